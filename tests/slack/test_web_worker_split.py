"""The web/worker split: queued work is done at least once and answers stay exactly once."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import fakeredis
import pytest

from bot.agent import new_run_id
from bot.errors import StoreUnavailable
from bot.fakeslack.state import TEAM_ID
from bot.ops.metrics import exposition
from bot.store import Keys
from bot.store.conversations import ConversationIndex
from bot.store.work_queue import GROUP
from bot.testing.openai_server import Reply, tool_call
from bot.testing.scrape import parse
from bot.testing.slack_scenarios import (
    ALICE,
    BOB,
    GENERAL,
    SINGLE,
    ask,
    has_controls,
    resumed_requests,
    text_is,
    thread_run,
)


async def start_split(h: Any, server: fakeredis.FakeServer) -> tuple[Any, Any]:
    web = await h.start_process(fakeredis.FakeAsyncRedis(server=server), role="web")
    worker = await h.start_process(fakeredis.FakeAsyncRedis(server=server), role="worker")
    h.route_to(web)
    return web, worker


def consume(worker: Any, stop: asyncio.Event, **kwargs: Any) -> asyncio.Future[None]:
    return asyncio.ensure_future(
        worker.bot.queue.consume(worker.bot.run_job, stop=stop, block_ms=50, consumer="live", **kwargs)
    )


async def asked_through_a_split(
    h: Any,
    client: fakeredis.FakeAsyncRedis,
    server: fakeredis.FakeServer,
    prefix: str,
    *,
    then: str,
    args: dict[str, Any] = SINGLE,
) -> tuple[Any, str, str, dict[str, Any]]:
    """Ask ``args`` (its reply will be ``then``) through a web/worker split whose worker stops consuming once it is
    asked. Returns ``(the worker, the work stream's key, the thread's ts,
    the question's message)``."""
    _web, worker = await start_split(h, server)
    key = Keys(prefix).work()
    await client.xgroup_create(key, GROUP, id="0", mkstream=True)
    stop = asyncio.Event()
    working = consume(worker, stop)
    try:
        thread, q = await ask(h, args, then=then)
    finally:
        stop.set()
        await asyncio.wait_for(working, 10)
    return worker, key, thread, q


async def click_taken_by_a_dead_worker(
    h: Any, client: fakeredis.FakeAsyncRedis, server: fakeredis.FakeServer, prefix: str, *, then: str
) -> tuple[Any, str, str]:
    """Ask a question through a web/worker split (its reply will be ``then``), then click its "api" option and
    let a consumer named "dead" take the click's job and never acknowledge it. Returns ``(the live worker, the
    work stream's key, the thread's ts)``."""
    worker, key, thread, q = await asked_through_a_split(h, client, server, prefix, then=then)
    await h.ws.click(q, "api", user=ALICE)
    taken = await client.xreadgroup(GROUP, "dead", {key: ">"}, count=10)
    assert len(taken[0][1]) == 1  # the dead worker took the click and never acknowledged it
    return worker, key, thread


async def test_queue_down_at_enqueue_tells_the_user_and_loses_or_doubles_nothing(
    fake_server: fakeredis.FakeServer, harness: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with harness(fakeredis.FakeAsyncRedis(server=fake_server)) as h:
        web, worker = await start_split(h, fake_server)
        stop = asyncio.Event()
        working = consume(worker, stop)
        try:
            thread, q = await ask(h, then="Answered once.")
            real_enqueue = web.bot.queue.enqueue

            async def down(job: dict[str, Any]) -> None:
                raise StoreUnavailable("Redis error while queueing work: ConnectionError")

            monkeypatch.setattr(web.bot.queue, "enqueue", down)
            ack = await h.ws.click(q, "api", user=ALICE)
            assert ack.status == 200
            note = await h.ws.wait_for_ephemeral(user=ALICE)
            assert "try again" in note["text"]
            h.model.script(Reply(text="never"))
            await h.ws.mention(ALICE, GENERAL, "hello?", thread_ts=thread)
            await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=lambda m: "storage" in m["text"])
            await asyncio.sleep(0.3)
            await h.settle()
            assert resumed_requests(h.model) == 0 and len(h.model.requests) == 1
            monkeypatch.setattr(web.bot.queue, "enqueue", real_enqueue)
            h.model.reset()
            h.model.script(Reply(text="Answered once."))
            await h.ws.click(q, "web", user=ALICE)
            await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Answered once."))
            await asyncio.sleep(0.3)
            await h.settle()
        finally:
            stop.set()
            await asyncio.wait_for(working, 10)
        assert len(h.model.requests) == 1 and resumed_requests(h.model) == 1
        assert json.loads(h.model.requests[0]["messages"][-1]["content"])["answer"] == "web"


async def test_job_of_a_worker_that_died_before_handling_it_is_answered_exactly_once(
    fake_server: fakeredis.FakeServer, harness: Any, prefix: str
) -> None:
    client = fakeredis.FakeAsyncRedis(server=fake_server)
    async with harness(client) as h:
        worker, key, thread = await click_taken_by_a_dead_worker(h, client, fake_server, prefix, then="Once.")
        await asyncio.sleep(0.35)
        stop = asyncio.Event()
        working = consume(worker, stop, lease_ttl=0.3)
        try:
            await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Once."))
            await asyncio.sleep(0.5)  # several reclaim rounds
            await h.settle()
        finally:
            stop.set()
            await asyncio.wait_for(working, 10)
        assert resumed_requests(h.model) == 1
        assert (await client.xpending(key, GROUP))["pending"] == 0
        assert not [e for e in h.ws.ephemerals(user=ALICE) if "already answered" in e["text"]]


async def test_job_of_a_worker_that_died_after_claiming_the_answer_still_gets_its_reply(
    fake_server: fakeredis.FakeServer, harness: Any, prefix: str
) -> None:
    client = fakeredis.FakeAsyncRedis(server=fake_server)
    async with harness(client) as h:
        worker, _key, thread = await click_taken_by_a_dead_worker(
            h, client, fake_server, prefix, then="Reply after crash."
        )
        state = await thread_run(client, prefix, thread)
        stream = await worker.bot.agent.resume_stream("api", run_id=state.run_id, answered_by=ALICE)
        assert stream._task is not None
        stream._task.cancel()  # ... claimed the answer, then the process died
        await asyncio.sleep(0.35)
        stop = asyncio.Event()
        working = consume(worker, stop, lease_ttl=0.3)
        try:
            await h.ws.wait_for_message(
                channel=GENERAL, thread_ts=thread, predicate=text_is("Reply after crash."), timeout=3
            )
            await h.settle()
        finally:
            stop.set()
            await asyncio.wait_for(working, 10)
        assert resumed_requests(h.model) == 1
        texts = [m["text"] for m in h.ws.messages(GENERAL, thread_ts=thread)]
        assert "Reply after crash." in texts


async def test_a_job_run_by_a_stalled_worker_and_its_heir_at_once_is_answered_exactly_once(
    fake_server: fakeredis.FakeServer, harness: Any, prefix: str
) -> None:
    """A worker stopped (SIGSTOP) past its lease: another takes its click job over and runs it, then the first one
    resumes and runs the same job too, at the same time. The model is asked once, the reply posted once, and the
    person is not told their one click was 'already answered'."""
    client = fakeredis.FakeAsyncRedis(server=fake_server)
    async with harness(client) as h:
        worker, key, thread = await click_taken_by_a_dead_worker(h, client, fake_server, prefix, then="Once only.")
        heir = await h.start_process(fakeredis.FakeAsyncRedis(server=fake_server), role="worker")
        [(_id, fields)] = await client.xrange(key)
        job = json.loads(fields[b"job"])
        before = parse(exposition().decode())
        await asyncio.gather(worker.bot.run_job(job), heir.bot.run_job({**job, "redelivered": True}))
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Once only."))
        await asyncio.sleep(0.5)
        await h.settle()
        assert resumed_requests(h.model) == 1
        texts = [m["text"] for m in h.ws.messages(GENERAL, thread_ts=thread)]
        assert texts.count("Once only.") == 1, texts
        assert not [e for e in h.ws.ephemerals(user=ALICE) if "already answered" in e["text"]]
        after = parse(exposition().decode())  # every process of the harness shares this registry
        assert after.since(before, "askbot_questions_answered_total", mode="single_select") == 1
        assert after.since(before, "askbot_run_resumes_total", trigger="answer") == 1


async def test_a_mention_redelivered_after_its_worker_claimed_the_thread_and_died_is_still_answered(
    fake_server: fakeredis.FakeServer, harness: Any, prefix: str
) -> None:
    """A worker took a top-level mention's job, marked the event seen and claimed the thread for its new run, then
    died before the run existed. The job's next delivery must answer the mention (at least once). A top-level
    mention that skipped reading the thread (nothing could point at it yet, it seemed) lost the thread's claim to
    the dead worker's and told Alice "I'm still working on this thread" about a run that never existed."""
    client = fakeredis.FakeAsyncRedis(server=fake_server)
    async with harness(client) as h:
        _web, worker = await start_split(h, fake_server)
        key = Keys(prefix).work()
        await client.xgroup_create(key, GROUP, id="0", mkstream=True)
        h.model.script(Reply(text="Hello after a crash."))
        d = await h.ws.mention(ALICE, GENERAL, "hi")
        await h.settle()
        taken = await client.xreadgroup(GROUP, "dead", {key: ">"}, count=10)
        [mention] = [j for j in (json.loads(f[b"job"]) for _id, f in taken[0][1]) if j["fn"] == "on_mention"]
        dead = ConversationIndex(client, keys=Keys(prefix))  # the dead worker's first steps, as its run_job made them
        assert await dead.is_new_event(str(mention["body"]["event_id"]), token=mention["id"])
        claimed = await dead.claim_thread(
            TEAM_ID, channel_id=GENERAL, thread_ts=d.message["ts"], run_id=new_run_id(), after=None
        )
        assert claimed
        await worker.bot.run_job({**mention, "redelivered": True})
        await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=d.message["ts"], predicate=text_is("Hello after a crash.")
        )
        assert [e["text"] for e in h.ws.ephemerals(user=ALICE)] == []


