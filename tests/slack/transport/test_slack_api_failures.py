"""Slack refusing or failing Web API calls: the answer is never lost and the person always sees a way on."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
import redis.asyncio as aioredis

from bot.testing.openai_server import Reply, tool_call
from bot.testing.slack_scenarios import (
    ALICE,
    FREE,
    GENERAL,
    MULTI,
    SINGLE,
    ask,
    has_controls,
    resumed_requests,
    still_open,
    texts_in,
    tool_results,
)


async def test_chat_update_failing_after_click_still_resumes_once(fake_redis: aioredis.Redis, harness: Any) -> None:
    async with harness(fake_redis) as h:
        thread, q = await ask(h, then="Went on.")
        h.ws.fake.fail_next("chat.update", "internal_error")
        await h.ws.click(q, "api", user=ALICE)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "Went on.")
        await h.ws.click(q, "web", user=ALICE)  # the buttons are still shown
        note = await h.ws.wait_for_ephemeral(user=ALICE)
        assert note["text"] == "You had already answered *api*; your choice *web* was not recorded."
        await h.settle()
        assert resumed_requests(h.model) == 1


async def test_question_post_failing_falls_back_to_text_answerable_by_reply(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    async with harness(fake_redis) as h:
        h.ws.fake.fail_next("chat.postMessage", "invalid_blocks")  # Slack refuses the question's blocks
        h.model.script(Reply(tool_calls=[tool_call("ask_user", SINGLE, id="c1")]), Reply(text="Typed ok."))
        d = await h.ws.mention(ALICE, GENERAL, "go")
        thread = d.message["ts"]
        plain = await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread)
        assert "Which repo?" in plain["text"] and "api" in plain["text"]
        await h.ws.reply_in_thread(ALICE, GENERAL, thread, "web")
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "Typed ok.")
        assert tool_results(h.model)[-1] == {"answer": "web", "answer_type": "option", "answered_by": ALICE}


async def test_multi_select_question_stays_answerable_when_blocks_are_refused(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    async with harness(fake_redis) as h:
        h.ws.fake.fail_next("chat.postMessage", "invalid_blocks")
        h.model.script(Reply(tool_calls=[tool_call("ask_user", MULTI, id="m1")]), Reply(text="Planned."))
        d = await h.ws.mention(ALICE, GENERAL, "go")
        thread = d.message["ts"]
        plain = await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread)
        assert not has_controls(plain)
        await h.ws.reply_in_thread(ALICE, GENERAL, thread, "Add tests, Refactor")
        await h.settle()
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "Planned.")


async def test_rate_limited_question_post_is_retried_with_its_buttons(fake_redis: aioredis.Redis, harness: Any) -> None:
    async with harness(fake_redis) as h:
        h.ws.fake.fail_next("chat.postMessage", "ratelimited", status=429)
        _thread, q = await ask(h)
        assert has_controls(q)
        statuses = [c.status for c in h.ws.calls("chat.postMessage")]
        assert statuses == [429, 200]


async def test_views_open_failure_tells_the_user_and_question_stays_open(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    async with harness(fake_redis) as h:
        _thread, q = await ask(h, FREE)
        h.ws.fake.fail_next("views.open", "expired_trigger_id")
        await h.ws.click(q, "Answer", user=ALICE)
        note = await h.ws.wait_for_ephemeral(user=ALICE)
        assert "click Answer again" in note["text"]
        assert await still_open(h, q)


@pytest.mark.parametrize("what", ["final-reply", "question-and-its-plain-text-fallback", "failure-notice"])
async def test_a_message_slack_refused_once_is_not_silently_lost(
    fake_redis: aioredis.Redis, harness: Any, what: str
) -> None:
    """README (Failures): nothing is lost, the person always has a way on. When Slack answers chat.postMessage with
    ``{"ok": false, "error": "internal_error"}`` (its transient error, HTTP 200; slack_sdk retries only HTTP 429/5xx
    and connection errors), Alice expects the message to reach the thread anyway (retried) or a notice that it could
    not be posted. Observed: the model's final reply, a question (whose blocks and plain-text fallback were both
    refused), or a model-failure notice with its Retry button, is dropped: the thread shows nothing and the run is
    completed / waiting / failed in silence."""
    async with harness(fake_redis) as h:
        if what == "final-reply":
            thread, q = await ask(h, then="The important reply.")
            h.ws.fake.fail_next("chat.postMessage", "internal_error")
            await h.ws.click(q, "api", user=ALICE)
            wanted = "The important reply."
        elif what == "question-and-its-plain-text-fallback":
            h.ws.fake.fail_next("chat.postMessage", "internal_error")
            h.ws.fake.fail_next("chat.postMessage", "internal_error")
            h.model.script(Reply(tool_calls=[tool_call("ask_user", SINGLE, id="c1")]))
            thread = (await h.ws.mention(ALICE, GENERAL, "go")).message["ts"]
            wanted = "Which repo?"
        else:
            h.ws.fake.fail_next("chat.postMessage", "internal_error")
            h.model.script(Reply(status=500))
            thread = (await h.ws.mention(ALICE, GENERAL, "go")).message["ts"]
            wanted = "model call failed"
        await asyncio.sleep(0.3)
        await h.settle()
        texts = texts_in(h, thread)
        shown = any(wanted.lower() in t.lower() for t in texts)
        assert shown or any("try" in t.lower() for t in texts[1:] if "important" not in t), texts


async def test_answer_form_that_slack_refused_to_show_leaves_a_way_on(fake_redis: aioredis.Redis, harness: Any) -> None:
    """README (Answering): "The Answer button opens the modal at once and turns it into the form"; the Slack API
    failures tests promise "the person always sees a way on". When Slack refuses the views.update that turns the
    loading modal into the form (e.g. ``internal_error``), Alice is left with a modal that says "Opening the
    question…" forever and is told nothing. Expected: she is told to press Answer again (as when views.open fails)."""
    async with harness(fake_redis) as h:
        _thread, q = await ask(h, FREE)
        h.ws.fake.fail_next("views.update", "internal_error")
        await h.ws.click(q, "Answer", user=ALICE)
        await h.settle()
        view = h.ws.state.top_view(ALICE)
        told = [e["text"] for e in h.ws.ephemerals(user=ALICE)] + [
            c.params.get("text", "") for c in h.ws.calls("chat.postMessage") if c.params.get("channel") == ALICE
        ]
        still_loading = view is not None and "Opening the question" in json.dumps(view.data)
        assert not still_loading or any("again" in t for t in told), (told, still_loading)
