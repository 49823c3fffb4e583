"""Runs working at once, per person, across every process: a sorted set per person in Redis whose members are
run slots and whose scores are when each slot lapses, so a process that dies can't leave a count stuck.

``acquire`` adds a slot if fewer than ``limit`` live slots remain (lapsed ones, and the slots given in ``drop``,
are removed first), atomically; ``renew`` pushes a held slot's lapse time on (never adding back a slot released
meanwhile); ``release`` removes slots. One round trip each (a release can also ride in another batch,
:meth:`ActiveRuns.queue_release`: with the save that ends the run's working segment; an acquire too,
:meth:`ActiveRuns.queue_acquire`: with a click's load of its run). A release that fails in an outage is not left
to the lapse time: :class:`bot.slack.run_slots.RunSlots` retries it until Redis answers, and carries it in the
person's next ``acquire`` (``drop``).

A taking can land in Redis after its slot was given back: its reply was lost or it was given up in flight (the
release is owed, and goes out on another connection), or its reply was slow enough that redis-py sent it again
(:attr:`ActiveRuns.resend_after`) and the first send, stalled, lands after the run ended. Such a slot's release
(``mark=True``, and ``acquire``'s ``drop``) leaves a marker in its place, the same member with minus its lapse time
as its score, until it would have lapsed: the taking that lands late finds it and takes nothing. Other releases
just remove the slot (no marker, nothing kept). A script whose arguments are stale (a send stalled past its slot's
lapse, or a process whose clock is behind) never shortens the set's expiry nor lowers a held slot's lapse time, so
it can't take another process's live slots with it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from bot.errors import StoreUnavailable
from bot.store.batch import Batch, Later
from bot.store.keys import Keys

# Scores: a live slot's is its lapse time (ms); a released slot's marker is minus its lapse time. Both have lapsed
# at now when ZREMRANGEBYSCORE from -now to now removes them. ARGV[1] now ms, ARGV[2] lapse ms in every script.
# The set lives at least until the newest lapse time it was given, by Redis's clock (never shortened).
_KEEP_UNTIL_LAPSE = """
local keep = tonumber(ARGV[2]) - tonumber(ARGV[1])
if redis.call('PTTL', KEYS[1]) < keep then redis.call('PEXPIRE', KEYS[1], keep) end
"""

# KEYS[1] the person's set; ARGV: [1] now, [2] lapse, [3] slot, [4] limit, [5 ..] slots to drop first (marked
# released). 1 granted (or held already), 0 full (or this slot was released before its taking landed).
_ACQUIRE = (
    """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-' .. ARGV[1], ARGV[1])
local lapse = tonumber(ARGV[2])
for i = 5, #ARGV do
  redis.call('ZADD', KEYS[1], -lapse, ARGV[i])
end
local granted = 1
local score = redis.call('ZSCORE', KEYS[1], ARGV[3])
if score then
  if tonumber(score) < 0 then
    granted = 0
  elseif tonumber(score) < lapse then
    redis.call('ZADD', KEYS[1], lapse, ARGV[3])
  end
elseif redis.call('ZCOUNT', KEYS[1], '(' .. ARGV[1], '+inf') >= tonumber(ARGV[4]) then
  granted = 0
else
  redis.call('ZADD', KEYS[1], lapse, ARGV[3])
end
"""
    + _KEEP_UNTIL_LAPSE
    + "return granted\n"
)

# KEYS[1] the person's set; ARGV: [1] now, [2] lapse, [3] slot. 1 renewed, 0 no longer held (released or lapsed:
# not added back).
_RENEW = (
    """
local score = redis.call('ZSCORE', KEYS[1], ARGV[3])
if not score or tonumber(score) <= tonumber(ARGV[1]) then return 0 end
if tonumber(score) < tonumber(ARGV[2]) then redis.call('ZADD', KEYS[1], ARGV[2], ARGV[3]) end
"""
    + _KEEP_UNTIL_LAPSE
    + "return 1\n"
)

# KEYS[1] the person's set; ARGV: [1] now, [2] lapse, [3 ..] slots to mark released.
_RELEASE_MARKED = (
    """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-' .. ARGV[1], ARGV[1])
for i = 3, #ARGV do
  redis.call('ZADD', KEYS[1], -tonumber(ARGV[2]), ARGV[i])