async def test_a_job_run_twice_counts_no_duplicate_answer(
    fake_server: fakeredis.FakeServer, harness: Any, prefix: str
) -> None:
    """A click's job that ran, then ran again redelivered (its worker died before acknowledging it): its second run
    finds its own person's answer and says and counts nothing. It counted and audited a duplicate answer nobody
    gave, and told Alice she had answered already. (A second click of hers is its own job: still a duplicate,
    tests/ops/test_metrics.py.)"""
    client = fakeredis.FakeAsyncRedis(server=fake_server)
    async with harness(client) as h:
        worker, key, thread = await click_taken_by_a_dead_worker(h, client, fake_server, prefix, then="Once.")
        [(_id, fields)] = await client.xrange(key)
        job = json.loads(fields[b"job"])
        before = parse(exposition().decode())
        await worker.bot.run_job(job)
        await worker.bot.run_job({**job, "redelivered": True})  # its worker died before acknowledging it
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Once."))
        await h.settle()
        after = parse(exposition().decode())
        told = [e["text"] for e in h.ws.ephemerals(user=ALICE)]
    assert after.since(before, "askbot_questions_answered_total", mode="single_select") == 1
    assert after.since(before, "askbot_answers_duplicate_total", kind="question") == 0
    assert told == [], told


async def test_web_and_worker_processes_split_the_work(fake_server: Any, harness: Any) -> None:
    """``web`` processes ack and queue; a ``worker`` process (sharing only Redis) runs the work."""
    import fakeredis

    async with harness(fakeredis.FakeAsyncRedis(server=fake_server)) as h:
        web = await h.start_process(fakeredis.FakeAsyncRedis(server=fake_server), role="web")
        worker = await h.start_process(fakeredis.FakeAsyncRedis(server=fake_server), role="worker")
        h.route_to(web)
        stop = asyncio.Event()
        working = asyncio.ensure_future(worker.bot.work(stop=stop))
        try:
            thread, q = await ask(h, then="Split works.")
            ack = await h.ws.click(q, "api", user=ALICE)
            assert ack.status == 200
            await h.ws.wait_for_message(
                channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "Split works."
            )
            await h.ws.click(q, "web", user=BOB, as_seen=True)
            refusal = await h.ws.wait_for_ephemeral(user=BOB)
            assert "Only <@U_ALICE> can answer" in refusal["text"]
        finally:
            stop.set()
            await asyncio.wait_for(working, 10)
        assert resumed_requests(h.model) == 1


