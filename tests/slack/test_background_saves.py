"""Saves that fail or whose acknowledgement is lost: the reply still arrives and the newer state wins."""

from __future__ import annotations

import asyncio
from typing import Any

import redis.asyncio as aioredis

from bot.agent import Agent
from bot.agent.state import RunState
from bot.errors import StoreUnavailable
from bot.testing.openai_server import FakeOpenAI, Reply, tool_call
from bot.testing.slack_scenarios import ALICE, GENERAL, SINGLE, ask


async def test_background_save_does_not_overwrite_a_run_taken_over_meanwhile(
    fake_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI
) -> None:
    first: Agent = make_agent(fake_redis, persist_for=10, store_kwargs={"lease_ttl": 0.2})
    other: Agent = make_agent(fake_redis)
    store = first.store
    real_save = store.save
    down = {"on": True}

    async def outage(state: RunState, **kwargs: Any) -> RunState:
        if down["on"] and state.status == "completed":
            raise StoreUnavailable("Redis error while saving a run: ConnectionError")
        saved: RunState = await real_save(state, **kwargs)
        return saved

    store.save = outage  # type: ignore[method-assign]
    openai_server.script(Reply(tool_calls=[tool_call("ask_user", SINGLE, id="c1")]), Reply(text="first process"))
    stream = await first.stream("hi")
    await stream.collect()
    await (await first.resume_stream("api", run_id=stream.run_id)).collect()  # reply shown; save goes on later
    assert len(first.saver.background) == 1
    assert (await other.get_run(stream.run_id)).status == "running"
    await asyncio.sleep(0.3)  # its lease runs out: the first process is no longer driving it
    openai_server.script(Reply(text="second process"))
    await (await other.retry_stream(run_id=stream.run_id)).collect()  # the 'dead' run is taken over
    down["on"] = False
    await asyncio.wait_for(asyncio.gather(*first.saver.background), 10)
    final = await other.get_run(stream.run_id)
    assert final.status == "completed" and final.messages[-1]["content"] == "second process"


async def test_save_applied_but_acknowledgement_lost_still_delivers_the_reply(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    async with harness(fake_redis) as h:
        thread, q = await ask(h, then="The reply.")
        store = h.bot.agent.store
        real_save = store.save
        lost: list[str] = []

        async def ack_lost(state: RunState, **kwargs: Any) -> RunState:
            saved: RunState = await real_save(state, **kwargs)
            if state.status == "completed" and not lost:
                lost.append(state.run_id)
                raise StoreUnavailable("Redis error while saving a run: TimeoutError")
            return saved

        store.save = ack_lost  # type: ignore[method-assign]
        await h.ws.click(q, "api", user=ALICE)
        await h.settle()
        texts = [m["text"] for m in h.ws.messages(GENERAL, thread_ts=thread)]
        assert lost and (await h.bot.agent.get_run(lost[0])).status == "completed"
        assert "The reply." in texts, texts