end
"""
    + _KEEP_UNTIL_LAPSE
    + "return 1\n"
)


def socket_timeout(client: aioredis.Redis) -> float | None:
    """The socket timeout (seconds) ``client`` (single or cluster) was made with: how long it waits for a reply
    before it retries (:func:`bot.store.connect.connect_redis`); None when it waits for ever."""
    kwargs = getattr(client, "connection_kwargs", None)  # redis.asyncio.RedisCluster
    if kwargs is None:
        kwargs = client.connection_pool.connection_kwargs
    timeout = kwargs.get("socket_timeout")
    return float(timeout) if timeout is not None else None


class ActiveRuns:
    """Per-person slots of working runs; ``ttl`` (seconds): how long a slot lives unless renewed; ``clock``: the
    process's clock (Unix seconds), whose time the lapse times are (each process its own)."""

    def __init__(
        self, client: aioredis.Redis, *, keys: Keys, ttl: float = 120.0, clock: Callable[[], float] = time.time
    ) -> None:
        self.client = client
        self.keys = keys
        self.ttl = ttl
        self.clock = clock
        timeout = socket_timeout(client)
        # a taking whose reply took this long (seconds) may have been sent twice by redis-py (its retry after a
        # timed-out reply): its release marks it released (see the module docstring)
        self.resend_after = timeout if timeout is not None else float("inf")
        self._acquire = client.register_script(_ACQUIRE)
        self._renew = client.register_script(_RENEW)
        self._release_marked = client.register_script(_RELEASE_MARKED)

    def _times(self) -> list[int]:
        """[now, lapse], in ms by :attr:`clock`: the first two arguments of every script."""
        now = int(self.clock() * 1000)
        return [now, now + int(self.ttl * 1000)]

    async def acquire(self, person: str, *, slot: str, limit: int, drop: Collection[str] = ()) -> bool:
        """Take ``slot`` for ``person`` when fewer than ``limit`` are live (a slot already held is renewed), after
        removing the slots in ``drop`` (releases that failed earlier: marked released, see the module docstring); not
        granted either when ``slot`` itself was marked released first. Raises ``StoreUnavailable`` (the slot may
        have been taken: its reply can be lost after Redis applied it)."""
        try:
            granted = await self._acquire(
                keys=[self.keys.active_runs(person)], args=[*self._times(), slot, limit, *sorted(drop)]
            )
        except RedisError as exc:
            raise StoreUnavailable(f"Redis error while counting runs: {type(exc).__name__}") from None
        return int(granted) == 1

    def queue_acquire(
        self, batch: Batch, person: str, *, slot: str, limit: int, drop: Collection[str] = ()
    ) -> Later[bool]:
        """:meth:`acquire`, queued in ``batch`` (sent twice, as a batch whose reply was lost is, it finds its own
        slot held: still granted once)."""
        batch.script(
            self._acquire, keys=[self.keys.active_runs(person)], args=[*self._times(), slot, limit, *sorted(drop)]
        )
        return batch.read(lambda granted: int(granted) == 1)

    async def renew(self, person: str, *, slot: str) -> bool:
        """Keep ``slot`` alive another ``ttl`` seconds; False when it is no longer held (released, or lapsed: it is
        not added back). Raises ``StoreUnavailable``."""
        try:
            renewed = await self._renew(keys=[self.keys.active_runs(person)], args=[*self._times(), slot])
        except RedisError as exc:
            raise StoreUnavailable(f"Redis error while counting runs: {type(exc).__name__}") from None
        return int(renewed) == 1

    def queue_release(self, batch: Batch, person: str, *, slots: Collection[str], mark: bool = False) -> None:
        """:meth:`release`, queued in ``batch``."""
        if not slots:
            return
        if mark:
            batch.script(
                self._release_marked, keys=[self.keys.active_runs(person)], args=[*self._times(), *sorted(slots)]
            )
        else:
            batch.pipe.zrem(self.keys.active_runs(person), *slots)

    async def release(self, person: str, *, slots: Collection[str], mark: bool = False) -> None:
        """Give ``slots`` back (one no longer held is no error: a release may be sent twice). ``mark``: their
        taking may still land (reply lost or slow, given up in flight): each is marked released until it would have
        lapsed, so that taking takes nothing (see the module docstring). Raises ``StoreUnavailable``."""
        if not slots:
            return
        key = self.keys.active_runs(person)
        try:
            if mark:
                await self._release_marked(keys=[key], args=[*self._times(), *sorted(slots)])
            else:
                await self.client.zrem(key, *slots)
        except RedisError as exc:
            raise StoreUnavailable(f"Redis error while counting runs: {type(exc).__name__}") from None
