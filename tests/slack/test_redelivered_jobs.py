"""A job redelivered after its first worker claimed the answer (or decision) and died finishes what that delivery
did not live to: the question's (or request's) message shows its outcome, the run goes on, nobody is told or
counted a duplicate; a redelivered job that claims nothing (opening the Answer form) says what it always says."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import fakeredis
import pytest

from bot.store import Keys
from bot.store.conversations import ConversationIndex
from bot.store.work_queue import GROUP
from bot.testing import approval_agent
from bot.testing.openai_server import Reply, tool_call
from bot.testing.slack_scenarios import (
    ALICE,
    FREE,
    GENERAL,
    blocks_text,
    current,
    has_controls,
    text_is,
    texts_in,
    thread_run,
)
from tests.slack.test_web_worker_split import asked_through_a_split, click_taken_by_a_dead_worker, consume, start_split


async def test_a_click_redelivered_after_its_worker_claimed_and_died_closes_the_question_message(
    fake_server: fakeredis.FakeServer, harness: Any, prefix: str
) -> None:
    """The first delivery of Alice's click claimed her answer ("api") and died before it closed the question's
    message. Its redelivery finds her answer, says nothing and continues the run (the reply comes), but the
    question's message must show its answered state: it keeps its option buttons forever (every click on them
    is then told "already answered")."""
    client = fakeredis.FakeAsyncRedis(server=fake_server)
    async with harness(client) as h:
        worker, key, thread = await click_taken_by_a_dead_worker(h, client, fake_server, prefix, then="After crash.")
        q = next(m for m in h.ws.messages(GENERAL, thread_ts=thread) if has_controls(m))
        state = await thread_run(client, prefix, thread)
        stream = await worker.bot.agent.resume_stream("api", run_id=state.run_id, answered_by=ALICE)
        assert stream._task is not None
        stream._task.cancel()  # ... the first delivery claimed the answer, then its process died
        await asyncio.sleep(0.35)  # its lease lapses
        [(_id, fields)] = await client.xrange(key)
        job = json.loads(fields[b"job"])
        await worker.bot.run_job({**job, "redelivered": True})
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("After crash."))
        await h.settle()
        assert [e["text"] for e in h.ws.ephemerals(user=ALICE)] == []
        after = await current(h, q)
        assert not has_controls(after), blocks_text(after)


async def test_an_approve_redelivered_after_its_worker_decided_and_died_shows_the_decision(
    fake_server: fakeredis.FakeServer, harness: Any, prefix: str
) -> None:
    """Approvals too: the first delivery of Alice's Approve claimed the decision and died before it touched the
    request's message. The redelivered job finds her decision, says nothing and continues the run (the tool runs
    once, the reply comes); the request's message must then show the decision, not Approve / Decline."""
    approval_agent.RESTARTS.clear()
    approval_agent.GATE.clear()
    client = fakeredis.FakeAsyncRedis(server=fake_server)
    async with harness(client, settings={"agent": "bot.testing.approval_agent:build"}) as h:
        _web, worker = await start_split(h, fake_server)
        key = Keys(prefix).work()
        await client.xgroup_create(key, GROUP, id="0", mkstream=True)
        h.model.script(Reply(tool_calls=[tool_call("restart_service", {"name": "api"}, id="r1")]), Reply(text="Done."))
        stop = asyncio.Event()
        working = consume(worker, stop)
        try:
            d = await h.ws.mention(ALICE, GENERAL, "restart api")
            thread = d.message["ts"]
            q = await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=has_controls)
            await h.settle()
        finally:
            stop.set()
            await asyncio.wait_for(working, 10)
        await h.ws.click(q, "Approve", user=ALICE)
        taken = await client.xreadgroup(GROUP, "dead", {key: ">"}, count=10)
        [(_entry, fields)] = taken[0][1]
        job = json.loads(fields[b"job"])
        state = await thread_run(client, prefix, thread)
        stream = await worker.bot.agent.approve_tool_call(run_id=state.run_id, tool_call_id="r1", approved_by=ALICE)
        assert stream._task is not None
        stream._task.cancel()  # decided, then the process died (before the tool ran)
        await asyncio.sleep(0.35)
        await worker.bot.run_job({**job, "redelivered": True})
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Done."), timeout=5)
        await h.settle()
        assert [e["text"] for e in h.ws.ephemerals(user=ALICE)] == []
        assert approval_agent.RESTARTS == ["api"]
        after = await current(h, q)
        assert not has_controls(after), blocks_text(after)
    approval_agent.GATE.clear()


