"""The playground's MCP server: the bot's ``ask_user`` and ``request_approval`` for MCP clients, over streamable
HTTP on loopback (``http://127.0.0.1:<port>/mcp``) behind a bearer token made at start (or ``MCP_TOKEN``), printed
with the playground's address. The port: ``MCP_PORT`` when set (``0``: a free one; the UI's port, ``PORT``, is
refused, naming both), else 3100 unless the UI or another process has it, then a free port: so ``PORT=3100`` never
clashes with it. Always loopback (``MCP_HOST`` is for ``python -m bot mcp --http``). Questions go to #general
for Alice unless ``MCP_ASK_CHANNEL`` / ``MCP_ASK_USER`` (or the call) say otherwise, and are answered in the
browser, offline. It runs in the playground's process on the playground bot's stores
(:class:`bot.mcp_server.asker.Asker`)."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import socket
from dataclasses import dataclass
from typing import Any

from bot.config import MCP_PORT_DEFAULT, Settings
from bot.errors import ConfigError, describe_os_error
from bot.fakeslack.state import TEAM_ID
from bot.mcp_server.asker import Asker
from bot.mcp_server.http import MCP_PATH, bound_port, http_server, listen_socket
from bot.mcp_server.server import build_mcp_server
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

    @property
    def stopping(self) -> bool:
        """Whether it stops (its calls are then ended by it, told why: :data:`bot.mcp_server.http.STOPPING`)."""
        return bool(self._server.stopping.is_set())

    async def stop(self) -> None:
        """Stop serving, as ``mcp --http`` stops on SIGTERM: calls still waiting end within the server's grace, told
        why (a keyed call's question stays for its key; a keyless one's is withdrawn)."""
        self._server.stopping.set()  # what handle_exit sets, without uvicorn recording a signal
        self._server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(self._task, 10)


def mcp_socket(settings: Settings, *, ui_port: int) -> socket.socket:
    """The loopback socket the playground's MCP server listens on (see the module docstring), never the UI's
    ``ui_port``. Raises ``ConfigError`` naming ``MCP_PORT`` when that port is the UI's or can't be listened on."""
    wanted = settings.mcp_port
    if wanted is not None and wanted != 0 and wanted == ui_port:
        raise ConfigError(
            f"MCP_PORT is {wanted}, the port of the playground's browser UI (PORT); set MCP_PORT to another port"
            " (0: any free one), or unset it"
        )
    if wanted is None:
        preferred = MCP_PORT_DEFAULT if ui_port != MCP_PORT_DEFAULT else 0
        try:
            return listen_socket(HOST, preferred)
        except OSError:  # another process has it: any free port (printed)
            return listen_socket(HOST, 0)
    try:
        return listen_socket(HOST, wanted)
    except OSError as exc:
        raise ConfigError(
            f"cannot serve MCP on {HOST}:{wanted} ({describe_os_error(exc)}); set MCP_PORT (0: any free port),"
            " or unset it"
        ) from None


async def start_mcp(settings: Settings, bot: Bot, *, ui_port: int = 0) -> PlaygroundMcp:
    """Serve the MCP server of ``bot`` (the playground's) on loopback, on a port other than ``ui_port`` (the
    UI's, once it listens; :func:`mcp_socket`). Raises ``ConfigError`` naming ``MCP_PORT``."""
    assert bot.threads is not None
    update = {k: v for k, v in DEFAULTS.items() if getattr(settings, k) is None}
    mcp_settings = settings.model_copy(update=update)
    token = settings.mcp_token.get_secret_value() if settings.mcp_token else secrets.token_urlsafe(24)
    server = build_mcp_server(mcp_settings, Asker(bot.threads, team_id=TEAM_ID))
    sock = mcp_socket(settings, ui_port=ui_port)
    port = int(sock.getsockname()[1])
    running = http_server(server, host=HOST, port=port, token=token)
    task = asyncio.ensure_future(running.serve(sockets=[sock]))
    task.add_done_callback(lambda _: sock.close())
    while not running.started:
        if task.done():  # it could not start: uvicorn logged why
            task.result()
            raise ConfigError(f"cannot serve MCP on {HOST}:{port}; set MCP_PORT (0: any free port)")
        await asyncio.sleep(0.02)
    return PlaygroundMcp(url=f"http://{HOST}:{bound_port(running)}{MCP_PATH}", token=token, _server=running, _task=task)
