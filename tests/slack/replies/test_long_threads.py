"""A thread longer than the model's context: its own notice (what to do, no Retry that would fail the same way),
and the thread goes on with its oldest messages left out."""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis

from bot.testing.openai_server import Reply
from bot.testing.slack_scenarios import ALICE, GENERAL, has_controls


async def test_a_conversation_too_long_for_the_model_gets_its_own_notice(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    async with harness(fake_redis) as h:
        h.model.context_window = 1500
        d = await h.ws.mention(ALICE, GENERAL, "please read all of this: " + "word " * 3000)
        thread = d.message["ts"]
        notice = await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=thread, predicate=lambda m: "too long" in m["text"]
        )
        assert notice["text"].startswith("This conversation has grown too long for the model")
        assert "context window of 1500 tokens" in notice["text"]
        assert "Write a shorter message here to go on" in notice["text"] and "Retry" not in notice["text"]
        assert not has_controls(notice)  # Retry would send the same request again
        await h.settle()
        assert len(h.model.requests) == 1

        h.model.script(Reply(text="Back on track."))
        await h.ws.mention(ALICE, GENERAL, "in short: what next?", thread_ts=thread)
        await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "Back on track."
        )
        sent = h.model.requests[-1]["messages"]
        assert sent[-1]["content"].endswith("in short: what next?")
        assert not any("word word" in str(m.get("content")) for m in sent)  # the long message was left out
