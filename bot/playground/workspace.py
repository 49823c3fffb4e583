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
  app_token=None, clock=time.time, subscriptions=DEFAULT_SUBSCRIPTIONS, directory=None, ack_timeout=10.0)``;
  ``start()``/``stop()`` or ``async with``. ``fake`` (``FakeSlack``), ``sender``, ``state`` (``SlackState``).
- ``transport="http"``: ``sender`` is a ``Sender`` posting signed requests to ``bot_url``.
  ``transport="socket"`` (needs ``app_token``, ``xapp-...``): the app connects over Socket Mode
  (``apps.connections.open`` on ``api_url``) and ``sender`` is a ``SocketSender``: the same calls deliver
  the same payloads as envelopes over the websocket and return the app's acks as ``Ack``s
  (``await ws.fake.socket_mode.wait_connected()`` waits for the app).
- ``subscriptions``: the app's bot events. Default ``app_mention``, ``message.im``, ``message.channels``:
  like Slack, a mention in a channel then sends BOTH an ``app_mention`` and a ``message`` event.
- People: ``say(user, channel, text, *, thread_ts=None)`` (the general "user posts" - sends what the
  subscriptions call for), ``mention`` (prefixes ``<@U_BOT>`` when absent), ``dm``, ``reply_in_thread``.
  Each returns a ``Delivery(message, acks)``. ``add_user_message`` only writes history (no event).
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
import re
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal

from bot.playground import blockkit
from bot.playground.fake_slack import ApiCall, FakeSlack
from bot.playground.sender import Ack, Sender, block_actions_payload, view_submission_payload
from bot.playground.socket_mode import SocketSender
from bot.playground.state import (
    APP_ID,
    BOT_USER_ID,
    JSON,
    TEAM_ID,
    Clock,
    Directory,
    PlaygroundError,
    SlackState,
    dm_channel_id,
    initial_state,
    iter_elements,
    make_view,
    random_id,
)

DEFAULT_SUBSCRIPTIONS = ("app_mention", "message.im", "message.channels")
Predicate = Callable[[JSON], bool]


@dataclass
class Delivery:
    """A user's message as stored, and the app's acks to the events it caused (in sending order)."""

    message: JSON
    acks: list[Ack] = field(default_factory=list)

    @property
    def ack(self) -> Ack | None:
        return self.acks[0] if self.acks else None


