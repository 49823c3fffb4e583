"""Tools from MCP servers: real servers written with the SDK (tests/agent/mcp/servers/, and a streamable HTTP one
started here on a loopback port), the real SDK client, an Agent on the loopback model. No code is patched."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import re
import socket
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
import uvicorn
from mcp.server.mcpserver import MCPServer

from bot.agent import Agent, OpenAIChatModel, ask_user_tool
from bot.agent.mcp.config import (
    HttpServer,
    McpConfigError,
    McpServerConfig,
    StdioServer,
    load_mcp_config,
    parse_mcp_config,
    tool_names,
)
from bot.agent.mcp.toolset import McpTool, McpTools
from bot.agent.stream import ApprovalChunk, ToolResultChunk
from bot.agent.tools import ToolInputError
from bot.config import Settings, SettingsError, load_settings
from bot.slack.app import build_bot
from bot.testing.openai_server import FakeOpenAI, Reply, tool_call
from bot.testing.ports import free_port

SERVERS = Path(__file__).resolve().parent / "servers"
BASIC = str(SERVERS / "basic.py")
NAMED = str(SERVERS / "named.py")
MODEL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


def basic(**entry: Any) -> dict[str, Any]:
    """A ``mcpServers`` entry for tests/agent/mcp/servers/basic.py."""
    return {"command": sys.executable, "args": [BASIC], **entry}


def config(**servers: dict[str, Any]) -> list[McpServerConfig]:
    return parse_mcp_config({"mcpServers": servers})


@asynccontextmanager
async def started(servers: list[McpServerConfig], **options: float) -> AsyncIterator[McpTools]:
    mcp = McpTools(servers, **options)
    try:
        await mcp.start(reserved=["ask_user"])
        yield mcp
    finally:
        await mcp.aclose()


def tools_by_id(mcp: McpTools) -> dict[str, McpTool]:
    return {t.id: t for t in mcp.tools}


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in status


def warnings_about(caplog: pytest.LogCaptureFixture, server: str) -> list[logging.LogRecord]:
    return [
        r
        for r in caplog.records
        if r.levelno == logging.WARNING and r.name.startswith("bot.agent.mcp.") and f"MCP server {server} " in r.message
    ]


# --- an agent using a stdio server --------------------------------------------------------------------------------


async def test_a_plain_tool_runs_and_its_result_reaches_the_model(
    fake_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI
) -> None:
    async with started(config(basic=basic(requireApproval=["delete_*"]))) as mcp:
        agent: Agent = make_agent(fake_redis, tools=[ask_user_tool])
        agent.add_tools(mcp.tools)
        openai_server.script(
            Reply(tool_calls=[tool_call("basic__echo", {"text": "hi"}, id="c1")]),
            Reply(tool_calls=[tool_call("basic__add", {"a": 2, "b": 3}, id="c2")]),
            Reply(text="Done."),
        )
        stream = await agent.stream("echo hi, then add 2 and 3")
        chunks = await stream.collect()
        results = [c.payload for c in chunks if isinstance(c, ToolResultChunk)]
        assert [(r.tool_name, r.result, r.is_error) for r in results] == [
            ("basic__echo", "echo: hi", False),
            ("basic__add", {"sum": 5}, False),
        ]
        assert chunks[-1].type == "finish"
        assert openai_server.requests[1]["messages"][-1] == {
            "role": "tool",
            "tool_call_id": "c1",
            "content": "echo: hi",
        }
        assert json.loads(openai_server.requests[2]["messages"][-1]["content"]) == {"sum": 5}  # structured: JSON
        offered = {t["function"]["name"]: t["function"] for t in openai_server.requests[0]["tools"]}
        assert {"ask_user", "basic__echo", "basic__add", "basic__delete_item", "basic__fail"} <= set(offered)
        echo = offered["basic__echo"]
        assert echo["description"] == "Echo the text back."
        assert echo["parameters"]["properties"] == {
            "text": {"title": "Text", "type": "string"}
        }  # as the server gave it
        assert echo["parameters"]["required"] == ["text"]


async def test_a_tool_matched_by_require_approval_waits_for_approval_and_runs_once_approved(
    fake_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI
) -> None:
    async with started(config(basic=basic(requireApproval=["delete_*", "crash"]))) as mcp:
        tools = tools_by_id(mcp)
        assert tools["basic__delete_item"].require_approval and tools["basic__crash"].require_approval
        assert not tools["basic__echo"].require_approval
        agent: Agent = make_agent(fake_redis, tools=[])
        agent.add_tools(mcp.tools)
        openai_server.script(
            Reply(tool_calls=[tool_call("basic__delete_item", {"item_id": "42"}, id="d1")]), Reply(text="Deleted.")
        )
        stream = await agent.stream("delete item 42")
        chunks = await stream.collect()
        approval = next(c for c in chunks if isinstance(c, ApprovalChunk))
        assert approval.payload.tool_name == "basic__delete_item"
        assert approval.payload.args == {"item_id": "42"}
        assert approval.payload.description == "Delete an item for good."
        assert not any(isinstance(c, ToolResultChunk) for c in chunks) and len(openai_server.requests) == 1
        resumed = await agent.approve_tool_call(run_id=stream.run_id, approved_by="U1")
        after = await resumed.collect()
        result = next(c for c in after if isinstance(c, ToolResultChunk))
        assert (result.payload.result, result.payload.is_error) == ("deleted 42", False)
        assert openai_server.requests[-1]["messages"][-1]["content"] == "deleted 42"
        assert after[-1].type == "finish"


async def test_invalid_arguments_and_is_error_results_go_back_to_the_model_as_tool_errors(
    fake_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI
) -> None:
    async with started(config(basic=basic(requireApproval=["delete_*"]))) as mcp:
        agent: Agent = make_agent(fake_redis, tools=[])
        agent.add_tools(mcp.tools)
        openai_server.script(
            Reply(
                tool_calls=[
                    tool_call("basic__add", {"a": "two"}, id="e1"),  # wrong type, and b missing
                    tool_call("basic__fail", {"reason": "not today"}, id="e2"),  # the server answers isError
                    tool_call("basic__delete_item", {}, id="e3"),  # invalid: refused before anyone is asked
                ]
            ),
            Reply(text="Sorry."),
        )
        chunks = await (await agent.stream("try things")).collect()
        results = {c.payload.tool_call_id: c.payload for c in chunks if isinstance(c, ToolResultChunk)}
        assert all(r.is_error for r in results.values()) and set(results) == {"e1", "e2", "e3"}
        assert not any(isinstance(c, ApprovalChunk) for c in chunks)
        told = {m["tool_call_id"]: m["content"] for m in openai_server.requests[-1]["messages"] if m["role"] == "tool"}
        assert "invalid arguments for basic__add" in told["e1"]
        assert "'b' is a required property" in told["e1"] and "'two' is not of type 'integer'" in told["e1"]
        assert "fail failed" in told["e2"] and "refused: not today" in told["e2"]
        assert "'item_id' is a required property" in told["e3"]
        assert chunks[-1].type == "finish"


# --- names ---------------------------------------------------------------------------------------------------------


def test_tool_names_are_valid_deterministic_and_collision_free() -> None:
    long_tool = "t" * 100
    pairs = [
        ("github", "create_issue"),  # plain: kept as it is
        ("my server", "search.docs"),  # odd characters
        ("github", long_tool),  # too long
        ("github", long_tool + "x"),  # too long, same first 64 characters
        ("a__b", "c"),  # these two would both be a__b__c
        ("a", "b__c"),
        ("x", "y"),  # would take a reserved name
        ("my_server", "search_docs"),  # the sanitised form of ("my server", "search.docs") without the hash
    ]
    names = tool_names(pairs, reserved={"x__y", "ask_user"})
    assert set(names) == set(pairs)
    assert all(MODEL_NAME.match(n) for n in names.values())
    assert len(set(names.values())) == len(pairs)
    assert not {"x__y", "ask_user"} & set(names.values())
    assert names[("github", "create_issue")] == "github__create_issue"
    assert names[("my_server", "search_docs")] == "my_server__search_docs"
    assert names[("my server", "search.docs")].startswith("my_server__search_docs_")
    assert names[("a__b", "c")] != "a__b__c" and names[("a", "b__c")] != "a__b__c"
    shuffled = pairs[::-1]
    random.Random(7).shuffle(shuffled)
    assert tool_names(shuffled, reserved={"ask_user", "x__y"}) == names  # the order they come in doesn't matter
    # A pair's name does not depend on the other servers (unless they collide with it).
    assert tool_names([("github", long_tool)])[("github", long_tool)] == names[("github", long_tool)]


async def test_real_servers_with_long_odd_and_colliding_names_each_get_their_own_tool() -> None:
    long_name = "report_" + "x" * 90
    servers = config(
        a={"command": sys.executable, "args": [NAMED, "a", "b__c", "odd name/v2!", long_name]},
        a__b={"command": sys.executable, "args": [NAMED, "a__b", "c"]},
    )
    async with started(servers) as mcp:
        tools = tools_by_id(mcp)
        assert len(tools) == 4 and all(MODEL_NAME.match(name) for name in tools)
        for tool in tools.values():  # every name reaches its own server's tool
            assert await tool.execute({}) == f"{tool.server}:{tool.mcp_name}"
        names = {(t.server, t.mcp_name): t.id for t in mcp.tools}
        assert names == tool_names(names, reserved=["ask_user"])  # the mapping tested above
        assert names[("a", "b__c")] != names[("a__b", "c")]


# --- failures --------------------------------------------------------------------------------------------------------


async def test_a_server_that_fails_to_start_is_reported_once_and_the_others_work(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="bot.agent.mcp")
    servers = config(
        missing={"command": "/nonexistent/mcp-server"},
        exits={"command": sys.executable, "args": ["-c", "import sys; sys.exit('no GITHUB_TOKEN given')"]},
        refused={"url": f"http://127.0.0.1:{free_port()}/mcp"},
        basic=basic(),
    )
    async with started(servers, connect_timeout=10) as mcp:
        assert set(mcp.failed) == {"missing", "exits", "refused"}
        assert await tools_by_id(mcp)["basic__echo"].execute({"text": "still here"}) == "echo: still here"
        assert {t.server for t in mcp.tools} == {"basic"}
    for server in ("missing", "exits", "refused"):
        (record,) = warnings_about(caplog, server)
        assert record.getMessage().startswith(f"MCP server {server} failed to start: ")
        assert record.exc_info is None and "\n" not in record.getMessage()
    assert "No such file or directory" in warnings_about(caplog, "missing")[0].getMessage()
    assert "no GITHUB_TOKEN given" in warnings_about(caplog, "exits")[0].getMessage()  # its last words on stderr


async def test_a_server_that_dies_fails_its_calls_is_reported_once_and_reconnects_on_a_later_call(
    caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    caplog.set_level(logging.INFO, logger="bot.agent.mcp")
    marker = tmp_path / "refuse"
    servers = config(basic=basic(env={"MCP_TEST_REFUSE_IF_EXISTS": str(marker)}))
    async with started(servers, connect_timeout=10) as mcp:
        tools = tools_by_id(mcp)
        first_pid = int(await tools["basic__pid"].execute({}))
        marker.touch()  # from now on the server can't be started again
        for call in (tools["basic__crash"], tools["basic__echo"], tools["basic__echo"]):
            with pytest.raises(ToolInputError, match=r"^MCP server basic is unavailable: "):
                await call.execute({"text": "x"} if call.mcp_name == "echo" else {})
        assert len(warnings_about(caplog, "basic")) == 1  # one line for the outage, not one per call
        marker.unlink()
        assert await tools["basic__echo"].execute({"text": "back"}) == "echo: back"
        assert int(await tools["basic__pid"].execute({})) != first_pid
        assert any(r.getMessage() == "MCP server basic: reconnected" for r in caplog.records)
        assert not alive(first_pid)


# --- streamable HTTP -----------------------------------------------------------------------------------------------


def http_server() -> MCPServer:
    server = MCPServer("web", log_level="ERROR")

    @server.tool(structured_output=False)
    def greet(name: str) -> str:
        """Greet someone."""
        return f"hello {name}"

    @server.tool()
    def delete_page(page: str) -> str:
        """Delete a page."""
        return f"deleted {page}"

    return server


@asynccontextmanager
async def serving(
    server: MCPServer, port: int, seen: list[dict[str, str]], *, path: str = "/mcp"
) -> AsyncIterator[None]:
    """``server`` over streamable HTTP at http://127.0.0.1:port``path`` (uvicorn in this event loop); the headers
    of every request are appended to ``seen``."""
    app = server.streamable_http_app(streamable_http_path=path)

    async def recording(
        scope: Any, receive: Callable[[], Awaitable[Any]], send: Callable[[Any], Awaitable[None]]
    ) -> None:
        if scope["type"] == "http":
            seen.append({k.decode(): v.decode() for k, v in scope["headers"]})
        await app(scope, receive, send)

    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    web = uvicorn.Server(uvicorn.Config(recording, log_level="critical", lifespan="on"))
    task = asyncio.ensure_future(web.serve(sockets=[sock]))
    try:
        while not web.started:
            assert not task.done(), "the MCP HTTP server did not start"
            await asyncio.sleep(0.01)
        yield
    finally:
        web.should_exit = True
        await task
        sock.close()


async def test_a_streamable_http_server_works_and_is_reconnected_after_a_restart(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="bot.agent.mcp")
    port, seen = free_port(), []
    entry = {"url": f"http://127.0.0.1:{port}/mcp", "headers": {"X-Api-Key": "${WEB_KEY}"}, "requireApproval": True}
    servers = parse_mcp_config({"mcpServers": {"web": entry}}, environ={"WEB_KEY": "k-123"})
    mcp = McpTools(servers, connect_timeout=5)
    try:
        async with serving(http_server(), port, seen):
            await mcp.start()
            tools = tools_by_id(mcp)
            assert set(tools) == {"web__greet", "web__delete_page"}
            assert all(t.require_approval for t in tools.values())  # requireApproval: true, the whole server
            assert await tools["web__greet"].execute({"name": "Ada"}) == "hello Ada"
            assert await tools["web__delete_page"].execute({"page": "home"}) == {"result": "deleted home"}
            assert seen and all(h.get("x-api-key") == "k-123" for h in seen)
        for _ in range(2):  # the server is gone
            with pytest.raises(ToolInputError, match=r"^MCP server web is unavailable: "):
                await tools["web__greet"].execute({"name": "Bob"})
        assert len(warnings_about(caplog, "web")) == 1
        async with serving(http_server(), port, seen):
            assert await tools["web__greet"].execute({"name": "Cy"}) == "hello Cy"
    finally:
        await mcp.aclose()


async def test_every_secret_bearing_value_of_mcp_config_is_redacted_from_the_logs(tmp_path: Path) -> None:
    """A token in an MCP server's URL (its path, or ``?key=``) was in DEBUG logs (httpx logs every request's URL).
    The playground as a process, LOG_LEVEL=DEBUG, MCP_CONFIG naming a loopback HTTP server by a URL holding a
    token in its path and query and a header filled from ${VAR}: none of them is in its output, the host is."""
    from tests.slack.test_serve_process import clean_env, read_until, start_bot, stop

    port, seen = free_port(), []
    path_token, query_key, header_key = "pathtoken-7f3a9c", "querykey-51d2e8", "headerkey-a04b77"
    url = f"http://127.0.0.1:{port}/t/{path_token}/mcp?key={query_key}"
    config_file = tmp_path / "mcp.json"
    entry = {"url": url, "headers": {"X-Api-Key": "${DOCS_KEY}"}}
    config_file.write_text(json.dumps({"mcpServers": {"docs": entry}}))
    env = clean_env(PORT="0", MCP_PORT="0", MCP_CONFIG=str(config_file), DOCS_KEY=header_key, LOG_LEVEL="DEBUG")
    async with serving(http_server(), port, seen, path=f"/t/{path_token}/mcp"):
        proc = await start_bot("playground", env=env)
        started: list[str] = []
        try:
            started = await read_until(proc, "Health and metrics:")
        finally:
            output = "\n".join(started) + "\n" + await stop(proc)
    assert seen and all(h.get("x-api-key") == header_key for h in seen)  # the server was reached, with the header
    assert f"127.0.0.1:{port}" in output  # its requests were logged: what is hidden is the secret part
    for secret in (path_token, query_key, header_key):
        assert secret not in output


def test_the_secret_bearing_values_of_each_kind_of_entry_reach_the_settings_secrets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GH_TOKEN", "ghp-expanded-1234")
    servers = {
        "gh": {"command": "npx", "args": ["-y", "--token=${GH_TOKEN}"], "env": {"DB": "postgres://u:dbpass99@h/db"}},
        "docs": {
            "url": "https://mcp.example.com/k/pathsecret9?key=querysecret9",
            "headers": {"Authorization": "Basic b64cred99"},
        },
    }
    config_file = tmp_path / "mcp.json"
    config_file.write_text(json.dumps({"mcpServers": servers}))
    secrets = Settings(mcp_config=str(config_file)).secret_values()
    for value in ("ghp-expanded-1234", "--token=ghp-expanded-1234", "postgres://u:dbpass99@h/db", "b64cred99"):
        assert value in secrets
    assert "/k/pathsecret9" in secrets and "querysecret9" in secrets
    assert not any("mcp.example.com" in v for v in secrets)  # the host stays readable in logs


# --- environment, lifecycle, wiring ----------------------------------------------------------------------------------


async def test_a_stdio_server_gets_its_env_with_variables_filled_in_but_not_the_bots_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("BOT_ONLY_SECRET", "sk-not-for-mcp-servers")
    entry = basic(env={"GREETING": "${WHO} says ${WHAT:-hi}"})
    servers = parse_mcp_config({"mcpServers": {"basic": entry}}, environ={"WHO": "Ada"})
    async with started(servers) as mcp:
        getenv = tools_by_id(mcp)["basic__getenv"]
        assert await getenv.execute({"name": "GREETING"}) == "Ada says hi"
        assert await getenv.execute({"name": "BOT_ONLY_SECRET"}) == ""
        assert await getenv.execute({"name": "PATH"}) != ""


def children() -> set[int]:
    """The ids of this process's live child processes."""
    me, found = os.getpid(), set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        if int(fields[1]) == me and fields[0] != "Z":
            found.add(int(stat.parent.name))
    return found


