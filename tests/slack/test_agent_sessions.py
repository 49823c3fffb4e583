"""Agent sessions (agent_view): each thread's session follows its run, Slack's Stop stops it, the Messages tab greets,
and workspaces that refuse sessions fall back to the assistant status; through the fake Slack over signed HTTP, in
one process and across a web/worker split."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from pathlib import Path
from typing import Any

import fakeredis
import pytest
import redis.asyncio as aioredis

from bot.agent.state import utcnow
from bot.fakeslack.workspace import DEFAULT_SUBSCRIPTIONS
from bot.testing import approval_agent
from bot.testing.openai_server import Reply, tool_call
from bot.testing.slack_scenarios import (
    ALICE,
    BOB,
    GENERAL,
    SINGLE,
    current,
    has_controls,
    leave_orphaned,
    past_deadline,
    thread_run_id,
)

AGENT_EVENTS = (*DEFAULT_SUBSCRIPTIONS, "agent_session_stopped", "app_context_changed", "app_home_opened")
AGENT = {"agent_view": True, "subscriptions": AGENT_EVENTS}


def statuses(h: Any, thread_ts: str, channel: str = GENERAL) -> list[str]:
    session = h.ws.session(channel, thread_ts)
    return list(session["statuses"]) if session else []


async def settled_status(h: Any, thread_ts: str, want: str, channel: str = GENERAL) -> dict[str, Any]:
    return await h.ws.fake.wait_until(
        lambda: (s := h.ws.session(channel, thread_ts)) and s["status"] == want and s,
        timeout=10,
        what=f"the session to be {want}",
    )


async def test_a_thread_is_processing_then_suspended_while_it_asks_then_active_and_titled(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    async with harness(fake_redis, **AGENT) as h:
        h.model.script(
            Reply(tool_calls=[tool_call("ask_user", SINGLE, id="q1")]),
            Reply(text="## Deploy of api\nDone: api is deployed."),
        )
        d = await h.ws.mention(ALICE, GENERAL, "deploy the thing we talked about")
        thread = d.message["ts"]
        q = await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=has_controls)
        await settled_status(h, thread, "suspended")
        session = h.ws.session(GENERAL, thread)
        assert session is not None and session["title"] == "deploy the thing we talked about"
        assert session["initiator_user_id"] == ALICE and statuses(h, thread) == ["processing", "suspended"]
        await h.ws.click(q, "api", user=ALICE)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=lambda m: "deployed" in m["text"])
        await h.settle()
        assert statuses(h, thread) == ["processing", "suspended", "processing", "active"]
        # the reply came in a later segment than the request's: the request's title stays (sessions.better_title)
        assert h.ws.session(GENERAL, thread)["title"] == "deploy the thing we talked about"  # type: ignore[index]
        assert not h.ws.calls("assistant.threads.setStatus") and not h.ws.calls("reactions.add")  # no fallback


CUT = "x" * 79 + "…"  # a request of 100 x's, titled


@pytest.mark.parametrize(
    ("request_text", "reply", "title"),
    [
        ("hi", "## Release checklist for 2.1\n- tag\n- ship", "Release checklist for 2.1"),  # a heading
        ("hi", "*Release plan*\nmore", "Release plan"),  # a bold line (mrkdwn)
        ("hi", "**Release plan:**\nmore", "Release plan"),  # a bold line (Markdown), its colon dropped
        ("what is up", "Nothing much.", "what is up"),  # a plain reply to a fine title: kept
        ("x" * 100, "Summary of the long request\nmore", "Summary of the long request"),  # a cut request title
        # Found by a break-it pass: none of these is a heading or a first line to title a session with
        ("what should I check first?", "* the logs\n* the metrics", "what should I check first?"),  # list items
        ("what to check?", "** not bold\nmore", "what to check?"),
        ("x" * 100, "```python\nprint(1)\n```", CUT),  # a code fence
        ("x" * 100, "~~~\ncode\n~~~", CUT),
        ("x" * 100, "| a | b |\n|---|---|\n| 1 | 2 |", CUT),  # a table row
        ("x" * 100, "- first\n- second", CUT),  # a list
        ("x" * 100, "1. first\n2. second", CUT),
        ("x" * 100, "> quoted\nmore", CUT),
        ("x" * 100, "---\nmore", CUT),
    ],
)
async def test_the_first_reply_renames_the_session_when_it_makes_a_better_title(
    fake_redis: aioredis.Redis, harness: Any, request_text: str, reply: str, title: str
) -> None:
    async with harness(fake_redis, **AGENT) as h:
        h.model.script(Reply(text=reply))
        d = await h.ws.mention(ALICE, GENERAL, request_text)
        await settled_status(h, d.message["ts"], "active")
        await h.settle()
        assert h.ws.session(GENERAL, d.message["ts"])["title"] == title  # type: ignore[index]
        assert len(h.ws.calls("agents.sessions.rename")) == (0 if title in (request_text, CUT) else 1)


@pytest.mark.parametrize(
    ("request_text", "title"),
    [
        (  # Found by a break-it pass: the title showed Slack's markup as it is
            f"ask <@{BOB}> about <#C_RANDOM|random> and <https://x.example/a|the doc>",
            "ask @bob about #random and the doc",
        ),
        (
            f"ping <@{BOB}> in <#C_RANDOM> re <https://x.example/a> &amp; <!here> <!subteam^S_ONCALL|@oncall>",
            "ping @bob in #random re https://x.example/a & @here @oncall",
        ),
        ("a" * 76 + "\U0001f468\u200d\U0001f469\u200d\U0001f467 family", "a" * 76 + "…"),  # no half emoji
        ("e" * 78 + "e\u0301e\u0301", "e" * 78 + "…"),  # no accent cut off its letter
    ],
)
async def test_a_session_is_titled_from_its_request_as_slack_shows_it(
    fake_redis: aioredis.Redis, harness: Any, request_text: str, title: str
) -> None:
    async with harness(fake_redis, **AGENT) as h:
        h.model.script(Reply(text="- ok"))  # a list: never a better title (sessions.better_title)
        d = await h.ws.mention(ALICE, GENERAL, request_text)
        await settled_status(h, d.message["ts"], "active")
        assert h.ws.session(GENERAL, d.message["ts"])["title"] == title  # type: ignore[index]


async def test_a_question_that_expires_closed_its_session(fake_redis: aioredis.Redis, harness: Any) -> None:
    async with harness(fake_redis, settings={"ask_on_timeout": "close"}, **AGENT) as h:
        h.model.script(Reply(tool_calls=[tool_call("ask_user", SINGLE, id="q1")]), Reply(text="ok"))
        d = await h.ws.mention(ALICE, GENERAL, "summarize")
        thread = d.message["ts"]
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=has_controls)
        await h.settle()
        await past_deadline(h, thread)
        assert h.bot.scheduler is not None
        taken = await h.bot.scheduler.tick(now=utcnow() + timedelta(seconds=7200))
        await h.settle()
        assert taken
        assert statuses(h, thread)[-1] == "closed"


async def test_a_workspace_that_refuses_sessions_gets_the_assistant_status_with_one_refusal_logged_once(
    fake_redis: aioredis.Redis, harness: Any, caplog: pytest.LogCaptureFixture
) -> None:
    async with harness(fake_redis, settings={"slack_view": "agent"}) as h:  # an assistant_view app: no sessions
        caplog.set_level(logging.WARNING, logger="bot.slack.replies.sessions")
        for n in range(2):
            h.model.script(Reply(text=f"answer {n}", chunk_delay=0.05))
            d = await h.ws.mention(ALICE, GENERAL, f"question {n}")
            await h.ws.wait_for_message(
                channel=GENERAL, thread_ts=d.message["ts"], predicate=lambda m, n=n: f"answer {n}" in m["text"]
            )
            await h.settle()
        refused = h.ws.calls("agents.sessions.setStatus")
        assert len(refused) == 1 and refused[0].error == "not_an_agent"  # remembered for the workspace
        assert len(h.ws.calls("assistant.threads.setStatus")) >= 2  # today's status, in both threads
        assert len([r for r in caplog.records if "refused agent sessions" in r.getMessage()]) == 1


async def test_a_missing_stop_subscription_falls_back_and_leaves_no_session_processing(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    async with harness(fake_redis, agent_view=True) as h:  # agent app, not subscribed to agent_session_stopped
        h.model.script(Reply(text="hello"))
        d = await h.ws.mention(ALICE, GENERAL, "hi")
        await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=d.message["ts"], predicate=lambda m: m["text"] == "hello"
        )
        await h.settle()
        assert statuses(h, d.message["ts"]) == ["processing", "active"]  # warned, then moved off processing
        assert h.ws.calls("assistant.threads.setStatus")


async def test_stop_cancels_the_model_turn_and_ends_the_reply_with_who_stopped_it(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    async with harness(fake_redis, **AGENT) as h:
        h.model.script(Reply(text="one two three four five six seven eight nine ten " * 20, chunk_delay=0.05))
        d = await h.ws.mention(ALICE, GENERAL, "count slowly")
        thread = d.message["ts"]
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=lambda m: "three" in m["text"])
        ack = await h.ws.stop_session(ALICE, GENERAL, thread)
        assert ack is not None and ack.ok
        stopped = await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=thread, predicate=lambda m: "Stopped by" in m["text"], timeout=10
        )
        await h.settle()
        assert "ten " * 20 not in stopped["text"]  # cut short: the model turn was cancelled
        assert h.ws.session(GENERAL, thread)["status"] == "active"  # type: ignore[index]
        assert len(h.model.requests) == 1
        state = await h.bot.agent.get_run(await thread_run_id(h, thread))
        assert state.status == "completed" and "Stopped" in str(state.messages[-1]["content"])


async def test_stop_finishes_the_message_slack_stopped_with_an_update_not_a_refused_stop_stream(
    fake_redis: aioredis.Redis, harness: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Slack's Stop ends the thread's streaming messages itself: the bot finishes its reply there with chat.update
    (who stopped it), and calls no chat.stopStream / appendStream on it (Slack: message_not_in_streaming_state)."""
    async with harness(fake_redis, **AGENT) as h:
        h.model.script(Reply(text="one two three four five six seven eight nine ten " * 20, chunk_delay=0.05))
        d = await h.ws.mention(ALICE, GENERAL, "count slowly")
        thread = d.message["ts"]
        streamed = await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=thread, predicate=lambda m: "three" in m["text"] and m.get("streaming")
        )
        with caplog.at_level(logging.INFO, logger="bot.slack.replies.streaming"):
            ack = await h.ws.stop_session(ALICE, GENERAL, thread)
            assert ack is not None and ack.ok
            await h.ws.wait_for_message(
                channel=GENERAL, thread_ts=thread, predicate=lambda m: "Stopped by" in m["text"], timeout=10
            )
            await h.settle()
        finished = h.ws.fake.state.message(GENERAL, streamed["ts"])
        assert finished is not None and "Stopped by" in finished["text"]  # the streamed message itself, updated
        refused = [c.method for c in h.ws.fake.calls if c.error == "message_not_in_streaming_state"]
        assert refused == []
        updates = [c for c in h.ws.fake.calls if c.method == "chat.update" and c.params.get("ts") == streamed["ts"]]
        assert updates and all(c.error is None for c in updates)
        warned = [r for r in caplog.records if r.levelno >= logging.WARNING and r.name.startswith("bot.")]
        assert warned == [], caplog.text  # no "streaming a reply failed"


