"""A client's cancellation of a call that waits for a person: a withdrawal, unless the client only stopped waiting.

Both MCP SDKs send ``notifications/cancelled`` for a call the client gave up on, whether its user cancelled it or
its own request timeout fired (the Python SDK's ``read_timeout_seconds``: reason ``"timed out after 60.0s"``; the
TypeScript SDK's, used by the MCP Inspector, Claude Code, Cursor and VS Code: ``"McpError: MCP error -32001:
Request timed out"``). The first withdraws the question (Slack says so); the second must not when the call has a
``request_key``: docs/mcp-server.md promises that the answer is kept and that the same call with the same key picks
it up later. A call without a key can't be picked up again: any end of it by its client withdraws its question (a
cancel, its timeout, its HTTP stream closed with no notification, its stdio client gone).

:class:`CancelReasons` (server middleware) notes each cancellation's ``reason`` by client and request id, as it
arrives; :func:`withdrawn_by_client` tells the two apart for the call being handled.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, Literal

import anyio
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import Context

from bot.mcp_server.callers import CALLER_STATE
from bot.mcp_server.http import CLIENT_GONE, STOPPING

CANCELLED = "notifications/cancelled"
REASON_WAIT = 1.0
"""Seconds a call that saw its cancellation waits for the notification's reason (the SDK sets the call's
cancellation before it hands the notification on): none by then counts as a withdrawal."""
FRESH = 3.0  # seconds a noted reason may wait for its call to read it (it comes with the cancellation)
KEPT = 100  # reasons kept at most (the oldest dropped): reasons of calls that ended before reading them


class CancelReasons:
    """Server middleware (``MCPServer(middleware=[...])``): the ``reason`` of each ``notifications/cancelled``, by
    the client it came from (:func:`client_of`) and the request id it names, for the call with that id to read
    (:meth:`reason`) within :data:`FRESH` seconds.

    The SDK gives every message its own session and connection objects (on the 2026 wire nothing else ties a
    notification to the call it names): a client is told by its HTTP session id and bearer token's caller; over
    stdio a server has one client. Two HTTP clients with neither, or the same caller and no session, whose calls
    share an id and are cancelled within :data:`FRESH` seconds of each other may read each other's reason."""

    def __init__(self) -> None:
        self._reasons: dict[tuple[str, str], list[tuple[str, float]]] = {}  # -> [(reason, when: monotonic s)]
        self._arrived: anyio.Event | None = None  # set when a reason arrives (made by the first call waiting)

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        """Note a cancellation's reason, then let the SDK go on with the notification (or request) as it would."""
        if ctx.method == CANCELLED and ctx.request_id is None and isinstance(ctx.params, Mapping):
            request_id = ctx.params.get("requestId")
            if isinstance(request_id, (str, int)) and not isinstance(request_id, bool):
                now = time.monotonic()
                key = (client_of(ctx.request), str(request_id))
                fresh = [r for r in self._reasons.pop(key, []) if now - r[1] <= FRESH]
                self._reasons[key] = [*fresh, (str(ctx.params.get("reason") or ""), now)]
                while len(self._reasons) > KEPT:
                    self._reasons.pop(next(iter(self._reasons)))
                if self._arrived is not None:
                    self._arrived.set()
                    self._arrived = None
        return await call_next(ctx)

    async def reason(self, ctx: Context, *, within: float = REASON_WAIT) -> str | None:
        """The reason the client gave for cancelling ``ctx``'s call (``""``: none given), waiting up to ``within``
        seconds for it to arrive; None when no notification named it (another way of cancelling, e.g. the HTTP
        stream of the call closed by the client)."""
        try:
            key = (client_of(ctx.request_context.request), str(ctx.request_context.request_id))
        except ValueError:  # outside a request
            return None
        with anyio.move_on_after(within):
            while True:
                now = time.monotonic()
                waiting = [r for r in self._reasons.get(key, []) if now - r[1] <= FRESH]
                if waiting:
                    self._reasons[key] = waiting[1:]
                    if not self._reasons[key]:
                        del self._reasons[key]
                    return waiting[0][0]
                if self._arrived is None:
                    self._arrived = anyio.Event()
                await self._arrived.wait()
        return None


