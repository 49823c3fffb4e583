"""The Python API tests drive the bot with: a fake Slack workspace plus people acting in it.

```python
async with Workspace(bot_url="http://127.0.0.1:3000/slack/events", signing_secret="s",
                     bot_token="xoxb-test") as ws:
    ws.api_url                                              # AsyncWebClient(base_url=ws.api_url)
    d = await ws.mention("U_ALICE", "C_GENERAL", "hello")   # Delivery: d.message (with ts), d.acks / d.ack
    await ws.dm("U_ALICE", "hi")                            # message.im in D_ALICE
    await ws.reply_in_thread("U_ALICE", "C_GENERAL", d.message["ts"], "blue")
    msg = await ws.wait_for_message(channel="C_GENERAL", thread_ts=d.message["ts"],
                                    predicate=lambda m: "?" in m["text"], timeout=10)
    ack = await ws.click(msg, "Option label", user="U_BOB")   # button (or a select/radio/overflow option)
    await ws.toggle(msg, "Label", user="U_ALICE")              # one checkbox tick/untick = one block_actions
    await ws.select(msg, ["A", "B"], user="U_ALICE")           # static_select / multi_static_select
    view = await ws.wait_for_view(user="U_ALICE")              # modal opened with views.open
    ack = await ws.submit_view(view, {"Your answer": "text"}, user="U_ALICE")  # by label or block_id
    ws.ephemerals(user="U_BOB"); ws.calls("chat.update"); ws.acks; ws.view_errors
```

Names
- ``Workspace(bot_url="", signing_secret="", bot_token="xoxb-playground", *, transport="http",
  app_token=None, clock=time.time, subscriptions=DEFAULT_SUBSCRIPTIONS, directory=None, ack_timeout=10.0,
  agent_view=False)``;
  ``start()``/``stop()`` or ``async with``. ``fake`` (``FakeSlack``), ``sender``, ``state`` (``SlackState``).
- ``transport="http"``: ``sender`` is a ``Sender`` posting signed requests to ``bot_url``.
  ``transport="socket"`` (needs ``app_token``, ``xapp-...``): the app connects over Socket Mode
  (``apps.connections.open`` on ``api_url``) and ``sender`` is a ``SocketSender``: the same calls deliver
  the same payloads as envelopes over the websocket and return the app's acks as ``Ack``s
  (``await ws.fake.socket_mode.wait_connected()`` waits for the app).
- ``subscriptions``: the app's bot events. Default ``app_mention``, ``message.im``, ``message.channels``,
  ``assistant_thread_started``, ``assistant_thread_context_changed``: like Slack, a mention in a channel then sends
  BOTH an ``app_mention`` and a ``message`` event.
- People: ``say(user, channel, text, *, thread_ts=None)`` (the general "user posts" - sends what the
  subscriptions call for), ``mention`` (prefixes ``<@U_BOT>`` when absent), ``dm``, ``reply_in_thread``.
  Each returns a ``Delivery(message, acks)``. ``add_user_message`` only writes history (no event).
- The assistant pane (Slack's AI split view; see ``assistant_pane``): ``open_assistant(user, *,
  context_channel=None) -> thread_ts`` (a thread root by the bot in the person's DM, then
  ``assistant_thread_started``), ``change_assistant_context(user, thread_ts, channel) -> Ack | None``
  (``assistant_thread_context_changed``); the person writes there with ``dm(user, text, thread_ts=thread_ts)``.
- The agent messaging experience (``agent_view=True``: the app is declared an agent; see ``agent_sessions``):
  ``session(channel, thread_ts)``, ``stop_session(user, channel, thread_ts)`` (``agent_session_stopped``),
  ``open_messages_tab(user)`` (``app_home_opened`` tab ``messages``), ``change_app_context(user, channel)``
  (``app_context_changed``).
- Waiting (event-driven, ``PlaygroundError`` on timeout): ``wait_for_message``, ``wait_for_ephemeral``,
  ``wait_for_view``, ``wait_for_call``.
- Interactions (each mints a 3-second single-use trigger_id and a response_url; returns the ``Ack``):
  ``click``, ``toggle``, ``select``, ``submit_view``, ``close_view``.
- Inspection: ``messages(channel, thread_ts=None)``, ``ephemerals(user=None, channel=None)``,
  ``calls(method=None)``, ``acks``, ``view_errors`` (view_id -> errors of the last ``response_action:
  errors`` ack), ``retry(ack, retry_num)``.

Messages returned to tests are copies of what Slack stores plus a ``"channel"`` key (and, for ephemerals,
``"is_ephemeral": True`` and ``"recipient"``).
"""

