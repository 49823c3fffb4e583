"""RedisRunStore: compare-and-set, retention, record checks, leases, deadlines (fakeredis); races, expiry and lost
replies on the real Redis."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest
import redis.asyncio as aioredis

from bot.agent import Agent
from bot.agent.state import PendingCall, RunState, utcnow
from bot.errors import (
    QuestionExpired,
    RunAlreadyResumed,
    RunConflict,
    RunNotFound,
    StoreCorrupt,
    StoreUnavailable,
    UnknownSchemaVersion,
)
from bot.store import Keys, RedisRunStore, connect_redis
from bot.testing.openai_server import FakeOpenAI, Reply, tool_call
from bot.testing.tcp_proxy import TcpProxy

ME = "host:1:me"


async def test_create_load_save_compare_and_set(fake_redis: aioredis.Redis, prefix: str) -> None:
    store = RedisRunStore(fake_redis, prefix=prefix)
    created = await store.create(RunState(run_id="r1", agent_id="a"), owner=ME)
    assert created.revision == 1
    with pytest.raises(RunConflict):
        await store.create(RunState(run_id="r1", agent_id="a"), owner=ME)
    loaded = await store.load("r1")
    assert loaded == created
    saved = await store.save(loaded.model_copy(update={"status": "suspended"}), owner=ME)
    assert saved.revision == 2 and (await store.load("r1")).status == "suspended"
    with pytest.raises(RunConflict):
        await store.save(loaded, owner=ME)  # stale revision 1
    assert (await store.load("r1")).revision == 2


async def test_save_never_creates(fake_redis: aioredis.Redis, prefix: str) -> None:
    store = RedisRunStore(fake_redis, prefix=prefix)
    with pytest.raises(RunNotFound):
        await store.save(RunState(run_id="ghost", agent_id="a", revision=3), owner=ME)
    assert await fake_redis.exists(Keys(prefix).run("ghost")) == 0
    with pytest.raises(RunNotFound):
        await store.load("ghost")


async def test_retention_after_the_end_and_after_a_questions_deadline(fake_redis: aioredis.Redis, prefix: str) -> None:
    store = RedisRunStore(fake_redis, prefix=prefix, retention=100)
    now = utcnow()
    pending = PendingCall(
        tool_call_id="c",
        tool_name="ask_user",
        args={},
        suspend_payload={},
        suspended_at=now,
        expires_at=now + timedelta(seconds=500),
    )
    state = await store.create(RunState(run_id="r", agent_id="a", status="suspended", pending=pending), owner=ME)
    key = Keys(prefix).run("r")
    assert 598_000 < await fake_redis.pttl(key) <= 602_000  # until the deadline, then the retention window
    await store.save(state.model_copy(update={"status": "completed"}), owner=ME)
    assert 99_000 < await fake_redis.pttl(key) <= 100_000
    assert RedisRunStore(fake_redis, prefix=prefix).retention == 7 * 24 * 3600


async def test_a_batch_of_approvals_is_kept_until_its_latest_calls_deadline(
    fake_redis: aioredis.Redis, prefix: str
) -> None:
    """Each call of a batch waits until its own deadline: the record lives until the latest (here the second's,
    2,000 s) plus the retention; before, the first call's (500 s) alone."""
    store = RedisRunStore(fake_redis, prefix=prefix, retention=100)
    now = utcnow()

    def call(tool_call_id: str, seconds: float) -> PendingCall:
        at = now + timedelta(seconds=seconds)
        return PendingCall(
            kind="approval",
            tool_call_id=tool_call_id,
            tool_name="t",
            args={},
            suspend_payload={},
            suspended_at=now,
            expires_at=at,
        )

    pending = call("a", 500).model_copy(update={"batch": [call("b", 2000), call("c", 50)]})
    await store.create(RunState(run_id="r", agent_id="a", status="suspended", pending=pending), owner=ME)
    assert 2_098_000 < await fake_redis.pttl(Keys(prefix).run("r")) <= 2_102_000


