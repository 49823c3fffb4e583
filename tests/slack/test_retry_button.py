"""Retry after a failure: only who may, only once, and never forking a conversation that moved on."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import redis.asyncio as aioredis

from bot.testing.openai_server import Reply, tool_call
from bot.testing.slack_scenarios import (
    ALICE,
    BOB,
    GENERAL,
    SINGLE,
    has_controls,
)


async def test_retry_twice_by_other_user_and_after_completion(fake_redis: aioredis.Redis, harness: Any) -> None:
    async with harness(fake_redis) as h:
        h.model.script(Reply(status=500), Reply(text="Recovered.", delay=0.3))
        d = await h.ws.mention(ALICE, GENERAL, "go")
        thread = d.message["ts"]
        failure = await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=has_controls)
        await h.ws.click(failure, "Retry", user=BOB)
        refusal = await h.ws.wait_for_ephemeral(user=BOB)
        assert "Only <@U_ALICE>" in refusal["text"]
        await asyncio.gather(
            h.ws.click(failure, "Retry", user=ALICE, as_seen=True),
            h.ws.click(failure, "Retry", user=ALICE, as_seen=True),
        )
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "Recovered.")
        await h.settle()
        await h.ws.click(failure, "Retry", user=ALICE, as_seen=True)  # after completion
        await h.settle()
        assert len(h.model.requests) == 2
        replies = [m for m in h.ws.messages(GENERAL, thread_ts=thread) if m["text"] == "Recovered."]
        assert len(replies) == 1
        notes = [e["text"] for e in h.ws.ephemerals(user=ALICE)]
        assert len(notes) == 2, notes


async def test_model_failure_posts_retry_that_continues(fake_redis: aioredis.Redis, harness: Any) -> None:
    async with harness(fake_redis) as h:
        h.model.script(
            Reply(tool_calls=[tool_call("ask_user", SINGLE, id="c1")]), Reply(status=500), Reply(text="Recovered.")
        )
        d = await h.ws.mention(ALICE, GENERAL, "go")
        thread = d.message["ts"]
        q = await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=has_controls)
        await h.ws.click(q, "web", user=ALICE)
        failure = await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=thread, predicate=lambda m: "model call failed" in m["text"]
        )
        assert "HTTP 500" in failure["text"] and has_controls(failure)
        await h.ws.click(failure, "Retry", user=ALICE)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "Recovered.")
        last_tool = next(m for m in reversed(h.model.requests[-1]["messages"]) if m["role"] == "tool")
        assert json.loads(last_tool["content"])["answer"] == "web"  # not asked again
        retried = next(m for m in h.ws.messages(GENERAL, thread_ts=thread) if m["ts"] == failure["ts"])
        assert not has_controls(retried)
