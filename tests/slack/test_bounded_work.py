"""Every kind of work is bounded: a model turn by time and by length, runs working at once by person (across
processes, in Redis with an expiry) and by process. Past a bound the person is told plainly, nothing is lost and
the run can be retried."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from bot.slack.replies.thread_writer import CUT_OFF
from bot.store import Keys
from bot.store.limits import ActiveRuns
from bot.testing.openai_server import Reply, tool_call
from bot.testing.scrape import scrape
from bot.testing.slack_scenarios import (
    ALICE,
    BOB,
    GENERAL,
    ask,
    blocks_text,
    current,
    has_controls,
    texts_in,
    thread_run_id,
)
from bot.testing.tcp_proxy import TcpProxy

BASIC = str(Path(__file__).resolve().parent.parent / "agent" / "mcp" / "servers" / "basic.py")


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


async def test_a_typed_answer_at_the_limit_is_taken_the_mentions_own_slot_given_back_first(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    """A mention's run slot is asked for with its first sight (one round trip less); when the thread's run waits
    for an answer, that mention is the answer, whose run takes a slot of its own: at one slot per person the
    mention's must be given back first, or the answer is refused as "still working"."""
    async with harness(fake_redis, settings={"max_runs_per_person": 1}) as h:
        thread, q = await ask(h, then="Going with api.")
        await h.settle()
        await h.ws.mention(ALICE, GENERAL, "api", thread_ts=thread)
        await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "Going with api."
        )
        await h.settle()
        assert not h.ws.ephemerals(user=ALICE)  # nobody was told to slow down
        assert not has_controls(await current(h, q))


async def test_a_mention_slack_delivers_again_gives_its_run_slot_back(fake_redis: aioredis.Redis, harness: Any) -> None:
    """Slack's retry of a mention already taken is dropped; the run slot asked for with its first sight goes back
    with it, so at one slot per person the next request is served (not "still working" until the slot lapses)."""
    async with harness(fake_redis, settings={"max_runs_per_person": 1}) as h:
        h.model.script(Reply(text="First."), Reply(text="Second."))
        d = await h.ws.mention(ALICE, GENERAL, "one")
        await h.settle()
        assert (await h.ws.retry(d.ack, 1)).status == 200
        await h.settle()
        d2 = await h.ws.mention(ALICE, GENERAL, "two")
        await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=d2.message["ts"], predicate=lambda m: m["text"] == "Second."
        )
        assert not h.ws.ephemerals(user=ALICE)
        assert len(h.model.requests) == 2  # the retry started nothing


@pytest.mark.real_redis
async def test_slots_of_a_crashed_process_lapse_on_their_own(real_redis: aioredis.Redis, prefix: str) -> None:
    active = ActiveRuns(real_redis, keys=Keys(prefix), ttl=0.3)
    assert await active.acquire("T:U", slot="a", limit=2) and await active.acquire("T:U", slot="b", limit=2)
    assert not await active.acquire("T:U", slot="c", limit=2)  # full; then the process holding a and b dies
    await asyncio.sleep(0.4)
    assert await active.acquire("T:U", slot="c", limit=2)
    assert 0 < await real_redis.pttl(Keys(prefix).active_runs("T:U")) <= 300


async def test_an_mcp_tools_huge_result_reaches_the_model_cut_to_tool_result_max_chars(
    fake_redis: aioredis.Redis, harness: Any, tmp_path: Path
) -> None:
    """README (Work is bounded): a tool result is cut to ``TOOL_RESULT_MAX_CHARS``, marked (the week's input: a
    3 MB MCP result put 3.2 MB into the next model request); a real stdio MCP server from tests/agent/mcp/servers."""
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"basic": {"command": sys.executable, "args": [BASIC]}}}))
    async with harness(fake_redis, settings={"mcp_config": str(config), "tool_result_max_chars": 3000}) as h:
        await h.bot.start()
        h.model.script(
            Reply(tool_calls=[tool_call("basic__big", {"chars": 3_000_000}, id="m1")]), Reply(text="Nothing odd.")
        )
        d = await h.ws.mention(ALICE, GENERAL, "anything in the logs?")
        await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=d.message["ts"], predicate=lambda m: m["text"] == "Nothing odd."
        )
        [sent] = [m["content"] for m in h.model.requests[1]["messages"] if m.get("tool_call_id") == "m1"]
        assert sent.startswith("log line 00000000") and len(sent) < 3200
        assert sent.endswith(
            "[... 2,997,000 more characters cut here: this tool result had 3,000,000 characters, and"
            " at most 3,000 are kept]"
        )