async def test_record_of_another_run_garbage_or_unknown_version_is_corrupt_with_its_run_id(
    fake_redis: aioredis.Redis, prefix: str
) -> None:
    store = RedisRunStore(fake_redis, prefix=prefix)
    await store.create(RunState(run_id="a", agent_id="x"), owner=ME)
    raw = await fake_redis.hget(Keys(prefix).run("a"), "state")
    await fake_redis.hset(Keys(prefix).run("b"), mapping={"rev": 1, "state": raw})
    with pytest.raises(StoreCorrupt, match="belongs to run a") as wrong:
        await store.load("b")
    assert wrong.value.run_id == "b"
    await fake_redis.hset(Keys(prefix).run("c"), mapping={"rev": 1, "state": "{not json"})
    with pytest.raises(StoreCorrupt, match="not JSON") as garbage:
        await store.load("c")
    assert garbage.value.run_id == "c"
    await fake_redis.hset(
        Keys(prefix).run("d"), mapping={"rev": 1, "state": raw.replace(b'"schema_version":6', b'"schema_version":9')}
    )
    with pytest.raises(UnknownSchemaVersion) as newer:
        await store.load("d")
    assert newer.value.run_id == "d" and newer.value.version == 9


async def test_a_resent_write_is_recognised_as_applied_not_a_conflict(fake_redis: aioredis.Redis, prefix: str) -> None:
    """What redis-py's retry does after a lost reply: the same script, same arguments, sent again."""
    store = RedisRunStore(fake_redis, prefix=prefix)
    base = await store.create(RunState(run_id="r", agent_id="a", status="suspended"), owner=ME)
    claimed = base.model_copy(update={"status": "running"})
    first = await store.save(claimed, owner=ME, write_id="w1")
    again = await store.save(claimed, owner=ME, write_id="w1")  # the reply to the first one was lost
    assert first.revision == again.revision == 2
    with pytest.raises(RunConflict):
        await store.save(claimed, owner="someone-else", write_id="w2")  # a different write still conflicts


async def test_deadline_is_judged_by_the_stores_clock(fake_redis: aioredis.Redis, prefix: str) -> None:
    store = RedisRunStore(fake_redis, prefix=prefix)
    base = await store.create(RunState(run_id="r", agent_id="a", status="suspended"), owner=ME)
    with pytest.raises(QuestionExpired):
        await store.save(
            base.model_copy(update={"status": "running"}), owner=ME, not_after=utcnow() - timedelta(seconds=1)
        )
    assert (await store.load("r")).revision == 1  # nothing written
    ok = await store.save(
        base.model_copy(update={"status": "running"}), owner=ME, not_after=utcnow() + timedelta(minutes=1)
    )
    assert ok.revision == 2


async def test_running_saves_hold_a_lease_that_others_see_and_other_saves_drop(
    fake_redis: aioredis.Redis, prefix: str
) -> None:
    store = RedisRunStore(fake_redis, prefix=prefix, lease_ttl=5)
    state = await store.create(RunState(run_id="r", agent_id="a"), owner=ME)
    assert await store.lease_owner("r") == ME
    assert 4_000 < await fake_redis.pttl(Keys(prefix).lease("r")) <= 5_000
    assert await store.renew_lease("r", owner=ME, revision=1) and not await store.renew_lease(
        "r", owner="other", revision=1
    )
    await store.save(state.model_copy(update={"status": "completed"}), owner=ME)
    assert await store.lease_owner("r") is None
    assert not await store.renew_lease("r", owner=ME, revision=2)


