"""The playground's browser UI: a small aiohttp server over a :class:`Workspace`, serving ``static/``.

``PlaygroundUI(workspace, info)``; ``url = await ui.start(host="127.0.0.1", port=0)``; ``await ui.stop()``.
People act through the Workspace, so every click or message becomes a real signed request to the app,
exactly as Slack sends it. Everything is served from the package (no external assets); the page's
Content-Security-Policy allows only this origin.

Routes (JSON in and out; POST bodies must be ``application/json`` from this origin)::

    GET  /                      the page (static/index.html); /static/<file> its scripts and styles
    GET  /api/state             Snapshot (bot.playground.ui_snapshot)
    GET  /api/events            text/event-stream: first {"type": "snapshot", "state": Snapshot}, then the
                                events of bot.playground.ui_events (one JSON object per ``data:`` line)
    POST /api/say               {"user", "channel", "text", "thread_ts"?} -> {"ok", "message", "acks": [LogEntry]}
    POST /api/click             {"user", "channel", "ts", "label", "ephemeral"?: bool} -> {"ok", "ack", "values"}
    POST /api/toggle            same with the checkbox "label"                          -> {"ok", "ack", "values"}
    POST /api/select            same with "labels": [str] (static/multi select, radio, overflow)
    POST /api/submit_view       {"user", "view_id", "values": {block_id: {action_id: text | label | [labels]}}}
                                -> {"ok", "ack", "errors": {block_id: message}}
    POST /api/close_view        {"user", "view_id"} -> {"ok", "ack": LogEntry | null}
    POST /api/open_home         {"user"} -> {"ok", "ack"}: the person opens the app's Home tab (app_home_opened)
    POST /api/home_click        {"user", "label", "block_id"?} -> {"ok", "ack", "values"}: a button on their Home
                                tab (the first so labelled, or the first in a block whose id contains ``block_id``);
                                the view's state as ticked and chosen there goes with it (``view.state.values``)
    POST /api/home_toggle       same with the checkbox "label" -> {"ok", "ack", "values"}: a tick (or untick) there
    POST /api/home_select       same with "labels": [str] (static/multi select, radio, overflow) -> {"ok", "ack",
                                "values"}; ``values``: the Home view's state after it (bot.fakeslack.home_tab)
    POST /api/open_assistant    {"user", "context_channel"?} -> {"ok", "channel", "thread_ts", "ack": LogEntry | null}:
                                the person opens a new thread in the app's assistant pane while viewing
                                ``context_channel`` (assistant_thread_started; see bot.fakeslack.assistant_pane)
    POST /api/assistant_context {"user", "thread_ts", "channel"} -> {"ok", "ack": LogEntry | null}: the person
                                views ``channel`` with the pane open (assistant_thread_context_changed)
    POST /api/stop_session      {"user", "channel", "thread_ts"} -> {"ok", "ack": LogEntry | null}: the person clicks
                                Slack's Stop on the thread's processing agent session (agent_session_stopped; see
                                bot.fakeslack.webapi.agent_sessions); 400 when the thread has no processing session
    POST /api/messages_tab      {"user"} -> {"ok", "ack"}: the person opens the app's Messages tab (app_home_opened,
                                tab "messages")
    POST /api/app_context       {"user", "channel"?} -> {"ok", "ack": LogEntry | null}: the person looks at
                                ``channel`` (none: no channel) with the app open (app_context_changed)
    POST /api/timing            {"ask_ttl_seconds"?, "remind_after"?, "remind_max"?, "escalate_after"?,
                                 "escalate_to"?, "on_timeout"?} -> {"ok", "timing"}: short deadlines and reminder
                                times for trying a day-long flow in seconds (seconds; 0 or null turns one off)

Failures answer ``{"ok": false, "error": "..."}``: 400 for a request the workspace cannot do (unknown
button, Slack's client would refuse the submission), 502 when the app does not answer.

Every route, pages included, first refuses a request whose ``Host`` is not this loopback server
(``127.0.0.1``, ``localhost`` or ``[::1]``, with the UI's port or none): 421 Misdirected Request, so a page
that rebinds its own name to 127.0.0.1 (DNS rebinding) can neither read the workspace nor post as anyone
(see :mod:`bot.playground.host_check`).

``Snapshot``: see :mod:`bot.playground.ui_snapshot`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import hdrs, web
from aiohttp.typedefs import Middleware

from bot.fakeslack.assistant_pane import change_context, open_pane
from bot.fakeslack.home_tab import choose_home, click_home, home_values, open_home, tick_home
from bot.fakeslack.sender import Ack
from bot.fakeslack.state import JSON, PlaygroundError, dm_channel_id
from bot.fakeslack.workspace import Workspace
from bot.playground.host_check import is_loopback_host
from bot.playground.timing import Timing
from bot.playground.ui_events import EventHub
from bot.playground.ui_snapshot import snapshot

STATIC_DIR = Path(__file__).parent / "static"
HEARTBEAT_SECONDS = 15.0
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
        "connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True)
class PlaygroundInfo:
    """What the header shows: the model (``demo`` = offline DemoModel) and the Redis in use."""

    model: str = "demo"
    model_label: str = "demo model (offline)"
    redis: str = "memory"
    redis_label: str = "in-process Redis"
    answerers: str = "requester"


class BadRequest(Exception):
    """The page sent something this server cannot act on (answered 400)."""


class PlaygroundUI:
    """The UI server. See the module docstring for its routes."""

    def __init__(
        self, workspace: Workspace, info: PlaygroundInfo | None = None, *, timing: Timing | None = None
    ) -> None:
        self.workspace = workspace
        self.info = info or PlaygroundInfo()
        self.timing = timing  # the bot's deadlines and reminder times, changeable from the developer panel
        self.hub = EventHub(workspace)
        self._runner: web.AppRunner | None = None
        self._url = ""
        self._port: int | None = None  # known once listening; until then any port (the names still checked)

    # -- lifecycle --------------------------------------------------------------------------------

    def make_app(self) -> web.Application:
        app = web.Application(middlewares=[_loopback_only(lambda: self._port), _guard])
        app.router.add_get("/", self._index)
        app.router.add_static("/static/", STATIC_DIR, append_version=False)
        app.router.add_get("/api/state", self._state)
        app.router.add_get("/api/events", self._events)
        for name, handler in (
            ("say", self._say),
            ("click", self._click),
            ("toggle", self._toggle),
            ("select", self._select),
            ("submit_view", self._submit_view),
            ("close_view", self._close_view),
            ("open_home", self._open_home),
            ("home_click", self._home_click),
            ("home_toggle", self._home_toggle),
            ("home_select", self._home_select),
            ("open_assistant", self._open_assistant),
            ("assistant_context", self._assistant_context),
            ("stop_session", self._stop_session),
            ("messages_tab", self._messages_tab),
            ("app_context", self._app_context),
            ("timing", self._timing),
        ):
            app.router.add_post(f"/api/{name}", _json_endpoint(handler))
        app.on_shutdown.append(self._on_shutdown)
        return app

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Serve on ``host:port`` (0 = a free port); returns the page's URL."""
        self.hub.start()
        self._runner = web.AppRunner(self.make_app(), access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        await web.TCPSite(self._runner, host, port).start()
        bound_host, bound_port = self._runner.addresses[0][:2]
        self._port = int(bound_port)
        self._url = f"http://{display_host(bound_host)}:{bound_port}/"
        return self._url

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        await self.hub.stop()

    @property
    def url(self) -> str:
        return self._url

    async def _on_shutdown(self, _app: web.Application) -> None:
        self.hub.close_clients()

    # -- reading ----------------------------------------------------------------------------------

    def snapshot(self) -> JSON:
        """Everything a freshly opened page needs (see the module docstring)."""
        return snapshot(
            self.workspace,
            info=asdict(self.info),
            timing=self.timing.get() if self.timing is not None else None,
            log=list(self.hub.log),
        )

    async def _index(self, _request: web.Request) -> web.StreamResponse:
        return web.FileResponse(STATIC_DIR / "index.html")

    async def _state(self, _request: web.Request) -> web.StreamResponse:
        return web.json_response(self.snapshot(), dumps=_dumps)

    async def _events(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store", "X-Accel-Buffering": "no"}
        )
        await response.prepare(request)
        queue = self.hub.client()
        try:
            await _send(response, {"type": "snapshot", "state": self.snapshot()})
            while True:
                try:
                    event = await asyncio.wait_for(queue.get(), HEARTBEAT_SECONDS)
                except TimeoutError:
                    await response.write(b": keep-alive\n\n")
                    continue
                if event is None:
                    break
                await _send(response, event)
        except ConnectionError:
            pass  # the page went away
        finally:
            self.hub.drop_client(queue)
        return response

    # -- acting -----------------------------------------------------------------------------------

    async def _say(self, body: JSON) -> JSON:
        user, channel = self._user(body), _str(body, "channel")
        text = _str(body, "text")
        if not text.strip():
            raise BadRequest("write something first")
        thread_ts = _str(body, "thread_ts", required=False) or None
        delivery = await self.workspace.say(user, channel, text, thread_ts=thread_ts)
        entries = self.hub.add_acks(delivery.acks)
        return {"ok": all(e["ok"] for e in entries), "message": delivery.message, "acks": entries}

    async def _click(self, body: JSON) -> JSON:
        user, message = self._user(body), self._message(body)
        ack = await self.workspace.click(message, _str(body, "label"), user=user)
        return self._interaction_result(ack, message, user)

    async def _toggle(self, body: JSON) -> JSON:
        user, message = self._user(body), self._message(body)
        ack = await self.workspace.toggle(message, _str(body, "label"), user=user)
        return self._interaction_result(ack, message, user)

    async def _select(self, body: JSON) -> JSON:
        user, message = self._user(body), self._message(body)
        ack = await self.workspace.select(message, _labels(body), user=user)
        return self._interaction_result(ack, message, user)

    async def _submit_view(self, body: JSON) -> JSON:
        user, view_id = self._user(body), _str(body, "view_id")
        values = body.get("values") or {}
        if not isinstance(values, dict) or not all(isinstance(v, dict) for v in values.values()):
            raise BadRequest("values must be {block_id: {action_id: value}}")
        ack = await self.workspace.submit_view({"id": view_id}, values, user=user)
        entry = self.hub.add_acks([ack])[0]
        errors = dict(self.workspace.view_errors.get(view_id) or {})
        self.hub.publish({"type": "view_errors", "user": user, "view_id": view_id, "errors": errors})
        return {"ok": ack.ok, "ack": entry, "errors": errors}

    async def _open_home(self, body: JSON) -> JSON:
        ack = await open_home(self.workspace, self._user(body))
        return {"ok": ack.ok, "ack": self.hub.add_acks([ack])[0]}

    async def _home_click(self, body: JSON) -> JSON:
        user, within = self._user(body), _str(body, "block_id", required=False)
        ack = await click_home(self.workspace, user, _str(body, "label"), within=within)
        return self._home_result(ack, user)

    async def _home_toggle(self, body: JSON) -> JSON:
        user, within = self._user(body), _str(body, "block_id", required=False)
        ack = await tick_home(self.workspace, user, _str(body, "label"), within=within)
        return self._home_result(ack, user)

    async def _home_select(self, body: JSON) -> JSON:
        user, within = self._user(body), _str(body, "block_id", required=False)
        ack = await choose_home(self.workspace, user, _labels(body), within=within)
        return self._home_result(ack, user)

    async def _open_assistant(self, body: JSON) -> JSON:
        user = self._user(body)
        context = _str(body, "context_channel", required=False) or None
        thread_ts, ack = await open_pane(self.workspace, user, context_channel=context)
        entries = self.hub.add_acks([ack] if ack is not None else [])
        channel = dm_channel_id(user)
        return {"ok": True, "channel": channel, "thread_ts": thread_ts, "ack": entries[0] if entries else None}

    async def _assistant_context(self, body: JSON) -> JSON:
        user, thread_ts, channel = self._user(body), _str(body, "thread_ts"), _str(body, "channel")
        ack = await change_context(self.workspace, user, thread_ts, channel)
        entries = self.hub.add_acks([ack] if ack is not None else [])
        return {"ok": True, "ack": entries[0] if entries else None}

    async def _stop_session(self, body: JSON) -> JSON:
        user, channel, thread_ts = self._user(body), _str(body, "channel"), _str(body, "thread_ts")
        ack = await self.workspace.stop_session(user, channel, thread_ts)
        entries = self.hub.add_acks([ack] if ack is not None else [])
        return {"ok": True, "ack": entries[0] if entries else None}

    async def _messages_tab(self, body: JSON) -> JSON:
        ack = await self.workspace.open_messages_tab(self._user(body))
        return {"ok": ack.ok, "ack": self.hub.add_acks([ack])[0]}

    async def _app_context(self, body: JSON) -> JSON:
        user, channel = self._user(body), _str(body, "channel", required=False) or None
        ack = await self.workspace.change_app_context(user, channel)
        entries = self.hub.add_acks([ack] if ack is not None else [])
        return {"ok": True, "ack": entries[0] if entries else None}

    async def _timing(self, body: JSON) -> JSON:
        if self.timing is None:
            raise BadRequest("this playground has no bot to set timings on")
        try:
            timing = self.timing.set(body)
        except ValueError as exc:
            raise BadRequest(str(exc)) from None
        self.hub.publish({"type": "timing", "timing": timing})
        return {"ok": True, "timing": timing}

    async def _close_view(self, body: JSON) -> JSON:
        user, view_id = self._user(body), _str(body, "view_id")
        ack = await self.workspace.close_view({"id": view_id}, user=user)
        entries = self.hub.add_acks([ack] if ack is not None else [])
        return {"ok": True, "ack": entries[0] if entries else None}

    def _interaction_result(self, ack: Ack, message: JSON, user: str) -> JSON:
        entry = self.hub.add_acks([ack])[0]
        key = (message["channel"], message["ts"], user)
        found = self.workspace.state.interactions.get(key)
        values = found.values if found is not None else {}
        self.hub.publish(
            {"type": "values", "channel": message["channel"], "ts": message["ts"], "user": user, "values": values}
        )
        return {"ok": ack.ok, "ack": entry, "values": values}

    def _home_result(self, ack: Ack, user: str) -> JSON:
        entry = self.hub.add_acks([ack])[0]
        values = home_values(self.workspace, user)
        self.hub.publish({"type": "home_values", "user": user, "values": values})
        return {"ok": ack.ok, "ack": entry, "values": values}

    def _user(self, body: JSON) -> str:
        user = _str(body, "user")
        known = self.workspace.state.directory.users.get(user)
        if known is None or known.get("is_bot"):
            raise BadRequest(f"no person {user!r} in the workspace")
        return user

    def _message(self, body: JSON) -> JSON:
        """The Workspace's handle on a message: ``{"channel", "ts"}`` (+ ephemeral recipient)."""
        message: JSON = {"channel": _str(body, "channel"), "ts": _str(body, "ts")}
        if body.get("ephemeral"):
            message.update(is_ephemeral=True, recipient=_str(body, "user"))
        return message


# -- helpers ----------------------------------------------------------------------------------------


def display_host(host: str) -> str:
    """The host to put in a URL someone opens: wildcard binds show as loopback; IPv6 gets brackets."""
    if host in ("0.0.0.0", "::", ""):
        return "127.0.0.1"
    return f"[{host}]" if ":" in host else host


def _str(body: JSON, key: str, *, required: bool = True) -> str:
    value = body.get(key)
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value):
        raise BadRequest(f"{key} must be a non-empty string")
    return value


