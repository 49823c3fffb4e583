"""The MCP server over streamable HTTP (``python -m bot mcp --http``): ``/mcp`` on ``MCP_HOST:MCP_PORT``
(default ``127.0.0.1:3100``: loopback; a TLS-terminating proxy in front serves it to other hosts, see the
README), every request refused (401) without ``Authorization: Bearer $MCP_TOKEN``, or with ``MCP_CALLERS`` without
one of its callers' tokens (the caller then rides in the ASGI scope's ``state`` for the tools, see
:func:`bot.mcp_server.server.caller_of`).

On a loopback address the SDK also refuses requests whose ``Host`` header is not a loopback name (DNS rebinding
protection): a proxy in front passes ``Host: 127.0.0.1:<port>`` (nginx's default; Caddy's
``header_up Host {upstream_hostport}``).

A request body is at most :data:`MAX_BODY` bytes (:class:`BodyLimit`): a larger one is refused with 413 and a
JSON-RPC error saying the bound, before any of it reaches the SDK (which reads a body whole into memory).

The token is compared in constant time (``hmac.compare_digest``; with ``MCP_CALLERS`` its SHA-256 with each
caller's) and never logged (uvicorn's access log is off;
the 401 says nothing of what was sent). The app itself is the SDK's (``MCPServer.streamable_http_app``), served by
uvicorn (the SDK's own dependency).
"""

from __future__ import annotations

import contextlib
import hmac
import json
import logging
import signal
import socket
import threading
from typing import Any

from mcp.server.mcpserver import MCPServer

from bot.mcp_server.callers import CALLER_STATE, Caller, Callers
from bot.serving import on_signals

log = logging.getLogger(__name__)

MCP_PATH = "/mcp"
HOST = "127.0.0.1"  # MCP_HOST's default: loopback only
MAX_BODY = 4 * 1024 * 1024  # bytes of one request body: the largest call (a permission prompt's input, at most
# 100,000 characters of JSON, bot.mcp_server.permission_prompt.MAX_INPUT, escaped up to 6 bytes each) fits
GRACE = 3  # seconds a stopping server gives requests in flight; waiting calls are cut short (their questions stay)
ASGIApp = Any  # an ASGI application: await app(scope, receive, send)
CLIENT_GONE = "mcp_client_gone"
"""``scope["state"]`` key of an HTTP request's :class:`threading.Event`, set once its client closed the request's
stream (:class:`Disconnects`): how a client on the newer HTTP wire cancels a call, with no notification."""
STOPPING = "mcp_server_stopping"
"""``scope["state"]`` key of the serving server's :class:`threading.Event`, set once it stops (SIGTERM, Ctrl-C, the
playground's stop): its calls are ended by it, not cancelled by their clients
(:func:`bot.mcp_server.cancellations.server_stopping`)."""


class Disconnects:
    """ASGI middleware: each HTTP request carries an event in ``scope["state"][CLIENT_GONE]``, set when the server
    hears ``http.disconnect`` while the request is handled (the client closed its stream: it cancelled the call,
    its own timeout fired, or it died), and the server's ``stopping`` event in ``scope["state"][STOPPING]``; both
    read by :mod:`bot.mcp_server.cancellations`."""

    def __init__(self, app: ASGIApp, *, stopping: threading.Event) -> None:
        self.app = app
        self.stopping = stopping

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        gone = threading.Event()
        state = scope.setdefault("state", {})
        state[CLIENT_GONE], state[STOPPING] = gone, self.stopping

        async def watched() -> dict[str, Any]:
            message: dict[str, Any] = await receive()
            if message.get("type") == "http.disconnect":
                gone.set()
            return message

        await self.app(scope, watched, send)


class BearerAuth:
    """ASGI middleware: HTTP requests without ``Authorization: Bearer <token>`` (``token``, or with ``callers`` one
    of theirs) get 401; lifespan passes. A caller's request carries its :class:`Caller` in ``scope["state"]``."""

    def __init__(self, app: ASGIApp, *, token: str | None = None, callers: Callers | None = None) -> None:
        self.app = app
        self._expected = token.encode() if token is not None else None
        self.callers = callers

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope.get("type") == "http" and not self._authorized(scope):
            body = json.dumps({"error": "unauthorized", "error_description": "a caller's bearer token is needed"})
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
        if scheme.lower() != b"bearer":
            return False
        if self.callers is not None:
            caller: Caller | None = self.callers.by_token(token.strip())
            if caller is None:
                return False
            scope.setdefault("state", {})[CALLER_STATE] = caller
            return True
        return self._expected is not None and hmac.compare_digest(token.strip(), self._expected)


