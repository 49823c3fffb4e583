"""Slack's agent sessions in the fake Web API: ``agents.sessions.setStatus`` and ``agents.sessions.rename``
(docs.slack.dev ai/agent-sessions, reference/methods/agents.sessions.setStatus, agents.sessions.rename), and the
Messages tab surface of the agent messaging experience (ai/migrating-to-agent-messaging).

- ``agents.sessions.setStatus``: ``status`` required, one of ``processing``, ``active``, ``suspended``, ``closed``;
  ``channel_id`` (required here: the bot only has thread sessions) and ``thread_ts`` (the thread's root, or a reply
  in it; required for thread-based sessions in channels and DMs); ``title`` (at most 200 characters) and
  ``initiator_user_id`` count only when the call creates the session (Slack: "ignored if the session already
  exists"). Answers ``{"ok": true, "status", "title"}``; while the app does not subscribe to
  ``agent_session_stopped`` the answer also carries ``warning: missing_agent_session_stopped_event_subscription``
  (Slack: the person then sees a non-interactive loading indicator instead of Stop).
- ``agents.sessions.rename``: ``channel_id``, ``thread_ts`` and ``title`` (1 to 200 characters) required; the
  session must exist.

Errors. Slack's pages (as read for this fake) list the arguments but no error table, so the codes below are the
fake's, in Slack's style: ``invalid_arguments`` (missing field, a status outside the four, a title over 200,
``[ERROR] ...`` in ``response_metadata.messages``), ``channel_not_found``, ``thread_not_found`` (``thread_ts`` is no
message of the channel), ``session_not_found`` (rename of a thread without a session), and ``not_an_agent`` for an
app not declared as an agent (Slack: "Only apps declared as agents in the app settings can create sessions"):
``SlackState.agent_app`` False, the default, is such an app (the manifest of an ``assistant_view`` app).

Each session is ``state.sessions[(channel_id, thread_ts)]`` = ``{channel_id, thread_ts, status, title,
initiator_user_id, statuses: [every status set, in order]}``; change event ``agent_session`` ``{"session": ...}``.
Stop (a person clicks the native Stop of a processing session) is the workspace's
:func:`stop_session`: Slack stops the thread's streaming messages and sends ``agent_session_stopped``; the status
does not change by itself (Slack: "Your app is responsible for transitioning the status").
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import TYPE_CHECKING, ClassVar, Protocol

from bot.fakeslack.state import JSON, TEAM_ID, PlaygroundError, SlackState, dm_channel_id
from bot.fakeslack.webapi.args import ApiError, invalid, require
from bot.fakeslack.webapi.core import Family

if TYPE_CHECKING:
    from bot.fakeslack.sender import Ack, Sender
    from bot.fakeslack.socket_mode import SocketSender


class Workspace(Protocol):
    """What a person's session actions need of the fake workspace (``bot.fakeslack.workspace.Workspace`` is one,
    and calls these functions): the sender of events to the app, the events the app subscribes to, its people."""

    sender: Sender | SocketSender
    subscriptions: frozenset[str]

    @property
    def state(self) -> SlackState: ...

    def _check_user(self, user: str) -> None: ...


STATUSES = ("processing", "active", "suspended", "closed")
TITLE_MAX = 200  # Slack: "max 200 characters"
MISSING_STOP_SUBSCRIPTION = "missing_agent_session_stopped_event_subscription"
STOPPED = "agent_session_stopped"
CONTEXT_CHANGED = "app_context_changed"


class AgentSessions(Family):
    """The ``agents.sessions.*`` methods of ``api`` (registered on it by :meth:`register`)."""

    METHODS: ClassVar[Mapping[str, str]] = {
        "agents.sessions.setStatus": "set_status",
        "agents.sessions.rename": "rename",
    }

    async def set_status(self, params: JSON) -> JSON:
        require(params, "status")
        status = str(params["status"])
        if status not in STATUSES:
            problem = f"must be one of {', '.join(STATUSES)} [json-pointer:/status]"
            raise invalid("invalid_arguments", [problem], with_errors=False)
        channel, thread_ts = self._thread(params)
        if not self.state.agent_app:
            raise ApiError("not_an_agent")
        title = _title(params, required=False)
        key = (channel, thread_ts)
        session = self.state.sessions.get(key)
        if session is None:
            session = {
                "channel_id": channel,
                "thread_ts": thread_ts,
                "status": status,
                "title": title or "",
                "initiator_user_id": str(params.get("initiator_user_id") or ""),
                "statuses": [],
            }
            self.state.sessions[key] = session
        session["status"] = status
        session["statuses"].append(status)
        self.state.changed({"type": "agent_session", "session": copy.deepcopy(session)})
        body: JSON = {"ok": True, "status": status, "title": session["title"]}
        if not self.state.stop_subscribed:
            body["warning"] = MISSING_STOP_SUBSCRIPTION
            body["response_metadata"] = {"warnings": [MISSING_STOP_SUBSCRIPTION]}
        return body

    async def rename(self, params: JSON) -> JSON:
        channel, thread_ts = self._thread(params)
        title = _title(params, required=True)
        if not self.state.agent_app:
            raise ApiError("not_an_agent")
        session = self.state.sessions.get((channel, thread_ts))
        if session is None:
            raise ApiError("session_not_found")
        session["title"] = title
        self.state.changed({"type": "agent_session", "session": copy.deepcopy(session)})
        return {"ok": True, "title": title}

    def _thread(self, params: JSON) -> tuple[str, str]:
        """``(channel, thread root ts)`` of ``channel_id`` / ``thread_ts`` (a reply's ts names its thread)."""
        channel = self.api.channel(params, "channel_id")
        if params.get("thread_ts") in (None, ""):
            problem = "missing required field: thread_ts (thread-based sessions need it)"
            raise invalid("invalid_arguments", [problem], with_errors=False)
        message = self.state.message(channel, str(params["thread_ts"]))
        if message is None:
            raise ApiError("thread_not_found")
        return channel, str(message.get("thread_ts", message["ts"]))


def _title(params: JSON, *, required: bool) -> str | None:
    title = params.get("title")
    if title in (None, ""):
        if required:
            raise invalid("invalid_arguments", ["missing required field: title"], with_errors=False)
        return None
    if len(str(title)) > TITLE_MAX:
        problem = f"must be at most {TITLE_MAX} characters [json-pointer:/title]"
        raise invalid("invalid_arguments", [problem], with_errors=False)
    return str(title)


def session_of(ws: Workspace, channel: str, thread_ts: str) -> JSON | None:
    """The session of a thread (a copy), or None."""
    session = ws.state.sessions.get((channel, thread_ts))
    return copy.deepcopy(session) if session is not None else None


async def stop_session(ws: Workspace, user: str, channel: str, thread_ts: str) -> Ack | None:
    """``user`` clicks Stop on the processing session of ``channel``'s thread ``thread_ts``: Slack stops the
    thread's streaming messages (their ts in ``streaming_message_ts``) and sends ``agent_session_stopped`` (None
    when the app is not subscribed: then Slack shows no Stop at all). Raises ``PlaygroundError`` when the thread
    has no processing session (Slack shows Stop only then)."""
    ws._check_user(user)
    session = ws.state.sessions.get((channel, thread_ts))
    if session is None or session["status"] != "processing":
        raise PlaygroundError(f"no processing agent session in {channel} {thread_ts}: Slack shows no Stop")
    if STOPPED not in ws.subscriptions:
        return None
    stopped = []
    for message in ws.state.conversations[channel].replies(thread_ts):
        if message.get("streaming"):
            message["streaming"] = False
            stopped.append(str(message["ts"]))
            ws.state.changed({"type": "message_changed", "channel": channel, "message": copy.deepcopy(message)})
    event: JSON = {
        "type": STOPPED,
        "channel": channel,
        "thread_ts": thread_ts,
        "user": user,
        "streaming_message_ts": stopped,
        "event_ts": ws.state.mint_ts(),
    }
    return await ws.sender.send_event(event)


async def open_messages_tab(ws: Workspace, user: str) -> Ack:
    """``user`` opens the app's Messages tab (its DM with the app): ``app_home_opened`` with tab ``messages``, which
    replaces ``assistant_thread_started`` in the agent messaging experience."""
    ws._check_user(user)
    event: JSON = {"type": "app_home_opened", "user": user, "channel": dm_channel_id(user), "tab": "messages"}
    return await ws.sender.send_event(event)


async def change_app_context(ws: Workspace, user: str, channel: str | None) -> Ack | None:
    """``user``, with the app visible, moves to ``channel`` (None: to no channel): ``app_context_changed`` with
    the channel as its first entity (``context: {}`` for none; Slack: entities "ordered by relevance"), when
    subscribed."""
    ws._check_user(user)
    context: JSON = {}
    if channel is not None:
        channel_id = ws.state.resolve_channel(channel)
        if channel_id is None:
            raise PlaygroundError(f"no channel {channel!r}")
        context = {"entities": [{"type": "slack#/types/channel_id", "value": channel_id, "team_id": TEAM_ID}]}
    if CONTEXT_CHANGED not in ws.subscriptions:
        return None
    event: JSON = {
        "type": CONTEXT_CHANGED,
        "user": user,
        "channel": dm_channel_id(user),
        "context": context,
        "event_ts": ws.state.mint_ts(),
    }
    return await ws.sender.send_event(event)
