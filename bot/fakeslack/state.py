"""The fake workspace's in-memory state: who is in it, what was said, which modals are open.

Shapes follow what Slack's Web API returns (docs.slack.dev reference/objects/message-object,
reference/views/modal-views). Everything is plain ``dict`` so it can be sent as JSON unchanged.

- ``Directory``: team ``T_PLAYGROUND``, the bot (user ``U_BOT``, bot ``B_BOT``, app ``A_PLAYGROUND``), users
  ``U_ALICE``/``U_BOB``/``U_CAROL`` and channels ``C_GENERAL``/``C_RANDOM`` plus a DM channel ``D_<NAME>``
  per user (``D_ALICE``...), and user groups (``usergroups``: group id -> member user ids; ``S_ONCALL``, handle
  ``oncall``, has ``U_BOB``; ``S_FINANCE``, handle ``finance``, has ``U_CAROL``), as ``usergroups.list`` /
  ``usergroups.users.list`` answer them; each channel's members (``channel_members``: everyone in ``C_GENERAL``,
  Alice in ``C_RANDOM``, the bot in both), as ``conversations.members`` answers them.
- ``Clock``: seconds since the epoch (float); injectable so tests can move time (trigger expiry) without
  sleeping. ``ManualClock`` is a settable one.
- ``TsMinter``: message timestamps as Slack writes them, ``"1700000000.000100"`` (seconds, 6-digit micros),
  strictly increasing even when the clock stands still.
- ``Conversation``: a channel's messages by ts (thread replies included, linked by ``thread_ts``) and
  its ephemeral messages (each with the one user who sees it).
- ``View``: one open modal (``id`` ``V...``, ``hash``, ``state.values``), kept per user as a stack of at
  most 3 (Slack: views.push "push_limit_reached").
- ``Trigger``: one minted per interaction; valid 3 s, single use (Slack: expired_trigger_id /
  exchanged_trigger_id; docs.slack.dev interactivity/handling-user-interaction).
- Slack's AI app surfaces (``SlackState``): ``statuses`` (every assistant.threads.setStatus, in call order:
  ``{channel_id, thread_ts, status}``) and each thread's current status (``status_of``: cleared by status ``""``,
  by the bot posting in the thread, or after ``STATUS_TTL_SECONDS``; docs.slack.dev
  reference/methods/assistant.threads.setStatus), ``suggested_prompts`` (``{channel_id, thread_ts, title,
  prompts}``; ``prompts_of``: the latest per thread), ``titles`` (``{channel_id, thread_ts, title}``) and
  ``assistant_threads`` (the assistant panes people opened: ``{user_id, channel_id, thread_ts, context}``).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bot.errors import BotError
from bot.fakeslack.elements import fill_ids, initial_state, random_id

Clock = Callable[[], float]
JSON = dict[str, Any]

TEAM_ID = "T_PLAYGROUND"
TEAM_DOMAIN = "playground"
APP_ID = "A_PLAYGROUND"
BOT_USER_ID = "U_BOT"
BOT_ID = "B_BOT"
BOT_NAME = "askbot"
ONCALL_GROUP_ID = "S_ONCALL"
FINANCE_GROUP_ID = "S_FINANCE"  # the playground's demo policy: refunds over 100 (bot/playground/demo_policy.yaml)
TRIGGER_TTL_SECONDS = 3.0
VIEW_STACK_LIMIT = 3


class PlaygroundError(BotError):
    """A playground call cannot be done as asked (unknown button label, nothing to wait for, timeout)."""


class ManualClock:
    """A clock for tests: ``clock()`` returns ``now``; ``advance(seconds)`` moves it forward."""

    def __init__(self, now: float | None = None) -> None:
        self.now = time.time() if now is None else now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class TsMinter:
    """Mints Slack message timestamps ``"<seconds>.<6-digit micros>"``, strictly increasing."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._last_us = 0

    def __call__(self) -> str:
        now_us = int(self._clock() * 1_000_000)
        self._last_us = max(now_us, self._last_us + 100)
        return f"{self._last_us // 1_000_000}.{self._last_us % 1_000_000:06d}"

    @property
    def last_us(self) -> int:
        """The last ts minted, in microseconds since the epoch (0 before the first)."""
        return self._last_us

    def continue_after(self, last_us: int) -> None:
        """Mint only timestamps after ``last_us`` (microseconds): a restored workspace's next messages sort last."""
        self._last_us = max(self._last_us, last_us)


