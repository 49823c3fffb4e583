"""A question past its deadline: every answer path (click, typed reply, modal, mention) closes it the same way,
from the stored run, and tells the person; the run record outlives the deadline by the retention window."""

from __future__ import annotations

import json
from typing import Any

import pytest
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
    texts_in,
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


async def test_deadline_is_judged_by_redis_clock_not_by_a_fast_process_clock(
    real_redis: aioredis.Redis, harness: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """README (Deadlines): "A question answered after its deadline (ASK_TTL_SECONDS, judged by Redis's clock) is
    closed as expired". A click 40 s before the deadline by Redis's clock, handled by a process whose own clock runs
    60 s fast (clock skew between hosts), must be taken: Alice expects her answer recorded, not "expired" (and the
    question must not be closed as expired by that process's clock)."""
    import sys
    from datetime import timedelta

    from bot.agent.state import utcnow as real_now

    async with harness(real_redis, ttl=40) as h:
        thread, q = await ask(h, then="Taken in time.")
        await h.settle()
        for name, module in list(sys.modules.items()):  # this process's clock runs 60 s fast from here on
            if name.startswith("bot.") and getattr(module, "utcnow", None) is real_now:
                monkeypatch.setattr(module, "utcnow", lambda: real_now() + timedelta(seconds=60))
        await h.ws.click(q, "api", user=ALICE)
        await h.settle()
        notes = [e["text"] for e in h.ws.ephemerals(user=ALICE)]
        assert not any("expired" in n for n in notes), notes
        assert "Taken in time." in texts_in(h, thread), texts_in(h, thread)


async def test_expired_question_click_closes_it_from_stored_state_and_starts_nothing(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    async with harness(fake_redis) as h:
        thread, q = await ask(h)
        await h.settle()
        run_id = (await past_deadline(h, thread)).run_id
        before = len(h.model.requests)
        await h.ws.click(q, "api", user=ALICE)
        note = await h.ws.wait_for_ephemeral(user=ALICE)
        assert "expired" in note["text"]
        closed = await h.ws.wait_for_message(
            channel=GENERAL, predicate=lambda m: m["ts"] == q["ts"] and not has_controls(m)
        )
        assert "expired" in json.dumps(closed["blocks"]) and "Which repo?" in json.dumps(closed["blocks"])
        await h.settle()
        assert len(h.model.requests) == before
        assert (await h.bot.agent.get_run(run_id)).status == "expired"  # kept for the retention window


async def test_click_after_the_record_is_gone_writes_nothing_to_the_message(
    fake_redis: aioredis.Redis, harness: Any, prefix: str
) -> None:
    async with harness(fake_redis) as h:
        _thread, q = await ask(h)
        await h.settle()
        keys = [k async for k in fake_redis.scan_iter(match=f"{prefix}run:*")]
        await fake_redis.delete(*keys)  # past the retention window
        await h.ws.click(q, "api", user=ALICE)
        note = await h.ws.wait_for_ephemeral(user=ALICE)
        assert "expired" in note["text"]
        await h.settle()
        assert h.ws.calls("chat.update") == []  # nothing stored to render it from: the message is left alone