async def test_a_lapsed_lease_is_taken_back_only_by_its_owner_while_the_run_is_as_it_saved_it(
    fake_redis: aioredis.Redis, prefix: str
) -> None:
    """The owner could not renew in time (its lease lapsed): its next renewal takes the lease back, unless another
    process holds it, or the run moved on (saved by another process, ended), or the renewal names an older
    revision."""
    store = RedisRunStore(fake_redis, prefix=prefix, lease_ttl=5)
    lease = Keys(prefix).lease("r")
    state = await store.create(RunState(run_id="r", agent_id="a"), owner=ME)
    await fake_redis.pexpire(lease, 1)  # as if 5 s without a renewal passed
    await asyncio.sleep(0.01)
    assert not await store.renew_lease("r", owner="other", revision=1)  # not theirs to take
    assert await store.lease_owner("r") is None
    assert not await store.renew_lease("r", owner=ME, revision=0)  # not the state it drives
    assert await store.renew_lease("r", owner=ME, revision=1)
    assert await store.lease_owner("r") == ME and 4_000 < await fake_redis.pttl(lease) <= 5_000

    await fake_redis.pexpire(lease, 1)
    await asyncio.sleep(0.01)
    taken = await store.save(state, owner="other")  # another process took the orphan over
    assert not await store.renew_lease("r", owner=ME, revision=1)
    assert await store.lease_owner("r") == "other"
    await fake_redis.pexpire(lease, 1)
    await asyncio.sleep(0.01)
    assert not await store.renew_lease("r", owner=ME, revision=taken.revision)  # saved by "other", not by ME
    ended = await store.save(taken.model_copy(update={"status": "completed"}), owner="other")
    assert not await store.renew_lease("r", owner="other", revision=ended.revision)  # ended: nobody drives it
    assert await store.lease_owner("r") is None


async def test_a_stop_is_taken_by_the_working_segment_it_was_read_from_not_by_a_later_one(
    fake_redis: aioredis.Redis, prefix: str
) -> None:
    """request_stop(state as read): a save in the middle of the segment (same owner, still running) does not stop
    it from being taken; a segment begun since (the run asked or failed, and works again: the reply to an answer, a
    Retry) refuses it."""
    store = RedisRunStore(fake_redis, prefix=prefix)
    read = await store.create(RunState(run_id="r", agent_id="a", status="running"), owner=ME)
    midway = await store.save(read, owner=ME)  # e.g. an approved call's executing_since
    assert await store.request_stop(read, by="U1")
    assert await store.stop_requested("r") == "U1"
    ended = await store.save(midway.model_copy(update={"status": "failed"}), owner=ME)  # drops the stop
    assert await store.stop_requested("r") is None
    await store.save(ended.model_copy(update={"status": "running"}), owner=ME)  # its Retry: a segment of its own
    assert not await store.request_stop(read, by="U2") and not await store.request_stop(midway, by="U2")
    assert await store.stop_requested("r") is None


async def test_a_waiting_run_keeps_only_its_state_in_its_hash(fake_redis: aioredis.Redis, prefix: str) -> None:
    """The driving fields (owner, working segment, a live question waiting) are kept only while a run works: a
    question waiting costs no more Redis than its state (issue 26: at most 3 KB per waiting question)."""
    store = RedisRunStore(fake_redis, prefix=prefix)
    running = await store.create(RunState(run_id="r", agent_id="a", status="running"), owner=ME)
    key = Keys(prefix).run("r")
    assert set(await fake_redis.hkeys(key)) == {b"rev", b"state", b"wid", b"owner", b"seg"}
    await store.save(running.model_copy(update={"status": "suspended"}), owner=ME)
    assert set(await fake_redis.hkeys(key)) == {b"rev", b"state", b"wid"}


async def test_redis_down_is_store_unavailable(prefix: str) -> None:
    client = aioredis.from_url("redis://127.0.0.1:9/0", socket_connect_timeout=0.5)
    store = RedisRunStore(client, prefix=prefix)
    with pytest.raises(StoreUnavailable):
        await store.load("r")
    with pytest.raises(StoreUnavailable):
        await store.create(RunState(run_id="r", agent_id="a"), owner=ME)
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
    real_redis: aioredis.Redis, connect_real_redis: Any, make_agent: Any, openai_server: FakeOpenAI
) -> None:
    openai_server.script(Reply(tool_calls=[tool_call("ask_user", SINGLE, id="c1")]))
    openai_server.responder = lambda body: Reply(text="done")
    stream = await make_agent(real_redis).stream("hi")
    await stream.collect()

    clients = [connect_real_redis() for _ in range(5)]  # 5 "processes"
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


