"""The playground's fake workspace kept in its Redis, so a restart finds the same channels, threads and modals.

Only with a real Redis (``REDIS_URL`` set): the bot's runs live there and outlast a restart, so the messages they
point at (a question waiting in a thread, the thread a resumed run replies in) must outlast it too; else the bot's
``chat.update`` of a question answers ``message_not_found`` and its reply ``invalid_thread_ts``. With the in-process
Redis nothing outlasts the process and nothing is saved.

One key, ``Keys.playground_workspace()`` (``{prefix}playground:workspace``), a JSON string::

    {"schema_version": 1,
     "last_ts_us": 1700000000000100,                 # the last message ts minted (microseconds)
     "conversations": {"C_GENERAL": {"messages": [message, ...],                     # oldest first, thread replies
                                     "ephemerals": [{"user": "U_ALICE", "message": message}, ...]}},
     "views": {"V123": {"user": "U_ALICE", "data": view}},   # the open modals ...
     "view_stacks": {"U_ALICE": ["V123"]},                   # ... and each user's stack of them, top last
     "home_views": {"U_ALICE": view},                        # each user's App Home tab as last published
     "assistant_threads": [...], "titles": [...], "suggested_prompts": [...],   # SlackState's, in call order
     "agent_sessions": [{"channel_id", "thread_ts", "status", "title", ...}]}   # each thread's, oldest first

``agent_sessions`` came after version 1's first shape: a snapshot without it restores with no sessions (an older
version ignores it).

Bounded: each channel keeps its newest :data:`MAX_MESSAGES` messages and :data:`MAX_EPHEMERALS` ephemerals, the
assistant lists and the agent sessions their newest :data:`MAX_RECORDS` entries; the key expires
:data:`TTL_SECONDS` after the last change.
Short-lived things are not kept: trigger_ids (3 s), response_urls, what someone ticked but did not send, the
assistant statuses (two minutes), the Web API call log.

:class:`WorkspaceSaver` loads the snapshot into a :class:`~bot.fakeslack.state.SlackState` (:meth:`load`, before the
bot starts) and writes it again after every change (:meth:`start` follows the fake's change events; changes within
:data:`COALESCE_SECONDS` of each other, or while a write is on its way, are written together); :meth:`stop` writes
the last changes.
A snapshot written by a newer version (a higher ``schema_version``) stops start-up with a
:class:`~bot.errors.ConfigError` and is left as it is; one that is not valid JSON is logged, set aside under
``Keys.playground_workspace_unreadable()`` and the workspace starts empty.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from bot.errors import ConfigError
from bot.fakeslack.fake_slack import FakeSlack
from bot.fakeslack.state import JSON, Conversation, Ephemeral, SlackState, View
from bot.store.keys import Keys

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
MAX_MESSAGES = 500
"""Per channel (thread replies included): the newest are kept."""
MAX_EPHEMERALS = 100
"""Per channel: the newest are kept."""
MAX_RECORDS = 200
"""Per assistant list (panes opened, titles, suggested prompts): the newest are kept."""
TTL_SECONDS = 30 * 24 * 3600
"""The saved workspace expires 30 days after its last change."""
COALESCE_SECONDS = 0.05
"""After a change, how long the writer waits for more (a streamed reply changes its message many times a second):
one write then covers them all."""
QUIET_EVENTS = frozenset(
    {"api_call", "socket_connected", "socket_disconnected", "assistant_status", "view_errors", "saver_stopping"}
)
"""Change events that change nothing this module keeps (``saver_stopping``: :meth:`WorkspaceSaver.stop`'s own)."""
_WAKE: JSON = {"type": "saver_stopping"}


def dump(state: SlackState) -> JSON:
    """The snapshot of ``state`` (the module docstring's shape), bounded."""
    conversations: JSON = {}
    for channel_id, conversation in state.conversations.items():
        messages = list(conversation.messages.values())[-MAX_MESSAGES:]
        ephemerals = [{"user": e.user, "message": e.message} for e in conversation.ephemerals[-MAX_EPHEMERALS:]]
        if messages or ephemerals:
            conversations[channel_id] = {"messages": messages, "ephemerals": ephemerals}
    open_views = {vid for stack in state.view_stacks.values() for vid in stack}
    return {
        "schema_version": SCHEMA_VERSION,
        "last_ts_us": state.mint_ts.last_us,
        "conversations": conversations,
        "views": {vid: {"user": v.user, "data": v.data} for vid, v in state.views.items() if vid in open_views},
        "view_stacks": {user: list(stack) for user, stack in state.view_stacks.items() if stack},
        "home_views": dict(state.home_views),
        "assistant_threads": state.assistant_threads[-MAX_RECORDS:],
        "titles": state.titles[-MAX_RECORDS:],
        "suggested_prompts": state.suggested_prompts[-MAX_RECORDS:],
        "agent_sessions": list(state.sessions.values())[-MAX_RECORDS:],
    }


def restore(state: SlackState, snapshot: JSON) -> int:
    """Put ``snapshot`` (from :func:`dump`) into a fresh ``state``; returns how many messages came back.

    Channels the directory does not have are skipped. Raises ``ConfigError`` for a ``schema_version`` this code
    does not know, ``ValueError`` for a snapshot of the wrong shape.
    """
    version = snapshot.get("schema_version")
    if not isinstance(version, int) or version < 1:
        raise ValueError(f"schema_version {version!r} is not a version")
    if version > SCHEMA_VERSION:
        raise ConfigError(
            f"the playground's saved workspace has schema_version {version}, newer than this version knows "
            f"({SCHEMA_VERSION}); run the newer version, or use another REDIS_PREFIX"
        )
    conversations, views, stacks = (_dict(snapshot, n) for n in ("conversations", "views", "view_stacks"))
    homes = _dict(snapshot, "home_views")
    names = ("assistant_threads", "titles", "suggested_prompts", "agent_sessions")
    lists = {n: _list(snapshot, n) for n in names}  # all checked first
    restored = 0
    for channel_id, saved in conversations.items():
        if channel_id not in state.conversations or not isinstance(saved, dict):
            continue
        conversation = Conversation(channel_id)
        for message in saved.get("messages") or []:
            if isinstance(message, dict) and isinstance(message.get("ts"), str):
                conversation.messages[message["ts"]] = message
                restored += 1
        for ephemeral in saved.get("ephemerals") or []:
            if isinstance(ephemeral, dict) and isinstance(ephemeral.get("message"), dict):
                conversation.ephemerals.append(Ephemeral(channel_id, str(ephemeral["user"]), ephemeral["message"]))
        state.conversations[channel_id] = conversation
    for view_id, saved in views.items():
        if isinstance(saved, dict) and isinstance(saved.get("data"), dict):
            state.views[view_id] = View(data=saved["data"], user=str(saved["user"]))
    for user, stack in stacks.items():
        state.view_stacks[user] = [vid for vid in stack if vid in state.views]
    state.home_views.update(homes)
    state.assistant_threads.extend(lists["assistant_threads"])
    state.titles.extend(lists["titles"])
    state.suggested_prompts.extend(lists["suggested_prompts"])
    for session in lists["agent_sessions"]:
        where = (session.get("channel_id"), session.get("thread_ts")) if isinstance(session, dict) else None
        if where is not None and all(isinstance(part, str) for part in where):
            state.sessions[(str(where[0]), str(where[1]))] = session
    last_us = snapshot.get("last_ts_us")
    if isinstance(last_us, int):
        state.mint_ts.continue_after(last_us)
    return restored


def _dict(snapshot: JSON, name: str) -> dict[str, Any]:
    value = snapshot.get(name)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"{name} is not an object")
    return value


