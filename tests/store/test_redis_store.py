"""RedisRunStore: compare-and-set, TTLs, record checks (fakeredis), races and expiry on the real Redis."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis.asyncio as aioredis

from bot.agent import Agent
from bot.agent.state import RunState
from bot.errors import RunAlreadyResumed, RunConflict, RunNotFound, StoreCorrupt, StoreUnavailable
from bot.store import Keys, RedisRunStore
from bot.testing.openai_server import FakeOpenAI, Reply, tool_call


async def test_create_load_save_compare_and_set(fake_redis: aioredis.Redis, prefix: str) -> None:
    store = RedisRunStore(fake_redis, prefix=prefix)
    created = await store.create(RunState(run_id="r1", agent_id="a"))
    assert created.revision == 1
    with pytest.raises(RunConflict):
        await store.create(RunState(run_id="r1", agent_id="a"))
    loaded = await store.load("r1")
    assert loaded == created
    saved = await store.save(loaded.model_copy(update={"status": "suspended"}))
    assert saved.revision == 2 and (await store.load("r1")).status == "suspended"
    with pytest.raises(RunConflict):
        await store.save(loaded)  # stale revision 1
    assert (await store.load("r1")).revision == 2


async def test_save_never_creates(fake_redis: aioredis.Redis, prefix: str) -> None:
    store = RedisRunStore(fake_redis, prefix=prefix)
    with pytest.raises(RunNotFound):
        await store.save(RunState(run_id="ghost", agent_id="a", revision=3))
    assert await fake_redis.exists(Keys(prefix).run("ghost")) == 0
    with pytest.raises(RunNotFound):
        await store.load("ghost")


async def test_ttls_by_status(fake_redis: aioredis.Redis, prefix: str) -> None:
    store = RedisRunStore(fake_redis, prefix=prefix, suspended_ttl=500, finished_ttl=100)
    state = await store.create(RunState(run_id="r", agent_id="a", status="suspended"))
    key = Keys(prefix).run("r")
    assert 499_000 < await fake_redis.pttl(key) <= 500_000
    await store.save(state.model_copy(update={"status": "completed"}))
    assert 99_000 < await fake_redis.pttl(key) <= 100_000
    default = RedisRunStore(fake_redis, prefix=prefix)
    assert (default.suspended_ttl, default.finished_ttl) == (24 * 3600, 3600)


async def test_record_of_another_run_or_garbage_is_corrupt(fake_redis: aioredis.Redis, prefix: str) -> None:
    store = RedisRunStore(fake_redis, prefix=prefix)
    await store.create(RunState(run_id="a", agent_id="x"))
    raw = await fake_redis.hget(Keys(prefix).run("a"), "state")
    await fake_redis.hset(Keys(prefix).run("b"), mapping={"rev": 1, "state": raw})
    with pytest.raises(StoreCorrupt, match="belongs to run a"):
        await store.load("b")
    await fake_redis.hset(Keys(prefix).run("c"), mapping={"rev": 1, "state": "{not json"})
    with pytest.raises(StoreCorrupt, match="unreadable"):
        await store.load("c")


async def test_redis_down_is_store_unavailable(prefix: str) -> None:
    client = aioredis.from_url("redis://127.0.0.1:9/0", socket_connect_timeout=0.5)
    store = RedisRunStore(client, prefix=prefix)
    with pytest.raises(StoreUnavailable):
        await store.load("r")
    with pytest.raises(StoreUnavailable):
        await store.create(RunState(run_id="r", agent_id="a"))
    await client.aclose()


async def test_redis_down_on_resume_raises_before_anything(make_agent: Any, prefix: str) -> None:
    client = aioredis.from_url("redis://127.0.0.1:9/0", socket_connect_timeout=0.5)
    agent: Agent = make_agent(client)
    with pytest.raises(StoreUnavailable):
        await agent.resume_stream("x", run_id="r")
    with pytest.raises(StoreUnavailable):
        await agent.stream("hi")
    await client.aclose()


# --- the real Redis --------------------------------------------------------------------------------

SINGLE = {"question": "Which?", "options": [{"label": "a"}, {"label": "b"}]}


@pytest.mark.real_redis
async def test_fifty_concurrent_resumes_exactly_one_wins(
    real_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI
) -> None:
    openai_server.script(Reply(tool_calls=[tool_call("ask_user", SINGLE, id="c1")]))
    openai_server.responder = lambda body: Reply(text="done")
    stream = await make_agent(real_redis).stream("hi")
    await stream.collect()

    clients = [aioredis.from_url("redis://127.0.0.1:6379/0") for _ in range(5)]  # 5 "processes"
    agents = [make_agent(clients[i % 5]) for i in range(50)]
    results = await asyncio.gather(
        *(
            a.resume_stream("a" if i % 2 else "b", run_id=stream.run_id, answered_by=f"U{i}")
            for i, a in enumerate(agents)
        ),
        return_exceptions=True,
    )
    winners = [r for r in results if not isinstance(r, BaseException)]
    losers = [r for r in results if isinstance(r, BaseException)]
    assert len(winners) == 1
    assert all(isinstance(e, RunAlreadyResumed) for e in losers), {type(e).__name__ for e in losers}
    await winners[0].collect()
    state = await agents[0].get_run(stream.run_id)
    assert len(state.answers) == 1 and state.status == "completed"
    assert {e.answered_by for e in losers if isinstance(e, RunAlreadyResumed)} <= {state.answers[0].answered_by, None}
    assert sum(1 for b in openai_server.requests if any(m["role"] == "tool" for m in b["messages"])) == 1
    for c in clients:
        await c.aclose()


@pytest.mark.real_redis
async def test_ttl_expiry_is_run_not_found(
    real_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI, prefix: str
) -> None:
    openai_server.script(Reply(tool_calls=[tool_call("ask_user", SINGLE, id="c1")]))
    agent: Agent = make_agent(real_redis, store_kwargs={"suspended_ttl": 1})
    stream = await agent.stream("hi")
    await stream.collect()
    assert (await agent.get_run(stream.run_id)).status == "suspended"
    await asyncio.sleep(1.3)
    with pytest.raises(RunNotFound):
        await agent.resume_stream("a", run_id=stream.run_id)
    assert await real_redis.exists(Keys(prefix).run(stream.run_id)) == 0


@pytest.mark.real_redis
async def test_cas_race_on_real_redis(real_redis: aioredis.Redis, prefix: str) -> None:
    store = RedisRunStore(real_redis, prefix=prefix)
    base = await store.create(RunState(run_id="race", agent_id="a", status="suspended"))
    outcomes = await asyncio.gather(
        *(store.save(base.model_copy(update={"metadata": {"n": i}})) for i in range(20)), return_exceptions=True
    )
    assert sum(not isinstance(o, BaseException) for o in outcomes) == 1
    assert all(isinstance(o, RunConflict) for o in outcomes if isinstance(o, BaseException))
