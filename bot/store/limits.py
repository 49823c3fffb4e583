"""Runs working at once, per person, across every process: a sorted set per person in Redis whose members are
run slots and whose scores are when each slot lapses, so a process that dies can't leave a count stuck.

``acquire`` adds a slot if fewer than ``limit`` live slots remain (expired ones, and the slots given in ``drop``,
are removed first), atomically; ``renew`` pushes a held slot's lapse time on (never adding back a slot released
meanwhile); ``release`` removes slots. A slot given back when whether its taking reached Redis is unknown (its reply
was lost, or the request was given up while it was in flight: ``release_owed``, and ``acquire``'s ``drop``) leaves a
marker in its place, the same member with a negative score (minus its lapse time), until it would have lapsed: a
taking that lands after its release (it went out on another connection, stalled) finds the marker and takes nothing.
One round trip each (a release can also ride in another batch,
:meth:`ActiveRuns.queue_release`: with the save that ends the run's working segment; an acquire too,
:meth:`ActiveRuns.queue_acquire`: with a click's load of its run). A release that fails in an
outage is not left to the lapse time: :class:`bot.slack.run_slots.RunSlots` retries it until Redis answers, and
carries it in the person's next ``acquire`` (``drop``).
"""

from __future__ import annotations

import time
from collections.abc import Collection

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from bot.errors import StoreUnavailable
from bot.store.batch import Batch, Later
from bot.store.keys import Keys

# Scores: a live slot's is its lapse time (ms); a released slot's marker is minus its lapse time. Both lapse at
# now: ZREMRANGEBYSCORE from -now to now removes the lapsed of either.
# KEYS[1] the person's set; ARGV: [1] now ms, [2] lapse ms, [3] slot, [4] limit, [5 ..] slots to drop first
# (marked released). 1 granted, 0 full (or this slot was released before its taking landed).
_ACQUIRE = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-' .. ARGV[1], ARGV[1])
for i = 5, #ARGV do
  redis.call('ZADD', KEYS[1], -tonumber(ARGV[2]), ARGV[i])
end
if #ARGV >= 5 then redis.call('PEXPIREAT', KEYS[1], ARGV[2]) end
local score = redis.call('ZSCORE', KEYS[1], ARGV[3])
if score then
  if tonumber(score) < 0 then return 0 end
  redis.call('ZADD', KEYS[1], ARGV[2], ARGV[3])
  return 1
end
if redis.call('ZCOUNT', KEYS[1], '(' .. ARGV[1], '+inf') >= tonumber(ARGV[4]) then return 0 end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[3])
redis.call('PEXPIREAT', KEYS[1], ARGV[2])
return 1
"""

# KEYS[1] the person's set; ARGV: [1] now ms, [2] lapse ms, [3 ..] slots to mark released.
_RELEASE_OWED = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-' .. ARGV[1], ARGV[1])
for i = 3, #ARGV do
  redis.call('ZADD', KEYS[1], -tonumber(ARGV[2]), ARGV[i])
end
redis.call('PEXPIREAT', KEYS[1], ARGV[2])
return 1
"""

# KEYS[1] the person's set; ARGV: [1] now ms, [2] lapse ms, [3] slot. 1 renewed, 0 no longer held (released or
# lapsed: not added back).
_RENEW = """
local score = redis.call('ZSCORE', KEYS[1], ARGV[3])
if not score or tonumber(score) <= tonumber(ARGV[1]) then return 0 end
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
        self._renew = client.register_script(_RENEW)
        self._release_owed = client.register_script(_RELEASE_OWED)

    async def acquire(self, person: str, *, slot: str, limit: int, drop: Collection[str] = ()) -> bool:
        """Take ``slot`` for ``person`` when fewer than ``limit`` are live (a slot already held is renewed), after
        removing the slots in ``drop`` (releases that failed earlier: marked released, see the module docstring); not
        granted either when ``slot`` itself was released first. Raises ``StoreUnavailable`` (the slot may
        have been taken: its reply can be lost after Redis applied it)."""
        now = int(time.time() * 1000)
        try:
            granted = await self._acquire(
                keys=[self.keys.active_runs(person)],
                args=[now, now + int(self.ttl * 1000), slot, limit, *sorted(drop)],
            )
        except RedisError as exc:
            raise StoreUnavailable(f"Redis error while counting runs: {type(exc).__name__}") from None
        return int(granted) == 1

    def queue_acquire(
        self, batch: Batch, person: str, *, slot: str, limit: int, drop: Collection[str] = ()
    ) -> Later[bool]:
        """:meth:`acquire`, queued in ``batch`` (sent twice, as a batch whose reply was lost is, it finds its own
        slot held: still granted once)."""
        now = int(time.time() * 1000)
        batch.script(
            self._acquire,
            keys=[self.keys.active_runs(person)],
            args=[now, now + int(self.ttl * 1000), slot, limit, *sorted(drop)],
        )
        return batch.read(lambda granted: int(granted) == 1)

    async def renew(self, person: str, *, slot: str) -> bool:
        """Keep ``slot`` alive another ``ttl`` seconds; False when it is no longer held (released, or lapsed: it is
        not added back). Raises ``StoreUnavailable``."""
        now = int(time.time() * 1000)
        try:
            renewed = await self._renew(
                keys=[self.keys.active_runs(person)], args=[now, now + int(self.ttl * 1000), slot]
            )
        except RedisError as exc:
            raise StoreUnavailable(f"Redis error while counting runs: {type(exc).__name__}") from None
        return int(renewed) == 1

    def queue_release(self, batch: Batch, person: str, *, slots: Collection[str]) -> None:
        """:meth:`release`, queued in ``batch``."""
        if slots:
            batch.pipe.zrem(self.keys.active_runs(person), *slots)

    async def release(self, person: str, *, slots: Collection[str]) -> None:
        """Give ``slots`` back (removing one no longer held is no error: a release may be sent twice). Raises
        ``StoreUnavailable``."""
        if not slots:
            return
        try:
            await self.client.zrem(self.keys.active_runs(person), *slots)
        except RedisError as exc:
            raise StoreUnavailable(f"Redis error while counting runs: {type(exc).__name__}") from None

    async def release_owed(self, person: str, *, slots: Collection[str]) -> None:
        """Give ``slots`` back when whether their taking reached Redis is unknown (reply lost, given up in flight):
        each is marked released until it would have lapsed, so a taking of it that lands later takes nothing (see
        the module docstring). Sending it twice is no error. Raises ``StoreUnavailable``."""
        if not slots:
            return
        now = int(time.time() * 1000)
        try:
            await self._release_owed(
                keys=[self.keys.active_runs(person)], args=[now, now + int(self.ttl * 1000), *sorted(slots)]
            )
        except RedisError as exc:
            raise StoreUnavailable(f"Redis error while counting runs: {type(exc).__name__}") from None
