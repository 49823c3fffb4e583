"""The browser UI's live feed: FakeSlack change events plus a developer log, fanned out to every open page.

``EventHub(workspace, *, log_limit=1000)``; ``start()`` subscribes to ``workspace.fake`` and pumps its
change events; ``await stop()`` ends every client stream. Each page gets ``client() -> asyncio.Queue``
of events (``None`` = the stream is over) and gives it back with ``drop_client(q)``.

Events a page receives (JSON objects; FakeSlack's own change events pass through unchanged)::

    {"type": "message" | "message_changed", "channel": "C_GENERAL", "message": {...}}
    {"type": "message_deleted", "channel": ..., "ts": ...}
    {"type": "ephemeral", "channel": ..., "user": "U_BOB", "message": {...}}
    {"type": "ephemeral_deleted", "channel": ..., "ts": ...}
    {"type": "view_opened" | "view_pushed" | "view_updated", "user": ..., "view": {...}}
    {"type": "view_closed", "user": ..., "view_id": "V..."}
    {"type": "assistant_status", "channel_id", "thread_ts", "status": "..." | "", "loading_messages"?: [str],
     "cleared_by"?: "message"}                         # "" = cleared (by setStatus, or by a bot post)
    {"type": "assistant_prompts", "channel_id", "thread_ts", "title": str | None, "prompts": [{"title", "message"}]}
    {"type": "assistant_title", "channel_id", "thread_ts", "title"}
    {"type": "assistant_thread", "thread": {"user_id", "channel_id", "thread_ts", "context"}}   # pane opened/moved
    {"type": "agent_session", "session": {"channel_id", "thread_ts", "status", "title", "initiator_user_id",
     "statuses"}}                                      # agents.sessions.setStatus / rename
    {"type": "home_published", "user", "view", "values"}   # values: the view's state, what was kept of the last
    {"type": "home_values", "user", "values": {block_id: {action_id: {...}}}}   # a tick or choice on their Home
    {"type": "log", "entry": LogEntry}                 # an API call or a request to the app
    {"type": "values", "channel", "ts", "user", "values": {block_id: {action_id: {...}}}}
    {"type": "view_errors", "user", "view_id", "errors": {block_id: "message"} | {}}

Reactions arrive as ``message_changed`` with the whole message (FakeSlack's reaction events name only
the reaction). ``LogEntry`` (see :func:`api_call_entry` / :func:`ack_entry`)::

    {"seq": 7, "kind": "api" | "event" | "interaction", "name": "chat.postMessage" | "block_actions" | ...,
     "ok": bool, "status": 200, "error": "invalid_blocks" | None, "messages": ["[ERROR] ... [json-pointer:/blocks/0]"],
     "duration_ms": 3.2, "at": 1700000000.0, "request": {...}, "response": {...} | "text"}

Tokens never appear: FakeSlack records parameters with the token redacted, and requests to the app
carry no secret (the signature header is not logged).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import time
from collections import deque
from typing import Any
from urllib.parse import parse_qs

from bot.fakeslack.fake_slack import ApiCall
from bot.fakeslack.sender import Ack
from bot.fakeslack.state import JSON
from bot.fakeslack.workspace import Workspace

JSON_PARAMS = ("blocks", "attachments", "view", "metadata")


def decode_params(params: JSON) -> JSON:
    """API call parameters as sent, with JSON-valued form fields (``blocks``, ``view``...) decoded."""
    decoded = dict(params)
    for key in JSON_PARAMS:
        value = decoded.get(key)
        if isinstance(value, str):
            with contextlib.suppress(json.JSONDecodeError):
                decoded[key] = json.loads(value)
    return decoded


def error_messages(body: Any) -> list[str]:
    """Slack's explanation of an error: ``response_metadata.messages`` (``[ERROR] ... [json-pointer:...]``)."""
    if not isinstance(body, dict):
        return []
    meta = body.get("response_metadata")
    messages = meta.get("messages") if isinstance(meta, dict) else None
    return [str(m) for m in messages] if isinstance(messages, list) else []


