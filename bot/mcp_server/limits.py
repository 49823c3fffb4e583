"""Each MCP caller's limits, kept in Redis so they hold across server processes: :class:`CallerLimits`.

- ``per_minute``: a counter per caller (``Keys.mcp_rate``) that lives 60 s from the first question of its window
  (``INCR`` then ``EXPIRE ... NX`` in one ``MULTI``); a question past the count is refused.
- ``max_waiting``: the run ids of the caller's questions (``Keys.mcp_waiting``, scored by when asked); before a new
  one, those whose runs ended (or that were never stored, a minute on) are dropped and the rest counted. A new
  question's run id is added before it is asked, so two processes asking at once both count it.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from bot.agent import Agent
from bot.errors import RunNotFound, StoreCorrupt, StoreUnavailable
from bot.mcp_server.callers import Caller, Refused
from bot.store import Keys

log = logging.getLogger(__name__)

WINDOW = 60  # seconds: per_minute's window
UNSTORED_GRACE_MS = 60_000  # a reserved run id whose run is not stored yet is kept this long (it is being asked)
KEPT = 8 * 24 * 3600  # seconds the waiting set outlives its last question (past the runs' retention)
ENDED = ("completed", "failed", "expired")


class CallerLimits:
    """The limits of :class:`~bot.mcp_server.callers.Caller` entries, on ``client`` under ``keys``; ``agent``
    reads the runs."""

    def __init__(self, client: aioredis.Redis, *, keys: Keys, agent: Agent) -> None:
        self.client, self.keys, self.agent = client, keys, agent

    async def admit(self, caller: Caller, *, run_id: str) -> None:
        """Count a new question (run ``run_id``) of ``caller``, or refuse it: ``max_waiting`` questions of its are
        waiting, or it asked ``per_minute`` this minute. Raises :class:`Refused` naming the rule,
        ``StoreUnavailable``."""
        try:
            waiting = await self._waiting(caller)
            if waiting >= caller.max_waiting:
                raise Refused(
                    caller,
                    "max_waiting",
                    f"{waiting} of its questions are waiting (at most {caller.max_waiting}); wait for an answer",
                )
            rate = self.keys.mcp_rate(caller.name)
            async with self.client.pipeline(transaction=True) as pipe:
                pipe.incr(rate)
                pipe.expire(rate, WINDOW, nx=True)
                count, _ = await pipe.execute()
            if int(count) > caller.per_minute:
                ttl = await self.client.ttl(rate)
                raise Refused(
                    caller,
                    "per_minute",
                    f"it asked {caller.per_minute} questions this minute (at most {caller.per_minute});"
                    f" try again in {max(int(ttl), 1)} s",
                )
            key = self.keys.mcp_waiting(caller.name)
            async with self.client.pipeline(transaction=True) as pipe:
                pipe.zadd(key, {run_id: int(time.time() * 1000)})
                pipe.expire(key, KEPT)
                await pipe.execute()
        except RedisError as exc:
            raise StoreUnavailable(f"Redis error while counting the caller's questions: {type(exc).__name__}") from None

    async def release(self, caller: Caller, *, run_id: str) -> None:
        """``run_id`` was not asked after all: it no longer counts. Raises ``StoreUnavailable``."""
        try:
            await self.client.zrem(self.keys.mcp_waiting(caller.name), run_id)
        except RedisError as exc:
            raise StoreUnavailable(f"Redis error while counting the caller's questions: {type(exc).__name__}") from None

    async def _waiting(self, caller: Caller) -> int:
        """How many of ``caller``'s questions still wait; the ended ones are dropped from its set."""
        key = self.keys.mcp_waiting(caller.name)
        now = int(time.time() * 1000)
        waiting, gone = 0, []
        members: list[Any] = await self.client.zrange(key, 0, -1, withscores=True)
        for member, score in members:
            run_id = member.decode() if isinstance(member, bytes) else str(member)
            try:
                state = await self.agent.get_run(run_id)
            except RunNotFound:
                if now - float(score) > UNSTORED_GRACE_MS:
                    gone.append(run_id)
                else:
                    waiting += 1
                continue
            except StoreCorrupt:
                gone.append(run_id)
                continue
            if state.status in ENDED:
                gone.append(run_id)
            else:
                waiting += 1
        if gone:
            await self.client.zrem(key, *gone)
        return waiting