async def test_a_message_over_the_token_budget_is_not_sent_and_says_what_to_do(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    """README (Work is bounded): a request over ``HISTORY_TOKEN_BUDGET`` even with every older message left out is
    never sent; the person gets the too-long notice (no Retry: it would be refused again), and the thread goes on."""
    async with harness(fake_redis, settings={"history_token_budget": 1000}) as h:
        metrics = h.processes[0].url.removesuffix("/slack/events")
        before = await scrape(metrics)
        d = await h.ws.mention(ALICE, GENERAL, "please read all of this: " + "word " * 3000)
        thread = d.message["ts"]
        notice = await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=thread, predicate=lambda m: "too long" in m["text"]
        )
        assert notice["text"].startswith("This conversation has grown too long for the model: the request would be")
        assert "over the budget of 1000 tokens" in notice["text"] and "Write a shorter message" in notice["text"]
        assert not has_controls(notice)
        await h.settle()
        assert h.model.requests == []  # never sent
        assert (await scrape(metrics)).since(before, "askbot_model_errors_total", kind="over_budget") == 1

        h.model.script(Reply(text="Back on track."))
        await h.ws.mention(ALICE, GENERAL, "in short: what next?", thread_ts=thread)
        await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "Back on track."
        )
        assert not any("word word" in str(m.get("content")) for m in h.model.requests[-1]["messages"])


async def test_in_channel_mode_bob_is_not_refused_for_alices_runs(fake_redis: aioredis.Redis, harness: Any) -> None:
    """README: "at most MAX_RUNS_PER_PERSON (3) runs per person work at once ... past them the person is asked to try
    again". In channel mode Bob (no run of his working) answering Alice's question is not past any limit of his; he
    must not be refused with "I'm still working on 3 of your requests" (they are Alice's, not his)."""
    async with harness(fake_redis, answerers="channel") as h:
        thread, q = await ask(h, then="Answered by Bob.")
        h.model.reset()
        h.model.script(*[Reply(text=f"slow {i}", delay=3.0) for i in range(3)])
        for i in range(3):
            await h.ws.mention(ALICE, GENERAL, f"work {i}")
        await asyncio.sleep(0.4)  # Alice's three runs are working
        h.model.script(Reply(text="Answered by Bob."))
        await h.ws.click(q, "web", user=BOB)
        await asyncio.sleep(0.5)
        notes = [e["text"] for e in h.ws.ephemerals(user=BOB)]
        await h.settle()
        assert not any("of your requests" in n for n in notes), notes
        assert "Answered by Bob." in texts_in(h, thread)


@pytest.mark.parametrize("what", ["tool-call-arguments", "reasoning"])
async def test_model_output_other_than_text_is_bounded_too(fake_redis: aioredis.Redis, harness: Any, what: str) -> None:
    """README (Work is bounded): a model turn stops after MAX_REPLY_CHARS characters ("the longest text one model
    turn may write"), "leaving the run retryable". A model that writes 300,000 characters in one turn as tool-call
    arguments (a question that long), or as streamed ``reasoning_content`` (thinking mode), writes far past the limit
    (1,000 here); it is expected to be stopped like reply text is (failure notice with Retry), not kept whole in the
    run (Redis) and sent back to the model on every later turn."""
    async with harness(fake_redis, settings={"max_reply_chars": 1000}) as h:
        if what == "tool-call-arguments":
            h.model.script(Reply(tool_calls=[tool_call("ask_user", {"question": "Q " * 150_000}, id="c1")]))
        else:
            h.model.script(Reply(chunks=[{"reasoning_content": "r" * 1000} for _ in range(300)] + [{"content": "ok"}]))
        d = await h.ws.mention(ALICE, GENERAL, "go")
        await asyncio.sleep(0.3)
        await h.settle()
        run_id = await thread_run_id(h, d.message["ts"])
        state = await h.bot.agent.get_run(run_id)
        assert state.status == "failed", (state.status, len(state.to_json()))
        assert any("Retry" in blocks_text(m) for m in h.ws.messages(GENERAL, thread_ts=d.message["ts"]))


