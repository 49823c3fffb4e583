"""Every tool result reaches the model bounded (``tool_result_max_chars``, ``TOOL_RESULT_MAX_CHARS``), with a
marker saying how much was cut, whatever its source: an own tool's return (text or JSON), an error's text, an
answer to a question, an MCP server's content (a real stdio server, tests/mcp_servers), an answer the server echoes;
and a request the token budget computes to be over it, even with every older turn left out, is never sent: the run
fails with a typed error, retryable."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from pydantic import BaseModel

from bot.agent import Agent, ask_user_tool
from bot.agent._loop.budget import Calibration
from bot.agent.mcp.config import parse_mcp_config
from bot.agent.mcp.toolset import McpTools
from bot.agent.stream import ErrorChunk, SuspendedChunk, ToolResultChunk
from bot.agent.tools import Tool, ToolContext
from bot.testing.openai_server import FakeOpenAI, Reply, tool_call

SERVERS = Path(__file__).resolve().parent.parent / "mcp_servers"
MARKER = "more characters cut here: this tool result had"


class Size(BaseModel):
    chars: int


async def _text(args: BaseModel, ctx: ToolContext | None) -> Any:
    assert isinstance(args, Size)
    return ("word " * (args.chars // 5 + 1))[: args.chars]


async def _rows(args: BaseModel, ctx: ToolContext | None) -> Any:
    assert isinstance(args, Size)
    return {"rows": ["x" * 90 for _ in range(args.chars // 100)]}


async def _fails(args: BaseModel, ctx: ToolContext | None) -> Any:
    assert isinstance(args, Size)
    raise RuntimeError("upstream said: " + "e" * args.chars)


TOOLS = [
    Tool(id="dump", description="A big text.", input_schema=Size, execute_fn=_text),
    Tool(id="rows", description="Big JSON.", input_schema=Size, execute_fn=_rows),
    Tool(id="fails", description="A big error.", input_schema=Size, execute_fn=_fails),
]


def tool_message(body: dict[str, Any], tool_call_id: str) -> str:
    [content] = [m["content"] for m in body["messages"] if m.get("tool_call_id") == tool_call_id]
    assert isinstance(content, str)
    return content


def assert_bounded(content: str, *, limit: int, whole: int) -> None:
    """``content`` is the first ``limit`` characters of a ``whole``-character result and the marker saying so."""
    head, _, marker = content.partition("\n\n[... ")
    assert len(head) == limit, len(head)
    assert marker.startswith(f"{whole - limit:,} {MARKER} {whole:,} characters, and at most {limit:,} are kept]")
    assert len(content) < limit + 200


@pytest.mark.parametrize(
    ("tool", "chars", "whole"),
    [
        ("dump", 3_000_000, 3_000_000),  # a string result: as it is
        ("rows", 300_000, len(json.dumps({"rows": ["x" * 90 for _ in range(3000)]}))),  # JSON of a dict
        ("fails", 100_000, None),  # the text of an error
    ],
)
async def test_an_own_tools_result_is_cut_to_the_bound_with_a_marker(
    fake_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI, tool: str, chars: int, whole: int | None
) -> None:
    agent: Agent = make_agent(fake_redis, tools=TOOLS, tool_result_max_chars=5000)
    openai_server.script(Reply(tool_calls=[tool_call(tool, {"chars": chars}, id="t1")]), Reply(text="Summarised."))
    stream = await agent.stream("look")
    chunks = await stream.collect()
    assert chunks[-1].type == "finish"
    sent = tool_message(openai_server.requests[1], "t1")
    if whole is None:  # an error result: {"error": "tool fails failed: RuntimeError: upstream said: eee..."}
        whole = len(json.dumps({"error": f"tool fails failed: RuntimeError: upstream said: {'e' * chars}"}))
    assert_bounded(sent, limit=5000, whole=whole)
    stored = await agent.get_run(stream.run_id)
    assert tool_message({"messages": stored.messages}, "t1") == sent  # stored as sent: Redis holds no megabytes
    [result] = [c.payload for c in chunks if isinstance(c, ToolResultChunk)]
    assert result.tool_call_id == "t1"


async def test_a_result_within_the_bound_is_sent_whole(
    fake_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI
) -> None:
    agent: Agent = make_agent(fake_redis, tools=TOOLS, tool_result_max_chars=5000)
    openai_server.script(Reply(tool_calls=[tool_call("dump", {"chars": 5000}, id="t1")]), Reply(text="ok"))
    await (await agent.stream("look")).collect()
    assert tool_message(openai_server.requests[1], "t1") == ("word " * 1000)[:5000]


async def test_the_default_bound_holds_without_configuration(
    fake_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI
) -> None:
    agent: Agent = make_agent(fake_redis, tools=TOOLS)
    openai_server.script(Reply(tool_calls=[tool_call("dump", {"chars": 3_000_000}, id="t1")]), Reply(text="ok"))
    await (await agent.stream("look")).collect()
    assert_bounded(tool_message(openai_server.requests[1], "t1"), limit=20_000, whole=3_000_000)


async def test_an_answer_to_a_question_is_bounded_too(
    fake_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI
) -> None:
    """An answer through the API (no Slack input limit): the ``ask_user`` result the model gets is bounded."""
    agent: Agent = make_agent(fake_redis, tools=[ask_user_tool], tool_result_max_chars=2000)
    openai_server.script(
        Reply(tool_calls=[tool_call("ask_user", {"question": "Paste the log"}, id="q1")]), Reply(text="Read it.")
    )
    stream = await agent.stream("debug this")
    await stream.collect()
    await (await agent.resume_stream("line\n" * 20_000, run_id=stream.run_id)).collect()
    sent = tool_message(openai_server.requests[1], "q1")
    assert MARKER in sent and len(sent) < 2200


async def test_an_mcp_servers_3_mb_result_does_not_reach_the_model_whole(
    fake_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI
) -> None:
    """The week's input: an MCP tool returning 3 MB of text put 3.2 MB into the next model request."""
    servers = parse_mcp_config(
        {"mcpServers": {"basic": {"command": sys.executable, "args": [str(SERVERS / "basic.py")]}}}
    )
    mcp = McpTools(servers)
    try:
        await mcp.start(reserved=["ask_user"])
        agent: Agent = make_agent(fake_redis, tools=[ask_user_tool])
        agent.add_tools(mcp.tools)
        openai_server.script(
            Reply(tool_calls=[tool_call("basic__big", {"chars": 3_000_000}, id="m1")]), Reply(text="Nothing odd.")
        )
        chunks = await (await agent.stream("anything in the logs?")).collect()
    finally:
        await mcp.aclose()
    assert chunks[-1].type == "finish"
    second = openai_server.requests[1]
    sent = tool_message(second, "m1")
    assert sent.startswith("log line 00000000: nothing to see here")
    assert_bounded(sent, limit=20_000, whole=3_000_000)
    assert len(json.dumps(second)) < 40_000  # the whole request, not 3.2 MB


