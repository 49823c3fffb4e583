"""Redis outages, crashes and short question deadlines: every thread stays usable and nothing is lost."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from typing import Any

import pytest
import redis.asyncio as aioredis

from bot.agent.state import RunState, utcnow
from bot.errors import StoreUnavailable
from bot.store import Keys
from bot.testing.openai_server import Reply, tool_call
from bot.testing.slack_scenarios import (
    ALICE,
    FREE,
    GENERAL,
    SINGLE,
    ask,
    index_of,
    leave_orphaned,
    resumed_requests,
    still_open,
    text_is,
    texts_in,
)


async def test_redis_blip_on_final_save_does_not_brick_the_thread(
    fake_redis: aioredis.Redis, harness: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failed final save is retried: the reply arrives, the run is saved, the thread goes on."""
    async with harness(fake_redis) as h:
        thread, q = await ask(h, then="Delivered anyway.")
        store = h.bot.agent.store
        real_save = store.save
        failed: list[str] = []

        async def flaky_save(state: RunState, **kwargs: Any) -> RunState:
            if state.status == "completed" and not failed:
                failed.append(state.run_id)
                raise StoreUnavailable("Redis error while saving a run: ConnectionError")
            saved: RunState = await real_save(state, **kwargs)
            return saved

        monkeypatch.setattr(store, "save", flaky_save)
        await h.ws.click(q, "api", user=ALICE)
        await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "Delivered anyway."
        )
        await h.settle()
        assert failed and (await h.bot.agent.get_run(failed[0])).status == "completed"
        h.model.script(Reply(text="Back on track."))
        await h.ws.mention(ALICE, GENERAL, "hello again?", thread_ts=thread)
        await h.settle()
        notes = [e["text"] for e in h.ws.ephemerals(user=ALICE)]
        assert not [n for n in notes if "still working" in n], notes
        await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "Back on track.", timeout=3
        )


async def test_run_orphaned_by_a_crash_does_not_block_the_thread(
    fake_redis: aioredis.Redis, harness: Any, prefix: str
) -> None:
    async with harness(fake_redis) as h:
        h.model.script(Reply(text="First."))
        d = await h.ws.mention(ALICE, GENERAL, "go")
        thread = d.message["ts"]
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "First.")
        await h.settle()
        run_key = next(iter([k async for k in fake_redis.scan_iter(match=f"{prefix}run:*")]))
        raw = await fake_redis.hget(run_key, "state")
        assert raw is not None
        state = RunState.from_json(raw)
        # what a process killed mid-run leaves behind: status running, last saved an hour ago
        orphan = state.model_copy(update={"status": "running", "updated_at": utcnow() - timedelta(hours=1)})
        await leave_orphaned(fake_redis, run_key.decode(), orphan)
        assert run_key.decode() == Keys(prefix).run(state.run_id)
        h.model.script(Reply(text="Second."))
        await h.ws.mention(ALICE, GENERAL, "still there?", thread_ts=thread)
        await h.settle()
        notes = [e["text"] for e in h.ws.ephemerals(user=ALICE)]
        assert not [n for n in notes if "still working" in n], notes


@pytest.mark.real_redis
async def test_short_ttl_on_real_redis_expires_question(real_redis: aioredis.Redis, harness: Any) -> None:
    async with harness(real_redis, ttl=1) as h:
        thread, q = await ask(h)
        await asyncio.sleep(1.3)
        await h.ws.click(q, "api", user=ALICE)
        note = await h.ws.wait_for_ephemeral(user=ALICE)
        assert "expired" in note["text"]
        await h.ws.reply_in_thread(ALICE, GENERAL, thread, "web")  # thread record expired too: ignored
        await h.settle()
        assert resumed_requests(h.model) == 0
        assert not await still_open(h, q)


@pytest.mark.real_redis
async def test_model_slower_than_ttl_still_delivers_its_reply(real_redis: aioredis.Redis, harness: Any) -> None:
    async with harness(real_redis, ttl=1) as h:
        h.model.script(Reply(text="Slow but sure.", delay=1.5))
        d = await h.ws.mention(ALICE, GENERAL, "think long")
        await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=d.message["ts"], predicate=lambda m: m["text"] == "Slow but sure.", timeout=5
        )