class Workspace:
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
    def state(self) -> SlackState:
        return self.fake.state

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
            "blocks": [
                {
                    "type": "rich_text",
                    "block_id": random_id("", 5),
                    "elements": [{"type": "rich_text_section", "elements": _rich_text(text)}],
                }
            ],
        }
        if thread_ts:
            parent = self.state.message(channel, thread_ts)
            if parent is None:
                raise PlaygroundError(f"no message {thread_ts} in {channel} to reply to")
            message["thread_ts"] = parent.get("thread_ts", thread_ts)
        self.state.conversations[channel].add(message)
        self.state.changed({"type": "message", "channel": channel, "message": copy.deepcopy(message)})
        return message

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

    # -- interactions with messages ---------------------------------------------------------------

    async def click(self, message: JSON, label: str, *, user: str, as_seen: bool = False) -> Ack:
        """Click the button whose visible text is ``label``; failing that, pick the option ``label`` of a
        select / radio group / overflow menu (checkbox options are toggled).

        ``as_seen=True`` clicks ``message`` as given, like a client still showing that copy after the
        message was updated (two people clicking at once, a double click): Slack delivers such clicks.
        """
        channel, current, is_ephemeral = self._current(message)
        if as_seen:
            current = {k: v for k, v in message.items() if k not in ("channel", "is_ephemeral", "recipient")}
        for block, element in iter_elements(current.get("blocks", [])):
            if element.get("type") == "button" and _text(element.get("text")) == label:
                action = {
                    "type": "button",
                    "action_id": element.get("action_id"),
                    "block_id": block.get("block_id"),
                    "text": element.get("text"),
                }
                for key in ("value", "style", "url"):
                    if key in element:
                        action[key] = element[key]
                return await self._send_block_action(channel, current, is_ephemeral, action, user=user)
        for _block, element in iter_elements(current.get("blocks", [])):
            if any(_text(o.get("text")) == label for o in _options(element)):
                if element.get("type") == "checkboxes":
                    return await self.toggle(message, label, user=user)
                return await self.select(message, [label], user=user)
        raise PlaygroundError(f"no button or option {label!r}; the message offers {_labels(current)}")

    async def toggle(self, message: JSON, label: str, *, user: str) -> Ack:
        """Tick (or untick) the checkbox ``label``: one block_actions with the group's new selection."""
        channel, current, is_ephemeral = self._current(message)
        for block, element in iter_elements(current.get("blocks", [])):
            if element.get("type") != "checkboxes":
                continue
            option = next((o for o in element.get("options", []) if _text(o.get("text")) == label), None)
            if option is None:
                continue
            values = self._values(channel, current, user)
            entry = values[str(block.get("block_id"))][str(element.get("action_id"))]
            chosen = {blockkit.option_key(o) for o in entry["selected_options"]}
            chosen ^= {blockkit.option_key(option)}
            entry["selected_options"] = [
                copy.deepcopy(o) for o in element["options"] if blockkit.option_key(o) in chosen
            ]
            action = {
                "type": "checkboxes",
                "action_id": element.get("action_id"),
                "block_id": block.get("block_id"),
                "selected_options": copy.deepcopy(entry["selected_options"]),
            }
            return await self._send_block_action(channel, current, is_ephemeral, action, user=user)
        raise PlaygroundError(f"no checkbox {label!r}; the message offers {_labels(current)}")

    async def select(self, message: JSON, labels: str | list[str], *, user: str) -> Ack:
        """Choose ``labels`` in the static_select / multi_static_select / radio group / overflow that has them
        (a single-choice element takes exactly one label)."""
        wanted = [labels] if isinstance(labels, str) else list(labels)
        channel, current, is_ephemeral = self._current(message)
        for block, element in iter_elements(current.get("blocks", [])):
            kind = element.get("type")
            options = _options(element)
            picked = [next((o for o in options if _text(o.get("text")) == w), None) for w in wanted]
            if kind not in ("static_select", "multi_static_select", "radio_buttons", "overflow"):
                continue
            if not wanted or any(p is None for p in picked) or (kind != "multi_static_select" and len(picked) != 1):
                continue
            action: JSON = {"type": kind, "action_id": element.get("action_id"), "block_id": block.get("block_id")}
            if kind == "multi_static_select":
                action["selected_options"] = copy.deepcopy(picked)
            else:
                action["selected_option"] = copy.deepcopy(picked[0])
            if "placeholder" in element:
                action["placeholder"] = element["placeholder"]
            if kind != "overflow":
                entry = self._values(channel, current, user)[str(block.get("block_id"))][str(element.get("action_id"))]
                key = "selected_options" if kind == "multi_static_select" else "selected_option"
                entry[key] = copy.deepcopy(action[key])
            return await self._send_block_action(channel, current, is_ephemeral, action, user=user)
        raise PlaygroundError(f"no select offering {wanted}; the message offers {_labels(current)}")

    def _current(self, message: JSON) -> tuple[str, JSON, bool]:
        """The message as stored now: ``(channel, message, is_ephemeral)``."""
        channel = message.get("channel")
        if not channel:
            raise PlaygroundError("pass a message returned by the Workspace (it carries its channel)")
        if message.get("is_ephemeral"):
            for eph in self.state.conversations[channel].ephemerals:
                if eph.message["ts"] == message["ts"] and eph.user == message.get("recipient"):
                    return channel, eph.message, True
            raise PlaygroundError(f"ephemeral {message['ts']} is gone")
        current = self.state.message(channel, message["ts"])
        if current is None:
            raise PlaygroundError(f"message {message['ts']} in {channel} was deleted")
        return channel, current, False

    def _values(self, channel: str, message: JSON, user: str) -> dict[str, dict[str, JSON]]:
        return self.state.interaction_values(channel, message["ts"], user, message.get("blocks", []))

    async def _send_block_action(
        self, channel: str, message: JSON, is_ephemeral: bool, action: JSON, *, user: str
    ) -> Ack:
        self._check_user(user)
        action["action_ts"] = f"{self.clock():.6f}"
        response_url = self.fake.mint_response_url(
            channel=channel,
            user=user,
            message_ts=message["ts"],
            thread_ts=message.get("thread_ts"),
            is_ephemeral=is_ephemeral,
        )
        payload = block_actions_payload(
            directory=self.state.directory,
            user=user,
            channel=channel,
            message=copy.deepcopy(message),
            is_ephemeral=is_ephemeral,
            actions=[action],
            state_values=copy.deepcopy(self._values(channel, message, user)),
            trigger_id=self.state.mint_trigger(user),
            response_url=response_url,
        )
        return await self.sender.send_interaction(payload)

    # -- modals -----------------------------------------------------------------------------------

    async def submit_view(self, view: JSON, values: Mapping[str, Any] | None = None, *, user: str) -> Ack:
        """Submit the open modal ``view`` with ``values`` keyed by input label or block_id:
        ``{"Your answer": "text"}`` or ``{"block_id": {"action_id": "text"}}``. A text input takes a str, a
        single select/radio a label, a multi select/checkboxes a list of labels. Applies the ack as Slack
        does: close (empty ack), ``errors`` (kept in ``view_errors``, modal stays), ``update``, ``push``,
        ``clear``. Raises ``PlaygroundError`` when Slack's client would refuse to submit (required input
        empty, text outside min/max length)."""
        current = self.state.views.get(str(view.get("id")))
        if current is None or current.id not in self.state.user_stack(user):
            raise PlaygroundError(f"view {view.get('id')} is not open for {user}")
        blocks = current.data["blocks"]
        state = initial_state(blocks)
        for key, raw in (values or {}).items():
            self._fill_value(blocks, state, key, raw)
        _check_submittable(blocks, state)
        payload = view_submission_payload(
            directory=self.state.directory,
            user=user,
            view=copy.deepcopy(current.data),
            state_values=state,
            trigger_id=self.state.mint_trigger(user),
        )
        ack = await self.sender.send_interaction(payload)
        if ack.ok:
            self._apply_submission_ack(user, current.id, ack.json if isinstance(ack.json, dict) else {})
        return ack

    async def close_view(self, view: JSON, *, user: str) -> Ack | None:
        """The user closes the modal; the app gets ``view_closed`` only if the view set notify_on_close."""
        current = self.state.views.get(str(view.get("id")))
        if current is None:
            raise PlaygroundError(f"no view {view.get('id')}")
        ack = None
        if current.data.get("notify_on_close"):
            payload = {
                "type": "view_closed",
                "team": {"id": TEAM_ID, "domain": "playground"},
                "user": {"id": user, "name": self.state.directory.user_name(user), "team_id": TEAM_ID},
                "api_app_id": APP_ID,
                "view": copy.deepcopy(current.data),
                "is_cleared": False,
                "is_enterprise_install": False,
                "enterprise": None,
            }
            ack = await self.sender.send_interaction(payload)
        self.state.close_views(user, everything=bool(current.data.get("clear_on_close")), view_id=current.id)
        return ack

    def _fill_value(self, blocks: list[JSON], state: dict[str, dict[str, JSON]], key: str, raw: Any) -> None:
        by_id = {str(b.get("block_id")): b for b in blocks}
        if key in by_id and isinstance(raw, Mapping):
            for action_id, value in raw.items():
                element = _element_of(by_id[key], str(action_id))
                state[key][str(action_id)] = _entry(element, value)
            return
        for block in blocks:
            if block.get("type") == "input" and _text(block.get("label")) == key:
                element = block["element"]
                state.setdefault(str(block["block_id"]), {})[str(element["action_id"])] = _entry(element, raw)
                return
        labels = [_text(b.get("label")) for b in blocks if b.get("type") == "input"]
        raise PlaygroundError(f"no input {key!r} in the view; its inputs are {labels}")

    def _apply_submission_ack(self, user: str, view_id: str, body: JSON) -> None:
        action = body.get("response_action")
        if action == "errors":
            self.view_errors[view_id] = dict(body.get("errors") or {})
            return
        self.view_errors.pop(view_id, None)
        if action == "update" and isinstance(body.get("view"), dict):
            if not blockkit.validate_view(body["view"]):
                self.fake.api.replace_view(view_id, body["view"])
        elif action == "push" and isinstance(body.get("view"), dict):
            if not blockkit.validate_view(body["view"]):
                stack = self.state.user_stack(user)
                pushed = make_view(body["view"], user=user, root_view_id=stack[0], previous_view_id=stack[-1])
                self.state.views[pushed.id] = pushed
                stack.append(pushed.id)
                self.state.changed({"type": "view_pushed", "user": user, "view": copy.deepcopy(pushed.data)})
        elif action == "clear":
            self.state.close_views(user, everything=True)
        else:
            self.state.close_views(user, view_id=view_id)

    # -- misc -------------------------------------------------------------------------------------

    async def retry(self, ack: Ack, retry_num: int = 1, *, reason: str = "http_timeout") -> Ack:
        """Re-send the request behind ``ack`` as Slack's retry number ``retry_num``."""
        return await self.sender.resend(ack, retry_num=retry_num, retry_reason=reason)

    def _check_user(self, user: str) -> None:
        if user not in self.state.directory.users or user == BOT_USER_ID:
            raise PlaygroundError(f"no person {user!r} in the workspace")

    def _for_test(self, channel: str, message: JSON) -> JSON:
        return {**copy.deepcopy(message), "channel": channel}


