"""The playground serves MCP too: an MCP client (the official SDK, streamable HTTP on loopback, the token printed at
start) asks into the playground, and the question is answered there, offline."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import aiohttp
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from bot.config import Settings
from bot.playground.launcher import Playground, run_playground
from bot.testing.slack_scenarios import ALICE, GENERAL, has_controls


def settings(**overrides: Any) -> Settings:
    values: dict[str, Any] = {"slack_bot_token": None, "openai_api_key": None, "redis_url": None, "port": 0}
    return Settings(**{**values, "mcp_port": 0, **overrides})


async def test_an_mcp_client_asks_into_the_playground_and_gets_the_answer_given_there() -> None:
    async with Playground(settings(), ui_port=0) as pg:
        assert pg.mcp is not None and pg.workspace is not None and pg.mcp.url.startswith("http://127.0.0.1:")
        auth = {"Authorization": f"Bearer {pg.mcp.token}"}
        async with (
            create_mcp_http_client(headers=auth) as http,
            streamable_http_client(pg.mcp.url, http_client=http) as streams,
            Client(contextlib.nullcontext(streams), mode="auto") as client,
        ):
            args = {"question": "Which environment?", "options": [{"label": "staging"}, {"label": "production"}]}
            call = asyncio.ensure_future(client.session.call_tool("ask_user", args))
            question = await pg.workspace.wait_for_message(channel=GENERAL, predicate=has_controls, timeout=10)
            await pg.workspace.click(question, "staging", user=ALICE)  # Alice, in #general: the playground's
            result = await asyncio.wait_for(call, 10)
        assert result.structured_content == {"status": "answered", "answer": "staging", "answered_by": ALICE}


async def test_the_playground_mcp_server_wants_its_token() -> None:
    async with Playground(settings(), ui_port=0) as pg, aiohttp.ClientSession() as http:
        assert pg.mcp is not None
        async with http.post(pg.mcp.url, json={"jsonrpc": "2.0", "id": 1, "method": "initialize"}) as resp:
            assert resp.status == 401


async def test_the_mcp_address_and_token_are_printed_at_start(capsys: Any) -> None:
    ready = asyncio.Event()
    task = asyncio.create_task(run_playground(settings(), ui_port=0, ready=ready))
    try:
        await asyncio.wait_for(ready.wait(), 20)
        out = capsys.readouterr().out
        [line] = [x for x in out.splitlines() if x.startswith("MCP server: ")]
        assert "/mcp  (Authorization: Bearer " in line and len(line.split("Bearer ")[1].rstrip(")")) >= 20
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_the_playground_stops_its_mcp_server_as_mcp_http_stops_on_sigterm() -> None:
    """Found by a new user's trial: Ctrl-C while an MCP call waited cut it short (the client told only "Server
    returned an error response", a traceback in the terminal): the playground set uvicorn's ``should_exit`` itself,
    so its calls never learnt the server stopped. Now it stops as ``mcp --http`` does on SIGTERM (``handle_exit``:
    the server's stop flag, which waiting calls read to end with "call again with the same request_key", as
    ``tests/mcp_server/test_mcp_server.py`` shows end to end)."""
    async with Playground(settings(), ui_port=0) as pg:
        assert pg.mcp is not None and not pg.mcp.stopping
        await pg.mcp.stop()
        assert pg.mcp.stopping
