"""Retry after a failure: only who may, only once, and never forking a conversation that moved on."""

from __future__ import annotations

import asyncio
from typing import Any

import redis.asyncio as aioredis

from bot.testing.openai_server import Reply
from bot.testing.slack_scenarios import ALICE, BOB, GENERAL, has_controls


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
