"""Socket Mode as Slack does it: the app opens a websocket and receives events and interactions over it.

The handshake (docs.slack.dev apis/events-api/using-socket-mode; what slack_sdk's socket mode clients expect):
``POST /api/apps.connections.open`` with the app-level token (``xapp-...``) answers
``{"ok": true, "url": "ws://127.0.0.1:PORT/socket-mode?ticket=...&app_id=..."}`` (a bot token gets
``not_allowed_token_type``, any other ``invalid_auth``; checked in ``fake_slack``). Each URL's ticket works once.
On connect the server sends ``{"type": "hello", "num_connections", "debug_info", "connection_info"}``, then
envelopes ``{"envelope_id", "type": "events_api" | "interactive", "payload": <what HTTP mode would POST>,
"accepts_response_payload", "retry_attempt", "retry_reason"}``; the app acks each with
``{"envelope_id", "payload"?}`` over the socket (the payload being what HTTP mode answers in its body).

``SocketModeHub(app_token, *, app_id=APP_ID, on_change=None)`` (``FakeSlack.socket_mode``): the server side;
    ``on_change`` gets ``{"type": "socket_connected" | "socket_disconnected", "connections": n}``.
    ``open_connection(base_url) -> dict`` (the ``apps.connections.open`` body); ``handle(request)`` (the
    aiohttp websocket route); ``await wait_connected(timeout=...)``; ``await deliver(type, payload, ...)``
    sends one envelope over the newest connection (waiting for one) and returns the ``Ack``;
    ``await refresh(reason="refresh_requested")`` asks the app to reconnect (``{"type": "disconnect"}``);
    ``await close()`` closes every connection. ``connections`` (open now), ``connects`` (ever accepted).
``SocketSender(hub, *, clock=time.time, timeout=10.0)``: the ``Sender`` interface (``send_event``,
    ``resend``, ``send_interaction``, ``acks``, ``close``) over the socket, so ``Workspace(transport="socket")``
    delivers the same payloads and hands back the same ``Ack``s. An ``Ack`` from the socket has status 200
    and ``json`` = the ack's ``payload`` (``None`` without one; ``body`` its JSON text or ""), its latency in
    ``duration_ms`` and its ``envelope_id``; an envelope not acked within ``timeout`` gives status 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import Callable
from typing import Literal

from aiohttp import WSMsgType, web

from bot.fakeslack.sender import Ack, event_envelope, new_event_id
from bot.fakeslack.state import APP_ID, JSON, Clock, PlaygroundError

SOCKET_PATH = "/socket-mode"
EnvelopeType = Literal["events_api", "interactive"]


class SocketModeHub:
    """The Socket Mode server side of the fake. See the module docstring."""

    def __init__(
        self, app_token: str | None, *, app_id: str = APP_ID, on_change: Callable[[JSON], None] | None = None
    ) -> None:
        self.app_token = app_token
        self.app_id = app_id
        self._on_change = on_change
        self.connections: list[web.WebSocketResponse] = []
        self.connects = 0
        self._tickets: set[str] = set()
        self._pending: dict[str, asyncio.Future[tuple[JSON, float]]] = {}
        self._changed = asyncio.Event()

    def open_connection(self, base_url: str) -> JSON:
        """The ``apps.connections.open`` answer: a single-use websocket URL on ``base_url``'s host."""
        ticket = str(uuid.uuid4())
        self._tickets.add(ticket)
        ws_base = "ws" + base_url.removeprefix("http")
        return {"ok": True, "url": f"{ws_base}{SOCKET_PATH}?ticket={ticket}&app_id={self.app_id}"}

    async def handle(self, request: web.Request) -> web.StreamResponse:
        """The websocket endpoint: ``hello``, then read acks until the app (or :meth:`close`) hangs up."""
        ticket = request.query.get("ticket", "")
        if ticket not in self._tickets:
            return web.json_response({"ok": False, "error": "invalid_ticket"}, status=401)
        self._tickets.discard(ticket)
        ws = web.WebSocketResponse()  # answers the client's pings (slack_sdk pings every ping_interval)
        await ws.prepare(request)
        self.connections.append(ws)
        self.connects += 1
        self._notify("socket_connected")
        try:
            await ws.send_json(
                {
                    "type": "hello",
                    "num_connections": len(self.connections),
                    "debug_info": {
                        "host": "applink-playground",
                        "build_number": 1,
                        "approximate_connection_time": 18060,
                    },
                    "connection_info": {"app_id": self.app_id},
                }
            )
            async for message in ws:
                if message.type == WSMsgType.TEXT:
                    self._on_text(message.data)
        finally:
            with contextlib.suppress(ValueError):
                self.connections.remove(ws)
            self._notify("socket_disconnected")
        return ws

    def _on_text(self, data: str) -> None:
        with contextlib.suppress(json.JSONDecodeError):
            ack = json.loads(data)
            if isinstance(ack, dict):
                future = self._pending.get(str(ack.get("envelope_id")))
                if future is not None and not future.done():
                    future.set_result((ack, time.perf_counter()))

    def _notify(self, kind: str) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()
        if self._on_change is not None:
            self._on_change({"type": kind, "connections": len(self.connections)})

    async def wait_connected(self, *, timeout: float = 10.0) -> web.WebSocketResponse:  # noqa: ASYNC109
        """The newest open connection; waits (event-driven) for the app to connect."""

        async def _wait() -> web.WebSocketResponse:
            while True:
                live = [ws for ws in self.connections if not ws.closed]
                if live:
                    return live[-1]
                await self._changed.wait()

        try:
            return await asyncio.wait_for(_wait(), timeout)
        except TimeoutError:
            raise PlaygroundError(f"no Socket Mode connection after {timeout:g}s") from None

    async def deliver(
        self,
        envelope_type: EnvelopeType,
        payload: JSON,
        *,
        kind: str,
        accepts_response_payload: bool,
        event_id: str | None = None,
        retry_attempt: int = 0,
        retry_reason: str = "",
        timeout: float = 10.0,  # noqa: ASYNC109
    ) -> Ack:
        """Send one envelope and wait for its ack (status 0 when none comes within ``timeout``)."""
        ws = await self.wait_connected(timeout=timeout)
        envelope_id = str(uuid.uuid4())
        envelope = {
            "envelope_id": envelope_id,
            "type": envelope_type,
            "payload": payload,
            "accepts_response_payload": accepts_response_payload,
            "retry_attempt": retry_attempt,
            "retry_reason": retry_reason,
        }
        text = json.dumps(envelope)
        future: asyncio.Future[tuple[JSON, float]] = asyncio.get_running_loop().create_future()
        self._pending[envelope_id] = future
        started = time.perf_counter()
        try:
            await ws.send_str(text)
            ack, at = await asyncio.wait_for(future, timeout)
            status, body = 200, ack.get("payload")
        except TimeoutError:
            status, body, at = 0, None, time.perf_counter()
        finally:
            self._pending.pop(envelope_id, None)
        return Ack(
            kind=kind,
            status=status,
            duration_ms=(at - started) * 1000,
            body="" if body is None else json.dumps(body),
            json=body,
            request_body=text,
            content_type="application/json",
            event_id=event_id,
            retry_num=retry_attempt or None,
            envelope_id=envelope_id,
        )

    async def refresh(self, reason: str = "refresh_requested") -> None:
        """Ask the app to reconnect, as Slack does every few hours: ``{"type": "disconnect", ...}``."""
        for ws in list(self.connections):
            await ws.send_json({"type": "disconnect", "reason": reason, "debug_info": {"host": "applink-playground"}})

    async def close(self) -> None:
        """Close every connection (going away); pending deliveries then time out."""
        for ws in list(self.connections):
            await ws.close(code=1001, message=b"server shutting down")