@pytest.mark.parametrize("redelivered", [True, False])
async def test_a_redelivered_answer_button_job_after_the_person_answered_otherwise_leaves_no_spinner(
    fake_server: fakeredis.FakeServer, harness: Any, prefix: str, redelivered: bool
) -> None:
    """Opening the Answer form claims nothing, so a redelivered "open the form" job never finds its own claim.
    Alice presses Answer (the web process opens the loading modal at once); the worker that took the job dies
    before it filled the form in; Alice, seeing a spinner, types her answer in the thread instead. The job's
    redelivery finds Alice's answer and, REDELIVERED being set, says nothing: the modal spins on
    ("Opening the question…") for good. Before e0da528 it said she had answered already (as the same job run
    without the flag still does: the False case passes)."""
    client = fakeredis.FakeAsyncRedis(server=fake_server)
    async with harness(client) as h:
        worker, key, thread, q = await asked_through_a_split(
            h, client, fake_server, prefix, then="Goal noted.", args=FREE
        )
        await h.settle()
        await h.ws.click(q, "Answer", user=ALICE)
        loading = await h.ws.wait_for_view(user=ALICE)
        assert "Opening the question" in json.dumps(loading)
        taken = await client.xreadgroup(GROUP, "dead", {key: ">"}, count=10)
        [(_entry, fields)] = taken[0][1]
        opening = json.loads(fields[b"job"])
        await h.ws.reply_in_thread(ALICE, GENERAL, thread, "Ship v2")
        taken = await client.xreadgroup(GROUP, "live2", {key: ">"}, count=10)
        for _entry, fields in taken[0][1]:
            await worker.bot.run_job(json.loads(fields[b"job"]))
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Goal noted."))
        await h.settle()
        await worker.bot.run_job({**opening, "redelivered": redelivered})
        await h.settle()
        view = await h.ws.wait_for_view(user=ALICE)
        assert "Opening the question" not in json.dumps(view), json.dumps(view)


async def test_mention_job_redelivered_after_its_worker_died_is_still_answered(
    fake_server: fakeredis.FakeServer, harness: Any, prefix: str
) -> None:
    """README (Scale out): workers run queued work "at least once: a dead worker's jobs are picked up by another".
    A worker that took a mention job, marked the event as seen (the first step of on_mention) and died before
    starting the run must not make the redelivered job a silent no-op: the person expects their mention answered.
    """
    client = fakeredis.FakeAsyncRedis(server=fake_server)
    async with harness(client) as h:
        web = await h.start_process(fakeredis.FakeAsyncRedis(server=fake_server), role="web")
        worker = await h.start_process(fakeredis.FakeAsyncRedis(server=fake_server), role="worker")
        h.route_to(web)
        key = Keys(prefix).work()
        await client.xgroup_create(key, GROUP, id="0", mkstream=True)
        h.model.script(Reply(text="Hello after a crash."))
        d = await h.ws.mention(ALICE, GENERAL, "hi")
        await h.settle()
        taken = await client.xreadgroup(GROUP, "dead", {key: ">"}, count=10)
        jobs = [json.loads(fields[b"job"]) for _id, fields in taken[0][1]]
        mention = next(j for j in jobs if j["fn"] == "on_mention")
        # the dead worker got as far as marking the event as seen (Threads._new_event), then died
        dead_index = ConversationIndex(client, keys=Keys(prefix))  # (it marks with its job's id, as run_job does)
        assert await dead_index.is_new_event(str(mention["body"]["event_id"]), token=mention["id"])
        await asyncio.sleep(0.35)
        stop = asyncio.Event()
        working = asyncio.ensure_future(
            worker.bot.queue.consume(worker.bot.run_job, stop=stop, block_ms=50, consumer="live", lease_ttl=0.3)
        )
        try:
            await asyncio.sleep(1.5)
            await h.settle()
        finally:
            stop.set()
            await asyncio.wait_for(working, 10)
        assert "Hello after a crash." in texts_in(h, d.message["ts"]), texts_in(h, d.message["ts"])


