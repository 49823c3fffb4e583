"""The MCP server over streamable HTTP (``python -m bot mcp --http``): ``/mcp`` on ``MCP_PORT``, every request
refused (401) without ``Authorization: Bearer $MCP_TOKEN``.

The token is compared in constant time (``hmac.compare_digest``) and never logged (uvicorn's access log is off;
the 401 says nothing of what was sent). The app itself is the SDK's (``MCPServer.streamable_http_app``), served by
uvicorn (the SDK's own dependency).
"""

from __future__ import annotations

import contextlib
import hmac
import json
import logging
from typing import Any

from mcp.server.mcpserver import MCPServer

log = logging.getLogger(__name__)

MCP_PATH = "/mcp"
HOST = "0.0.0.0"
GRACE = 3  # seconds a stopping server gives requests in flight; waiting calls are cut short (their questions stay)
ASGIApp = Any  # an ASGI application: await app(scope, receive, send)


class BearerAuth:
    """ASGI middleware: HTTP requests without ``Authorization: Bearer <token>`` get 401; lifespan passes."""

    def __init__(self, app: ASGIApp, *, token: str) -> None:
        self.app = app
        self._expected = token.encode()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope.get("type") == "http" and not self._authorized(scope):
            body = json.dumps({"error": "unauthorized", "error_description": "a bearer token (MCP_TOKEN) is needed"})
            await send(
                {
                    "type": "http.response.start",
                    "status": 401,
                    "headers": [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")],
                }
            )
            await send({"type": "http.response.body", "body": body.encode()})
            return
        await self.app(scope, receive, send)

    def _authorized(self, scope: dict[str, Any]) -> bool:
        """``Authorization: Bearer <token>``, the scheme in any case (RFC 7235), the token compared in constant
        time."""
        given = b""
        for name, value in scope.get("headers") or []:
            if name.lower() == b"authorization":
                given = value
        scheme, _, token = given.strip().partition(b" ")
        return scheme.lower() == b"bearer" and hmac.compare_digest(token.strip(), self._expected)


def http_server(server: MCPServer[Any], *, host: str = HOST, port: int, token: str, embedded: bool = False) -> Any:
    """A uvicorn server of ``server`` at ``/mcp`` on ``host:port`` behind the bearer ``token``; ``await
    it.serve()`` runs it, ``it.should_exit = True`` stops it. ``embedded``: inside another program (the
    playground), which keeps its own signal handling."""
    import uvicorn

    from bot.mcp_server.server import SHUTTING_DOWN

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            SHUTTING_DOWN.set()  # the calls cut short now are not the clients' cancellations
            super().handle_exit(sig, frame)

        def capture_signals(self) -> Any:
            return contextlib.nullcontext() if embedded else super().capture_signals()

    app = BearerAuth(server.streamable_http_app(streamable_http_path=MCP_PATH, host=host), token=token)
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=GRACE,  # calls waiting for a person would hold a stop forever
    )
    return Server(config)


def bound_port(running: Any) -> int:
    """The port a started :func:`http_server` listens on (``port=0`` picks a free one)."""
    return int(running.servers[0].sockets[0].getsockname()[1])


async def serve_http(server: MCPServer[Any], *, port: int, token: str) -> None:
    """Serve ``server`` at ``/mcp`` on ``port`` (all interfaces) until stopped (SIGINT/SIGTERM). Raises
    ``OSError`` when the port can't be bound."""
    log.info("MCP server: streamable HTTP at http://%s:%d%s", HOST, port, MCP_PATH)
    await http_server(server, port=port, token=token).serve()
