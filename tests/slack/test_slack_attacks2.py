"""Second attack pass: typed multi-select parsing, repeated tool_call_ids, continuing failed/stale runs,
background saves, the web/worker split, Block Kit budgets and long replies.

Each test asserts what a user would expect (the bugs this pass found are fixed).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import fakeredis
import pytest
import redis.asyncio as aioredis

from bot.agent import Agent
from bot.agent.state import RunState
from bot.errors import StoreUnavailable
from bot.slack.mrkdwn import MARKDOWN_BLOCK, split_reply, text_length
from bot.slack.typed_answers import labels_in_text
from bot.store import Keys
from bot.store.work_queue import GROUP
from bot.testing.openai_server import FakeOpenAI, Reply, tool_call

ALICE, BOB = "U_ALICE", "U_BOB"
GENERAL = "C_GENERAL"
SINGLE = {"question": "Which repo?", "options": [{"label": "api"}, {"label": "web"}]}
SECOND = {"question": "Which env?", "options": [{"label": "staging"}, {"label": "prod"}]}


# --- helpers -------------------------------------------------------------------------------------


def has_controls(message: dict[str, Any]) -> bool:
    return any(b["type"] == "actions" for b in message.get("blocks", []))


def resumed_requests(model: FakeOpenAI) -> int:
    return sum(1 for r in model.requests if r["messages"][-1]["role"] == "tool")


def assert_tool_messages_complete(model: FakeOpenAI) -> None:
    """Chat Completions: before every request, every tool_call_id has exactly one tool message."""
    for body in model.requests:
        msgs = body["messages"]
        wanted = [c["id"] for m in msgs if m["role"] == "assistant" for c in m.get("tool_calls") or []]
        got = [m["tool_call_id"] for m in msgs if m["role"] == "tool"]
        assert sorted(wanted) == sorted(got), (wanted, got)


def slack_errors(h: Any) -> list[tuple[str, str]]:
    return [(c.method, c.error) for c in h.ws.calls() if c.error]


async def ask(h: Any, args: dict[str, Any] = SINGLE, *, then: str | Reply = "Done.") -> tuple[str, dict[str, Any]]:
    h.model.script(
        Reply(tool_calls=[tool_call("ask_user", args, id="c1")]),
        then if isinstance(then, Reply) else Reply(text=then),
    )
    d = await h.ws.mention(ALICE, GENERAL, "go")
    q = await h.ws.wait_for_message(channel=GENERAL, thread_ts=d.message["ts"], predicate=has_controls)
    return d.message["ts"], q


def text_is(text: str) -> Any:
    return lambda m: m["text"] == text


async def thread_run(client: aioredis.Redis, prefix: str, thread: str) -> RunState:
    keys = [k async for k in client.scan_iter(match=f"{prefix}thread:*{thread}")]
    assert len(keys) == 1, keys
    run_id = (await client.hget(keys[0], "run_id")).decode()
    raw = await client.hget(Keys(prefix).run(run_id), "state")
    assert raw is not None
    return RunState.from_json(raw)


async def put_state(client: aioredis.Redis, prefix: str, state: RunState) -> None:
    await client.hset(Keys(prefix).run(state.run_id), mapping={"rev": str(state.revision), "state": state.to_json()})


# --- typed multi-select answers: labels_in_text --------------------------------------------------


def test_numeric_labels_names_win_over_numbers_and_blank_or_repeated_pieces_are_ignored() -> None:
    assert labels_in_text("1, 10", ["1", "2", "10"]) == ["1", "10"]
    assert labels_in_text("10", ["1", "2", "10"]) == ["10"]
    assert labels_in_text("3", ["1", "2", "10"]) == ["10"]  # not a label: its number in the list
    assert labels_in_text("2", ["10", "2", "x"]) == ["2"]  # a label equal to another option's number
    assert labels_in_text("1,, ;\n 1 ,1.", ["1", "2"]) == ["1"]
    assert labels_in_text("b, 2, B", ["a", "b"]) == ["b"]
    assert labels_in_text(" , ;\n ", ["a"]) is None
    assert labels_in_text("0", ["a"]) is None and labels_in_text("2", ["a"]) is None
    assert labels_in_text("\u0661", ["a"]) is None  # ARABIC-INDIC DIGIT ONE: not a list number


def test_label_with_a_comma_can_be_named_with_another() -> None:
    assert labels_in_text("Yes, please; No", ["Yes, please", "No"]) == ["Yes, please", "No"]


def test_labels_starting_or_ending_with_a_dot_can_be_listed() -> None:
    assert labels_in_text(".NET, Java", [".NET", "Java"]) == [".NET", "Java"]
    assert labels_in_text("Misc., Java", ["Misc.", "Java"]) == ["Misc.", "Java"]


def test_labels_differing_only_by_case_keep_the_exact_one_typed() -> None:
    assert labels_in_text("api", ["api", "API"]) == ["api"]
    assert labels_in_text("api, web", ["api", "API", "web"]) == ["api", "web"]


# --- long replies: split_reply -------------------------------------------------------------------


def test_split_reply_of_one_30k_word_loses_nothing() -> None:
    word = "".join(chr(ord("a") + i % 26) for i in range(30_000))
    parts = split_reply(word)
    assert "".join(parts) == word
    assert all(0 < len(p) <= MARKDOWN_BLOCK for p in parts)


def test_split_reply_of_unicode_without_spaces_loses_nothing() -> None:
    text = "日本語🙂" * 8000  # 32,000 code points, no break anywhere
    parts = split_reply(text)
    assert "".join(parts) == text and all(0 < len(p) <= MARKDOWN_BLOCK for p in parts)


def test_split_reply_keeps_indentation_of_a_long_code_listing() -> None:
    text = "Here is the file:\n" + "".join(f"    line_{i:05d} = {i}\n" for i in range(1500))
    parts = split_reply(text)
    lines = [line for p in parts for line in p.splitlines()]
    assert all(line.startswith("    ") for line in lines[1:] if line), [p[:30] for p in parts]


def test_split_reply_never_yields_an_empty_part() -> None:
    parts = split_reply(" " * 13_000 + "hi")
    assert parts and all(p.strip() for p in parts), [len(p) for p in parts]


# --- question_blocks against the fake Slack's checks ---------------------------------------------


@pytest.mark.parametrize("mode", ["single_select", "multi_select"])
@pytest.mark.parametrize("question_char", ["Q", "&"])  # '&' becomes '&amp;': 5x longer once escaped
async def test_100_options_of_75_chars_with_descriptions_and_a_5000_char_question_are_accepted(
    fake_redis: aioredis.Redis, harness: Any, mode: str, question_char: str
) -> None:
    args = {
        "question": question_char * 5000,
        "selection_mode": mode,
        "options": [{"label": f"{i:03d}" + "<&>" * 24, "description": "d&<" * 25} for i in range(100)],
    }
    assert all(len(o["label"]) == 75 for o in args["options"])
    async with harness(fake_redis) as h:
        h.model.script(Reply(tool_calls=[tool_call("ask_user", args, id="c1")]), Reply(text="ok"))
        d = await h.ws.mention(ALICE, GENERAL, "go")
        thread = d.message["ts"]
        q = await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=has_controls, timeout=5)
        await h.settle()
        assert slack_errors(h) == []
        assert text_length(q["blocks"]) <= 12_000
        labels = [o["label"] for o in args["options"]]
        if mode == "single_select":
            await h.ws.select(q, labels[99][:75], user=ALICE)
        else:
            await h.ws.select(q, [labels[0], labels[99]], user=ALICE)
            await h.ws.click(q, "Submit", user=ALICE)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("ok"))
        await h.settle()
        result = json.loads(h.model.requests[-1]["messages"][-1]["content"])
        if mode == "single_select":
            assert result["answer"] == labels[99]
        else:
            assert result["answers"] == [labels[0], labels[99]]
        assert slack_errors(h) == []


# --- repeated tool_call_ids in ONE turn ----------------------------------------------------------


async def test_two_questions_with_the_same_id_in_one_turn_each_get_their_own_answer(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    async with harness(fake_redis) as h:
        h.model.script(
            Reply(tool_calls=[tool_call("ask_user", SINGLE, id="call_0"), tool_call("ask_user", SECOND, id="call_0")]),
            Reply(text="Both answered."),
        )
        d = await h.ws.mention(ALICE, GENERAL, "go")
        thread = d.message["ts"]
        q1 = await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=has_controls)
        assert "Which repo?" in json.dumps(q1["blocks"])
        await h.ws.click(q1, "web", user=ALICE)
        q2 = await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=thread, predicate=lambda m: has_controls(m) and m["ts"] != q1["ts"]
        )
        assert "Which env?" in json.dumps(q2["blocks"])
        await h.ws.click(q1, "api", user=ALICE, as_seen=True)  # late double click on the first question
        await h.settle()
        assert h.ws.ephemerals(user=ALICE)[-1]["text"] == "Your answer was recorded."
        await h.ws.click(q2, "prod", user=ALICE)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Both answered."))
        await h.settle()
        assert len(h.model.requests) == 2
        assert_tool_messages_complete(h.model)
        msgs = h.model.requests[-1]["messages"]
        calls = next(m for m in msgs if m.get("tool_calls"))["tool_calls"]
        ids = [c["id"] for c in calls]
        assert len(set(ids)) == 2
        by_id = {m["tool_call_id"]: json.loads(m["content"])["answer"] for m in msgs if m["role"] == "tool"}
        questions = {c["id"]: json.loads(c["function"]["arguments"])["question"] for c in calls}
        assert {questions[i]: by_id[i] for i in ids} == {"Which repo?": "web", "Which env?": "prod"}


# --- continuing from failed and abandoned runs ---------------------------------------------------


async def test_follow_up_after_a_model_500_sends_a_valid_history_with_the_earlier_answer(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    async with harness(fake_redis) as h:
        h.model.script(
            Reply(tool_calls=[tool_call("ask_user", SINGLE, id="call_0"), tool_call("lookup", "{}", id="call_0")]),
            Reply(status=500),
        )
        d = await h.ws.mention(ALICE, GENERAL, "go")
        thread = d.message["ts"]
        q = await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=has_controls)
        await h.ws.click(q, "web", user=ALICE)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=lambda m: "failed" in m["text"])
        await h.settle()
        h.model.script(Reply(tool_calls=[tool_call("ask_user", SECOND, id="call_0")]), Reply(text="Carried on."))
        await h.ws.mention(ALICE, GENERAL, "try again please", thread_ts=thread)
        q2 = await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=thread, predicate=lambda m: has_controls(m) and "Which env?" in m["text"]
        )
        await h.ws.click(q2, "staging", user=ALICE)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Carried on."))
        await h.settle()
        assert_tool_messages_complete(h.model)
        last = h.model.requests[-1]["messages"]
        assert [m["content"] for m in last if m["role"] == "user"] == ["go", "try again please"]
        answers = [json.loads(m["content"]).get("answer") for m in last if m["role"] == "tool"]
        assert answers[0] == "web" and answers[-1] == "staging"
        ids = [c["id"] for m in last if m["role"] == "assistant" for c in m.get("tool_calls") or []]
        assert len(ids) == len(set(ids)) == 3


async def test_mention_after_a_crash_with_a_queued_question_continues_the_run_first(
    fake_redis: aioredis.Redis, harness: Any, prefix: str
) -> None:
    """A process died right after the first of two questions was answered: the run is left running (the answer
    claimed) with a queued call, and nobody drives it. A later mention continues it at once (no stale window):
    the second question is asked, the first answer is kept, and the mention is not taken as its answer."""
    async with harness(fake_redis) as h:
        h.model.script(
            Reply(tool_calls=[tool_call("ask_user", SINGLE, id="a"), tool_call("ask_user", SECOND, id="b")]),
        )
        d = await h.ws.mention(ALICE, GENERAL, "go")
        thread = d.message["ts"]
        first = await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=has_controls)
        await h.settle()
        state = await thread_run(fake_redis, prefix, thread)
        assert state.status == "suspended" and [c.id for c in state.queued] == ["b"]
        stream = await h.bot.agent.resume_stream("web", run_id=state.run_id, answered_by=ALICE)
        assert stream._task is not None
        stream._task.cancel()  # the process dies right after claiming the answer
        await asyncio.sleep(0)
        claimed = await thread_run(fake_redis, prefix, thread)
        assert claimed.status == "running" and claimed.queued
        await h.ws.mention(ALICE, GENERAL, "anyone?", thread_ts=thread)
        second = await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=thread, predicate=lambda m: has_controls(m) and m["ts"] != first["ts"]
        )
        await h.settle()
        assert "Which env?" in json.dumps(second["blocks"])
        resumed = await thread_run(fake_redis, prefix, thread)
        assert resumed.status == "suspended" and [a.resume_data for a in resumed.answers] == ["web"]
        assert "picked up where I left off" in h.ws.ephemerals(user=ALICE)[-1]["text"]


async def test_retry_on_an_old_failure_after_the_thread_moved_on_does_not_fork(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    async with harness(fake_redis) as h:
        h.model.script(Reply(status=500))
        d = await h.ws.mention(ALICE, GENERAL, "go")
        thread = d.message["ts"]
        failure = await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=has_controls)
        await h.settle()
        h.model.script(Reply(text="New run reply."))
        await h.ws.mention(ALICE, GENERAL, "again", thread_ts=thread)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("New run reply."))
        await h.settle()
        before = len(h.model.requests)
        h.model.script(Reply(text="Old run reply."))
        await h.ws.click(failure, "Retry", user=ALICE)
        await h.settle()
        texts = [m["text"] for m in h.ws.messages(GENERAL, thread_ts=thread)]
        assert len(h.model.requests) == before and "Old run reply." not in texts


# --- saves: background persistence and lost acknowledgements -------------------------------------


async def test_background_save_does_not_overwrite_a_run_taken_over_meanwhile(
    fake_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI
) -> None:
    first: Agent = make_agent(fake_redis, persist_for=10, store_kwargs={"lease_ttl": 0.2})
    other: Agent = make_agent(fake_redis)
    store = first.store
    real_save = store.save
    down = {"on": True}

    async def outage(state: RunState, **kwargs: Any) -> RunState:
        if down["on"] and state.status == "completed":
            raise StoreUnavailable("Redis error while saving a run: ConnectionError")
        saved: RunState = await real_save(state, **kwargs)
        return saved

    store.save = outage  # type: ignore[method-assign]
    openai_server.script(Reply(tool_calls=[tool_call("ask_user", SINGLE, id="c1")]), Reply(text="first process"))
    stream = await first.stream("hi")
    await stream.collect()
    await (await first.resume_stream("api", run_id=stream.run_id)).collect()  # reply shown; save goes on later
    assert len(first.saver.background) == 1
    assert (await other.get_run(stream.run_id)).status == "running"
    await asyncio.sleep(0.3)  # its lease runs out: the first process is no longer driving it
    openai_server.script(Reply(text="second process"))
    await (await other.retry_stream(run_id=stream.run_id)).collect()  # the 'dead' run is taken over
    down["on"] = False
    await asyncio.wait_for(asyncio.gather(*first.saver.background), 10)
    final = await other.get_run(stream.run_id)
    assert final.status == "completed" and final.messages[-1]["content"] == "second process"


async def test_save_applied_but_acknowledgement_lost_still_delivers_the_reply(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    async with harness(fake_redis) as h:
        thread, q = await ask(h, then="The reply.")
        store = h.bot.agent.store
        real_save = store.save
        lost: list[str] = []

        async def ack_lost(state: RunState, **kwargs: Any) -> RunState:
            saved: RunState = await real_save(state, **kwargs)
            if state.status == "completed" and not lost:
                lost.append(state.run_id)
                raise StoreUnavailable("Redis error while saving a run: TimeoutError")
            return saved

        store.save = ack_lost  # type: ignore[method-assign]
        await h.ws.click(q, "api", user=ALICE)
        await h.settle()
        texts = [m["text"] for m in h.ws.messages(GENERAL, thread_ts=thread)]
        assert lost and (await h.bot.agent.get_run(lost[0])).status == "completed"
        assert "The reply." in texts, texts


# --- the web/worker split ------------------------------------------------------------------------


async def start_split(h: Any, server: fakeredis.FakeServer) -> tuple[Any, Any]:
    web = await h.start_process(fakeredis.FakeAsyncRedis(server=server), role="web")
    worker = await h.start_process(fakeredis.FakeAsyncRedis(server=server), role="worker")
    h.route_to(web)
    return web, worker


def consume(worker: Any, stop: asyncio.Event, **kwargs: Any) -> asyncio.Future[None]:
    return asyncio.ensure_future(
        worker.bot.queue.consume(worker.bot.run_job, stop=stop, block_ms=50, consumer="live", **kwargs)
    )


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
        _web, worker = await start_split(h, fake_server)
        key = Keys(prefix).work()
        await client.xgroup_create(key, GROUP, id="0", mkstream=True)
        stop = asyncio.Event()
        working = consume(worker, stop)
        try:
            thread, q = await ask(h, then="Once.")
        finally:
            stop.set()
            await asyncio.wait_for(working, 10)
        await h.ws.click(q, "api", user=ALICE)
        taken = await client.xreadgroup(GROUP, "dead", {key: ">"}, count=10)
        assert len(taken[0][1]) == 1  # the dead worker took the click and never acknowledged it
        await asyncio.sleep(0.35)
        stop = asyncio.Event()
        working = consume(worker, stop, reclaim_after=0.3)
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
        _web, worker = await start_split(h, fake_server)
        key = Keys(prefix).work()
        await client.xgroup_create(key, GROUP, id="0", mkstream=True)
        stop = asyncio.Event()
        working = consume(worker, stop)
        try:
            thread, q = await ask(h, then="Reply after crash.")
        finally:
            stop.set()
            await asyncio.wait_for(working, 10)
        await h.ws.click(q, "api", user=ALICE)
        taken = await client.xreadgroup(GROUP, "dead", {key: ">"}, count=10)
        assert len(taken[0][1]) == 1
        state = await thread_run(client, prefix, thread)
        stream = await worker.bot.agent.resume_stream("api", run_id=state.run_id, answered_by=ALICE)
        assert stream._task is not None
        stream._task.cancel()  # ... claimed the answer, then the process died
        await asyncio.sleep(0.35)
        stop = asyncio.Event()
        working = consume(worker, stop, reclaim_after=0.3)
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