@pytest.mark.real_redis
async def test_ttl_expiry_is_run_not_found(
    real_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI, prefix: str
) -> None:
    openai_server.script(Reply(tool_calls=[tool_call("ask_user", SINGLE, id="c1")]))
    agent: Agent = make_agent(real_redis, store_kwargs={"retention": 1}, ask_ttl=0.2)
    stream = await agent.stream("hi")
    await stream.collect()
    assert (await agent.get_run(stream.run_id)).status == "suspended"
    await asyncio.sleep(0.3)
    with pytest.raises(QuestionExpired):  # past the deadline, within retention: told it expired
        await agent.resume_stream("a", run_id=stream.run_id)
    assert (await agent.get_run(stream.run_id)).status == "expired"
    await asyncio.sleep(1.3)
    with pytest.raises(RunNotFound):
        await agent.resume_stream("a", run_id=stream.run_id)
    assert await real_redis.exists(Keys(prefix).run(stream.run_id)) == 0


@pytest.mark.real_redis
async def test_cas_race_on_real_redis(real_redis: aioredis.Redis, prefix: str) -> None:
    store = RedisRunStore(real_redis, prefix=prefix)
    base = await store.create(RunState(run_id="race", agent_id="a", status="suspended"), owner=ME)
    outcomes = await asyncio.gather(
        *(store.save(base.model_copy(update={"metadata": {"n": i}}), owner=ME) for i in range(20)),
        return_exceptions=True,
    )
    assert sum(not isinstance(o, BaseException) for o in outcomes) == 1
    assert all(isinstance(o, RunConflict) for o in outcomes if isinstance(o, BaseException))


@pytest.mark.real_redis
@pytest.mark.redis_kinds("single")  # a TcpProxy in front of one server
async def test_a_claim_whose_reply_is_lost_is_applied_once_and_recognised(
    real_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI
) -> None:
    """Redis executes the claim, the connection drops before the reply: the client's retry resends it and the
    claim is recognised as ours (not 'already answered'); the run goes on with the answer."""
    openai_server.script(Reply(tool_calls=[tool_call("ask_user", SINGLE, id="c1")]), Reply(text="done"))
    async with TcpProxy("127.0.0.1", 6379) as proxy:
        client = connect_redis(f"redis://127.0.0.1:{proxy.port}/0")
        agent: Agent = make_agent(client)
        stream = await agent.stream("hi")
        await stream.collect()
        proxy.lose_next_reply(containing=b'"status":"running"')
        resumed = await agent.resume_stream("a", run_id=stream.run_id, answered_by="U1")
        await resumed.collect()
        assert proxy.replies_lost == 1
        state = await agent.get_run(stream.run_id)
        assert state.status == "completed" and [a.answered_by for a in state.answers] == ["U1"]
        await client.aclose()


@pytest.mark.parametrize("rescuer", ["the same process", "another process"])
async def test_a_stop_read_from_an_orphan_stops_whoever_took_it_over_as_a_stop_asked_before_the_takeover(
    fake_redis: aioredis.Redis, prefix: str, rescuer: str
) -> None:
    """A run works under process A's lease; A's driver is gone (an internal error, a claim whose reply was lost)
    and the lease lapses: an orphan. A stop is read from it (rev r), then a takeover (rev r+1) works under a fresh
    lease. A takeover carries the same work on (its segment is the orphan's), and a stop asked just before it would
    have stopped it at its first step: the stop is taken, whoever took it over (it was refused when another
    process did, taken when A did: a new segment began at each new owner)."""
    store = RedisRunStore(fake_redis, prefix=prefix, lease_ttl=0.2)
    created = await store.create(RunState(run_id="run_seg", agent_id="a", status="running", messages=[]), owner="A")
    worked = await store.save(created, owner="A")  # a midway save of the first segment
    await asyncio.sleep(0.4)  # A's driver is gone: its lease lapses
    assert await store.lease_owner("run_seg") is None
    read = await store.load("run_seg")  # what the stop is computed from: the orphan
    owner = "A" if rescuer == "the same process" else "B"
    taken = await store.save(read.model_copy(update={"status": "running", "turns": 0}), owner=owner)  # Retry
    assert taken.revision == worked.revision + 1 and await store.lease_owner("run_seg") == owner
    assert await store.request_stop(read, by="U2")
    assert await store.stop_requested("run_seg") == "U2"
