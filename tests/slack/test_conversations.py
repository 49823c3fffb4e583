"""Mentions, direct messages and thread replies (bot/slack/conversations.py): each event Slack delivers, however often
and in however many shapes, starts one run."""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis

from bot.testing.openai_server import Reply
from bot.testing.slack_scenarios import (
    ALICE,
    GENERAL,
)


async def test_retried_mention_while_thinking_starts_one_run(fake_redis: aioredis.Redis, harness: Any) -> None:
    async with harness(fake_redis, subscriptions=("app_mention", "message.im")) as h:
        h.model.script(Reply(text="Only once.", delay=1.0))
        d = await h.ws.mention(ALICE, GENERAL, "think hard")
        first = d.ack
        assert first is not None
        retry = await h.ws.sender.resend(first, retry_num=1)
        assert retry.status == 200 and retry.event_id == first.event_id
        await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=d.message["ts"], predicate=lambda m: m["text"] == "Only once."
        )
        await h.settle()
        assert len(h.model.requests) == 1
        assert [m["text"] for m in h.ws.messages(GENERAL, thread_ts=d.message["ts"]) if m.get("bot_id")] == [
            "Only once."
        ]


async def test_mention_also_delivered_as_message_event_starts_one_run(fake_redis: aioredis.Redis, harness: Any) -> None:
    async with harness(fake_redis) as h:  # app_mention + message.channels: Slack sends both
        h.model.script(Reply(text="One reply."))
        d = await h.ws.mention(ALICE, GENERAL, "hello")
        assert len(d.acks) == 2
        await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=d.message["ts"], predicate=lambda m: m["text"] == "One reply."
        )
        await h.settle()
        assert len(h.model.requests) == 1


async def test_event_seen_only_as_a_retry_is_processed(fake_redis: aioredis.Redis, harness: Any) -> None:
    async with harness(fake_redis, subscriptions=("app_mention",)) as h:
        h.model.script(Reply(text="Got it."))
        msg = h.ws.add_user_message(ALICE, GENERAL, "<@U_BOT> are you there?")
        event = {
            "type": "app_mention",
            "user": ALICE,
            "text": msg["text"],
            "ts": msg["ts"],
            "channel": GENERAL,
            "event_ts": msg["ts"],
            "team": "T_PLAYGROUND",
        }
        ack = await h.ws.sender.send_event(event, retry_num=2, retry_reason="http_timeout")
        assert ack.status == 200
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=msg["ts"], predicate=lambda m: m["text"] == "Got it.")