def client_of(request: Any) -> str:
    """Which client an MCP message came from, as far as the server can tell: ``""`` over stdio (one client), else
    its HTTP session id (``Mcp-Session-Id``) and the caller its bearer token names."""
    scope = getattr(request, "scope", None)
    if not isinstance(scope, dict):
        return ""
    headers = {bytes(k).lower(): bytes(v) for k, v in scope.get("headers") or []}
    session = headers.get(b"mcp-session-id", b"").decode("latin-1")
    caller = (scope.get("state") or {}).get(CALLER_STATE)
    return f"{session}|{getattr(caller, 'name', '') or ''}"


ClientEnd = Literal["cancelled", "gone"]
"""How a client ended a call: ``cancelled`` (``notifications/cancelled``), ``gone`` (its HTTP stream closed with no
notification: how the newer wire cancels, and what its request timeout and a dead client do too)."""


def _http_state(ctx: Context) -> dict[str, Any] | None:
    """The ``scope["state"]`` of the HTTP request carrying this call (what :mod:`bot.mcp_server.http`'s middleware
    put there), ``{}`` when it has none; None over stdio (no HTTP request) or outside a request."""
    try:
        request = ctx.request_context.request
    except ValueError:  # outside a request
        return None
    scope = getattr(request, "scope", None)
    return (scope.get("state") or {}) if isinstance(scope, dict) else None


def _is_set(state: dict[str, Any] | None, key: str) -> bool:
    event = (state or {}).get(key)
    return bool(event is not None and event.is_set())


def server_stopping(ctx: Context) -> bool:
    """Whether the server serving this call stops (:data:`bot.mcp_server.http.STOPPING`, in the request's scope:
    SIGTERM or Ctrl-C of ``mcp --http``, the playground's stop); never over stdio (its process handles no signal)."""
    return _is_set(_http_state(ctx), STOPPING)


def client_end(ctx: Context) -> ClientEnd | None:
    """How the client ended this call (:data:`ClientEnd`), or None: it did not (this process stops, a closed stdio
    transport, or still waiting). The SDK signals a notification on the request's dispatch context, which its
    public ``Context`` does not expose yet: read from the session's request channel; a closed stream from the
    request's scope (:class:`bot.mcp_server.http.Disconnects`). None when neither can be read."""
    state = _http_state(ctx)
    if _is_set(state, STOPPING):
        return None
    try:
        session = ctx.request_context.session
    except ValueError:  # outside a request
        return None
    event = getattr(getattr(session, "_request_outbound", None), "cancel_requested", None)
    if event is not None and event.is_set():
        return "cancelled"
    return "gone" if _is_set(state, CLIENT_GONE) else None


def over_stdio(ctx: Context) -> bool:
    """Whether this call came over stdio (no HTTP request: one client, the process's own): its handler is cut short
    only when that transport closes (its client went away) or the process is interrupted with it."""
    try:
        request = ctx.request_context.request
    except ValueError:  # outside a request
        return False
    return not isinstance(getattr(request, "scope", None), dict)


def cancelled_by_client(ctx: Context) -> bool:
    """Whether the client ended this call, one way or the other (:func:`client_end`)."""
    return client_end(ctx) is not None


def timed_out(reason: str) -> bool:
    """Whether a cancellation's ``reason`` says the client's own request timeout fired (the SDKs' wording, or
    MCP's request-timeout error code -32001)."""
    said = reason.lower()
    return "timed out" in said or "timeout" in said or "-32001" in said


async def withdrawn_by_client(ctx: Context, reasons: CancelReasons, *, keyed: bool, cut_short: bool = False) -> bool:
    """Whether the client's end of this call (:func:`cancelled_by_client`) withdraws its question. A call without a
    ``request_key`` (``keyed`` False): always, since nobody could collect its answer. One with a key: only when the
    client said it cancelled (a notification whose reason is not its own request timeout: then it stopped waiting,
    and the question stays for the same ``request_key``); a stream closed with no notification (the newer HTTP
    wire, where a cancel, a timeout and a dead client look alike) keeps it for the key too, and so does a stdio
    transport that closed (``cut_short``: the call's handler was cancelled; over stdio, its client went away).
    Waits up to :data:`REASON_WAIT` seconds for the reason; call it shielded when the call's scope is cancelled."""
    end = client_end(ctx)
    if end is None and cut_short and over_stdio(ctx):
        end = "gone"
    if end is None:
        return False
    if not keyed:
        return True
    if end == "gone":
        return False
    reason = await reasons.reason(ctx)  # None: none came in time (the notification's own, a reason not read)
    return reason is None or not timed_out(reason)
