"""Each person's inbox: the questions and approval requests waiting for them (the App Home tab lists them) and the
ones recently closed. Keys (built in :mod:`bot.store.keys`):

- ``{prefix}inbox:{team_id}:{user}`` - sorted set: ``[run_id, tool_call_id]`` (JSON) scored by when it was asked
  (ms), oldest first;
- ``{prefix}inbox_of:{<run_id>}:{tool_call_id}`` - set: ``team_id|user`` of everyone whose inbox holds it;
- ``{prefix}inbox_done:{team_id}:{user}`` - list: the last :data:`RECENT` closed ones (JSON ``{run_id,
  tool_call_id, summary, at}``), newest first.
"""

from __future__ import annotations

import json
import time
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from bot.errors import StoreUnavailable
from bot.store.keys import Keys

RECENT = 10


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class Inbox:
    """Inboxes on ``client``; ``retention`` (seconds) bounds every key's life."""

    def __init__(self, client: aioredis.Redis, *, keys: Keys, retention: int = 7 * 24 * 3600) -> None:
        self.client = client
        self.keys = keys
        self.retention = retention

    async def add(self, team_id: str, people: list[str], *, run_id: str, call: str, asked_ms: int) -> None:
        """Put question ``call`` of ``run_id`` in each of ``people``'s inbox. Raises ``StoreUnavailable``."""
        if not people:
            return
        member = json.dumps([run_id, call])
        owners = self.keys.inbox_of(run_id, call)
        try:
            async with self.client.pipeline(transaction=False) as pipe:
                for user in people:
                    box = self.keys.inbox(team_id, user)
                    pipe.zadd(box, {member: asked_ms})
                    pipe.expire(box, self.retention)
                    pipe.sadd(owners, f"{team_id}|{user}")
                pipe.expire(owners, self.retention)
                await pipe.execute()
        except RedisError as exc:
            raise StoreUnavailable(f"Redis error while filling an inbox: {type(exc).__name__}") from None

    async def close(self, run_id: str, call: str, *, summary: str) -> list[tuple[str, str]]:
        """Take question ``call`` of ``run_id`` out of every inbox, adding ``summary`` to each person's recently
        closed; returns those ``(team_id, user)``. Raises ``StoreUnavailable``."""
        owners = self.keys.inbox_of(run_id, call)
        member = json.dumps([run_id, call])
        done = json.dumps({"run_id": run_id, "tool_call_id": call, "summary": summary, "at": int(time.time())})
        try:
            people = [_text(p).split("|", 1) for p in await self.client.smembers(owners)]
            async with self.client.pipeline(transaction=False) as pipe:
                for team_id, user in people:
                    pipe.zrem(self.keys.inbox(team_id, user), member)
                    recent = self.keys.inbox_done(team_id, user)
                    pipe.lpush(recent, done)
                    pipe.ltrim(recent, 0, RECENT - 1)
                    pipe.expire(recent, self.retention)
                pipe.delete(owners)
                await pipe.execute()
        except RedisError as exc:
            raise StoreUnavailable(f"Redis error while closing an inbox entry: {type(exc).__name__}") from None
        return [(team_id, user) for team_id, user in people]

    async def waiting(self, team_id: str, user: str, *, limit: int = 50) -> list[tuple[str, str, int]]:
        """``(run_id, tool_call_id, asked_ms)`` waiting for ``user``, oldest first. Raises ``StoreUnavailable``."""
        try:
            rows: Any = await self.client.zrange(self.keys.inbox(team_id, user), 0, limit - 1, withscores=True)
        except RedisError as exc:
            raise StoreUnavailable(f"Redis error while reading an inbox: {type(exc).__name__}") from None
        out = []
        for member, score in rows:
            try:
                entry = json.loads(_text(member))
                run_id, call = str(entry[0]), str(entry[1])
            except (ValueError, TypeError, IndexError, KeyError):
                continue
            out.append((run_id, call, int(score)))
        return out

    async def count(self, team_id: str, user: str) -> int:
        """How many questions wait for ``user``. Raises ``StoreUnavailable``."""
        try:
            return int(await self.client.zcard(self.keys.inbox(team_id, user)))
        except RedisError as exc:
            raise StoreUnavailable(f"Redis error while reading an inbox: {type(exc).__name__}") from None

    async def drop(self, team_id: str, user: str, *, run_id: str, call: str) -> None:
        """Take an entry that no longer waits out of ``user``'s inbox (found stale while reading it)."""
        try:
            await self.client.zrem(self.keys.inbox(team_id, user), json.dumps([run_id, call]))
        except RedisError as exc:
            raise StoreUnavailable(f"Redis error while tidying an inbox: {type(exc).__name__}") from None

    async def recent(self, team_id: str, user: str, *, limit: int = 5) -> list[dict[str, Any]]:
        """The questions of ``user`` closed lately, newest first. Raises ``StoreUnavailable``."""
        try:
            rows = await self.client.lrange(self.keys.inbox_done(team_id, user), 0, limit - 1)
        except RedisError as exc:
            raise StoreUnavailable(f"Redis error while reading an inbox: {type(exc).__name__}") from None
        out = []
        for row in rows:
            try:
                item = json.loads(_text(row))
            except ValueError:
                continue
            if isinstance(item, dict):
                out.append(item)
        return out