class SocketSender:
    """Delivers what ``Sender`` posts, over Socket Mode. See the module docstring."""

    def __init__(self, hub: SocketModeHub, *, clock: Clock = time.time, timeout: float = 10.0) -> None:
        self.hub = hub
        self._clock = clock
        self._timeout = timeout
        self.acks: list[Ack] = []

    async def close(self) -> None:
        """Nothing to release (the hub's connections close with the fake)."""

    async def send_event(
        self,
        event: JSON,
        *,
        event_id: str | None = None,
        retry_num: int | None = None,
        retry_reason: str = "http_timeout",
    ) -> Ack:
        """``event`` in an event_callback envelope, as an ``events_api`` envelope."""
        payload = event_envelope(event, event_id=event_id or new_event_id(), event_time=int(self._clock()))
        return await self._deliver(
            "events_api", payload, kind=str(event.get("type")), retry_num=retry_num, retry_reason=retry_reason
        )

    async def resend(self, ack: Ack, *, retry_num: int, retry_reason: str = "http_timeout") -> Ack:
        """Re-send the payload of an earlier envelope as a retry (new envelope_id, same event_id)."""
        earlier = json.loads(ack.request_body)
        return await self._deliver(
            earlier["type"], earlier["payload"], kind=ack.kind, retry_num=retry_num, retry_reason=retry_reason
        )

    async def send_interaction(self, payload: JSON) -> Ack:
        """An interaction payload as an ``interactive`` envelope."""
        return await self._deliver("interactive", payload, kind=str(payload.get("type")))

    async def _deliver(
        self,
        envelope_type: EnvelopeType,
        payload: JSON,
        *,
        kind: str,
        retry_num: int | None = None,
        retry_reason: str = "",
    ) -> Ack:
        ack = await self.hub.deliver(
            envelope_type,
            payload,
            kind=kind,
            # Slack lets the app answer in the ack only where HTTP mode could (view submissions etc.)
            accepts_response_payload=envelope_type == "interactive" and kind in _RESPONSE_PAYLOAD_KINDS,
            event_id=payload.get("event_id") if envelope_type == "events_api" else None,
            retry_attempt=retry_num or 0,
            retry_reason=retry_reason if retry_num else "",
            timeout=self._timeout,
        )
        self.acks.append(ack)
        return ack


_RESPONSE_PAYLOAD_KINDS = frozenset({"view_submission", "block_suggestion", "shortcut", "message_action"})