async def test_closing_stops_every_server_process_and_task() -> None:
    before = children()
    servers = config(basic=basic(), named={"command": sys.executable, "args": [NAMED, "named", "hello"]})
    mcp = McpTools(servers)
    await mcp.start()
    pid = int(await tools_by_id(mcp)["basic__pid"].execute({}))
    assert pid in children() and len(children() - before) == 2
    await mcp.aclose()
    await mcp.aclose()  # idempotent
    assert children() <= before and not alive(pid)
    assert [t for t in asyncio.all_tasks() if t is not asyncio.current_task() and not t.done()] == []
    with pytest.raises(ToolInputError, match=r"^MCP server basic is unavailable: the bot is shutting down"):
        await tools_by_id(mcp)["basic__echo"].execute({"text": "late"})


async def test_closing_while_the_servers_start_stops_them_too() -> None:
    before = children()
    mcp = McpTools(config(basic=basic()))
    starting = asyncio.ensure_future(mcp.start())
    for _ in range(1000):  # until the server process exists
        if children() - before:
            break
        await asyncio.sleep(0.01)
    assert children() - before and not starting.done()
    starting.cancel()
    await mcp.aclose()
    assert children() <= before
    assert [t for t in asyncio.all_tasks() if t is not asyncio.current_task() and not t.done()] == []


