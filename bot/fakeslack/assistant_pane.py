"""The assistant pane (Slack's AI split view) in the fake workspace: a person opens a new thread in the app's assistant
container, and moves around Slack while it is open (docs.slack.dev reference/events/assistant_thread_started,
reference/events/assistant_thread_context_changed, reference/events/message/assistant_app_thread).

- ``open_pane(ws, user, *, context_channel=None) -> (thread_ts, Ack | None)``: the thread's root message goes into
  the person's DM with the bot (``D_<NAME>``), authored by the bot (subtype ``assistant_app_thread``, with
  ``assistant_app_thread: {title, title_blocks, artifacts}``), then the app gets ``assistant_thread_started`` (when
  subscribed; else the Ack is None)::

      {"type": "assistant_thread_started",
       "assistant_thread": {"user_id": "U_ALICE", "context": {"channel_id": "C_GENERAL", "team_id": "T_PLAYGROUND",
                            "enterprise_id": None},   # {} when the person was viewing no channel
                            "channel_id": "D_ALICE", "thread_ts": "1700000000.000100"},
       "event_ts": "1700000000.000200"}

- ``change_context(ws, user, thread_ts, channel) -> Ack | None``: the person opened ``channel`` while the pane is open:
  ``assistant_thread_context_changed``, the same shape with the new context.

The person writes in the pane with ``ws.dm(user, text, thread_ts=thread_ts)`` (a ``message`` event, channel_type
``im``, in that thread), as Slack sends it. Each pane is recorded in ``state.assistant_threads`` (``{user_id,
channel_id, thread_ts, context}``); change event ``assistant_thread`` ``{"thread": record}`` when one opens or its
context changes.
"""

from __future__ import annotations

import copy
from typing import Protocol

from bot.fakeslack.fake_slack import FakeSlack
from bot.fakeslack.sender import Ack, Sender
from bot.fakeslack.socket_mode import SocketSender
from bot.fakeslack.state import JSON, TEAM_ID, PlaygroundError, SlackState, dm_channel_id
from bot.fakeslack.webapi.assistant import PANE_SUBTYPE

STARTED = "assistant_thread_started"
CONTEXT_CHANGED = "assistant_thread_context_changed"
NEW_THREAD_TITLE = "New chat"


class Workspace(Protocol):
    """What the pane needs of the fake workspace (``bot.fakeslack.workspace.Workspace`` is one, and calls these
    functions): its fake Slack, the sender of events to the app, the events the app subscribes to, and its people."""

    fake: FakeSlack
    sender: Sender | SocketSender
    subscriptions: frozenset[str]

    @property
    def state(self) -> SlackState: ...

    def _check_user(self, user: str) -> None: ...


def pane_context(ws: Workspace, channel: str | None) -> JSON:
    """The ``context`` of the assistant events: the channel the person is viewing (``{}`` for none)."""
    if channel is None:
        return {}
    channel_id = ws.state.resolve_channel(channel)
    if channel_id is None:
        raise PlaygroundError(f"no channel {channel!r}")
    return {"channel_id": channel_id, "team_id": TEAM_ID, "enterprise_id": None}


async def open_pane(ws: Workspace, user: str, *, context_channel: str | None = None) -> tuple[str, Ack | None]:
    """``user`` opens a new assistant thread (see the module docstring); returns its ts and the app's ack."""
    ws._check_user(user)
    context = pane_context(ws, context_channel)
    channel = dm_channel_id(user)
    root = ws.fake.api.bot_message(text=NEW_THREAD_TITLE, blocks=None, thread_ts=None)
    root.update(subtype=PANE_SUBTYPE)
    root[PANE_SUBTYPE] = {"title": NEW_THREAD_TITLE, "title_blocks": [], "artifacts": []}
    record: JSON = {"user_id": user, "channel_id": channel, "thread_ts": root["ts"], "context": context}
    ws.state.assistant_threads.append(record)
    ws.state.changed({"type": "assistant_thread", "thread": copy.deepcopy(record)})  # first: pages know the thread
    ws.state.conversations[channel].add(root)
    ws.state.changed({"type": "message", "channel": channel, "message": copy.deepcopy(root)})
    ack = await _tell(ws, STARTED, record)
    return str(root["ts"]), ack


async def change_context(ws: Workspace, user: str, thread_ts: str, channel: str) -> Ack | None:
    """``user`` opened ``channel`` while their assistant thread ``thread_ts`` is open."""
    record = next((t for t in ws.state.assistant_threads if t["user_id"] == user and t["thread_ts"] == thread_ts), None)
    if record is None:
        raise PlaygroundError(f"{user} has no assistant thread {thread_ts}")
    record["context"] = pane_context(ws, channel)
    ws.state.changed({"type": "assistant_thread", "thread": copy.deepcopy(record)})
    return await _tell(ws, CONTEXT_CHANGED, record)


async def _tell(ws: Workspace, kind: str, record: JSON) -> Ack | None:
    if kind not in ws.subscriptions:
        return None
    event = {"type": kind, "assistant_thread": copy.deepcopy(record), "event_ts": ws.state.mint_ts()}
    return await ws.sender.send_event(event)
