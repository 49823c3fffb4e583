"""Each MCP caller's limits, kept in Redis so they hold across server processes: :class:`CallerLimits`.

- ``per_minute``: a counter per caller (``Keys.mcp_rate``) that lives 60 s from the first question of its window;
  a question past the count is refused.
- ``max_waiting``: the run ids of the caller's questions (``Keys.mcp_waiting``, scored by when asked). Before a new
  one, those whose runs ended (or that were never stored, a minute on) are found (a read of each run); then one
  Lua script (:data:`_ADMIT`, the caller's two keys in one cluster slot) drops them, counts the rest, and only when
  fewer than ``max_waiting`` remain counts the question in ``per_minute`` and adds its run id: two questions asked
  at once, in one process or several, can't both take the last place. The run id is added before the question is
  asked, so a question being asked counts.
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

# KEYS[1] the caller's waiting set, KEYS[2] its per-minute counter (one slot: Keys.mcp_waiting / mcp_rate).
# ARGV: [1] now ms, [2] run id, [3] max_waiting, [4] per_minute, [5] window s, [6] kept s, then pairs
# [run id, score] of ended questions to drop first (each only while it still has that score: not one asked again).
# Returns {1, 0} admitted (a run id already held: admitted again, not counted twice), {0, waiting} max_waiting,
# {-1, ttl s} per_minute.
_ADMIT = """
for i = 7, #ARGV, 2 do
  local score = redis.call('ZSCORE', KEYS[1], ARGV[i])
  if score and tonumber(score) == tonumber(ARGV[i + 1]) then redis.call('ZREM', KEYS[1], ARGV[i]) end
end
if not redis.call('ZSCORE', KEYS[1], ARGV[2]) then
  local waiting = redis.call('ZCARD', KEYS[1])
  if waiting >= tonumber(ARGV[3]) then return {0, waiting} end
end
local count = redis.call('INCR', KEYS[2])
if redis.call('TTL', KEYS[2]) < 0 then redis.call('EXPIRE', KEYS[2], ARGV[5]) end
if count > tonumber(ARGV[4]) then return {-1, redis.call('TTL', KEYS[2])} end
redis.call('ZADD', KEYS[1], ARGV[1], ARGV[2])
redis.call('EXPIRE', KEYS[1], ARGV[6])
return {1, 0}
"""


class CallerLimits:
    """The limits of :class:`~bot.mcp_server.callers.Caller` entries, on ``client`` under ``keys``; ``agent``
    reads the runs."""

    def __init__(self, client: aioredis.Redis, *, keys: Keys, agent: Agent) -> None:
        self.client, self.keys, self.agent = client, keys, agent
        self._admit = client.register_script(_ADMIT)

    async def admit(self, caller: Caller, *, run_id: str) -> None:
        """Count a new question (run ``run_id``) of ``caller``, or refuse it: ``max_waiting`` questions of its are
        waiting, or it asked ``per_minute`` this minute (a question refused for ``max_waiting`` is not counted
        toward ``per_minute``). Atomic across processes (see the module docstring). Raises :class:`Refused`
        naming the rule, ``StoreUnavailable``."""
        try:
            gone = await self._ended(caller)
            now = int(time.time() * 1000)
            keys = [self.keys.mcp_waiting(caller.name), self.keys.mcp_rate(caller.name)]
            args: list[Any] = [now, run_id, caller.max_waiting, caller.per_minute, WINDOW, KEPT]
            for member, score in gone:
                args += [member, score]
            verdict, n = (int(v) for v in await self._admit(keys=keys, args=args))
        except RedisError as exc:
            raise StoreUnavailable(f"Redis error while counting the caller's questions: {type(exc).__name__}") from None
        if verdict == 0:
            raise Refused(
                caller,
                "max_waiting",
                f"{n} of its questions are waiting (at most {caller.max_waiting}); wait for an answer",
            )
        if verdict < 0:
            raise Refused(
                caller,
                "per_minute",
                f"it asked {caller.per_minute} questions this minute (at most {caller.per_minute});"
                f" try again in {max(n, 1)} s",
            )

    async def release(self, caller: Caller, *, run_id: str) -> None:
        """``run_id`` was not asked after all: it no longer counts. Raises ``StoreUnavailable``."""
        try:
            await self.client.zrem(self.keys.mcp_waiting(caller.name), run_id)
        except RedisError as exc:
            raise StoreUnavailable(f"Redis error while counting the caller's questions: {type(exc).__name__}") from None

    async def _ended(self, caller: Caller) -> list[tuple[str, float]]:
        """The ``(run id, score)`` of ``caller``'s questions that no longer wait: their runs ended (or are
        unreadable), or were never stored past :data:`UNSTORED_GRACE_MS`. Raises ``RedisError``,
        ``StoreUnavailable``."""
        now = int(time.time() * 1000)
        gone: list[tuple[str, float]] = []
        members: list[Any] = await self.client.zrange(self.keys.mcp_waiting(caller.name), 0, -1, withscores=True)
        for member, score in members:
            run_id = member.decode() if isinstance(member, bytes) else str(member)
            try:
                state = await self.agent.get_run(run_id)
            except RunNotFound:
                if now - float(score) > UNSTORED_GRACE_MS:
                    gone.append((run_id, float(score)))
                continue
            except StoreCorrupt:
                gone.append((run_id, float(score)))
                continue
            if state.status in ENDED:
                gone.append((run_id, float(score)))
        return gone
