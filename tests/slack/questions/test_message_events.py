"""Which message events are a person speaking (their words answer an open question) and which are not; and text
with no visible character is never an answer."""

from __future__ import annotations

from typing import Any

import pytest
import redis.asyncio as aioredis

from bot.agent.ask_user import AskUserInput, validate_answer
from bot.errors import AnswerError
from bot.testing.slack_scenarios import (
    ALICE,
    FREE,
    GENERAL,
    ask,
    current,
    has_controls,
    is_answer_form,
    resumed_requests,
)

INVISIBLE = ["\u200b", " \u200b\u2060\ufeff ", "\u00a0\u3000", "\u200e\u202e", "\x00\t"]


async def send_message_event(h: Any, *, user: str, thread: str, text: str, subtype: str | None) -> None:
    """``user`` posts ``text`` in ``thread`` and the app gets a ``message`` event with ``subtype`` (as Slack
    publishes it, e.g. ``thread_broadcast`` for a reply also sent to the channel)."""
    stored = h.ws.add_user_message(user, GENERAL, text, thread_ts=thread)
    event: dict[str, Any] = {
        "type": "message",
        "user": user,
        "text": text,
        "ts": stored["ts"],
        "thread_ts": thread,
        "channel": GENERAL,
        "channel_type": "channel",
        "event_ts": stored["ts"],
        "team": stored["team"],
    }
    if subtype:
        event["subtype"] = subtype
    if subtype == "thread_broadcast":
        event["root"] = {"ts": thread, "user": user, "text": "go", "thread_ts": thread}
    if subtype == "file_share":
        event["files"] = [{"id": "F1", "name": "notes.txt"}]
    await h.ws.sender.send_event(event)


@pytest.mark.parametrize("subtype", ["thread_broadcast", "file_share", "me_message"])
async def test_subtypes_that_carry_a_persons_words_answer_like_a_reply(
    fake_redis: aioredis.Redis, harness: Any, subtype: str
) -> None:
    async with harness(fake_redis) as h:
        thread, q = await ask(h, then="Got it.")
        await send_message_event(h, user=ALICE, thread=thread, text="web", subtype=subtype)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "Got it.")
        assert not has_controls(await current(h, q))
        assert '"answer": "web"' in h.model.requests[-1]["messages"][-1]["content"]


@pytest.mark.parametrize("subtype", ["message_changed", "message_deleted", "channel_join", "bot_message"])
async def test_subtypes_that_are_not_a_person_speaking_are_not_answers(
    fake_redis: aioredis.Redis, harness: Any, subtype: str
) -> None:
    async with harness(fake_redis) as h:
        thread, q = await ask(h)
        await send_message_event(h, user=ALICE, thread=thread, text="web", subtype=subtype)
        await h.settle()
        assert has_controls(await current(h, q)) and resumed_requests(h.model) == 0


def test_text_with_no_visible_character_is_a_blank_answer_and_a_blank_question() -> None:
    for text in INVISIBLE:
        with pytest.raises(AnswerError, match="blank"):
            validate_answer(text, {"question": "Why?"})
        with pytest.raises(ValueError, match="empty"):
            AskUserInput.model_validate({"question": text})
    assert validate_answer("\u200bok", {"question": "Why?"}) == "\u200bok"


async def test_an_invisible_modal_answer_is_refused_under_the_input(fake_redis: aioredis.Redis, harness: Any) -> None:
    async with harness(fake_redis) as h:
        _thread, q = await ask(h, FREE)
        await h.ws.click(q, "Answer", user=ALICE)
        form = await h.ws.wait_for_view(user=ALICE, predicate=is_answer_form)
        ack = await h.ws.submit_view(form, {"answer_input": {"answer_text": "\u200b"}}, user=ALICE)
        assert ack.json == {"response_action": "errors", "errors": {"answer_input": "Please write an answer."}}
        assert has_controls(await current(h, q)) and resumed_requests(h.model) == 0


async def test_an_invisible_thread_reply_is_not_an_answer(fake_redis: aioredis.Redis, harness: Any) -> None:
    async with harness(fake_redis) as h:
        thread, q = await ask(h, FREE)
        await h.ws.reply_in_thread(ALICE, GENERAL, thread, "\u200b\u2060")
        await h.settle()
        assert has_controls(await current(h, q)) and resumed_requests(h.model) == 0