async def test_stop_never_starts_the_tool_calls_of_the_turn_it_stopped(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    async with harness(fake_redis, **AGENT) as h:
        h.model.script(
            Reply(text="Let me ask. " * 30, tool_calls=[tool_call("ask_user", SINGLE, id="q1")], chunk_delay=0.05),
            Reply(text="never"),
        )
        d = await h.ws.mention(ALICE, GENERAL, "ask me something")
        thread = d.message["ts"]
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=lambda m: "Let me ask" in m["text"])
        await h.ws.stop_session(ALICE, GENERAL, thread)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=lambda m: "Stopped by" in m["text"])
        await h.settle()
        assert not [m for m in h.ws.messages(GENERAL, thread_ts=thread) if has_controls(m)]  # never asked
        assert len(h.model.requests) == 1


async def test_only_who_may_act_on_the_thread_can_stop_it(fake_redis: aioredis.Redis, harness: Any) -> None:
    async with harness(fake_redis, **AGENT) as h:
        h.model.script(Reply(text="word " * 60, chunk_delay=0.05))
        d = await h.ws.mention(ALICE, GENERAL, "write")
        thread = d.message["ts"]
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=lambda m: "word" in m["text"])
        await h.ws.stop_session(BOB, GENERAL, thread)
        told = await h.ws.wait_for_ephemeral(user=BOB, predicate=lambda m: "can stop this" in m["text"])
        assert f"<@{ALICE}>" in told["text"]
        await h.settle()
        texts = [m["text"] for m in h.ws.messages(GENERAL, thread_ts=thread)]
        assert not any("Stopped by" in t for t in texts) and any(("word " * 59).strip() in t for t in texts)