async def test_a_mention_told_nothing_was_recorded_does_not_run_the_model_anyway(
    fake_redis: aioredis.Redis, harness: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When Redis fails while a mention is being started (here: pointing the thread at the new run), Alice is told
    "I couldn't reach my storage, so nothing was recorded. Please try again". She expects exactly that: no model
    call made for it in the background (and no run slot left behind) - not a run that goes on unseen, whose question
    her next message in the thread would then answer without her ever having seen it."""
    async with harness(fake_redis) as h:
        threads_index = index_of(h)
        real_claim = threads_index.claim_thread

        async def applied_then_lost(*args: Any, **kwargs: Any) -> bool:
            await real_claim(*args, **kwargs)  # Redis applied it; the reply never came back
            raise StoreUnavailable("Redis error while claiming a thread: ConnectionError")

        monkeypatch.setattr(threads_index, "claim_thread", applied_then_lost)
        h.model.script(Reply(tool_calls=[tool_call("ask_user", SINGLE, id="c1")]), Reply(text="Took 'sure'."))
        d = await h.ws.mention(ALICE, GENERAL, "deploy")
        thread = d.message["ts"]
        await asyncio.sleep(0.5)
        await h.settle()
        assert any("nothing was recorded" in t for t in texts_in(h, thread)), texts_in(h, thread)
        monkeypatch.setattr(threads_index, "claim_thread", real_claim)
        assert len(h.model.requests) == 0, "the model was called for a mention Alice was told was not recorded"
        h.model.reset()
        h.model.script(Reply(text="Now it works."))
        await h.ws.mention(ALICE, GENERAL, "deploy again", thread_ts=thread)  # the thread isn't stuck
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Now it works."))


async def test_a_modal_answer_hit_by_a_redis_blip_is_not_lost(
    fake_redis: aioredis.Redis, harness: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """README (Answering / Failures): "A submitted answer that can't be taken any more says so in the modal, the text
    kept", and "If Redis is unreachable during a click, the person is told to try again and the question stays
    open". Alice types a long answer in the modal and presses Send; the submission is accepted (the modal closes),
    then Redis blips during the claim. She is told "nothing was recorded. Please try again" - but her text is gone
    (modal closed, not quoted back): she must type it all again. Expected: the text kept (in the modal, or quoted
    back to her)."""
    from bot.slack.render.modals import ACT_TEXT, MODAL_INPUT_BLOCK
    from bot.testing.slack_scenarios import is_answer_form

    async with harness(fake_redis) as h:
        _thread, q = await ask(h, FREE)
        real_resume = h.bot.agent.resume_stream
        failed: list[bool] = []

        async def blip(*args: Any, **kwargs: Any) -> Any:
            if not failed:
                failed.append(True)
                raise StoreUnavailable("Redis error while saving a run: ConnectionError")
            return await real_resume(*args, **kwargs)

        monkeypatch.setattr(h.bot.agent, "resume_stream", blip)
        await h.ws.click(q, "Answer", user=ALICE)
        form = await h.ws.wait_for_view(user=ALICE, predicate=is_answer_form)
        typed = "Focus on the billing service: the retry storm on Tuesdays, and the two flaky tests in CI."
        ack = await h.ws.submit_view(form, {MODAL_INPUT_BLOCK: {ACT_TEXT: typed}}, user=ALICE)
        await h.settle()
        assert failed
        view = h.ws.state.top_view(ALICE)
        kept_in_modal = view is not None and typed in json.dumps(view.data)
        told = [e["text"] for e in h.ws.ephemerals(user=ALICE)] + [
            c.params.get("text", "") for c in h.ws.calls("chat.postMessage") if c.params.get("channel") == ALICE
        ]
        assert kept_in_modal or any(typed in t for t in told), (ack.body, told)
