"""Runs working at once, per person, across every process: a sorted set per person in Redis whose members are
run slots and whose scores are when each slot lapses, so a process that dies can't leave a count stuck.

``acquire`` adds a slot if fewer than ``limit`` live slots remain (expired ones are dropped first), atomically;
``renew`` pushes a held slot's lapse time on; ``release`` removes it. One round trip each.
"""

from __future__ import annotations

import time

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from bot.errors import StoreUnavailable
from bot.store.keys import Keys

# KEYS[1] the person's set; ARGV: [1] now ms, [2] lapse ms, [3] slot, [4] limit. 1 granted, 0 full.
_ACQUIRE = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
if redis.call('ZSCORE', KEYS[1], ARGV[3]) then
  redis.call('ZADD', KEYS[1], ARGV[2], ARGV[3])
  return 1
end
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[4]) then return 0 end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[3])
redis.call('PEXPIREAT', KEYS[1], ARGV[2])
return 1
"""


class ActiveRuns:
    """Per-person slots of working runs; ``ttl`` (seconds): how long a slot lives unless renewed."""

    def __init__(self, client: aioredis.Redis, *, keys: Keys, ttl: float = 120.0) -> None:
        self.client = client
        self.keys = keys
        self.ttl = ttl
        self._acquire = client.register_script(_ACQUIRE)

    async def acquire(self, person: str, *, slot: str, limit: int) -> bool:
        """Take ``slot`` for ``person`` when fewer than ``limit`` are live (a slot already held is renewed).
        Raises ``StoreUnavailable``."""
        now = int(time.time() * 1000)
        try:
            granted = await self._acquire(
                keys=[self.keys.active_runs(person)], args=[now, now + int(self.ttl * 1000), slot, limit]
            )
        except RedisError as exc:
            raise StoreUnavailable(f"Redis error while counting runs: {type(exc).__name__}") from None
        return int(granted) == 1

    async def renew(self, person: str, *, slot: str, limit: int) -> bool:
        """Keep ``slot`` alive another ``ttl`` seconds. Raises ``StoreUnavailable``."""
        return await self.acquire(person, slot=slot, limit=limit)

    async def release(self, person: str, *, slot: str) -> None:
        """Give ``slot`` back. Raises ``StoreUnavailable``."""
        try:
            await self.client.zrem(self.keys.active_runs(person), slot)
        except RedisError as exc:
            raise StoreUnavailable(f"Redis error while counting runs: {type(exc).__name__}") from None