@dataclass
class Directory:
    """Users, channels and user groups of the fake workspace (``usergroups``: group id -> member user ids)."""

    users: dict[str, JSON] = field(default_factory=dict)
    channels: dict[str, JSON] = field(default_factory=dict)
    usergroups: dict[str, list[str]] = field(default_factory=dict)
    usergroup_handles: dict[str, str] = field(default_factory=dict)  # group id -> its handle ("oncall": @oncall)
    channel_members: dict[str, list[str]] = field(default_factory=dict)  # conversations.members, by channel id

    @classmethod
    def default(cls) -> Directory:
        directory = cls()
        directory.add_user(BOT_USER_ID, BOT_NAME, is_bot=True)
        for name in ("alice", "bob", "carol"):
            directory.add_user(f"U_{name.upper()}", name)
        for name in ("general", "random"):
            directory.channels[f"C_{name.upper()}"] = {
                "id": f"C_{name.upper()}",
                "name": name,
                "is_channel": True,
                "is_im": False,
                "is_private": False,
                "is_member": True,
            }
        directory.usergroups[ONCALL_GROUP_ID] = ["U_BOB"]
        directory.usergroup_handles[ONCALL_GROUP_ID] = "oncall"
        directory.usergroups[FINANCE_GROUP_ID] = ["U_CAROL"]
        directory.usergroup_handles[FINANCE_GROUP_ID] = "finance"
        directory.channel_members["C_GENERAL"] = [BOT_USER_ID, "U_ALICE", "U_BOB", "U_CAROL"]
        directory.channel_members["C_RANDOM"] = [BOT_USER_ID, "U_ALICE"]
        return directory

    def add_user(self, user_id: str, name: str, *, is_bot: bool = False) -> None:
        """Add a user (and, for humans, the DM channel ``D_<NAME>`` with the bot)."""
        self.users[user_id] = {
            "id": user_id,
            "team_id": TEAM_ID,
            "name": name,
            "deleted": False,
            "real_name": name.title(),
            "tz": "Europe/London",
            "tz_label": "British Summer Time",
            "tz_offset": 3600,
            "profile": {"real_name": name.title(), "display_name": name, "team": TEAM_ID},
            "is_admin": False,
            "is_owner": False,
            "is_bot": is_bot,
            "is_app_user": False,
            **(
                {"profile": {"real_name": name, "display_name": name, "bot_id": BOT_ID, "team": TEAM_ID}}
                if is_bot
                else {}
            ),
        }
        if not is_bot:
            dm = dm_channel_id(user_id)
            self.channels[dm] = {
                "id": dm,
                "is_im": True,
                "is_channel": False,
                "user": user_id,
                "is_private": True,
                "is_member": True,
            }

    def user_name(self, user_id: str) -> str:
        return str(self.users[user_id]["name"]) if user_id in self.users else user_id

    def channel_type(self, channel_id: str) -> str:
        """Slack's ``channel_type`` in message events: ``im`` for DMs, ``channel`` otherwise."""
        return "im" if self.channels.get(channel_id, {}).get("is_im") else "channel"


def dm_channel_id(user_id: str) -> str:
    """The DM channel between ``user_id`` and the bot: ``U_ALICE`` -> ``D_ALICE``."""
    return "D_" + user_id.removeprefix("U_")


@dataclass
class Ephemeral:
    """An ephemeral message: visible to ``user`` only, never in history (chat.postEphemeral)."""

    channel: str
    user: str
    message: JSON


@dataclass
class Conversation:
    """One channel's history: ``messages`` by ts (insertion order = ts order), ``ephemerals``."""

    channel: str
    messages: dict[str, JSON] = field(default_factory=dict)
    ephemerals: list[Ephemeral] = field(default_factory=list)

    def replies(self, thread_ts: str) -> list[JSON]:
        """The thread: parent first, then its replies in ts order (conversations.replies)."""
        parent = self.messages.get(thread_ts)
        if parent is None:
            return []
        replies = [m for m in self.messages.values() if m.get("thread_ts") == thread_ts and m["ts"] != thread_ts]
        return [parent, *replies]

    def add(self, message: JSON) -> None:
        """Store ``message``; a reply updates its parent's reply_count/latest_reply/reply_users."""
        self.messages[message["ts"]] = message
        thread_ts = message.get("thread_ts")
        if thread_ts and thread_ts != message["ts"] and thread_ts in self.messages:
            parent = self.messages[thread_ts]
            replies = self.replies(thread_ts)[1:]
            users = list(dict.fromkeys(m.get("user", "") for m in replies))
            parent.update(
                thread_ts=thread_ts,
                reply_count=len(replies),
                reply_users_count=len(users),
                reply_users=users,
                latest_reply=replies[-1]["ts"],
            )
            message["parent_user_id"] = parent.get("user")


@dataclass
class Trigger:
    """A trigger_id handed to the bot in one interaction payload."""

    trigger_id: str
    user: str
    issued_at: float
    used: bool = False