async def test_an_answer_an_mcp_server_echoes_back_is_bounded(
    fake_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI, tmp_path: Path
) -> None:
    """An elicitation answer goes to the server, and what it returns with it comes back as the tool's result."""
    entry = {
        "command": sys.executable,
        "args": [str(SERVERS / "asking.py")],
        "env": {"MCP_TEST_RUNS": str(tmp_path / "runs")},
    }
    mcp = McpTools(parse_mcp_config({"mcpServers": {"ask": entry}}))
    try:
        await mcp.start(reserved=["ask_user"])
        agent: Agent = make_agent(fake_redis, tools=[ask_user_tool], tool_result_max_chars=1000)
        agent.add_tools(mcp.tools)
        openai_server.script(Reply(tool_calls=[tool_call("ask__rename", {}, id="r1")]), Reply(text="Renamed."))
        stream = await agent.stream("rename it")
        chunks = await stream.collect()
        assert any(isinstance(c, SuspendedChunk) for c in chunks)
        await (await agent.resume_stream("n" * 50_000, run_id=stream.run_id)).collect()
    finally:
        await mcp.aclose()
    sent = tool_message(openai_server.requests[1], "r1")
    assert sent.startswith("rename: accept") and MARKER in sent and len(sent) < 1200


# --- the budget never sends a request it computes to be over -----------------------------------------------------


async def test_a_request_over_the_budget_even_alone_is_not_sent(
    fake_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI
) -> None:
    agent: Agent = make_agent(fake_redis, history_budget=1000)
    agent.budget.calibration = Calibration()
    stream = await agent.stream("please read all of this: " + "word " * 3000)  # ~3,800 tokens alone
    chunks = await stream.collect()
    error = chunks[-1]
    assert isinstance(error, ErrorChunk) and error.payload.kind == "context_length"
    assert "over the budget of 1000 tokens" in error.payload.message
    assert "even with every older message left out" in error.payload.message
    assert openai_server.requests == []  # never sent
    state = await agent.get_run(stream.run_id)
    assert state.status == "failed" and state.error is not None  # kept, and retryable

    agent.budget.budget = 24_000  # e.g. the deployment's budget raised for this model: Retry goes on
    openai_server.script(Reply(text="Read it all."))
    retried = await (await agent.retry_stream(run_id=stream.run_id)).collect()
    assert retried[-1].type == "finish" and len(openai_server.requests) == 1


async def test_a_newest_turn_of_many_results_over_the_budget_is_not_sent(
    fake_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI
) -> None:
    """Each result within its bound, together over the budget: the next request is refused, not sent."""
    agent: Agent = make_agent(fake_redis, tools=TOOLS, history_budget=1500, tool_result_max_chars=4000)
    agent.budget.calibration = Calibration()
    calls = [tool_call("dump", {"chars": 4000}, id=f"t{i}") for i in range(6)]  # 6 x ~1,000 tokens
    openai_server.script(Reply(tool_calls=calls))
    stream = await agent.stream("collect everything")
    chunks = await stream.collect()
    error = chunks[-1]
    assert isinstance(error, ErrorChunk) and error.payload.kind == "context_length", chunks[-1]
    assert "over the budget of 1500 tokens" in error.payload.message
    assert len(openai_server.requests) == 1  # the first turn only
