"""An MCP server's questions during a tool call (elicitation): a real stdio server written with the SDK
(tests/agent/mcp/servers/asking.py), the real SDK client, agents on the loopback model and one store. The newer protocol
generation suspends the run and is continued by another process; the older one asks live and hands the answer to
the process holding the session, or, if that process is gone, asks whether to run the call again."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from bot.agent import Agent, AskUserPayload
from bot.agent.forms import FormReply
from bot.agent.mcp.config import parse_mcp_config
from bot.agent.mcp.elicitation import INPUT_KEY
from bot.agent.mcp.toolset import McpTools
from bot.agent.state import Answer, utcnow
from bot.agent.stream import (
    AgentStream,
    ApprovalChunk,
    Chunk,
    FinishChunk,
    QuestionClosedChunk,
    SuspendedChunk,
    ToolResultChunk,
)
from bot.errors import AnswerError
from bot.store.keys import Keys
from bot.testing.openai_server import FakeOpenAI, Reply, tool_call

ASKING = str(Path(__file__).resolve().parent / "servers" / "asking.py")


SHARED_KEY = "k" * 40


@asynccontextmanager
async def asking_tools(
    runs: Path, *, protocol: str = "auto", shared_key: str | None = None, **entry: Any
) -> AsyncIterator[McpTools]:
    """The asking server's tools (one server process per call of this), as ``ask__<tool>``; ``shared_key``: the
    request-state key its instances share."""
    env = {"MCP_TEST_RUNS": str(runs), **({"MCP_TEST_STATE_KEY": shared_key} if shared_key else {})}
    server = {"command": sys.executable, "args": [ASKING], "env": env, **entry}
    if protocol != "auto":
        server["protocol"] = protocol
    mcp = McpTools(parse_mcp_config({"mcpServers": {"ask": server}}))
    try:
        await mcp.start(reserved=["ask_user"])
        yield mcp
    finally:
        await mcp.aclose()


def ran(runs: Path) -> list[str]:
    """The lines the server's tool bodies wrote (one per body run)."""
    return runs.read_text().splitlines() if runs.exists() else []


async def until_suspended(stream: AgentStream) -> tuple[SuspendedChunk, list[Chunk]]:
    """Read ``stream`` up to its first ``tool-call-suspended`` chunk (the stream may go on afterwards)."""
    seen: list[Chunk] = []
    async with asyncio.timeout(20):
        async for chunk in stream:
            seen.append(chunk)
            if isinstance(chunk, SuspendedChunk):
                return chunk, seen
    raise AssertionError(f"the stream ended without a question: {seen}")


def result_of(chunks: list[Chunk]) -> Any:
    return next(c.payload.result for c in chunks if isinstance(c, ToolResultChunk))


async def test_newer_generation_a_question_suspends_the_run_and_another_process_continues_the_call(
    fake_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI, tmp_path: Path
) -> None:
    runs = tmp_path / "runs"
    async with asking_tools(runs, shared_key=SHARED_KEY) as mcp_a, asking_tools(runs, shared_key=SHARED_KEY) as mcp_b:
        agent_a: Agent = make_agent(fake_redis, tools=[])
        agent_a.add_tools(mcp_a.tools)
        agent_b: Agent = make_agent(fake_redis, tools=[])  # another process: its own session, its own server
        agent_b.add_tools(mcp_b.tools)
        openai_server.script(
            Reply(tool_calls=[tool_call("ask__deploy", {"service": "web"}, id="d1")]), Reply(text="Deployed.")
        )
        stream = await agent_a.stream("deploy web")
        chunks = await stream.collect()
        suspended = next(c for c in chunks if isinstance(c, SuspendedChunk))
        question = suspended.payload.suspend_payload
        assert isinstance(question, AskUserPayload)
        assert question.question.startswith("Deploy web now?")
        assert (question.labels, question.selection_mode) == (["Yes", "No"], "single_select")
        assert question.form is not None and [f.name for f in question.form.fields] == ["confirm"]
        state = await agent_a.get_run(stream.run_id)
        assert state.status == "suspended" and state.pending is not None
        assert INPUT_KEY in state.pending.suspend_payload  # the server's request state, stored with the run
        assert ran(runs) == []  # the tool body waits for the answer
        resumed = await agent_b.resume_stream("Yes", run_id=stream.run_id, answered_by="U1")
        after = await resumed.collect()
        assert result_of(after) == 'deploy web: accept {"confirm":true}'
        assert after[-1].type == "finish" and ran(runs) == ['deploy web: accept {"confirm":true}']
        stored = (await agent_b.get_run(stream.run_id)).answers[-1]
        assert json.loads(str(stored.resume_data)) == {"action": "accept", "content": {"confirm": True}}


