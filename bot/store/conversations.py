"""Slack-side bookkeeping in Redis: event dedupe and the thread -> run pointer.

- :meth:`ConversationIndex.first_sight` marks a Slack ``event_id`` (``SET NX EX``); only the first
  delivery (original or retry, whichever arrives first) gets ``True``. The window is ``event_ttl``
  seconds (default 2 h; Slack retries for about 5 minutes).
- A thread record (hash) holds the thread's latest ``run_id`` and the ``ts`` of its open question
  message, so follow-ups continue the conversation and typed replies can close the question.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from bot.errors import StoreUnavailable
from bot.store.keys import Keys


@dataclass(frozen=True)
class ThreadRecord:
    """The latest run of a thread and the ``ts`` of its open question message (``None`` when none)."""

    run_id: str
    question_ts: str | None = None


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)


class ConversationIndex:
    """Event dedupe and thread records; ``thread_ttl`` should be at least the question TTL (seconds)."""

    def __init__(self, client: aioredis.Redis, *, keys: Keys, thread_ttl: int, event_ttl: int = 7200) -> None:
        self.client = client
        self.keys = keys
        self.thread_ttl = thread_ttl
        self.event_ttl = event_ttl

    async def first_sight(self, event_id: str) -> bool:
        """True the first time ``event_id`` is seen in the window. Raises ``StoreUnavailable``."""
        try:
            return bool(await self.client.set(self.keys.event(event_id), 1, nx=True, ex=self.event_ttl))
        except RedisError as exc:
            raise StoreUnavailable(f"Redis error while checking an event: {type(exc).__name__}") from None

    async def thread(self, team_id: str, channel_id: str, thread_ts: str) -> ThreadRecord | None:
        """The thread's record, or None. Raises ``StoreUnavailable``."""
        try:
            raw = await self.client.hgetall(self.keys.thread(team_id, channel_id, thread_ts))
        except RedisError as exc:
            raise StoreUnavailable(f"Redis error while reading a thread: {type(exc).__name__}") from None
        fields = {_text(k): _text(v) for k, v in raw.items()}
        run_id = fields.get("run_id")
        return ThreadRecord(run_id=run_id, question_ts=fields.get("question_ts") or None) if run_id else None

    async def set_thread(
        self, team_id: str, channel_id: str, thread_ts: str, *, run_id: str, question_ts: str | None = None
    ) -> None:
        """Point the thread at ``run_id`` (and its open question message). Raises ``StoreUnavailable``."""
        key = self.keys.thread(team_id, channel_id, thread_ts)
        try:
            async with self.client.pipeline(transaction=True) as pipe:
                pipe.hset(key, mapping={"run_id": run_id, "question_ts": question_ts or ""})
                pipe.expire(key, self.thread_ttl)
                await pipe.execute()
        except RedisError as exc:
            raise StoreUnavailable(f"Redis error while writing a thread: {type(exc).__name__}") from None