def test_add_tools_keeps_tool_ids_unique(fake_redis: aioredis.Redis, make_agent: Any) -> None:
    agent: Agent = make_agent(fake_redis, tools=[ask_user_tool])
    twin = McpTool(
        id="ask_user",
        description="x",
        input_schema=ask_user_tool.input_schema,
        execute_fn=ask_user_tool.execute_fn,
        server="s",
        mcp_name="ask_user",
        json_schema={"type": "object"},
    )
    with pytest.raises(ValueError, match="ask_user"):
        agent.add_tools([twin])
    other = McpTool(
        id="s__t",
        description="x",
        input_schema=ask_user_tool.input_schema,
        execute_fn=ask_user_tool.execute_fn,
        server="s",
        mcp_name="t",
        json_schema={"type": "object", "properties": {}},
    )
    with pytest.raises(ValueError, match="s__t"):
        agent.add_tools([other, other])
    assert list(agent.tools) == ["ask_user"]
    agent.add_tools([other])
    assert list(agent.tools) == ["ask_user", "s__t"]
    assert agent.toolbox.specs[-1]["function"]["parameters"] == {"type": "object", "properties": {}}


async def test_build_bot_starts_mcp_config_servers_in_the_background_and_aclose_stops_them(
    tmp_path: Path, fake_redis: aioredis.Redis, openai_server: FakeOpenAI
) -> None:
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {"basic": basic(requireApproval=["delete_*"])}}))
    settings = Settings(
        slack_bot_token="xoxb-test-0123456789",
        slack_signing_secret="signing-secret-0123456789",
        slack_api_url="http://127.0.0.1:9/api/",
        mcp_config=str(path),
    )
    before = children()
    model = OpenAIChatModel(model="m", base_url=openai_server.base_url, api_key="sk-test")
    bot = build_bot(settings, model=model, redis_client=fake_redis)
    try:
        await bot.start()
        await bot.start()  # once is enough; again just waits
        tools = bot.agent.tools
        assert {"ask_user", "basic__echo", "basic__delete_item"} <= set(tools)
        assert tools["basic__delete_item"].require_approval and not tools["basic__echo"].require_approval
        assert await tools["basic__echo"].execute({"text": "via the bot"}) == "echo: via the bot"
    finally:
        await bot.aclose()
    assert children() <= before
    web = build_bot(settings, model=model, redis_client=fake_redis, role="web")  # web processes run no agent
    assert web.mcp is None
    await web.aclose()


