"""Every kind of work is bounded: a model turn by time and by length, runs working at once by person (across
processes, in Redis with an expiry) and by process. Past a bound the person is told plainly, nothing is lost and
the run can be retried."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis.asyncio as aioredis

from bot.slack.follow import CUT_OFF
from bot.store import Keys
from bot.store.limits import ActiveRuns
from bot.testing.openai_server import Reply
from bot.testing.slack_scenarios import ALICE, BOB, GENERAL, ask, current, has_controls


def failure(m: dict[str, Any]) -> bool:
    return "Retry" in str(m.get("blocks"))


async def test_a_model_that_streams_forever_is_stopped_at_the_turn_limit_and_can_be_retried(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    async with harness(fake_redis, settings={"model_turn_timeout": 1}) as h:
        h.model.script(Reply(endless=True, chunk_delay=0.05), Reply(text="Short and done."))
        d = await h.ws.mention(ALICE, GENERAL, "go on forever")
        thread = d.message["ts"]
        note = await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=failure, timeout=10)
        assert "longer than 1 s" in note["text"]
        posted = [m for m in h.ws.messages(GENERAL, thread_ts=thread) if m.get("bot_id") and m is not note]
        shown = [m for m in posted if m["ts"] != note["ts"]]
        assert len(shown) == 1 and shown[0]["text"].endswith(CUT_OFF)  # what streamed in 1 s, marked cut off
        assert not shown[0]["streaming"] and len(shown[0]["text"]) < 500 and len(note["text"]) < 500
        await h.ws.click(note, "Retry", user=ALICE)
        await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "Short and done."
        )


async def test_a_reply_past_the_length_limit_is_not_posted_and_can_be_retried(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    async with harness(fake_redis, settings={"max_reply_chars": 1000}) as h:
        h.model.script(Reply(text="word " * 400), Reply(text="Shorter."))
        d = await h.ws.mention(ALICE, GENERAL, "write a lot")
        thread = d.message["ts"]
        note = await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=failure)
        assert "past 1000 characters" in note["text"]
        await h.ws.click(note, "Retry", user=ALICE)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "Shorter.")


async def test_a_burst_of_mentions_from_one_person_starts_only_the_allowed_runs(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    async with harness(fake_redis, settings={"max_runs_per_person": 2}) as h:
        h.model.responder = lambda body: Reply(text="done", delay=0.5)
        threads = [(await h.ws.mention(ALICE, GENERAL, f"job {i}")).message["ts"] for i in range(6)]
        await h.ws.mention(BOB, GENERAL, "mine too")  # another person is not held back by Alice's burst
        await h.settle()
        assert len(h.model.requests) == 3
        told = [e["text"] for e in h.ws.ephemerals(user=ALICE)]
        assert len(told) == 4 and all("try again in a moment" in t for t in told)
        assert not h.ws.ephemerals(user=BOB)
        h.model.requests.clear()
        await h.ws.mention(ALICE, GENERAL, "one more", thread_ts=threads[0])  # slots are given back
        await h.settle()
        assert len(h.model.requests) == 1


async def test_the_per_process_limit_turns_work_away_politely(fake_redis: aioredis.Redis, harness: Any) -> None:
    async with harness(fake_redis, settings={"max_runs_per_process": 1}) as h:
        h.model.responder = lambda body: Reply(text="done", delay=0.5)
        await h.ws.mention(ALICE, GENERAL, "first")
        await asyncio.sleep(0.1)
        await h.ws.mention(BOB, GENERAL, "second")
        await h.settle()
        assert len(h.model.requests) == 1
        assert "many conversations" in h.ws.ephemerals(user=BOB)[-1]["text"]


async def test_an_answer_past_the_limit_is_not_taken_and_can_be_sent_again(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    async with harness(fake_redis, settings={"max_runs_per_person": 1}) as h:
        _thread, q = await ask(h, then=Reply(text="answered", delay=0.3))
        await h.settle()  # the asking segment gives its slot back
        h.model.responder = lambda body: Reply(text="busy", delay=1.0)
        await h.ws.mention(ALICE, GENERAL, "something slow")  # holds Alice's one slot
        await asyncio.sleep(0.1)
        await h.ws.click(q, "api", user=ALICE)
        note = await h.ws.wait_for_ephemeral(user=ALICE)
        assert "try again in a moment" in note["text"]
        await h.settle()
        assert has_controls(await current(h, q))  # nothing was taken: the question is still open
        await h.ws.click(q, "api", user=ALICE)
        await h.settle()
        assert not has_controls(await current(h, q))


@pytest.mark.real_redis
async def test_slots_of_a_crashed_process_lapse_on_their_own(real_redis: aioredis.Redis, prefix: str) -> None:
    active = ActiveRuns(real_redis, keys=Keys(prefix), ttl=0.3)
    assert await active.acquire("T:U", slot="a", limit=2) and await active.acquire("T:U", slot="b", limit=2)
    assert not await active.acquire("T:U", slot="c", limit=2)  # full; then the process holding a and b dies
    await asyncio.sleep(0.4)
    assert await active.acquire("T:U", slot="c", limit=2)
    assert 0 < await real_redis.pttl(Keys(prefix).active_runs("T:U")) <= 300
