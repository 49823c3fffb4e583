"""The playground's MCP server: the bot's ``ask_user`` and ``request_approval`` for MCP clients, over streamable
HTTP on loopback (``http://127.0.0.1:$MCP_PORT/mcp``, default 3100; ``MCP_PORT=0`` picks a free port) behind a
bearer token made at start (or ``MCP_TOKEN``), printed with the playground's address. Questions go to #general
for Alice unless ``MCP_ASK_CHANNEL`` / ``MCP_ASK_USER`` (or the call) say otherwise, and are answered in the
browser, offline. It runs in the playground's process on the playground bot's stores
(:class:`bot.mcp_server.asker.Asker`)."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from dataclasses import dataclass
from typing import Any

from bot.config import Settings
from bot.errors import ConfigError
from bot.mcp_server.asker import Asker
from bot.mcp_server.http import MCP_PATH, bound_port, http_server
from bot.mcp_server.server import build_mcp_server
from bot.playground.state import TEAM_ID
from bot.slack.app import Bot

HOST = "127.0.0.1"  # loopback only, as the rest of the playground
DEFAULTS = {"mcp_ask_channel": "C_GENERAL", "mcp_ask_user": "U_ALICE"}


@dataclass
class PlaygroundMcp:
    """A running playground MCP server: its ``url`` and ``token``; :meth:`stop` ends it."""

    url: str
    token: str
    _server: Any
    _task: asyncio.Task[None]

    async def stop(self) -> None:
        """Stop serving (calls still waiting are cut short; their questions stay)."""
        self._server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(self._task, 10)


async def start_mcp(settings: Settings, bot: Bot) -> PlaygroundMcp:
    """Serve the MCP server of ``bot`` (the playground's) on loopback. Raises ``ConfigError`` when ``MCP_PORT``
    is taken."""
    assert bot.threads is not None
    update = {k: v for k, v in DEFAULTS.items() if getattr(settings, k) is None}
    mcp_settings = settings.model_copy(update=update)
    token = settings.mcp_token.get_secret_value() if settings.mcp_token else secrets.token_urlsafe(24)
    server = build_mcp_server(mcp_settings, Asker(bot.threads, team_id=TEAM_ID))
    running = http_server(server, host=HOST, port=settings.mcp_port, token=token, embedded=True)
    task = asyncio.ensure_future(running.serve())
    while not running.started:
        if task.done():  # it could not start (the port is taken): uvicorn says why and gives up
            raise ConfigError(f"cannot serve MCP on {HOST}:{settings.mcp_port}; set MCP_PORT (0: any free port)")
        await asyncio.sleep(0.02)
    return PlaygroundMcp(url=f"http://{HOST}:{bound_port(running)}{MCP_PATH}", token=token, _server=running, _task=task)