# --- the file ------------------------------------------------------------------------------------------------------


def test_the_config_file_format(tmp_path: Path) -> None:
    path = tmp_path / "mcp.json"
    path.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "github": {
                        "command": "npx",
                        "args": ["-y", "@modelcontextprotocol/server-github"],
                        "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": "${GITHUB_TOKEN}", "MODE": "${MODE:-read}"},
                        "requireApproval": ["create_*", "delete_*"],
                    },
                    "docs": {
                        "type": "http",
                        "url": "https://mcp.example.com/mcp",
                        "headers": {"Authorization": "Bearer ${DOCS_TOKEN}"},
                        "requireApproval": True,
                        "alwaysAllow": ["search"],  # another client's setting: ignored
                    },
                    "old": {"command": "old-server", "disabled": True},
                }
            }
        )
    )
    github, docs = load_mcp_config(path, environ={"GITHUB_TOKEN": "ghp_1", "DOCS_TOKEN": "d0c"})
    assert github.name == "github" and docs.name == "docs"
    assert github.transport == StdioServer(
        command="npx",
        args=("-y", "@modelcontextprotocol/server-github"),
        env={"GITHUB_PERSONAL_ACCESS_TOKEN": "ghp_1", "MODE": "read"},
    )
    assert docs.transport == HttpServer(url="https://mcp.example.com/mcp", headers={"Authorization": "Bearer d0c"})
    assert github.needs_approval("create_issue") and github.needs_approval("delete_repo")
    assert not github.needs_approval("list_issues") and not github.needs_approval("Create_issue")
    assert docs.needs_approval("anything")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{", "is not valid JSON: Expecting property name enclosed in double quotes at line 1 column 2"),
        ("[]", 'must be a JSON object with an "mcpServers" object'),
        ('{"mcpServers": {"a": {}}}', 'mcpServers.a: needs "command" (a stdio server) or "url"'),
        ('{"mcpServers": {"a": {"command": "x", "url": "http://h"}}}', 'mcpServers.a: has both "command" and "url"'),
        ('{"mcpServers": {"a": {"command": "x", "args": "-v"}}}', "mcpServers.a.args: must be a list of strings"),
        ('{"mcpServers": {"a": {"command": "x", "env": {"K": 1}}}}', "mcpServers.a.env.K: must be a string"),
        ('{"mcpServers": {"a": {"url": "ftp://h/mcp"}}}', "mcpServers.a.url: must be an http:// or https:// URL"),
        ('{"mcpServers": {"a": {"type": "sse", "url": "http://h/sse"}}}', "SSE servers are not supported"),
        ('{"mcpServers": {"a": {"command": "x", "requireApproval": "yes"}}}', "mcpServers.a.requireApproval: must be"),
        (
            '{"mcpServers": {"a": {"url": "http://h", "headers": {"Authorization": "Bearer ${NOT_SET_ANYWHERE}"}}}}',
            "mcpServers.a.headers.Authorization: environment variable NOT_SET_ANYWHERE is not set",
        ),
    ],
)
def test_a_bad_config_file_is_one_line_naming_the_problem(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "mcp.json"
    path.write_text(content)
    with pytest.raises(McpConfigError) as info:
        load_mcp_config(path, environ={})
    assert message in str(info.value) and "\n" not in str(info.value)


def test_mcp_config_is_checked_with_the_other_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The file's problems come as a setting's line. Paths relative to the working directory: a shown value is cut
    at 80 characters, and a tmp_path's length varies (pytest-xdist adds a directory per worker)."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SettingsError) as info:
        load_settings(mcp_config="missing.json")
    assert info.value.problems == ["MCP_CONFIG: no such file (got 'missing.json')"]
    (tmp_path / "mcp.json").write_text('{"mcpServers": {"a": {"command": 42}}}')
    with pytest.raises(SettingsError) as info:
        load_settings(mcp_config="mcp.json")
    assert info.value.problems == ["MCP_CONFIG: mcpServers.a.command: must be a string (got 'mcp.json')"]
    (tmp_path / "mcp.json").write_text('{"mcpServers": {}}')
    assert load_settings(mcp_config="mcp.json").mcp_config == "mcp.json"