@dataclass
class InteractionState:
    """What a user has ticked/typed in one message's elements: ``values[block_id][action_id]``."""

    values: dict[str, dict[str, JSON]] = field(default_factory=dict)


@dataclass
class View:
    """An open modal, as views.open returns it in ``view``."""

    data: JSON
    user: str

    @property
    def id(self) -> str:
        return str(self.data["id"])


def make_view(
    view: JSON,
    *,
    user: str,
    view_id: str | None = None,
    root_view_id: str | None = None,
    previous_view_id: str | None = None,
) -> View:
    """Build the stored view object from the submitted one (ids filled, state from initial values)."""
    blocks = fill_ids(list(view.get("blocks", [])))
    vid = view_id or random_id("V")
    data: JSON = {
        "id": vid,
        "team_id": TEAM_ID,
        "type": view.get("type", "modal"),
        "blocks": blocks,
        "private_metadata": view.get("private_metadata", ""),
        "callback_id": view.get("callback_id", ""),
        "state": {"values": initial_state(blocks)},
        "hash": f"{int(time.time())}.{secrets.token_hex(4)}",
        "title": view.get("title"),
        "clear_on_close": bool(view.get("clear_on_close", False)),
        "notify_on_close": bool(view.get("notify_on_close", False)),
        "close": view.get("close"),
        "submit": view.get("submit"),
        "previous_view_id": previous_view_id,
        "root_view_id": root_view_id or vid,
        "app_id": APP_ID,
        "external_id": view.get("external_id", ""),
        "app_installed_team_id": TEAM_ID,
        "bot_id": BOT_ID,
    }
    return View(data=data, user=user)


@dataclass
class ResponseUrl:
    """A response_url handed out with one interaction: valid 30 min, at most 5 uses (Slack docs,
    interactivity/handling-user-interaction#message_responses)."""

    token: str
    channel: str
    user: str
    message_ts: str | None
    thread_ts: str | None
    is_ephemeral: bool
    issued_at: float
    uses: int = 0


RESPONSE_URL_TTL_SECONDS = 30 * 60
RESPONSE_URL_MAX_USES = 5
STATUS_TTL_SECONDS = 120.0  # setStatus: "A two minute timeout applies" when no message is sent

Notify = Callable[[JSON], None]


