"""Mentions, direct messages and thread replies (bot/slack/conversations.py): each event Slack delivers, however often
and in however many shapes, starts one run."""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis

from bot.fakeslack.state import TEAM_ID
from bot.testing.openai_server import Reply, tool_call
from bot.testing.slack_scenarios import (
    ALICE,
    BOB,
    GENERAL,
    current,
    has_controls,
    text_is,
    thread_run_id,
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


def bot_mention(h: Any, text: str, *, thread_ts: str | None = None, user: str | None = "U0OTHERBOT") -> dict[str, Any]:
    """An ``app_mention`` another app's bot (``user`` None: a webhook's or a workflow's post, nobody's) sent."""
    stored = h.ws.add_user_message(ALICE, GENERAL, text, thread_ts=thread_ts)
    event: dict[str, Any] = {"type": "app_mention", "text": text, "ts": stored["ts"], "channel": GENERAL}
    event |= {"event_ts": stored["ts"], "team": TEAM_ID, "bot_id": "B0OTHER", "bot_profile": {"id": "B0OTHER"}}
    if user is not None:
        event["user"] = user
    else:
        event["subtype"] = "bot_message"
    if thread_ts is not None:
        event["thread_ts"] = thread_ts
    return event


async def test_another_bots_mention_neither_answers_a_waiting_question_nor_starts_a_run(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    """Only people answer and start runs: a bot's thread reply was ignored already, its ``app_mention`` wasn't (it
    answered a free-form question in channel mode, ``answered_by`` the bot, or with no name at all; it started runs,
    so two agent bots could loop on each other)."""
    async with harness(fake_redis, answerers="channel") as h:
        h.model.script(Reply(tool_calls=[tool_call("ask_user", {"question": "Which name?"}, id="q1")]))
        d = await h.ws.mention(ALICE, GENERAL, "name it")
        thread = d.message["ts"]
        q = await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=has_controls)
        for user in ("U0OTHERBOT", None):
            ack = await h.ws.sender.send_event(bot_mention(h, "<@U_BOT> rm -rf", thread_ts=thread, user=user))
            assert ack.status == 200
            ack = await h.ws.sender.send_event(bot_mention(h, "<@U_BOT> start something", user=user))
            assert ack.status == 200
        await h.settle()
        assert len(h.model.requests) == 1  # no run resumed, none started
        assert has_controls(await current(h, q))
        state = await h.bot.agent.get_run(await thread_run_id(h, thread))
        assert state.status == "suspended" and state.answers == []
        h.model.script(Reply(text="Named."))
        await h.ws.mention(BOB, GENERAL, "call it nova", thread_ts=thread)  # a person's still answers
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Named."))