def _uuid() -> str:
    return str(uuid.uuid4())


def _rich_text(text: str) -> list[JSON]:
    """Rich-text elements of a typed message: ``<@U123>`` becomes a ``user`` element, as Slack does."""
    elements: list[JSON] = []
    for index, part in enumerate(re.split(r"<@([A-Z0-9_]+)>", text)):
        if index % 2:
            elements.append({"type": "user", "user_id": part})
        elif part:
            elements.append({"type": "text", "text": part})
    return elements


def _text(obj: Any) -> str | None:
    return str(obj.get("text")) if isinstance(obj, dict) and "text" in obj else None


def _options(element: JSON) -> list[JSON]:
    options = list(element.get("options", []))
    for group in element.get("option_groups", []):
        options.extend(group.get("options", []))
    return [o for o in options if isinstance(o, dict)]


def _labels(message: JSON) -> list[str]:
    found: list[str] = []
    for _block, element in iter_elements(message.get("blocks", [])):
        if element.get("type") == "button":
            found.append(str(_text(element.get("text"))))
        found.extend(str(_text(o.get("text"))) for o in _options(element))
    return found


def _element_of(block: JSON, action_id: str) -> JSON:
    for _block, element in iter_elements([block]):
        if element.get("action_id") == action_id:
            return element
    raise PlaygroundError(f"no element {action_id!r} in block {block.get('block_id')!r}")


