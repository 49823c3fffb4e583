"""A question past its deadline: every answer path (click, typed reply, modal, mention) closes it the same way,
from the stored run, and tells the person; the run record outlives the deadline by the retention window."""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis

from bot.slack.render.modals import ACT_TEXT, MODAL_INPUT_BLOCK
from bot.testing.openai_server import Reply
from bot.testing.slack_scenarios import (
    ALICE,
    FREE,
    GENERAL,
    ask,
    blocks_text,
    current,
    has_controls,
    is_answer_form,
    past_deadline,
)


async def test_a_typed_reply_after_the_deadline_closes_the_question_and_says_so_once(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    async with harness(fake_redis) as h:
        thread, q = await ask(h)
        await h.settle()
        state = await past_deadline(h, thread)
        before = len(h.model.requests)
        await h.ws.reply_in_thread(ALICE, GENERAL, thread, "api")
        note = await h.ws.wait_for_ephemeral(user=ALICE)
        assert "expired" in note["text"]
        closed = await current(h, q)
        assert not has_controls(closed) and "expired" in blocks_text(closed) and "Which repo?" in blocks_text(closed)
        await h.ws.reply_in_thread(ALICE, GENERAL, thread, "hello? api!")  # people talk on in threads
        await h.settle()
        assert len([e for e in h.ws.ephemerals(user=ALICE) if "expired" in e["text"]]) == 1
        assert len(h.model.requests) == before
        assert (await h.bot.agent.get_run(state.run_id)).status == "expired"


async def test_a_modal_submitted_after_the_deadline_is_refused_in_the_modal_and_closes_the_question(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    async with harness(fake_redis) as h:
        thread, q = await ask(h, FREE)
        await h.ws.click(q, "Answer", user=ALICE)
        form = await h.ws.wait_for_view(user=ALICE, predicate=is_answer_form)
        await past_deadline(h, thread)
        ack = await h.ws.submit_view(form, {MODAL_INPUT_BLOCK: {ACT_TEXT: "too late"}}, user=ALICE)
        assert isinstance(ack.json, dict) and "expired" in ack.json["errors"][MODAL_INPUT_BLOCK]
        closed = await current(h, q)
        assert not has_controls(closed) and "expired" in blocks_text(closed)
        assert len(h.model.requests) == 1


async def test_the_answer_button_after_the_deadline_opens_a_notice_not_a_form(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    async with harness(fake_redis) as h:
        thread, q = await ask(h, FREE)
        await past_deadline(h, thread)
        await h.ws.click(q, "Answer", user=ALICE)
        view = await h.ws.wait_for_view(user=ALICE, predicate=lambda v: "expired" in str(v["blocks"]))
        assert not any(b["type"] == "input" for b in view["blocks"])
        assert not has_controls(await current(h, q))


async def test_a_mention_after_the_deadline_closes_the_question_and_starts_fresh(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    async with harness(fake_redis) as h:
        thread, q = await ask(h)
        await h.settle()
        await past_deadline(h, thread)
        h.model.reset()  # forget the reply scripted for the answer that never came
        h.model.script(Reply(text="Starting over."))
        await h.ws.mention(ALICE, GENERAL, "never mind, summarize", thread_ts=thread)
        await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "Starting over."
        )
        assert not has_controls(await current(h, q))
        last = h.model.requests[-1]["messages"]
        assert last[-1] == {"role": "user", "content": "never mind, summarize"}
        assert not any(m.get("tool_calls") for m in last if m["role"] == "assistant")  # the unanswered call is dropped