def _labels(body: JSON) -> list[str]:
    labels = body.get("labels")
    if not isinstance(labels, list) or not labels or not all(isinstance(x, str) for x in labels):
        raise BadRequest("labels must be a non-empty list of option labels")
    return labels


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


async def _send(response: web.StreamResponse, event: JSON) -> None:
    await response.write(f"data: {_dumps(event)}\n\n".encode())


def _json_endpoint(action: Callable[[JSON], Awaitable[JSON]]) -> Handler:
    """Wrap ``action(body) -> result`` as a POST handler with the error answers of the module docstring."""

    async def handler(request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            body = None
        if not isinstance(body, dict):
            return _error(400, "the body must be a JSON object")
        try:
            return web.json_response(await action(body), dumps=_dumps)
        except (BadRequest, PlaygroundError) as exc:
            return _error(400, str(exc))
        except (aiohttp.ClientError, TimeoutError) as exc:
            return _error(502, f"the app did not answer ({type(exc).__name__})")

    return handler


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"ok": False, "error": message}, status=status, dumps=_dumps)


def _loopback_only(port: Callable[[], int | None]) -> Middleware:
    """Refuse (421, security headers on) every request whose ``Host`` is not this loopback server: the
    DNS-rebinding defence of :mod:`bot.playground.host_check`."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if not is_loopback_host(request.headers.get(hdrs.HOST), port=port()):
            message = "this server answers only to 127.0.0.1, localhost or [::1] on its own port"
            return _with_headers(_error(421, message))
        return await handler(request)

    return middleware


@web.middleware
async def _guard(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Security headers on every answer; POSTs only as JSON from this origin (no cross-site driving)."""
    if request.method == "POST":
        origin = request.headers.get("Origin")
        if request.content_type != "application/json":
            return _with_headers(_error(415, "send application/json"))
        if origin is not None and origin != f"{request.scheme}://{request.host}":
            return _with_headers(_error(403, "cross-origin requests are not allowed"))
    return _with_headers(await handler(request))


def _with_headers(response: web.StreamResponse) -> web.StreamResponse:
    if not response.prepared:
        for key, value in SECURITY_HEADERS.items():
            response.headers.setdefault(key, value)
    return response