async def test_stop_leaves_a_waiting_question_answerable(fake_redis: aioredis.Redis, harness: Any) -> None:
    async with harness(fake_redis, **AGENT) as h:
        h.model.script(Reply(tool_calls=[tool_call("ask_user", SINGLE, id="q1")]), Reply(text="Thanks, api it is."))
        d = await h.ws.mention(ALICE, GENERAL, "pick")
        thread = d.message["ts"]
        q = await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=has_controls)
        await settled_status(h, thread, "suspended")
        h.ws.state.sessions[(GENERAL, thread)]["status"] = "processing"  # a Stop clicked just as it suspended
        await h.ws.stop_session(ALICE, GENERAL, thread)
        told = await h.ws.wait_for_ephemeral(user=ALICE, predicate=lambda m: "still waits" in m["text"])
        assert told
        await h.settle()
        assert h.ws.session(GENERAL, thread)["status"] == "suspended"  # type: ignore[index]
        assert has_controls(await current(h, q))
        await h.ws.click(q, "api", user=ALICE)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=lambda m: "api it is" in m["text"])


async def test_stop_reaches_the_worker_that_drives_the_run(
    fake_server: fakeredis.FakeServer, harness: Any, caplog: pytest.LogCaptureFixture
) -> None:
    async with harness(fakeredis.FakeAsyncRedis(server=fake_server), settings={"stream_interval": 0.2}, **AGENT) as h:
        web = await h.start_process(fakeredis.FakeAsyncRedis(server=fake_server), role="web")
        worker = await h.start_process(fakeredis.FakeAsyncRedis(server=fake_server), role="worker")
        h.route_to(web)
        stop = asyncio.Event()
        working = asyncio.ensure_future(
            worker.bot.queue.consume(worker.bot.run_job, stop=stop, block_ms=50, consumer="live")
        )
        try:
            h.model.script(Reply(text="tick " * 200, chunk_delay=0.05))
            d = await h.ws.mention(ALICE, GENERAL, "tick for a while")
            thread = d.message["ts"]
            await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=lambda m: "tick" in m["text"])
            await h.ws.stop_session(ALICE, GENERAL, thread)
            stopped = await h.ws.wait_for_message(
                channel=GENERAL, thread_ts=thread, predicate=lambda m: "Stopped by" in m["text"], timeout=15
            )
            assert stopped["text"].count("tick") < 200
            await settled_status(h, thread, "active")
            # the worker learnt of Slack's Stop from Slack's answer (message_not_in_streaming_state): expected, quiet
            warned = [r for r in caplog.records if r.levelno >= logging.WARNING and r.name.startswith("bot.slack")]
            assert warned == [], caplog.text
        finally:
            stop.set()
            await asyncio.wait_for(working, 10)