async def test_only_a_message_that_starts_its_thread_takes_a_run_slot_with_its_first_sight(
    fake_redis: aioredis.Redis, harness: Any, prefix: str
) -> None:
    """A message that starts its own thread starts a run: its slot is asked for with its first sight (one round
    trip less). A reply in a thread may be an answer, "still working", or a stop, and starts no run of its own
    then: it holds no slot while its thread is read, so at the limit it can't turn away the same person's next
    request (it did for that round trip)."""
    async with harness(fake_redis, settings={"max_runs_per_person": 1}) as h:
        threads = h.bot.threads
        assert threads is not None
        person = Keys(prefix).active_runs(f"T_PLAYGROUND:{ALICE}")
        now = int(time.time())

        def event(n: int, **extra: str) -> dict[str, Any]:
            ts = f"{now}.00000{n}"  # message ts of this moment (Slack's ts is a Unix time)
            fields = {"type": "app_mention", "user": ALICE, "channel": GENERAL, "ts": ts, "text": "hi", **extra}
            return {"team_id": "T_PLAYGROUND", "event_id": f"Ev{n}{prefix}", "event": fields}

        for body in (event(1, thread_ts=f"{now}.000000"), event(2, thread_ts=f"{now}.000000")):
            read = await threads.new_event_reads(body, {})
            assert read is not None and read.taking is None
            assert await fake_redis.zcard(person) == 0  # no slot held while the thread is read
        top = await threads.new_event_reads(event(3), {})
        assert top is not None and top.taking is not None
        assert await fake_redis.zcard(person) == 1
        await top.drop_slot()
        assert await fake_redis.zcard(person) == 0


@pytest.mark.real_redis
@pytest.mark.redis_kinds("single")  # a TcpProxy in front of one server
async def test_a_mention_given_up_while_its_first_sight_is_in_flight_leaves_no_slot_held(
    proxied_redis: tuple[aioredis.Redis, TcpProxy], real_redis: aioredis.Redis, harness: Any, prefix: str
) -> None:
    """A mention's first sight (which asks for its run slot, :meth:`new_event_reads`) is given up while its batch is
    stalled in the network (shutdown, or a Redis stall past the caller's wait). The slot is owed back (it was not:
    only a Redis error owed it) and, once the batch has landed after the release, nothing holds the person's slot
    (it stayed held 2 minutes: "still working on 1 of your requests" while nothing ran)."""
    client, proxy = proxied_redis
    async with harness(client, settings={"max_runs_per_person": 1}) as h:
        threads = h.bot.threads
        assert threads is not None
        gate = threads.answering.gate
        person = Keys(prefix).active_runs(f"T_PLAYGROUND:{ALICE}")
        ts = f"{int(time.time())}.000001"
        event = {"type": "app_mention", "user": ALICE, "channel": GENERAL, "ts": ts, "text": "hi"}
        proxy.hold_next(containing=b"active:", seconds=1.0)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(
                threads.new_event_reads({"team_id": "T_PLAYGROUND", "event_id": f"Ev{prefix}", "event": event}, {}), 0.2
            )
        assert gate.owed
        await gate.pay_owed()  # before the held batch lands
        await asyncio.sleep(1.3)
        now_ms = int(time.time() * 1000)
        assert await real_redis.zcount(person, f"({now_ms}", "+inf") == 0