@pytest.mark.parametrize("protocol", ["auto", "legacy"])
async def test_each_kind_of_field_is_asked_as_its_question_and_answers_are_checked_and_typed(
    fake_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI, tmp_path: Path, protocol: str
) -> None:
    runs = tmp_path / "runs"
    cases: list[tuple[str, list[str] | None, str | None, list[Any], Any, str]] = [
        # tool, labels, selection mode, refused answers, the answer, what the tool body gets
        (
            "pick_region",
            ["Europe", "Americas", "Asia-Pacific"],
            "single_select",
            ["Mars"],
            "Americas",
            '{"region":"us"}',
        ),
        (
            "pick_tags",
            ["red", "green", "blue"],
            "multi_select",
            [["red", "green", "blue"]],
            ["red", "blue"],
            '{"tags":["red","blue"]}',
        ),
        ("set_replicas", None, None, ["lots", "11", "2.5"], "3", '{"replicas":3}'),
        ("rename", None, None, [" "], "api-v2", '{"name":"api-v2"}'),
        (
            "profile",
            None,
            None,
            ['{"action":"accept","content":{"name":"Ada","age":"old","color":"red"}}', "just text"],
            FormReply(
                action="accept", content={"name": "Ada", "age": "36", "color": "green", "subscribe": "Yes"}
            ).to_json(),
            '{"name":"Ada","age":36,"color":"green","subscribe":true}',
        ),
    ]
    async with asking_tools(runs, protocol=protocol) as mcp:
        agent: Agent = make_agent(fake_redis, tools=[])
        agent.add_tools(mcp.tools)
        for tool, labels, mode, refused, answer, got in cases:
            openai_server.script(Reply(tool_calls=[tool_call(f"ask__{tool}", {}, id=f"c_{tool}")]), Reply(text="ok"))
            stream = await agent.stream(f"run {tool}")
            suspended, _ = await until_suspended(stream)
            question = suspended.payload.suspend_payload
            assert isinstance(question, AskUserPayload) and question.form is not None
            assert (question.labels or None) == labels and question.selection_mode == mode
            if tool == "set_replicas":
                assert "whole number" in question.question
            if tool == "profile":
                assert [f.kind for f in question.form.fields] == ["text", "integer", "choice", "boolean"]
            for wrong in refused:
                with pytest.raises(AnswerError):
                    await agent.resume_stream(wrong, run_id=stream.run_id)
            resumed = await agent.resume_stream(answer, run_id=stream.run_id, answered_by="U1")
            done = await (stream if protocol == "legacy" else resumed).collect()
            assert result_of(done) == f"{tool}: accept {got}", tool
        assert len(ran(runs)) == len(cases)


@pytest.mark.parametrize("protocol", ["auto", "legacy"])
async def test_a_declined_question_reaches_the_server_as_decline(
    fake_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI, tmp_path: Path, protocol: str
) -> None:
    runs = tmp_path / "runs"
    async with asking_tools(runs, protocol=protocol) as mcp:
        agent: Agent = make_agent(fake_redis, tools=[])
        agent.add_tools(mcp.tools)
        openai_server.script(Reply(tool_calls=[tool_call("ask__deploy", {"service": "db"}, id="d1")]), Reply(text="ok"))
        stream = await agent.stream("deploy db")
        await until_suspended(stream)
        resumed = await agent.resume_stream(FormReply(action="decline").to_json(), run_id=stream.run_id)
        done = await (stream if protocol == "legacy" else resumed).collect()
        assert result_of(done) == "deploy db: decline" and ran(runs) == ["deploy db: decline"]