async def test_the_messages_tab_greets_once_with_prompts_and_runs_know_the_channel_in_view(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    async with harness(fake_redis, **AGENT) as h:
        await h.ws.open_messages_tab(ALICE)
        await h.settle()
        await h.ws.open_messages_tab(ALICE)
        await h.settle()
        greetings = [m for m in h.ws.messages("D_ALICE") if m.get("user") == "U_BOT" or m.get("bot_id")]
        assert len(greetings) == 1  # once, however often the tab opens
        prompts = h.ws.state.prompts_of("D_ALICE", greetings[0]["ts"])
        assert prompts is not None and prompts["prompts"] == h.settings.assistant_prompts
        await h.ws.change_app_context(ALICE, GENERAL)
        h.model.script(Reply(text="Here is the summary."))
        await h.ws.dm(ALICE, "summarise what I'm looking at")
        await h.ws.wait_for_message(channel="D_ALICE", predicate=lambda m: "summary" in m["text"])
        assert f"<#{GENERAL}>" in str(h.model.requests[-1]["messages"][-1]["content"])


async def test_stop_of_a_run_whose_process_died_takes_it_over_and_stops_it_before_any_step(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    async with harness(fake_redis, **AGENT) as h:
        h.model.script(Reply(text="First."))
        d = await h.ws.mention(ALICE, GENERAL, "go")
        thread = d.message["ts"]
        await settled_status(h, thread, "active")
        await h.settle()
        store = h.bot.agent.store
        state = await h.bot.agent.get_run(await thread_run_id(h, thread))
        # what a process killed mid-run leaves behind: status running, last saved an hour ago, Slack still spinning
        orphan = state.model_copy(update={"status": "running", "updated_at": utcnow() - timedelta(hours=1)})
        await leave_orphaned(store.client, store.keys.run(state.run_id), orphan)
        h.ws.state.sessions[(GENERAL, thread)]["status"] = "processing"
        requests = len(h.model.requests)
        await h.ws.stop_session(ALICE, GENERAL, thread)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=lambda m: "Stopped by" in m["text"])
        await settled_status(h, thread, "active")
        assert len(h.model.requests) == requests  # stopped before its first step: no model turn


TOOLS = {"agent": "bot.testing.approval_agent:build", "stream_interval": 0.2}


async def test_a_turn_with_several_tool_calls_shows_as_a_plan_and_a_lone_call_as_a_task(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    async with harness(fake_redis, settings=TOOLS, **AGENT) as h:
        h.model.script(
            Reply(
                text="Checking both.",
                tool_calls=[
                    tool_call("lookup_ticket", {"ticket_id": "T1"}, id="a"),
                    tool_call("lookup_ticket", {"ticket_id": "T2"}, id="b"),
                ],
            ),
            Reply(tool_calls=[tool_call("lookup_ticket", {"ticket_id": "T3"}, id="c")]),
            Reply(text="All three are open."),
        )
        d = await h.ws.mention(ALICE, GENERAL, "check T1 T2 T3")
        thread = d.message["ts"]
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=lambda m: "open" in m["text"])
        await h.settle()
        starts = h.ws.calls("chat.startStream")
        modes = [c.params.get("task_display_mode") for c in starts]
        assert modes[:2] == [None, "plan"] and modes.count("plan") == 1  # the text, then the plan's own message
        plan = next(m for m in h.ws.messages(GENERAL, thread_ts=thread) if m.get("task_display_mode") == "plan")
        assert plan["plan_title"] == "Working through 2 steps"
        assert {t["status"] for t in plan["tasks"].values()} == {"complete"} and set(plan["tasks"]) >= {"a", "b"}
        sent = [c for c in h.ws.calls() if c.method in ("chat.startStream", "chat.appendStream", "chat.stopStream")]
        chunk_types = [ch.get("type") for c in sent for ch in (c.params.get("chunks") or [])]
        assert chunk_types.count("plan_update") == 1  # the lone call of the next turn: a task_update only
        assert sum(1 for c in sent for ch in (c.params.get("chunks") or []) if ch.get("id") == "c") >= 1


async def test_stop_during_an_approved_tool_says_it_runs_on_and_starts_nothing_after_it(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    approval_agent.GATE.clear()
    approval_agent.RESTARTS.clear()
    gate = approval_agent.GATE["gate"] = asyncio.Event()
    try:
        async with harness(fake_redis, settings=TOOLS, **AGENT) as h:
            h.model.script(
                Reply(tool_calls=[tool_call("restart_service", {"name": "api"}, id="r1")]),
                Reply(tool_calls=[tool_call("restart_service", {"name": "web"}, id="r2")]),
            )
            d = await h.ws.mention(ALICE, GENERAL, "restart api then web")
            thread = d.message["ts"]
            q = await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=has_controls)
            await h.ws.click(q, "Approve", user=ALICE)
            await h.ws.fake.wait_until(lambda: approval_agent.RESTARTS, timeout=10, what="the approved call to run")
            await settled_status(h, thread, "processing")
            await h.ws.stop_session(ALICE, GENERAL, thread)
            told = await h.ws.wait_for_ephemeral(user=ALICE, predicate=lambda m: "is running now" in m["text"])
            assert "`restart_service`" in told["text"] and "will finish" in told["text"]
            gate.set()  # the call ends on its own: not killed
            await h.ws.wait_for_message(
                channel=GENERAL, thread_ts=thread, predicate=lambda m: "Stopped by" in m["text"]
            )
            await settled_status(h, thread, "active")
            assert approval_agent.RESTARTS == ["api"]  # the model was not asked again: "web" never started
            assert len(h.model.requests) == 1
    finally:
        gate.set()
        approval_agent.GATE.clear()


@pytest.mark.parametrize("protocol", ["auto", "legacy"])
async def test_an_mcp_servers_elicitation_suspends_the_session_until_answered(
    fake_redis: aioredis.Redis, harness: Any, tmp_path: Path, protocol: str
) -> None:
    from tests.mcp_server.test_mcp_questions import ask as mcp_ask
    from tests.mcp_server.test_mcp_questions import mcp_settings

    async with harness(fake_redis, settings=mcp_settings(tmp_path, protocol=protocol), **AGENT) as h:
        thread, q = await mcp_ask(h, "deploy", {"service": "web"}, then="Deployed web.")
        await settled_status(h, thread, "suspended")  # waits for a person: the server's question
        await h.ws.click(q, "Yes", user=ALICE)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "Deployed web.")
        await settled_status(h, thread, "active")
        assert statuses(h, thread) == ["processing", "suspended", "processing", "active"]


def test_a_reply_whose_first_line_is_very_long_is_judged_for_a_title_at_once() -> None:
    """Found by a break-it pass: ``"# a" + 20,000 spaces + "b"`` kept the event loop busy for seconds (the heading
    regex backtracking over the spaces); a title is 80 characters, so only the start of the line is read."""
    import time

    from bot.slack.replies.sessions import better_title

    started = time.process_time()
    for reply in ("# a" + " " * 40_000 + "b", "*a" + " " * 40_000 + "b*", "x" * 100_000):
        better_title("hi", reply)
    assert time.process_time() - started < 1.0  # before: 20 s and more (not a benchmark: orders of magnitude)