async def test_a_click_redelivered_to_another_worker_while_the_dead_ones_lease_stands_goes_on_with_the_run(
    fake_server: fakeredis.FakeServer, harness: Any, prefix: str
) -> None:
    """Worker A claimed Alice's answer and died; the queue hands the click's job to worker B once A's queue lease is
    gone (10-14 s), while A's run lease (30 s) still stands for a while: B waits it out and goes on with the run.
    Before: B found the run driven (A's lease), closed the question and acknowledged the job; the run stayed
    ``running`` with no reply. Found by a break-it review."""
    client = fakeredis.FakeAsyncRedis(server=fake_server)
    async with harness(client) as h:
        worker_a, key, thread, q = await asked_through_a_split(h, client, fake_server, prefix, then="After crash.")
        worker_b = await h.start_process(fakeredis.FakeAsyncRedis(server=fake_server), role="worker")
        await h.ws.click(q, "api", user=ALICE)
        taken = await client.xreadgroup(GROUP, "dead", {key: ">"}, count=10)
        [(_id, fields)] = taken[0][1]
        job = json.loads(fields[b"job"])
        state = await thread_run(client, prefix, thread)
        stream = await worker_a.bot.agent.resume_stream("api", run_id=state.run_id, answered_by=ALICE)
        stream._task.cancel()  # A claimed the answer, then died mid-run: its lease stands 2 s more
        await asyncio.sleep(0.1)
        await client.pexpire(Keys(prefix).lease(state.run_id), 2000)
        await worker_b.bot.run_job({**job, "redelivered": True})
        await h.settle()
        assert "After crash." in texts_in(h, thread)
        assert (await thread_run(client, prefix, thread)).status == "completed"
        assert not has_controls(await current(h, q))
        assert not [e for e in h.ws.ephemerals(user=ALICE)]  # nobody is told anything


async def a_mention_two_workers_may_take(
    h: Any, client: fakeredis.FakeAsyncRedis, server: fakeredis.FakeServer, prefix: str, text: str, *replies: Reply
) -> tuple[Any, Any, str, dict[str, Any]]:
    """A web/worker split with a second worker; the model scripted with ``replies``; Alice's mention ``text`` queued
    and its job taken by a consumer that never acknowledges it. Returns ``(worker A, worker B, the thread's ts, the
    mention's job)``: a test runs the job on A, then on B as redelivered."""
    web, worker_a = await start_split(h, server)
    worker_b = await h.start_process(fakeredis.FakeAsyncRedis(server=server), role="worker")
    h.route_to(web)
    key = Keys(prefix).work()
    await client.xgroup_create(key, GROUP, id="0", mkstream=True)
    h.model.script(*replies)
    d = await h.ws.mention(ALICE, GENERAL, text)
    await h.settle()
    taken = await client.xreadgroup(GROUP, "dead", {key: ">"}, count=10)
    mention = next(j for j in (json.loads(f[b"job"]) for _i, f in taken[0][1]) if j["fn"] == "on_mention")
    return worker_a, worker_b, d.message["ts"], mention