class SlackState:
    """Everything the fake Slack knows; mutated by the Web API and the interaction sender.

    ``on_change`` is called with an event dict (``{"type": "message", ...}``) after every change; the
    server uses it to wake waiters and feed subscribers.
    """

    def __init__(self, *, clock: Clock, directory: Directory | None = None, on_change: Notify | None = None):
        self.clock = clock
        self.directory = directory or Directory.default()
        self.mint_ts = TsMinter(clock)
        self.conversations: dict[str, Conversation] = {cid: Conversation(cid) for cid in self.directory.channels}
        self.views: dict[str, View] = {}
        self.view_stacks: dict[str, list[str]] = {}
        self.home_views: dict[str, JSON] = {}  # user -> the App Home view published for them
        # user -> the state of their Home view, what they ticked and chose there (bot.fakeslack.home_tab)
        self.home_values: dict[str, dict[str, dict[str, JSON]]] = {}
        self.triggers: dict[str, Trigger] = {}
        self.interactions: dict[tuple[str, str, str], InteractionState] = {}
        self.response_urls: dict[str, ResponseUrl] = {}
        self.statuses: list[JSON] = []  # every assistant.threads.setStatus call, in order
        self.suggested_prompts: list[JSON] = []  # every assistant.threads.setSuggestedPrompts call, in order
        self.titles: list[JSON] = []  # every assistant.threads.setTitle call, in order
        self.assistant_threads: list[JSON] = []  # {user_id, channel_id, thread_ts, context} per pane opened
        self.sessions: dict[tuple[str, str], JSON] = {}  # (channel, thread_ts) -> agent session (agent_sessions)
        self.agent_app = False  # the app is declared an agent (agent_view): it may create agent sessions
        self.stop_subscribed = True  # the app subscribes to agent_session_stopped (else setStatus warns)
        self._status_now: dict[tuple[str, str], tuple[str, float]] = {}  # (channel, thread) -> (status, set at)
        self._on_change = on_change
        self._trigger_seq = 0

    def changed(self, event: JSON) -> None:
        if self._on_change is not None:
            self._on_change(event)

    # -- AI app surfaces: status, suggested prompts --------------------------------------------------

    def set_status(self, channel_id: str, thread_ts: str, status: str, *, loading_messages: list[str]) -> None:
        """Record one setStatus call; ``""`` clears the thread's status. Emits ``assistant_status``."""
        record = {"channel_id": channel_id, "thread_ts": thread_ts, "status": status}
        self.statuses.append(record)
        if status:
            self._status_now[(channel_id, thread_ts)] = (status, self.clock())
        else:
            self._status_now.pop((channel_id, thread_ts), None)
        self.changed({"type": "assistant_status", **record, "loading_messages": list(loading_messages)})

    def clear_status(self, channel_id: str, thread_ts: str | None) -> None:
        """The bot posted in the thread: Slack clears its status (emits ``assistant_status`` with ``""``)."""
        if thread_ts and self._status_now.pop((channel_id, thread_ts), None) is not None:
            event = {"channel_id": channel_id, "thread_ts": thread_ts, "status": "", "cleared_by": "message"}
            self.changed({"type": "assistant_status", **event})

    def status_of(self, channel_id: str, thread_ts: str) -> str:
        """The status shown in a thread now (``""`` when none, cleared, or older than ``STATUS_TTL_SECONDS``)."""
        status, since = self._status_now.get((channel_id, thread_ts), ("", 0.0))
        return status if status and self.clock() - since <= STATUS_TTL_SECONDS else ""

    def current_statuses(self) -> list[JSON]:
        """Every thread's current status: ``[{channel_id, thread_ts, status}]``."""
        found = [{"channel_id": c, "thread_ts": t, "status": self.status_of(c, t)} for c, t in self._status_now]
        return [f for f in found if f["status"]]

    def prompts_of(self, channel_id: str, thread_ts: str) -> JSON | None:
        """The suggested prompts a thread shows: the latest setSuggestedPrompts call for it."""
        calls = [p for p in self.suggested_prompts if (p["channel_id"], p["thread_ts"]) == (channel_id, thread_ts)]
        return calls[-1] if calls else None

    # -- lookups ----------------------------------------------------------------------------------

    def resolve_channel(self, channel: str) -> str | None:
        """A channel id, or a user id (posting to a user id goes to the DM with them)."""
        if channel in self.conversations:
            return channel
        if channel in self.directory.users and channel != BOT_USER_ID:
            return dm_channel_id(channel)
        return None

    def message(self, channel: str, ts: str) -> JSON | None:
        conversation = self.conversations.get(channel)
        return conversation.messages.get(ts) if conversation else None

    def user_stack(self, user: str) -> list[str]:
        return self.view_stacks.setdefault(user, [])

    # -- triggers ---------------------------------------------------------------------------------

    def mint_trigger(self, user: str) -> str:
        """A fresh trigger_id for one interaction by ``user``."""
        self._trigger_seq += 1
        trigger_id = f"{int(self.clock())}{self._trigger_seq:04d}.{secrets.randbelow(10**10)}.{secrets.token_hex(16)}"
        self.triggers[trigger_id] = Trigger(trigger_id, user, self.clock())
        return trigger_id

    def redeem_trigger(self, trigger_id: str) -> tuple[Trigger | None, str | None]:
        """Use a trigger once: ``(trigger, None)`` or ``(None, slack_error)``."""
        trigger = self.triggers.get(trigger_id)
        if trigger is None:
            return None, "invalid_trigger_id"
        if trigger.used:
            return None, "exchanged_trigger_id"
        if self.clock() - trigger.issued_at > TRIGGER_TTL_SECONDS:
            return None, "expired_trigger_id"
        trigger.used = True
        return trigger, None

    # -- interaction state ------------------------------------------------------------------------

    def interaction_values(self, channel: str, ts: str, user: str, blocks: list[JSON]) -> dict[str, dict[str, JSON]]:
        """The live ``state.values`` of ``user`` in message ``(channel, ts)``, created from initial values."""
        key = (channel, ts, user)
        if key not in self.interactions:
            self.interactions[key] = InteractionState(initial_state(blocks))
        return self.interactions[key].values

    def reset_interactions(self, channel: str, ts: str) -> None:
        """Forget what users ticked in a message (its blocks changed, clients re-render it)."""
        for key in [k for k in self.interactions if k[0] == channel and k[1] == ts]:
            del self.interactions[key]

    # -- views ------------------------------------------------------------------------------------

    def top_view(self, user: str) -> View | None:
        """The modal ``user`` sees now (top of their stack), if any."""
        stack = self.view_stacks.get(user) or []
        return self.views.get(stack[-1]) if stack else None

    def close_views(self, user: str, *, view_id: str | None = None, everything: bool = False) -> None:
        """Close ``view_id`` (default: the top one), or the whole stack when ``everything``."""
        stack = self.user_stack(user)
        closing = list(stack) if everything else [view_id or (stack[-1] if stack else "")]
        for vid in closing:
            if vid in stack:
                stack.remove(vid)
                self.changed({"type": "view_closed", "user": user, "view_id": vid})
