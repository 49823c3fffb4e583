"""An MCP caller's limits in Redis (:class:`bot.mcp_server.limits.CallerLimits`) against the real Redis, single and
cluster: questions asked at once, each through its own client as separate server processes would, can't take
more than ``max_waiting`` places; an ended question's place is freed for the next."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
import redis.asyncio as aioredis

from bot.agent import Agent
from bot.agent.model import NoModel
from bot.agent.state import RunState
from bot.mcp_server.callers import Caller, Refused
from bot.mcp_server.limits import CallerLimits
from bot.store import Keys, RedisRunStore

pytestmark = pytest.mark.real_redis


def limits_of(client: aioredis.Redis, prefix: str) -> CallerLimits:
    """A server process's limits: its own client, agent and run store on the same Redis."""
    store = RedisRunStore(client, prefix=prefix)
    agent = Agent(id="mcp", name="MCP", instructions="Ask.", model=NoModel("only asks"), store=store)
    return CallerLimits(client, keys=Keys(prefix), agent=agent)


async def test_questions_asked_at_once_take_at_most_max_waiting_places(
    real_redis: aioredis.Redis, prefix: str, connect_real_redis: Callable[[], aioredis.Redis]
) -> None:
    caller = Caller(name="build-42", channels=("C1",), max_waiting=2, per_minute=1000)
    processes = [limits_of(connect_real_redis(), prefix) for _ in range(6)]
    results = await asyncio.gather(
        *(p.admit(caller, run_id=f"run_{i}") for i, p in enumerate(processes)), return_exceptions=True
    )
    refused = [r for r in results if isinstance(r, Refused)]
    assert len([r for r in results if r is None]) == 2 and len(refused) == 4, results
    assert {r.rule for r in refused} == {"max_waiting"}
    assert "2 of its questions are waiting (at most 2)" in str(refused[0])
    assert await real_redis.zcard(Keys(prefix).mcp_waiting("build-42")) == 2
    assert int(await real_redis.get(Keys(prefix).mcp_rate("build-42")) or 0) == 2  # the refused are not counted


async def test_an_ended_question_frees_its_place_and_a_place_is_taken_once(
    real_redis: aioredis.Redis, prefix: str, connect_real_redis: Callable[[], aioredis.Redis]
) -> None:
    caller = Caller(name="build-42", channels=("C1",), max_waiting=2, per_minute=1000)
    limits = limits_of(real_redis, prefix)
    await limits.admit(caller, run_id="run_a")
    await limits.admit(caller, run_id="run_a")  # the same question again: still one place
    await limits.admit(caller, run_id="run_b")
    with pytest.raises(Refused) as full:
        await limits.admit(caller, run_id="run_c")
    assert full.value.rule == "max_waiting"
    store = RedisRunStore(real_redis, prefix=prefix)
    await store.create(RunState(run_id="run_a", agent_id="mcp", status="completed"), owner="p")
    others = [limits_of(connect_real_redis(), prefix) for _ in range(4)]
    results = await asyncio.gather(
        *(p.admit(caller, run_id=f"run_{i}") for i, p in enumerate(others)), return_exceptions=True
    )
    assert len([r for r in results if r is None]) == 1, results  # run_a's place, to one of them
    members = {m.decode() for m in await real_redis.zrange(Keys(prefix).mcp_waiting("build-42"), 0, -1)}
    assert "run_a" not in members and "run_b" in members and len(members) == 2