async def test_two_questions_of_one_round_are_asked_one_at_a_time_and_the_call_is_sent_again_once(
    fake_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI, tmp_path: Path
) -> None:
    runs = tmp_path / "runs"
    async with asking_tools(runs) as mcp:
        agent: Agent = make_agent(fake_redis, tools=[])
        agent.add_tools(mcp.tools)
        openai_server.script(Reply(tool_calls=[tool_call("ask__two_questions", {}, id="t1")]), Reply(text="ok"))
        stream = await agent.stream("two questions")
        first, _ = await until_suspended(stream)
        assert isinstance(first.payload.suspend_payload, AskUserPayload)
        assert first.payload.suspend_payload.question == "First question?"
        again = await agent.resume_stream("hello", run_id=stream.run_id)
        second, _ = await until_suspended(again)
        assert second.payload.tool_call_id == "t1"
        assert isinstance(second.payload.suspend_payload, AskUserPayload)
        assert second.payload.suspend_payload.question == "Second question?"
        assert ran(runs) == []
        last = await agent.resume_stream("No", run_id=stream.run_id)
        done = await last.collect()
        expected = 'two_questions: first: accept {"first":"hello"} | second: accept {"second":false}'
        assert result_of(done) == expected and ran(runs)[-1] == expected and len(ran(runs)) == 3


async def test_older_generation_the_answer_taken_by_another_process_reaches_the_call_through_the_store(
    fake_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI, tmp_path: Path
) -> None:
    runs = tmp_path / "runs"
    async with asking_tools(runs, protocol="legacy") as mcp:
        agent_a: Agent = make_agent(fake_redis, tools=[])
        agent_a.add_tools(mcp.tools)
        agent_b: Agent = make_agent(fake_redis, tools=[])  # the process Slack sent the click to
        agent_b.add_tools(mcp.tools)
        openai_server.script(
            Reply(tool_calls=[tool_call("ask__deploy", {"service": "api"}, id="d1")]), Reply(text="Deployed.")
        )
        stream = await agent_a.stream("deploy api")
        await until_suspended(stream)
        state = await agent_a.get_run(stream.run_id)
        assert state.status == "running" and state.pending is not None
        assert state.pending.live_owner == agent_a.owner  # asked live: the run stays with the process asking
        assert await agent_b.store.lease_owner(stream.run_id) == agent_a.owner
        handed = await (await agent_b.resume_stream("yes", run_id=stream.run_id, answered_by="U2")).collect()
        assert [c.type for c in handed] == ["finish"]
        assert isinstance(handed[0], FinishChunk) and handed[0].payload.status == "handed_off"
        rest = await stream.collect()
        assert result_of(rest) == 'deploy api: accept {"confirm":true}'
        assert rest[-1].type == "finish" and rest[-1].payload.text == "Deployed."
        final = await agent_a.get_run(stream.run_id)
        assert final.status == "completed" and final.answers[-1].answered_by == "U2"
        with pytest.raises(Exception, match="already resumed"):
            await agent_b.resume_stream("no", run_id=stream.run_id)  # one answer only


async def test_older_generation_a_live_question_whose_process_died_asks_whether_to_run_the_call_again(
    fake_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI, tmp_path: Path, prefix: str
) -> None:
    runs = tmp_path / "runs"
    async with asking_tools(runs, protocol="legacy") as mcp_a:
        agent_a: Agent = make_agent(fake_redis, tools=[])
        agent_a.add_tools(mcp_a.tools)
        openai_server.script(Reply(tool_calls=[tool_call("ask__deploy", {"service": "api"}, id="d1")]))
        stream = await agent_a.stream("deploy api")
        await until_suspended(stream)
        assert stream._task is not None
        stream._task.cancel()  # the process dies: its session and its lease go with it
    await fake_redis.delete(Keys(prefix).lease(stream.run_id))
    async with asking_tools(runs, protocol="legacy") as mcp_b:
        agent_b: Agent = make_agent(fake_redis, tools=[])
        agent_b.add_tools(mcp_b.tools)
        openai_server.script(Reply(text="Deployed after all."))
        taken = await agent_b.resume_stream("Yes", run_id=stream.run_id, answered_by="U1")
        chunks = await taken.collect()
        approval = next(c for c in chunks if isinstance(c, ApprovalChunk))
        assert approval.payload.interrupted and approval.payload.tool_name == "ask__deploy"
        assert approval.payload.args == {"service": "api"} and ran(runs) == []
        again = await agent_b.approve_tool_call(run_id=stream.run_id, approved_by="U1")
        await until_suspended(again)  # the call runs again, and its server asks again
        handed = await (await agent_b.resume_stream("No", run_id=stream.run_id)).collect()
        assert handed[-1].payload.status == "handed_off"
        rest = await again.collect()
        assert result_of(rest) == 'deploy api: accept {"confirm":false}' and len(ran(runs)) == 1