from __future__ import annotations

import copy
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Literal

from bot.fakeslack import assistant_pane
from bot.fakeslack.elements import text_blocks
from bot.fakeslack.fake_slack import ApiCall, FakeSlack
from bot.fakeslack.interactions import Interactions
from bot.fakeslack.sender import Ack, Sender
from bot.fakeslack.socket_mode import SocketSender
from bot.fakeslack.state import BOT_USER_ID, JSON, TEAM_ID, Clock, Directory, PlaygroundError, dm_channel_id
from bot.fakeslack.webapi import agent_sessions

DEFAULT_SUBSCRIPTIONS = (
    "app_mention",
    "message.im",
    "message.channels",
    "assistant_thread_started",
    "assistant_thread_context_changed",
)
Predicate = Callable[[JSON], bool]


@dataclass
class Delivery:
    """A user's message as stored, and the app's acks to the events it caused (in sending order)."""

    message: JSON
    acks: list[Ack] = field(default_factory=list)

    @property
    def ack(self) -> Ack | None:
        return self.acks[0] if self.acks else None


class Workspace(Interactions):
    """A fake Slack workspace wired to the app at ``bot_url``. See the module docstring."""

    def __init__(
        self,
        bot_url: str = "",
        signing_secret: str = "",
        bot_token: str = "xoxb-playground",
        *,
        transport: Literal["http", "socket"] = "http",
        app_token: str | None = None,
        clock: Clock = time.time,
        subscriptions: Iterable[str] = DEFAULT_SUBSCRIPTIONS,
        directory: Directory | None = None,
        ack_timeout: float = 10.0,
        agent_view: bool = False,
    ) -> None:
        self.clock = clock
        self.fake = FakeSlack(bot_token, app_token=app_token, clock=clock, directory=directory)
        self.sender: Sender | SocketSender
        if transport == "socket":
            if not app_token:
                raise PlaygroundError("transport='socket' needs an app_token (xapp-...)")
            self.sender = SocketSender(self.fake.socket_mode, clock=clock, timeout=ack_timeout)
        else:
            self.sender = Sender(bot_url, signing_secret, clock=clock, timeout=ack_timeout)
        self.subscriptions = frozenset(subscriptions)
        self.fake.state.agent_app = agent_view
        self.fake.state.stop_subscribed = agent_sessions.STOPPED in self.subscriptions
        self.view_errors: dict[str, JSON] = {}

    async def start(self) -> None:
        await self.fake.start()

    async def stop(self) -> None:
        await self.sender.close()
        await self.fake.stop()

    async def __aenter__(self) -> Workspace:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    @property
    def api_url(self) -> str:
        return self.fake.api_url

    @property
    def acks(self) -> list[Ack]:
        return self.sender.acks

    def calls(self, method: str | None = None) -> list[ApiCall]:
        return self.fake.calls_to(method)

    # -- people post ------------------------------------------------------------------------------

    async def say(self, user: str, channel: str, text: str, *, thread_ts: str | None = None) -> Delivery:
        """``user`` posts ``text`` in ``channel`` (a thread when ``thread_ts``); the app gets the events its
        subscriptions ask for: ``app_mention`` when the text mentions the bot outside DMs, and
        ``message`` (``message.channels`` / ``message.im``)."""
        self._check_user(user)
        channel_id = self.state.resolve_channel(channel)
        if channel_id is None:
            raise PlaygroundError(f"no channel {channel!r}")
        message = self.add_user_message(user, channel_id, text, thread_ts=thread_ts)
        delivery = Delivery(message=self._for_test(channel_id, message))
        channel_type = self.state.directory.channel_type(channel_id)
        base = {
            k: copy.deepcopy(v)
            for k, v in message.items()
            if k in ("user", "type", "ts", "client_msg_id", "text", "team", "blocks", "thread_ts", "parent_user_id")
        }
        base.update(channel=channel_id, event_ts=message["ts"])
        if f"<@{BOT_USER_ID}>" in text and channel_type != "im" and "app_mention" in self.subscriptions:
            event = {**copy.deepcopy(base), "type": "app_mention"}
            event.pop("parent_user_id", None)
            delivery.acks.append(await self.sender.send_event(event))
        subscription = "message.im" if channel_type == "im" else "message.channels"
        if subscription in self.subscriptions:
            delivery.acks.append(await self.sender.send_event({**base, "channel_type": channel_type}))
        return delivery

    async def mention(self, user: str, channel: str, text: str, *, thread_ts: str | None = None) -> Delivery:
        """``user`` mentions the bot in ``channel``: ``<@U_BOT>`` is prefixed unless ``text`` has it."""
        mention = f"<@{BOT_USER_ID}>"
        return await self.say(user, channel, text if mention in text else f"{mention} {text}", thread_ts=thread_ts)

    async def dm(self, user: str, text: str, *, thread_ts: str | None = None) -> Delivery:
        """``user`` writes to the bot in their DM channel ``D_<NAME>``."""
        return await self.say(user, dm_channel_id(user), text, thread_ts=thread_ts)

    async def reply_in_thread(self, user: str, channel: str, thread_ts: str, text: str) -> Delivery:
        """``user`` replies in the thread under ``thread_ts``."""
        return await self.say(user, channel, text, thread_ts=thread_ts)

    def add_user_message(self, user: str, channel: str, text: str, *, thread_ts: str | None = None) -> JSON:
        """Store ``user``'s message in history WITHOUT telling the app (``say`` does both)."""
        message: JSON = {
            "user": user,
            "type": "message",
            "ts": self.state.mint_ts(),
            "client_msg_id": _uuid(),
            "text": text,
            "team": TEAM_ID,
            "blocks": text_blocks(text),
        }
        if thread_ts:
            parent = self.state.message(channel, thread_ts)
            if parent is None:
                raise PlaygroundError(f"no message {thread_ts} in {channel} to reply to")
            message["thread_ts"] = parent.get("thread_ts", thread_ts)
        self.state.conversations[channel].add(message)
        self.state.changed({"type": "message", "channel": channel, "message": copy.deepcopy(message)})
        return message

    # -- the assistant pane ------------------------------------------------------------------------

    async def open_assistant(self, user: str, *, context_channel: str | None = None) -> str:
        """``user`` opens a new thread in the app's assistant pane while viewing ``context_channel``; returns its
        thread_ts (the app gets ``assistant_thread_started`` when subscribed)."""
        thread_ts, _ack = await assistant_pane.open_pane(self, user, context_channel=context_channel)
        return thread_ts

    async def change_assistant_context(self, user: str, thread_ts: str, channel: str) -> Ack | None:
        """``user`` opens ``channel`` while their assistant thread is open: ``assistant_thread_context_changed``
        (None when the app is not subscribed to it)."""
        return await assistant_pane.change_context(self, user, thread_ts, channel)

    # -- the agent messaging experience (agent_view) -----------------------------------------------

    def session(self, channel: str, thread_ts: str) -> JSON | None:
        """The agent session of a thread (``{channel_id, thread_ts, status, title, initiator_user_id, statuses}``),
        or None."""
        return agent_sessions.session_of(self, channel, thread_ts)

    async def stop_session(self, user: str, channel: str, thread_ts: str) -> Ack | None:
        """``user`` clicks Stop on the thread's processing session: ``agent_session_stopped`` (see
        ``agent_sessions.stop_session``)."""
        return await agent_sessions.stop_session(self, user, channel, thread_ts)

    async def open_messages_tab(self, user: str) -> Ack:
        """``user`` opens the app's Messages tab: ``app_home_opened`` with tab ``messages``."""
        return await agent_sessions.open_messages_tab(self, user)

    async def change_app_context(self, user: str, channel: str | None) -> Ack | None:
        """``user`` moves to ``channel`` with the app visible: ``app_context_changed`` (None when unsubscribed)."""
        return await agent_sessions.change_app_context(self, user, channel)

    # -- looking ----------------------------------------------------------------------------------

    def messages(self, channel: str, *, thread_ts: str | None = None) -> list[JSON]:
        """The channel's history (a thread: parent and replies), oldest first."""
        conversation = self.state.conversations[channel]
        found = conversation.replies(thread_ts) if thread_ts else list(conversation.messages.values())
        return [self._for_test(channel, m) for m in found]

    def ephemerals(self, *, user: str | None = None, channel: str | None = None) -> list[JSON]:
        """Ephemeral messages, oldest first, optionally only those shown to ``user`` / in ``channel``."""
        found = []
        for conversation in self.state.conversations.values():
            for eph in conversation.ephemerals:
                if (user is None or eph.user == user) and (channel is None or eph.channel == channel):
                    found.append(
                        {
                            **copy.deepcopy(eph.message),
                            "channel": eph.channel,
                            "is_ephemeral": True,
                            "recipient": eph.user,
                        }
                    )
        return found

    async def wait_for_message(
        self,
        *,
        channel: str | None = None,
        thread_ts: str | None = None,
        predicate: Predicate | None = None,
        from_bot: bool = True,
        timeout: float = 10.0,  # noqa: ASYNC109 - part of the test API
    ) -> JSON:
        """The newest message (by default: posted by the bot) matching the filters, as it is now
        (updates included); waits for one to appear."""

        def probe() -> JSON | None:
            for cid, conversation in self.state.conversations.items():
                if channel is not None and cid != channel:
                    continue
                for message in reversed(list(conversation.messages.values())):
                    if from_bot and message.get("user") != BOT_USER_ID:
                        continue
                    if thread_ts is not None and (message.get("thread_ts") != thread_ts or message["ts"] == thread_ts):
                        continue
                    candidate = self._for_test(cid, message)
                    if predicate is None or predicate(candidate):
                        return candidate
            return None

        return await self.fake.wait_until(probe, timeout=timeout, what=f"a message in {channel or 'any channel'}")

    async def wait_for_ephemeral(
        self,
        *,
        user: str,
        predicate: Predicate | None = None,
        timeout: float = 10.0,  # noqa: ASYNC109 - part of the test API
    ) -> JSON:
        """The newest ephemeral shown to ``user`` matching ``predicate``."""

        def probe() -> JSON | None:
            for message in reversed(self.ephemerals(user=user)):
                if predicate is None or predicate(message):
                    return message
            return None

        return await self.fake.wait_until(probe, timeout=timeout, what=f"an ephemeral for {user}")

    async def wait_for_view(
        self,
        *,
        user: str,
        predicate: Predicate | None = None,
        timeout: float = 10.0,  # noqa: ASYNC109 - part of the test API
    ) -> JSON:
        """The modal ``user`` currently sees (top of their stack), once one matching ``predicate`` is open."""

        def probe() -> JSON | None:
            view = self.state.top_view(user)
            if view is None or (predicate is not None and not predicate(view.data)):
                return None
            return copy.deepcopy(view.data)

        return await self.fake.wait_until(probe, timeout=timeout, what=f"a modal for {user}")

    async def wait_for_call(
        self,
        method: str,
        *,
        predicate: Callable[[ApiCall], bool] | None = None,
        timeout: float = 10.0,  # noqa: ASYNC109 - part of the test API
    ) -> ApiCall:
        """The first Web API call of ``method`` matching ``predicate``."""

        def probe() -> ApiCall | None:
            return next((c for c in self.calls(method) if predicate is None or predicate(c)), None)

        return await self.fake.wait_until(probe, timeout=timeout, what=f"a {method} call")

    # -- misc -------------------------------------------------------------------------------------

    async def retry(self, ack: Ack, retry_num: int = 1, *, reason: str = "http_timeout") -> Ack:
        """Re-send the request behind ``ack`` as Slack's retry number ``retry_num``."""
        return await self.sender.resend(ack, retry_num=retry_num, retry_reason=reason)

    def _for_test(self, channel: str, message: JSON) -> JSON:
        return {**copy.deepcopy(message), "channel": channel}


def _uuid() -> str:
    return str(uuid.uuid4())