RESTARTS = [tool_call("restart_service", {"name": n}, id=f"r_{n}") for n in ("api", "web")]


@pytest.mark.parametrize("asked", ["question", "batch"])
async def test_a_mention_redelivered_after_its_worker_saved_the_question_but_died_before_posting_it_asks_it(
    fake_server: fakeredis.FakeServer, harness: Any, prefix: str, asked: str
) -> None:
    """A worker ran a mention's job: the model asked (a question, or two calls needing approval: a batch), the run
    was saved waiting, and the worker died while posting it (here: the post held up by Slack, the job's task
    cancelled). The job's next delivery finds the run waiting on what no message shows, and posts it (a batch with
    its header), which can then be answered (before: nothing was posted, the run waited, invisible, until its
    deadline)."""
    client = fakeredis.FakeAsyncRedis(server=fake_server)
    settings = {"agent": "bot.testing.approval_agent:build"} if asked == "batch" else {}
    async with harness(client, settings=settings) as h:
        _web, worker = await start_split(h, fake_server)
        key = Keys(prefix).work()
        await client.xgroup_create(key, GROUP, id="0", mkstream=True)
        calls = RESTARTS if asked == "batch" else [tool_call("ask_user", SINGLE, id="q1")]
        h.model.script(Reply(tool_calls=calls), Reply(text="Done with api."))
        d = await h.ws.mention(ALICE, GENERAL, "deploy it")
        thread = d.message["ts"]
        await h.settle()
        taken = await client.xreadgroup(GROUP, "dead", {key: ">"}, count=10)
        [mention] = [j for j in (json.loads(f[b"job"]) for _id, f in taken[0][1]) if j["fn"] == "on_mention"]
        # the question's post is held up, and never gets through: the worker dies meanwhile
        h.ws.fake.set_delay("chat.postMessage", 2)
        h.ws.fake.fail_next("chat.postMessage", "request_timeout")
        dying = asyncio.ensure_future(worker.bot.run_job(mention))
        for _ in range(200):
            record = await client.hget(Keys(prefix).thread(TEAM_ID, channel_id=GENERAL, thread_ts=thread), "run_id")
            if record is not None and (await worker.bot.agent.get_run(record.decode())).status == "suspended":
                break
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.2)  # its post of the question is in flight
        dying.cancel()
        await asyncio.gather(dying, return_exceptions=True)
        h.ws.fake.set_delay("chat.postMessage", 0)
        assert not [m for m in h.ws.messages(GENERAL, thread_ts=thread) if has_controls(m)]
        await worker.bot.run_job({**mention, "redelivered": True})
        q = await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=has_controls)
        await h.settle()
        shown = [m for m in h.ws.messages(GENERAL, thread_ts=thread) if has_controls(m)]
        assert len(shown) == (3 if asked == "batch" else 1)  # a batch: its header, then each call's request
        stop = asyncio.Event()
        working = consume(worker, stop)
        try:
            if asked == "batch":
                [header] = [m for m in shown if "Approve all" in json.dumps(m["blocks"])]
                await h.ws.click(header, "Approve all", user=ALICE)
            else:
                await h.ws.click(q, "api", user=ALICE)
            await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Done with api."))
        finally:
            stop.set()
            await asyncio.wait_for(working, 10)