async def test_newer_generation_a_process_that_died_while_sending_the_answers_leaves_the_call_to_a_person(
    fake_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI, tmp_path: Path, prefix: str
) -> None:
    """The answer was claimed and the call was being sent again when its process died: whoever continues the run
    asks whether to run it again instead of sending it a second time."""
    runs = tmp_path / "runs"
    async with asking_tools(runs) as mcp:
        agent: Agent = make_agent(fake_redis, tools=[])
        agent.add_tools(mcp.tools)
        openai_server.script(Reply(tool_calls=[tool_call("ask__deploy", {"service": "api"}, id="d1")]))
        stream = await agent.stream("deploy api")
        await stream.collect()
        state = await agent.get_run(stream.run_id)
        assert state.pending is not None
        answer = Answer(tool_call_id="d1", resume_data="Yes", answered_by="U1", answered_at=utcnow())
        pending = state.pending.model_copy(update={"resume": answer, "executing_since": utcnow()})
        crashed = state.model_copy(update={"status": "running", "pending": pending, "answers": [answer]})
        await agent.store.save(crashed, owner="a-process-that-died")
        await fake_redis.delete(Keys(prefix).lease(stream.run_id))
        chunks = await (await agent.retry_stream(run_id=stream.run_id)).collect()
        approval = next(c for c in chunks if isinstance(c, ApprovalChunk))
        assert approval.payload.interrupted and ran(runs) == []


async def test_newer_generation_a_server_that_no_longer_accepts_its_state_has_its_question_asked_again(
    fake_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI, tmp_path: Path
) -> None:
    """The answer reaches a server process that can't read the state another one sealed (no shared key; the same
    as a restart, or a state past its TTL): the person is asked again, saying why, and the second answer works."""
    runs = tmp_path / "runs"
    async with asking_tools(runs) as mcp_a, asking_tools(runs) as mcp_b:
        agent_a: Agent = make_agent(fake_redis, tools=[])
        agent_a.add_tools(mcp_a.tools)
        agent_b: Agent = make_agent(fake_redis, tools=[])
        agent_b.add_tools(mcp_b.tools)
        openai_server.script(
            Reply(tool_calls=[tool_call("ask__deploy", {"service": "web"}, id="d1")]), Reply(text="ok")
        )
        stream = await agent_a.stream("deploy web")
        await stream.collect()
        again, _ = await until_suspended(await agent_b.resume_stream("Yes", run_id=stream.run_id))
        question = again.payload.suspend_payload
        assert isinstance(question, AskUserPayload) and question.question.startswith("(Asked again:")
        assert "Deploy web now?" in question.question and ran(runs) == []
        done = await (await agent_b.resume_stream("Yes", run_id=stream.run_id)).collect()
        assert result_of(done) == 'deploy web: accept {"confirm":true}' and len(ran(runs)) == 1


async def test_older_generation_questions_sent_at_once_are_asked_one_at_a_time_each_with_its_own_answer(
    fake_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI, tmp_path: Path
) -> None:
    runs = tmp_path / "runs"
    async with asking_tools(runs, protocol="legacy") as mcp:
        agent: Agent = make_agent(fake_redis, tools=[])
        agent.add_tools(mcp.tools)
        openai_server.script(Reply(tool_calls=[tool_call("ask__two_at_once", {}, id="t1")]), Reply(text="ok"))
        stream = await agent.stream("two at once")
        first, _ = await until_suspended(stream)
        assert isinstance(first.payload.suspend_payload, AskUserPayload)
        asked_first = first.payload.suspend_payload.question
        answer = "Yes" if asked_first == "Question A?" else "bee"
        await (await agent.resume_stream(answer, run_id=stream.run_id)).collect()
        second, _ = await until_suspended(stream)
        assert isinstance(second.payload.suspend_payload, AskUserPayload)
        assert {asked_first, second.payload.suspend_payload.question} == {"Question A?", "Question B?"}
        await (await agent.resume_stream("bee" if answer == "Yes" else "Yes", run_id=stream.run_id)).collect()
        done = await stream.collect()
        expected = 'two_at_once: a: accept {"a":true} | b: accept {"b":"bee"}'
        assert result_of(done) == expected and ran(runs)[-1] == expected