async def test_a_mention_redelivered_while_its_dead_workers_run_lease_stands_is_answered_once(
    fake_server: fakeredis.FakeServer, harness: Any, prefix: str
) -> None:
    """Worker A started the mention's run and died in its model turn; the job reaches worker B while A's run lease
    still stands: B waits it out, goes on with that run (the mention's own) and starts no second one. Before: Alice
    was told "still working" and the run stayed ``running`` with no reply. Found by a break-it review."""
    client = fakeredis.FakeAsyncRedis(server=fake_server)
    async with harness(client) as h:
        replies = (Reply(text="never seen", delay=3.0), Reply(text="Hello after a crash."))
        worker_a, worker_b, thread, mention = await a_mention_two_workers_may_take(
            h, client, fake_server, prefix, "hi", *replies
        )
        first = asyncio.ensure_future(worker_a.bot.run_job(mention))
        for _ in range(100):  # the run exists, its model turn under way
            await asyncio.sleep(0.05)
            if len(h.model.requests) == 1:
                break
        state = await thread_run(client, prefix, thread)
        assert state.status == "running"
        first.cancel()  # worker A dies: its job and the run it drives (the only run going) end where they are
        for task in asyncio.all_tasks():
            if task.get_coro().__qualname__ == "AgentStream._start.<locals>.runner":  # type: ignore[union-attr]
                task.cancel()
        await asyncio.sleep(0.1)
        await client.pexpire(Keys(prefix).lease(state.run_id), 2000)
        await worker_b.bot.run_job({**mention, "redelivered": True})
        await h.settle()
        assert texts_in(h, thread).count("Hello after a crash.") == 1, texts_in(h, thread)
        assert not [e["text"] for e in h.ws.ephemerals(user=ALICE)]
        assert len(h.model.requests) == 2  # the dead turn, then the one going on: no second run


async def test_a_mention_redelivered_while_its_first_worker_lives_leaves_the_run_that_worker_ended_alone(
    fake_server: fakeredis.FakeServer, harness: Any, prefix: str
) -> None:
    """The first worker is alive, only slow: its model turn fails (HTTP 400) while the redelivered job waits for
    its lease. The lease goes with the run's failure: the waiting job must not take a failed run for an orphan and
    retry it unasked (the thread's "press Retry" would then be untrue, and the model called twice). Found by a
    break-it review of the lease wait."""
    client = fakeredis.FakeAsyncRedis(server=fake_server)
    async with harness(client) as h:
        refused = {"error": {"message": "bad request", "type": "invalid_request_error"}}
        replies = (Reply(status=400, delay=2.0, json_body=refused), Reply(text="A reply nobody asked for."))
        worker_a, worker_b, thread, mention = await a_mention_two_workers_may_take(
            h, client, fake_server, prefix, "hi", *replies
        )
        first = asyncio.ensure_future(worker_a.bot.run_job(mention))
        for _ in range(100):  # its model turn under way
            await asyncio.sleep(0.05)
            if len(h.model.requests) == 1:
                break
        await asyncio.wait_for(worker_b.bot.run_job({**mention, "redelivered": True}), 40)
        await asyncio.wait_for(first, 40)
        await h.settle()
        assert len(h.model.requests) == 1, texts_in(h, thread)
        assert (await thread_run(client, prefix, thread)).status == "failed"


async def test_a_mention_redelivered_after_its_run_asked_does_not_answer_its_own_question(
    fake_server: fakeredis.FakeServer, harness: Any, prefix: str
) -> None:
    """The first worker ran the mention to its question and died before acknowledging the job; the job comes again:
    the person's message is not taken for the answer to the question it asked (nor a second run started). Found by
    a break-it review."""
    client = fakeredis.FakeAsyncRedis(server=fake_server)
    async with harness(client) as h:
        replies = (Reply(tool_calls=[tool_call("ask_user", FREE, id="q1")]), Reply(text="Answered by my own words."))
        worker_a, worker_b, thread, mention = await a_mention_two_workers_may_take(
            h, client, fake_server, prefix, "deploy it", *replies
        )
        await worker_a.bot.run_job(mention)  # asked; then the worker died before acknowledging
        q = await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=has_controls)
        await worker_b.bot.run_job({**mention, "redelivered": True})
        await h.settle()
        assert has_controls(await current(h, q)) and len(h.model.requests) == 1
        assert "Answered by my own words." not in texts_in(h, thread)
