"""Redis outages, crashes and short question deadlines: every thread stays usable and nothing is lost."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest
import redis.asyncio as aioredis

from bot.agent.state import RunState, utcnow
from bot.errors import StoreUnavailable
from bot.store import Keys
from bot.testing.openai_server import Reply
from bot.testing.slack_scenarios import ALICE, GENERAL, ask, resumed_requests, still_open


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
        await fake_redis.hset(run_key, mapping={"rev": str(orphan.revision), "state": orphan.to_json()})
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