def api_call_entry(seq: int, call: ApiCall) -> JSON:
    """A log entry for one Web API call the app made."""
    return {
        "seq": seq,
        "kind": "api",
        "name": call.method,
        "ok": call.error is None,
        "status": call.status,
        "error": call.error,
        "messages": error_messages(call.response),
        "duration_ms": round(call.duration_ms, 2),
        "at": call.at,
        "request": decode_params(call.params),
        "response": call.response,
    }


def request_payload(ack: Ack) -> Any:
    """What was posted to the app: the event envelope, or the interaction's ``payload`` JSON."""
    try:
        if ack.content_type == "application/x-www-form-urlencoded":
            form = parse_qs(ack.request_body)
            return json.loads(form["payload"][0]) if "payload" in form else form
        return json.loads(ack.request_body)
    except (json.JSONDecodeError, KeyError, IndexError):
        return ack.request_body


def ack_entry(seq: int, ack: Ack) -> JSON:
    """A log entry for one request to the app (an event or an interaction) and how it was acked."""
    kind = "interaction" if ack.content_type == "application/x-www-form-urlencoded" else "event"
    error = None
    if not ack.ok:
        error = f"HTTP {ack.status}"
    elif not ack.in_time:
        error = "acked after 3 s (Slack would show an error)"
    response = ack.json if ack.json is not None else ack.body
    return {
        "seq": seq,
        "kind": kind,
        "name": ack.kind,
        "ok": error is None,
        "status": ack.status,
        "error": error,
        "messages": [],
        "duration_ms": round(ack.duration_ms, 2),
        "at": time.time() - ack.duration_ms / 1000,
        "request": request_payload(ack),
        "response": response,
        "retry_num": ack.retry_num,
    }


class EventHub:
    """Fans out FakeSlack's change events and the developer log to page streams. See the module docstring."""

    def __init__(self, workspace: Workspace, *, log_limit: int = 1000) -> None:
        self.workspace = workspace
        self.log: deque[JSON] = deque(maxlen=log_limit)
        self._seq = 0
        self._calls_seen = 0
        self._clients: list[asyncio.Queue[JSON | None]] = []
        self._source: asyncio.Queue[JSON] | None = None
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Subscribe to the fake Slack; call once, inside the running loop."""
        fake = self.workspace.fake
        self._source = fake.subscribe()
        self._calls_seen = len(fake.calls)
        self._task = asyncio.get_running_loop().create_task(self._pump(self._source))

    async def stop(self) -> None:
        """Stop pumping and end every page stream."""
        self.close_clients()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._source is not None:
            self.workspace.fake.unsubscribe(self._source)
            self._source = None

    def close_clients(self) -> None:
        """Tell every page stream to finish (the server is shutting down)."""
        for queue in self._clients:
            queue.put_nowait(None)
        self._clients.clear()

    def client(self) -> asyncio.Queue[JSON | None]:
        queue: asyncio.Queue[JSON | None] = asyncio.Queue()
        self._clients.append(queue)
        return queue

    def drop_client(self, queue: asyncio.Queue[JSON | None]) -> None:
        with contextlib.suppress(ValueError):
            self._clients.remove(queue)

    def publish(self, event: JSON) -> None:
        for queue in self._clients:
            queue.put_nowait(event)

    def add_acks(self, acks: list[Ack]) -> list[JSON]:
        """Log requests the UI made the app handle; returns their entries."""
        return [self._add(ack_entry(self._next_seq(), ack)) for ack in acks]

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def _add(self, entry: JSON) -> JSON:
        self.log.append(entry)
        self.publish({"type": "log", "entry": entry})
        return entry

    async def _pump(self, source: asyncio.Queue[JSON]) -> None:
        while True:
            event = await source.get()
            self._handle(event)

    def _handle(self, event: JSON) -> None:
        kind = event.get("type")
        if kind == "api_call":
            calls = self.workspace.fake.calls
            if self._calls_seen < len(calls):
                call = calls[self._calls_seen]
                self._calls_seen += 1
                self._add(api_call_entry(self._next_seq(), call))
            return
        if kind in ("reaction_added", "reaction_removed"):
            channel, ts = str(event.get("channel")), str(event.get("ts"))
            message = self.workspace.state.message(channel, ts)
            if message is not None:
                self.publish({"type": "message_changed", "channel": channel, "message": copy.deepcopy(message)})
            return
        self.publish(event)