async def test_older_generation_a_live_question_that_ends_unanswered_is_closed(
    fake_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI, tmp_path: Path
) -> None:
    """Past its deadline the server gets cancel and the stream says the question closed; when the server dies
    while it waits, the stream says so too, and the run is left waiting for nothing."""
    runs = tmp_path / "runs"
    async with asking_tools(runs, protocol="legacy") as mcp:
        agent: Agent = make_agent(fake_redis, tools=[], ask_ttl=0.5)
        agent.add_tools(mcp.tools)
        openai_server.script(
            Reply(tool_calls=[tool_call("ask__deploy", {"service": "web"}, id="d1")]), Reply(text="No answer.")
        )
        chunks = await (await agent.stream("deploy web")).collect()
        closed = [c for c in chunks if isinstance(c, QuestionClosedChunk)]
        assert [c.payload.reason for c in closed] == ["expired"] and result_of(chunks) == "deploy web: cancel"
        openai_server.script(Reply(tool_calls=[tool_call("ask__die_while_asking", {}, id="x1")]), Reply(text="Gone."))
        slow: Agent = make_agent(fake_redis, tools=[], ask_ttl=60)
        slow.add_tools(mcp.tools)
        stream = await slow.stream("ask and die")
        chunks = await stream.collect()
        closed = [c for c in chunks if isinstance(c, QuestionClosedChunk)]
        assert [c.payload.reason for c in closed] == ["ended"]
        assert "unavailable" in json.dumps(result_of(chunks))
        state = await slow.get_run(stream.run_id)
        assert state.status == "completed" and state.pending is None


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("javascript:alert(document.cookie)", "scheme is javascript:"),
        ("slack://open?team=T1", "scheme is slack:"),
        ("http://169.254.169.254/latest/meta-data/", "scheme is http:"),
        ("data:text/html,<b>hi</b>", "<, >, |"),
        ("https://", "no host"),
        ("https://auth.example.com/x|click here", "<, >, |"),
    ],
)
async def test_older_generation_a_link_with_a_scheme_not_allowed_is_refused_to_the_server(
    fake_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI, tmp_path: Path, url: str, why: str
) -> None:
    """A URL-mode question showed any link (javascript:, slack://, the cloud metadata address over http). Now only
    https (MCP_ELICIT_URL_SCHEMES) is shown; the server gets a JSON-RPC error saying why, and nobody is asked."""
    runs = tmp_path / "runs"
    async with asking_tools(runs, protocol="legacy") as mcp:
        agent: Agent = make_agent(fake_redis, tools=[])
        agent.add_tools(mcp.tools)
        openai_server.script(Reply(tool_calls=[tool_call("ask__open_link", {"url": url}, id="l1")]), Reply(text="ok"))
        chunks: list[Chunk] = []
        async with asyncio.timeout(20):
            async for chunk in await agent.stream("sign in"):
                chunks.append(chunk)
                if isinstance(chunk, (SuspendedChunk, FinishChunk)):
                    break
    assert not any(isinstance(c, SuspendedChunk) for c in chunks), "the link was shown"
    [line] = ran(runs)
    assert line.startswith("open_link: refused: the bot can't ask this:") and why in line, line


async def test_older_generation_an_https_link_is_shown_and_other_schemes_only_when_configured(
    fake_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI, tmp_path: Path
) -> None:
    runs = tmp_path / "runs"
    for url, schemes in (("https://auth.example.com/x", None), ("http://intranet.example/login", ("https", "http"))):
        env = {"MCP_TEST_RUNS": str(runs)}
        server = {"command": sys.executable, "args": [ASKING], "env": env, "protocol": "legacy"}
        options = {"url_schemes": schemes} if schemes else {}
        async with McpTools(parse_mcp_config({"mcpServers": {"ask": server}}), **options) as mcp:
            agent: Agent = make_agent(fake_redis, tools=[])
            agent.add_tools(mcp.tools)
            openai_server.script(Reply(tool_calls=[tool_call("ask__open_link", {"url": url})]), Reply(text="ok"))
            stream = await agent.stream("sign in")
            suspended, _ = await until_suspended(stream)
            question = suspended.payload.suspend_payload
            assert isinstance(question, AskUserPayload) and question.form is not None
            assert question.form.url == url and url in question.question
            await (await agent.resume_stream("Done", run_id=stream.run_id)).collect()
            await stream.collect()
    assert ran(runs) == ["open_link: accept", "open_link: accept"]
