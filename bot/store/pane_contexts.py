"""What the person of an assistant-pane thread is looking at: :class:`PaneContexts`.

Slack sends an assistant thread's context (``{"channel_id", "team_id", "enterprise_id"}``: the channel open beside
the pane) with ``assistant_thread_started`` and again with each ``assistant_thread_context_changed`` (Slack:
docs.slack.dev reference/events/assistant_thread_context_changed). Any process may take the next message of the
thread, so the latest context lives in Redis: ``{prefix}pane:{channel_id}:{thread_ts}`` (JSON), kept
``retention`` seconds after its last write.

In the agent messaging experience (agent_view) there is no pane thread: ``app_context_changed`` tells the channel a
person looks at with the app open (docs.slack.dev reference/events/app_context_changed), kept per person the same
way (:meth:`PaneContexts.save_viewing`, ``{prefix}appctx:{team_id}:{user}``), and read for their next message in the
Messages tab. :meth:`PaneContexts.first_greeting` marks a person greeted there (once per ``retention``).
"""

from __future__ import annotations

import json
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from bot.errors import StoreUnavailable
from bot.store.keys import Keys

FIELDS = ("channel_id", "team_id", "enterprise_id")


class PaneContexts:
    """Pane thread contexts on ``client``."""

    def __init__(self, client: aioredis.Redis, *, keys: Keys, retention: int = 7 * 24 * 3600) -> None:
        self.client, self.keys, self.retention = client, keys, retention

    async def save(self, *, channel_id: str, thread_ts: str, context: dict[str, Any]) -> None:
        """Keep ``context`` (only its :data:`FIELDS`, as strings) as the thread's latest. Raises
        ``StoreUnavailable``."""
        kept = {k: str(context[k]) for k in FIELDS if isinstance(context.get(k), (str, int)) and context.get(k)}
        try:
            await self.client.set(self.keys.pane_context(channel_id, thread_ts), json.dumps(kept), ex=self.retention)
        except RedisError as exc:
            raise StoreUnavailable(f"could not save the pane's context: {type(exc).__name__}") from exc

    async def save_viewing(self, *, team_id: str, user: str, context: dict[str, Any]) -> None:
        """Keep ``context`` (:data:`FIELDS`) as what ``user`` looks at now (``{}``: nothing). Raises
        ``StoreUnavailable``."""
        kept = {k: str(context[k]) for k in FIELDS if isinstance(context.get(k), (str, int)) and context.get(k)}
        try:
            await self.client.set(self.keys.app_context(team_id, user), json.dumps(kept), ex=self.retention)
        except RedisError as exc:
            raise StoreUnavailable(f"could not save the app context: {type(exc).__name__}") from exc

    async def viewing(self, *, team_id: str, user: str) -> dict[str, str] | None:
        """What ``user`` looked at last with the app open, or None. Raises ``StoreUnavailable``."""
        try:
            raw = await self.client.get(self.keys.app_context(team_id, user))
        except RedisError as exc:
            raise StoreUnavailable(f"could not read the app context: {type(exc).__name__}") from exc
        return _parsed(raw)

    async def first_greeting(self, *, team_id: str, user: str) -> bool:
        """Whether ``user`` is to be greeted in the Messages tab now (not greeted in the last ``retention``
        seconds); marks them greeted. Raises ``StoreUnavailable``."""
        try:
            return bool(await self.client.set(self.keys.greeted(team_id, user), "1", nx=True, ex=self.retention))
        except RedisError as exc:
            raise StoreUnavailable(f"could not mark the greeting: {type(exc).__name__}") from exc

    async def find(self, *, channel_id: str, thread_ts: str) -> dict[str, str] | None:
        """The thread's latest context, or None when none was saved (not a pane thread, or past retention); an
        unreadable record reads as None. Raises ``StoreUnavailable``."""
        try:
            raw = await self.client.get(self.keys.pane_context(channel_id, thread_ts))
        except RedisError as exc:
            raise StoreUnavailable(f"could not read the pane's context: {type(exc).__name__}") from exc
        return _parsed(raw)


def _parsed(raw: Any) -> dict[str, str] | None:
    """A stored context (JSON), or None when absent or unreadable."""
    if raw is None:
        return None
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None
    return {k: str(v) for k, v in data.items() if k in FIELDS} if isinstance(data, dict) else None