def _list(snapshot: JSON, name: str) -> list[Any]:
    value = snapshot.get(name)
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValueError(f"{name} is not a list")
    return value


class WorkspaceSaver:
    """Keeps ``fake``'s workspace (``fake.state``) in Redis under ``keys.playground_workspace()`` (see the module
    docstring).

    The fake's change events (``FakeSlack.subscribe``) wake the writer. Redis errors while writing are logged and
    the write is tried again at the next change; the workspace goes on in memory.
    """

    def __init__(self, redis_client: aioredis.Redis, fake: FakeSlack, *, keys: Keys) -> None:
        self.redis = redis_client
        self.fake = fake
        self.key = keys.playground_workspace()
        self.aside_key = keys.playground_workspace_unreadable()
        self.state = fake.state
        self._queue: asyncio.Queue[JSON] | None = None
        self._task: asyncio.Task[None] | None = None
        self._dirty = False
        self._stopping = False

    async def load(self) -> int:
        """Restore the saved workspace into ``state`` (call before anything changes it); returns how many
        messages came back (0 when nothing was saved). Raises ``ConfigError`` for a newer snapshot."""
        raw = await self.redis.get(self.key)
        if raw is None:
            return 0
        try:
            snapshot = json.loads(raw)
            if not isinstance(snapshot, dict):
                raise ValueError("not a JSON object")
            restored = restore(self.state, snapshot)
        except (ValueError, KeyError, TypeError) as exc:  # JSONDecodeError is a ValueError
            log.warning(
                "the saved playground workspace is unreadable (%s); kept as %s, starting empty", exc, self.aside_key
            )
            await self.redis.set(self.aside_key, raw, ex=TTL_SECONDS)
            return 0
        log.info("restored the playground workspace: %d messages", restored)
        return restored

    def start(self) -> None:
        """Write the workspace after every change from now on."""
        self._stopping = False
        self._queue = self.fake.subscribe()
        self._task = asyncio.create_task(self._follow(self._queue), name="playground-saver")

    async def stop(self) -> None:
        """Stop following changes and write what changed since the last write. A write on its way is waited
        for, not cancelled (its changes would be taken as written, and a cancel lost inside a store call, as
        Python 3.11's ``asyncio.wait_for`` can lose one, would leave this waiting for ever): the writer ends at its
        next look, within the client's own timeouts."""
        if self._task is not None and self._queue is not None:
            self._stopping = True
            self._queue.put_nowait(_WAKE)  # a writer waiting for the next change looks now
            await self._task
            self._task = None
        if self._queue is not None:
            self.fake.unsubscribe(self._queue)
            self._dirty = self._dirty or _drain(self._queue)
            self._queue = None
        if self._dirty:
            await self.save()

    async def save(self) -> None:
        """Write the snapshot now (``RedisError`` logged; the next change writes again)."""
        self._dirty = False
        text = json.dumps(dump(self.state), ensure_ascii=False, separators=(",", ":"))
        try:
            await self.redis.set(self.key, text, ex=TTL_SECONDS)
        except RedisError as exc:
            self._dirty = True
            log.warning("could not save the playground workspace (%s)", type(exc).__name__)
        except BaseException:  # cancelled on the way: not written, as far as anyone knows
            self._dirty = True
            raise

    async def _follow(self, queue: asyncio.Queue[JSON]) -> None:
        while not self._stopping:
            event = await queue.get()
            changed = event.get("type") not in QUIET_EVENTS
            if self._stopping:  # stop() writes what is left
                self._dirty = self._dirty or changed
                return
            if not (changed or self._dirty):
                continue
            self._dirty = True
            await asyncio.sleep(COALESCE_SECONDS)
            _drain(queue)
            await self.save()


def _drain(queue: asyncio.Queue[JSON]) -> bool:
    """Empty ``queue``; whether any of its events changed something kept."""
    changed = False
    while not queue.empty():
        changed = queue.get_nowait().get("type") not in QUIET_EVENTS or changed
    return changed