def _entry(element: JSON, raw: Any) -> JSON:
    """A ``state.values`` entry for ``element`` from a test value (text, label or labels)."""
    kind = element.get("type")
    entry: JSON = {"type": kind}
    if kind in ("checkboxes", "multi_static_select", "static_select", "radio_buttons"):
        labels = [raw] if isinstance(raw, str) else list(raw or [])
        options = _options(element)
        picked = []
        for label in labels:
            option = next((o for o in options if _text(o.get("text")) == label), None)
            if option is None:
                raise PlaygroundError(f"no option {label!r}; offered: {[_text(o.get('text')) for o in options]}")
            picked.append(copy.deepcopy(option))
        if kind in ("checkboxes", "multi_static_select"):
            entry["selected_options"] = picked
        else:
            entry["selected_option"] = picked[0] if picked else None
    elif kind == "users_select":
        entry["selected_user"] = raw
    elif kind == "multi_users_select":
        entry["selected_users"] = list(raw)
    elif kind == "datepicker":
        entry["selected_date"] = raw
    else:
        entry["value"] = raw
    return entry


def _check_submittable(blocks: list[JSON], state: dict[str, dict[str, JSON]]) -> None:
    """Refuse what Slack's client refuses: an empty required input, text outside min/max length."""
    for block in blocks:
        if block.get("type") != "input":
            continue
        element = block.get("element", {})
        entry = state.get(str(block.get("block_id")), {}).get(str(element.get("action_id")), {})
        label = _text(block.get("label"))
        filled = [v for k, v in entry.items() if k != "type" and v not in (None, "", [])]
        if not filled and not block.get("optional"):
            raise PlaygroundError(f"Slack would not submit: required input {label!r} is empty")
        value = entry.get("value")
        if isinstance(value, str) and element.get("type") == "plain_text_input":
            if len(value) > int(element.get("max_length", 3000)):
                raise PlaygroundError(f"Slack would not submit: {label!r} is longer than max_length")
            if value and len(value) < int(element.get("min_length", 0)):
                raise PlaygroundError(f"Slack would not submit: {label!r} is shorter than min_length")