class BodyLimit:
    """ASGI middleware: an HTTP request whose body is over ``limit`` bytes (by its ``Content-Length``, or counted as
    it arrives when chunked) gets 413 with a JSON-RPC error (``-32600``, ``id`` null) naming the bound; the app
    never sees it. A body within the bound is read whole (the SDK does so anyway) and handed on in one message;
    what the client sends later (its disconnect) reaches the app as it comes."""

    def __init__(self, app: ASGIApp, *, limit: int = MAX_BODY) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        declared = next((v for k, v in scope.get("headers") or [] if k.lower() == b"content-length"), None)
        if declared is not None and declared.strip().isdigit() and int(declared) > self.limit:
            await self._refuse(send)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message.get("type") != "http.request":  # gone before its body was whole
                return
            chunk = message.get("body") or b""
            size += len(chunk)
            if size > self.limit:
                await self._refuse(send)
                return
            chunks.append(chunk)
            if not message.get("more_body"):
                break
        replayed = False

        async def replay() -> dict[str, Any]:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            message: dict[str, Any] = await receive()
            return message

        await self.app(scope, replay, send)

    async def _refuse(self, send: Any) -> None:
        error = {"code": -32600, "message": f"Request body too large: an MCP request is at most {self.limit:,} bytes"}
        body = json.dumps({"jsonrpc": "2.0", "id": None, "error": error}).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [(b"content-type", b"application/json"), (b"connection", b"close")],
            }
        )
        await send({"type": "http.response.body", "body": body})


def http_server(
    server: MCPServer[Any],
    *,
    host: str = HOST,
    port: int,
    token: str | None,
    callers: Callers | None = None,
) -> Any:
    """A uvicorn server of ``server`` at ``/mcp`` on ``host:port`` behind the bearer ``token`` (with ``callers``:
    their tokens); ``await it.serve()`` runs it, ``it.handle_exit(signal.SIGTERM, None)`` stops it. It handles no
    signal itself: the process does (:func:`serve_http`, or the playground). uvicorn's own handling restored the
    default action as it stopped and sent the signal again, which ended the process (status -15) before the clean-up
    after it ran (drain, Redis closed), and its handler, called again by each SIGTERM of a supervisor that signals
    until the process is gone, nested until ``RecursionError``."""
    import uvicorn

    stopping = threading.Event()  # the calls ended now are not the clients' cancellations

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            stopping.set()
            super().handle_exit(sig, frame)

        def capture_signals(self) -> Any:  # the process's own (serve_http's, or the playground's)
            return contextlib.nullcontext()

    app = BearerAuth(  # the token first: a body is read only for a caller
        Disconnects(BodyLimit(server.streamable_http_app(streamable_http_path=MCP_PATH, host=host)), stopping=stopping),
        token=token,
        callers=callers,
    )
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=GRACE,  # calls waiting for a person would hold a stop forever
    )
    running = Server(config)
    running.stopping = stopping  # type: ignore[attr-defined]  # set once it stops (handle_exit)
    return running


def listen_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` (0: a free port), for ``await http_server(...).serve(sockets=[it])``:
    bound here, so an address in use is an ``OSError`` to the caller (uvicorn, binding itself, logs it and exits
    the process), and listening already, so a client that connects as soon as the address is logged waits in the
    backlog instead of being refused before uvicorn starts. Raises ``OSError``."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)  # uvicorn's default backlog
    except BaseException:
        sock.close()
        raise
    return sock


def bound_port(running: Any) -> int:
    """The port a started :func:`http_server` listens on (``port=0`` picks a free one)."""
    return int(running.servers[0].sockets[0].getsockname()[1])


async def serve_http(
    server: MCPServer[Any], *, host: str = HOST, port: int, token: str | None, callers: Callers | None = None
) -> None:
    """Serve ``server`` at ``/mcp`` on ``host:port`` until stopped (SIGINT or SIGTERM: :func:`bot.serving.on_signals`;
    a later one changes nothing, and the caller's clean-up runs), to ``token`` (with ``callers``: their tokens). Raises
    ``OSError`` when the address can't be bound."""
    running = http_server(server, host=host, port=port, token=token, callers=callers)
    sock = listen_socket(host, port)
    try:
        with on_signals(lambda: running.handle_exit(signal.SIGTERM, None), signal.SIGINT, signal.SIGTERM):
            shown = f"[{host}]" if ":" in host else host
            log.info("MCP server: streamable HTTP at http://%s:%d%s", shown, sock.getsockname()[1], MCP_PATH)
            await running.serve(sockets=[sock])
    finally:
        sock.close()
