"""A headless fake of Slack's Web API (and response_url endpoints) on loopback, for tests and the playground.

``FakeSlack(bot_token="xoxb-playground", *, app_token=None, clock=time.time, directory=None, host="127.0.0.1",
port=0)``
    ``await start()`` / ``await stop()`` (or ``async with``). ``api_url`` is ``http://127.0.0.1:PORT/api/``,
    usable as ``AsyncWebClient(token=..., base_url=fake.api_url)``.

Transport, as Slack does it:
- ``POST|GET /api/<method>``: form-encoded, JSON or query arguments (JSON-valued arguments such as
  ``blocks``/``view`` may arrive as strings in forms). Token from ``Authorization: Bearer`` or ``token``.
  Missing token -> ``not_authed``, wrong token -> ``invalid_auth``, unknown method -> ``unknown_method``
  with ``req_method``; all with HTTP 200 (Slack answers errors in the body; observed for unknown_method).
  ``apps.connections.open`` takes only the app-level token (``app_token``, ``xapp-...``); the other methods
  only the bot token; the other kind of token -> ``not_allowed_token_type``.
- ``GET /socket-mode?ticket=...``: Socket Mode's websocket (``socket_mode``, a ``SocketModeHub``).
- ``POST /actions/<id>``: the ``response_url`` of one interaction (JSON body: ``text``, ``blocks``,
  ``replace_original``, ``delete_original``, ``response_type`` ``ephemeral`` (default) | ``in_channel``,
  ``thread_ts``). Valid 30 minutes, 5 uses; answers ``{"ok": true}`` or ``{"ok": false, "error": ...}``.

For tests:
- ``calls``: every Web API call as an ``ApiCall`` (method, params with the token redacted, response body,
  HTTP status, duration_ms, error); ``calls_to(method)`` filters.
- ``subscribe() -> asyncio.Queue[dict]``: change events (``{"type": "message" | "message_changed" |
  "message_deleted" | "ephemeral" | "ephemeral_deleted" | "view_opened" | "view_pushed" | "view_updated" |
  "view_closed" | "reaction_added" | "reaction_removed" | "home_published" | "assistant_status" |
  "assistant_prompts" | "assistant_title" | "assistant_thread" | "agent_session" | "api_call" | "socket_connected" |
  "socket_disconnected", ...}``);
  ``unsubscribe(q)``.
- ``await wait_until(probe, timeout=..., what=...)``: event-driven wait until ``probe()`` returns a truthy
  value, which it returns; raises ``PlaygroundError`` on timeout.
- Fault injection: ``fail_next(method, error, *, status=200, **extra)`` answers the next call of ``method``
  with that error; ``refuse(method, error, *, status=200, **extra)`` answers EVERY call of it so (e.g. a workspace
  without the AI features: ``refuse("assistant.threads.setStatus", "missing_scope")``) until ``allow(method)``;
  ``set_delay(method, seconds)`` delays every call of it. A queued ``fail_next`` goes first.
- ``state`` (``SlackState``) and ``api`` (``WebApi``) for direct inspection.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import secrets
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, TypeVar
from urllib.parse import parse_qsl

from aiohttp import web

from bot.fakeslack.elements import fill_ids
from bot.fakeslack.socket_mode import SOCKET_PATH, SocketModeHub
from bot.fakeslack.state import (
    JSON,
    RESPONSE_URL_MAX_USES,
    RESPONSE_URL_TTL_SECONDS,
    Clock,
    Directory,
    Ephemeral,
    PlaygroundError,
    ResponseUrl,
    SlackState,
)
from bot.fakeslack.webapi.agent_sessions import AgentSessions
from bot.fakeslack.webapi.args import ApiError
from bot.fakeslack.webapi.assistant import Assistant
from bot.fakeslack.webapi.chat import Chat
from bot.fakeslack.webapi.conversations import Conversations
from bot.fakeslack.webapi.core import APP_TOKEN_METHODS, WebApi
from bot.fakeslack.webapi.people import People
from bot.fakeslack.webapi.reactions import Reactions
from bot.fakeslack.webapi.streams import Streams
from bot.fakeslack.webapi.views import Views

T = TypeVar("T")
REDACTED = "[redacted]"


@dataclass
class ApiCall:
    """One Web API call as the fake saw it."""

    method: str
    params: JSON
    response: JSON
    status: int
    duration_ms: float
    at: float
    error: str | None = None


@dataclass
class _Fault:
    error: str
    status: int
    extra: JSON = field(default_factory=dict)


class FakeSlack:
    """The fake Slack Web API server. See the module docstring."""

    def __init__(
        self,
        bot_token: str = "xoxb-playground",
        *,
        app_token: str | None = None,
        clock: Clock = time.time,
        directory: Directory | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.bot_token = bot_token
        self.clock = clock
        self.state = SlackState(clock=clock, directory=directory, on_change=self._on_change)
        self.api = WebApi(self.state)
        families = (Chat, Streams, Views, Reactions, Conversations, People, Assistant, AgentSessions)
        for family in families:
            family(self.api).register()
        self.app_token = app_token
        self.socket_mode = SocketModeHub(app_token, on_change=self.state.changed)
        self.api.methods["apps.connections.open"] = self._apps_connections_open
        self.calls: list[ApiCall] = []
        self._host, self._port = host, port
        self._runner: web.AppRunner | None = None
        self._base_url = ""
        self._subscribers: list[asyncio.Queue[JSON]] = []
        self._tick = asyncio.Event()
        self._faults: dict[str, deque[_Fault]] = {}
        self._refusals: dict[str, _Fault] = {}
        self._delays: dict[str, float] = {}

    # -- lifecycle --------------------------------------------------------------------------------

    async def start(self) -> None:
        """Listen on ``host`` (a free port when ``port`` is 0)."""
        app = web.Application()
        app.router.add_route("*", "/api/{method}", self._handle_api)
        app.router.add_post("/actions/{token}", self._handle_response_url)
        app.router.add_get(SOCKET_PATH, self.socket_mode.handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self._host, self._port)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self._base_url = f"http://{host}:{port}"

    async def stop(self) -> None:
        await self.socket_mode.close()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeSlack:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT`` (no trailing slash)."""
        if not self._base_url:
            raise PlaygroundError("FakeSlack is not started")
        return self._base_url

    @property
    def api_url(self) -> str:
        """The Web API base for slack_sdk clients: ``http://127.0.0.1:PORT/api/``."""
        return f"{self.base_url}/api/"

    # -- test hooks -------------------------------------------------------------------------------

    def calls_to(self, method: str | None = None) -> list[ApiCall]:
        return [c for c in self.calls if method is None or c.method == method]

    def fail_next(self, method: str, error: str, *, status: int = 200, after: int = 0, **extra: Any) -> None:
        """Answer the next call of ``method`` (``after``: once that many more were served as ever) with
        ``{"ok": false, "error": error, **extra}`` and ``status``."""
        queue = self._faults.setdefault(method, deque())
        queue.extend(_Fault("", 200) for _ in range(after))  # served as ever
        queue.append(_Fault(error, status, extra))

    def _fault_for(self, method: str) -> _Fault | None:
        """The fault this call of ``method`` gets (:meth:`fail_next`, :meth:`refuse`), or None: served as ever."""
        faults = self._faults.get(method)
        if faults:
            fault = faults.popleft()
            return fault if fault.error else None
        return self._refusals.get(method)

    def refuse(self, method: str, error: str, *, status: int = 200, **extra: Any) -> None:
        """Answer every call of ``method`` with ``{"ok": false, "error": error, **extra}`` until :meth:`allow`."""
        self._refusals[method] = _Fault(error, status, extra)

    def allow(self, method: str) -> None:
        """Serve ``method`` again after :meth:`refuse` (no-op when it was not refused)."""
        self._refusals.pop(method, None)

    def set_delay(self, method: str, seconds: float) -> None:
        """Delay every call of ``method`` by ``seconds`` (0 removes the delay)."""
        self._delays[method] = seconds

    def subscribe(self) -> asyncio.Queue[JSON]:
        """A queue receiving every change event from now on."""
        queue: asyncio.Queue[JSON] = asyncio.Queue()
        self._subscribers.append(queue)
        return queue

    def unsubscribe(self, queue: asyncio.Queue[JSON]) -> None:
        with contextlib.suppress(ValueError):
            self._subscribers.remove(queue)

    async def wait_until(self, probe: Callable[[], T | None], *, timeout: float, what: str = "condition") -> T:  # noqa: ASYNC109
        """Wait (woken by changes, no polling) until ``probe()`` is truthy; return its value."""

        async def _wait() -> T:
            while True:
                result = probe()
                if result:
                    return result
                await self._tick.wait()  # set (and replaced) by every change

        try:
            return await asyncio.wait_for(_wait(), timeout)
        except TimeoutError:
            raise PlaygroundError(f"timed out after {timeout:g}s waiting for {what}") from None

    def _on_change(self, event: JSON) -> None:
        for queue in self._subscribers:
            queue.put_nowait(copy.deepcopy(event))
        tick, self._tick = self._tick, asyncio.Event()
        tick.set()

    # -- response_url -----------------------------------------------------------------------------

    def mint_response_url(
        self, *, channel: str, user: str, message_ts: str | None, thread_ts: str | None, is_ephemeral: bool
    ) -> str:
        """A response_url for one interaction with a message (``message_ts``) in ``channel``."""
        token = secrets.token_urlsafe(18)
        self.state.response_urls[token] = ResponseUrl(
            token=token,
            channel=channel,
            user=user,
            message_ts=message_ts,
            thread_ts=thread_ts,
            is_ephemeral=is_ephemeral,
            issued_at=self.clock(),
        )
        return f"{self.base_url}/actions/{token}"

    async def _handle_response_url(self, request: web.Request) -> web.Response:
        started = time.perf_counter()
        params = await _read_params(request)
        target = self.state.response_urls.get(request.match_info["token"])
        try:
            body = self._respond(target, params)
        except ApiError as exc:
            body = exc.body()
        self._record("response_url", params, body, 200 if body["ok"] else 404, started)
        return web.json_response(body, status=200 if body["ok"] else 404)

    def _respond(self, target: ResponseUrl | None, params: JSON) -> JSON:
        if target is None:
            raise ApiError("invalid_url")
        if self.clock() - target.issued_at > RESPONSE_URL_TTL_SECONDS or target.uses >= RESPONSE_URL_MAX_USES:
            raise ApiError("expired_url")
        target.uses += 1
        conversation = self.state.conversations[target.channel]
        if _truthy(params.get("delete_original")):
            if target.is_ephemeral:
                conversation.ephemerals[:] = [
                    e
                    for e in conversation.ephemerals
                    if not (e.user == target.user and e.message["ts"] == target.message_ts)
                ]
                self.state.changed({"type": "ephemeral_deleted", "channel": target.channel, "ts": target.message_ts})
            elif target.message_ts in conversation.messages:
                del conversation.messages[target.message_ts]
                self.state.changed({"type": "message_deleted", "channel": target.channel, "ts": target.message_ts})
            return {"ok": True}
        text, blocks = self.api.message_content(params)
        if _truthy(params.get("replace_original")) and target.message_ts:
            if target.is_ephemeral:
                for ephemeral in conversation.ephemerals:
                    if ephemeral.user == target.user and ephemeral.message["ts"] == target.message_ts:
                        ephemeral.message.update(text=text or "", blocks=blocks or [])
                        self.state.changed(
                            {
                                "type": "ephemeral",
                                "channel": target.channel,
                                "user": target.user,
                                "message": copy.deepcopy(ephemeral.message),
                            }
                        )
                return {"ok": True}
            message = self.state.message(target.channel, target.message_ts)
            if message is None:
                raise ApiError("message_not_found")
            message["text"] = text or ""
            message["blocks"] = fill_ids(blocks) if blocks is not None else []
            message["edited"] = {"user": message.get("user"), "ts": self.state.mint_ts()}
            self.state.reset_interactions(target.channel, target.message_ts)
            self.state.changed(
                {"type": "message_changed", "channel": target.channel, "message": copy.deepcopy(message)}
            )
            return {"ok": True}
        thread_ts = params.get("thread_ts") or target.thread_ts
        message = self.api.bot_message(text=text, blocks=blocks, thread_ts=thread_ts)
        if params.get("response_type") == "in_channel":
            conversation.add(message)
            self.state.changed({"type": "message", "channel": target.channel, "message": copy.deepcopy(message)})
            self.state.clear_status(target.channel, message.get("thread_ts"))
        else:
            conversation.ephemerals.append(Ephemeral(target.channel, target.user, message))
            self.state.changed(
                {"type": "ephemeral", "channel": target.channel, "user": target.user, "message": copy.deepcopy(message)}
            )
        return {"ok": True}

    # -- Web API ----------------------------------------------------------------------------------

    async def _handle_api(self, request: web.Request) -> web.Response:
        started = time.perf_counter()
        method = request.match_info["method"]
        params = await _read_params(request)
        param_token = params.pop("token", None)
        token = _bearer(request) or param_token
        if param_token is not None:
            params["token"] = REDACTED
        delay = self._delays.get(method, 0.0)
        expected = self.app_token if method in APP_TOKEN_METHODS else self.bot_token
        # a fault is bound to the call it is meant for as the call comes (a call held up by a delay fails as it was
        # told then, whatever is asked of the calls after it meanwhile)
        fault = self._fault_for(method) if token == expected else None
        if delay:
            await asyncio.sleep(delay)
        status = 200
        if not token:
            body: JSON = {"ok": False, "error": "not_authed"}
        elif token != expected:
            known = token in (self.bot_token, self.app_token)
            body = {"ok": False, "error": "not_allowed_token_type" if known else "invalid_auth"}
        elif fault is not None:
            body, status = {"ok": False, "error": fault.error, **copy.deepcopy(fault.extra)}, fault.status
        elif method not in self.api.methods:
            body = {"ok": False, "error": "unknown_method", "req_method": method}
        else:
            try:
                body = await self.api.methods[method](params)
            except ApiError as exc:
                body = exc.body()
        self._record(method, params, body, status, started)
        headers = {"Retry-After": "1"} if status == 429 else None
        return web.json_response(body, status=status, headers=headers)

    async def _apps_connections_open(self, params: JSON) -> JSON:
        return self.socket_mode.open_connection(self.base_url)

    def _record(self, method: str, params: JSON, body: JSON, status: int, started: float) -> None:
        call = ApiCall(
            method=method,
            params=params,
            response=copy.deepcopy(body),
            status=status,
            duration_ms=(time.perf_counter() - started) * 1000,
            at=self.clock(),
            error=None if body.get("ok") else str(body.get("error")),
        )
        self.calls.append(call)
        self.state.changed(
            {"type": "api_call", "method": method, "ok": bool(body.get("ok")), "error": call.error, "status": status}
        )


def _truthy(value: Any) -> bool:
    return value is True or (isinstance(value, str) and value.lower() in ("true", "1"))


def _bearer(request: web.Request) -> str | None:
    header = request.headers.get("Authorization", "")
    return header[7:].strip() or None if header.lower().startswith("bearer ") else None


async def _read_params(request: web.Request) -> JSON:
    """Query + body arguments; JSON bodies as objects, forms as strings (``payload=`` forms unwrapped)."""
    params: JSON = dict(request.query)
    raw = await request.text()
    if not raw:
        return params
    if request.content_type == "application/json":
        try:
            body = json.loads(raw)
        except json.JSONDecodeError:
            body = None
        if isinstance(body, dict):
            params.update(body)
        return params
    form = dict(parse_qsl(raw, keep_blank_values=True))
    if set(form) == {"payload"}:
        with contextlib.suppress(json.JSONDecodeError):
            payload = json.loads(form["payload"])
            if isinstance(payload, dict):
                return {**params, **payload}
    params.update(form)
    return params
