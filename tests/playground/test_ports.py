"""The playground as a real process (``python -m bot playground``): which ports it opens, that its second port
(the MCP server's) never clashes with ``PORT``, that a clash names the setting that caused it, and that every
address it serves (the bot's /healthz, /readyz, /metrics among them) is printed and answers."""

from __future__ import annotations

import contextlib
import re
import socket
from collections.abc import Iterator

import pytest
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from bot.config import MCP_PORT_DEFAULT
from bot.testing.scrape import get
from tests.slack.test_serve_process import clean_env, error_lines, free_port, read_until, run_bot, start_bot, stop

HEALTH = "Health and metrics:"


@contextlib.contextmanager
def holding(port: int) -> Iterator[None]:
    """Listen on 127.0.0.1:``port`` for the block (another process's server); skip when this machine has it."""
    with socket.socket() as held:
        try:
            held.bind(("127.0.0.1", port))
        except OSError:
            pytest.skip(f"port {port} is in use on this machine")
        held.listen()
        yield


def port_free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def printed(lines: list[str], label: str) -> str:
    """The address printed after ``label`` (``MCP server: http://127.0.0.1:3100/mcp  (...)`` -> the URL)."""
    line = next(line for line in lines if line.startswith(label))
    match = re.search(r"http://[^\s]+", line)
    assert match, line
    return match.group(0)


async def tools_at(url: str, token: str) -> set[str]:
    """The tool names a real MCP client (the SDK's, streamable HTTP) lists at ``url`` with ``token``."""
    async with (
        create_mcp_http_client(headers={"Authorization": f"Bearer {token}"}) as http,
        streamable_http_client(url, http_client=http) as streams,
        Client(contextlib.nullcontext(streams), mode="auto") as client,
    ):
        return {t.name for t in (await client.session.list_tools()).tools}


async def test_the_mcp_servers_default_port_never_clashes() -> None:
    """Both cases that touch port 3100 (MCP_PORT_DEFAULT), one after the other in one test: the port is the
    machine's, and as two tests on two xdist workers they raced for it."""
    await port_3100_is_the_ui_and_the_mcp_server_takes_another_port_printed()
    await with_3100_taken_by_another_process_the_mcp_server_takes_a_free_port()


async def port_3100_is_the_ui_and_the_mcp_server_takes_another_port_printed() -> None:
    """``PORT=3100 python -m bot`` failed "cannot listen on 127.0.0.1:3100 ... set PORT": the MCP server's default
    port was 3100 too, and it was taken first."""
    if not port_free(MCP_PORT_DEFAULT):
        pytest.skip(f"port {MCP_PORT_DEFAULT} is in use on this machine")
    proc = await start_bot("playground", env=clean_env(PORT=str(MCP_PORT_DEFAULT)))
    try:
        lines = await read_until(proc, HEALTH)
        mcp_line = next(line for line in lines if line.startswith("MCP server:"))
        token = mcp_line.rsplit("Bearer ", 1)[1].rstrip(")")
        tools = await tools_at(printed(lines, "MCP server:"), token)
    finally:
        output = await stop(proc)
    assert printed(lines, "Playground:") == f"http://127.0.0.1:{MCP_PORT_DEFAULT}/", lines
    assert f":{MCP_PORT_DEFAULT}/mcp" not in mcp_line
    assert tools == {"ask_user", "request_approval", "approve_tool_use"}
    assert "Traceback" not in output


async def with_3100_taken_by_another_process_the_mcp_server_takes_a_free_port() -> None:
    with holding(MCP_PORT_DEFAULT):
        proc = await start_bot("playground", env=clean_env(PORT="0"))
        try:
            lines = await read_until(proc, HEALTH)
        finally:
            await stop(proc)
    url = printed(lines, "MCP server:")
    assert url.startswith("http://127.0.0.1:") and f":{MCP_PORT_DEFAULT}/" not in url


def test_mcp_port_equal_to_port_is_refused_naming_mcp_port() -> None:
    port = free_port()
    [line] = error_lines(run_bot("playground", env=clean_env(PORT=str(port), MCP_PORT=str(port)), timeout=120))
    assert line.startswith(f"error: MCP_PORT is {port}, the port of the playground's browser UI (PORT)"), line
    assert "set MCP_PORT" in line


def test_metrics_port_equal_to_port_is_refused_naming_metrics_port() -> None:
    port = free_port()
    env = clean_env(PORT=str(port), MCP_PORT="0", METRICS_PORT=str(port))
    [line] = error_lines(run_bot("playground", env=env, timeout=120))
    assert line.startswith(f"error: METRICS_PORT is PORT ({port}), the playground's browser UI"), line


def test_a_taken_mcp_port_is_refused_naming_mcp_port() -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        taken = held.getsockname()[1]
        [line] = error_lines(run_bot("playground", env=clean_env(PORT="0", MCP_PORT=str(taken)), timeout=120))
    assert line.startswith(f"error: cannot serve MCP on 127.0.0.1:{taken}") and "set MCP_PORT" in line, line


async def test_health_readiness_and_metrics_are_printed_and_answer() -> None:
    """They were 404 on the playground's PORT (the UI), on a bot port printed nowhere."""
    proc = await start_bot("playground", env=clean_env(PORT="0", MCP_PORT="0"))
    try:
        lines = await read_until(proc, HEALTH)
        base = printed(lines, HEALTH).removesuffix("/healthz")
        statuses = [(await get(base, path))[0] for path in ("/healthz", "/readyz", "/metrics")]
        _, metrics, _ = await get(base, "/metrics")
    finally:
        await stop(proc)
    assert statuses == [200, 200, 200], lines
    assert "askbot_runs_in_flight " in metrics
    assert printed(lines, "Bot:").endswith("/slack/events")


async def test_metrics_port_is_honoured_in_the_playground() -> None:
    metrics_port = free_port()
    env = clean_env(PORT="0", MCP_PORT="0", METRICS_PORT=str(metrics_port))
    proc = await start_bot("playground", env=env)
    try:
        lines = await read_until(proc, HEALTH)
        statuses = [(await get(f"http://127.0.0.1:{metrics_port}", p))[0] for p in ("/healthz", "/readyz", "/metrics")]
        bot_base = printed(lines, "Bot:").removesuffix("/slack/events")
        on_bot_port, _, _ = await get(bot_base, "/metrics")
    finally:
        await stop(proc)
    assert printed(lines, HEALTH) == f"http://127.0.0.1:{metrics_port}/healthz"
    assert statuses == [200, 200, 200]
    assert on_bot_port == 404  # with METRICS_PORT they have their own port, as in serve
