"""Things due later, kept in Redis so they happen once, whichever process is alive (:class:`Schedule`), and the loop
that carries them out (:class:`Scheduler`).

Why a sorted set here rather than a job library's delayed jobs: a due item must be moved, replaced or dropped when
a question is answered early (a reminder must never fire after the answer), and fire on Redis's clock (the clock
deadlines are judged by); one sorted set gives both with one key and two small scripts, on the Redis the bot already
has, and stays correct with several processes and after restarts.

- ``{prefix}due`` (:meth:`bot.store.keys.Keys.due`): members are :class:`DueItem` s as JSON text, scores the time
  (milliseconds since the epoch, Redis's clock) they are due.
- Claiming (:meth:`Schedule.claim`, one script): the items due now are moved ``lease`` seconds ahead and returned,
  atomically: two processes never claim the same item at once, and an item whose process died while carrying it out
  comes back when its lease ends (at least once; every handler is written to be idempotent).
- Done (:meth:`Schedule.done`): removed only if still at the score its claim gave it, so an item the handler
  re-added for a later time (the next reminder) is kept.
- Cost: an idle process makes one script call per tick (:data:`TICK`), however many items wait; each due item
  costs its claim share and one ``done``. Tests pass ``now`` to :meth:`Scheduler.tick` instead of sleeping.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from bot.errors import StoreUnavailable
from bot.store.batch import Batch
from bot.store.keys import Keys

log = logging.getLogger(__name__)

TICK = 0.5  # seconds between two claims of an idle process
LEASE = 60.0  # seconds a claimed item is held before it may be claimed again
BATCH = 100  # items one claim takes at most
CONCURRENCY = 20  # items one process carries out at once
MAX_TRIES = 10  # a handler failing this often gives its item up (logged), instead of trying forever

# KEYS[1] due. ARGV: [1] now ms ("" = Redis TIME), [2] lease ms, [3] limit. Returns {now, lease-until, items...}.
_CLAIM = """
local now = tonumber(ARGV[1])
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[3]))
local held = now + tonumber(ARGV[2])
local out = {tostring(now), tostring(held)}
for _, member in ipairs(due) do
  redis.call('ZADD', KEYS[1], held, member)
  out[#out + 1] = member
end
return out
"""

# KEYS[1] due. ARGV: [1] member, [2] its claimed score. 1 removed, 0 moved meanwhile (kept).
_DONE = """
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if score and tonumber(score) == tonumber(ARGV[2]) then
  return redis.call('ZREM', KEYS[1], ARGV[1])
end
return 0
"""

# KEYS[1] due. ARGV: [1] n, [2 .. n+1] members to drop, then per item to add four: "LT" to keep an earlier one (an
# item being carried out is at its lease's end, later: LT moves it, so its done() keeps it for the new time) or "",
# at ms ("" = Redis TIME + after), after ms, member. Returns how many were added. One script for many items (not a
# pipeline of scripts: redis-py's cluster pipelines refuse EVALSHA), on the one key: one round trip on a cluster.
_CHANGE = """
local n = tonumber(ARGV[1])
for i = 2, n + 1 do
  redis.call('ZREM', KEYS[1], ARGV[i])
end
local now = nil
local added = 0
for i = n + 2, #ARGV, 4 do
  local at = tonumber(ARGV[i + 1])
  if not at then
    if not now then
      local t = redis.call('TIME')
      now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    end
    at = now + tonumber(ARGV[i + 2])
  end
  if ARGV[i] == 'LT' then
    added = added + redis.call('ZADD', KEYS[1], 'LT', at, ARGV[i + 3])
  else
    added = added + redis.call('ZADD', KEYS[1], at, ARGV[i + 3])
  end
end
return added
"""


@dataclass(frozen=True)
class DueItem:
    """Something due: ``kind`` (which handler), ``run_id`` and ``key`` (e.g. a tool_call_id, or a person), ``n``
    (e.g. which reminder)."""

    kind: str
    run_id: str = ""
    key: str = ""
    n: int = 0

    def member(self) -> str:
        """The sorted-set member: compact JSON ``[kind, run_id, key, n]``."""
        return json.dumps([self.kind, self.run_id, self.key, self.n], separators=(",", ":"), ensure_ascii=False)

    @classmethod
    def of(cls, member: str | bytes) -> DueItem | None:
        """Parse a member; None for one this release does not know (logged by the caller)."""
        try:
            kind, run_id, key, n = json.loads(member)
            return cls(str(kind), str(run_id), str(key), int(n))
        except (ValueError, TypeError):
            return None


@dataclass(frozen=True)
class Due:
    """``item`` to be due ``at`` (an aware datetime; never before it, to the millisecond), else ``after`` seconds from
    now by Redis's clock; ``keep_earlier``: leave it as it is when it is already due sooner (a debounce; one being
    carried out now is due again at the new time)."""

    item: DueItem
    at: datetime | None = None
    after: float = 0.0
    keep_earlier: bool = False


@dataclass(frozen=True)
class Claimed:
    """An item a claim took: carry it out, then :meth:`Schedule.done` with ``held`` (the score the claim gave)."""

    item: DueItem | None
    member: str
    held: int


class Schedule:
    """The due items of one deployment (key prefix), on ``client``. Every method raises ``StoreUnavailable``."""

    def __init__(self, client: aioredis.Redis, *, prefix: str | None = None) -> None:
        self.client = client
        keys = Keys(prefix) if prefix is not None else Keys()
        self.key = keys.due()
        self.tries_key = keys.due_tries()
        self._claim = client.register_script(_CLAIM)
        self._done = client.register_script(_DONE)
        self._change = client.register_script(_CHANGE)

    async def add(
        self, item: DueItem, *, at: datetime | None = None, after: float = 0.0, keep_earlier: bool = False
    ) -> None:
        """Make ``item`` due (see :class:`Due`)."""
        await self.change(add=[Due(item, at=at, after=after, keep_earlier=keep_earlier)])

    async def change(self, *, add: Sequence[Due] = (), drop: Sequence[DueItem] = ()) -> None:
        """Drop the items of ``drop`` (those not scheduled are ignored), then schedule those of ``add``: one script
        call, one round trip, also on a cluster (one key)."""
        if not add and not drop:
            return
        try:
            await self._change(keys=[self.key], args=self._change_args(add, drop))
        except RedisError as exc:
            raise StoreUnavailable(f"Redis error while scheduling items: {type(exc).__name__}") from None

    def queue_change(self, batch: Batch, *, add: Sequence[Due] = (), drop: Sequence[DueItem] = ()) -> None:
        """:meth:`change`, queued in ``batch`` (so it costs no round trip of its own; sent twice it changes
        nothing more: an item added ``after`` seconds is due that long after the second send)."""
        if add or drop:
            batch.script(self._change, keys=[self.key], args=self._change_args(add, drop))

    @staticmethod
    def _change_args(add: Sequence[Due], drop: Sequence[DueItem]) -> list[str | int]:
        args: list[str | int] = [len(drop), *(item.member() for item in drop)]
        for due in add:
            at = str(math.ceil(due.at.timestamp() * 1000)) if due.at is not None else ""
            args += ["LT" if due.keep_earlier else "", at, int(due.after * 1000), due.item.member()]
        return args

    async def claim(self, *, now: datetime | None = None, lease: float = LEASE, limit: int = BATCH) -> list[Claimed]:
        """Take the items due at ``now`` (default: Redis's clock), at most ``limit``, holding them ``lease``
        seconds."""
        now_ms = str(int(now.timestamp() * 1000)) if now is not None else ""
        raw = await self._run(self._claim, [now_ms, int(lease * 1000), limit], "claim due items")
        held = int(float(_text(raw[1])))
        return [Claimed(DueItem.of(m), _text(m), held) for m in raw[2:]]

    async def done(self, claimed: Claimed) -> None:
        """Remove a carried-out item, unless it was scheduled again meanwhile."""
        await self._run(self._done, [claimed.member, claimed.held], "finish a scheduled item")

    async def failed(self, claimed: Claimed) -> int:
        """Count a failed attempt at ``claimed`` (kept a day); returns how many there were."""
        try:
            async with self.client.pipeline(transaction=True) as pipe:
                pipe.hincrby(self.tries_key, claimed.member, 1)
                pipe.expire(self.tries_key, 86400)
                tries, _ = await pipe.execute()
        except RedisError as exc:
            raise StoreUnavailable(f"Redis error while counting a failed item: {type(exc).__name__}") from None
        return int(tries)

    async def due_at(self, item: DueItem) -> float | None:
        """When ``item`` is due (seconds since the epoch), or None when it is not scheduled."""
        try:
            score = await self.client.zscore(self.key, item.member())
        except RedisError as exc:
            raise StoreUnavailable(f"Redis error while reading a scheduled item: {type(exc).__name__}") from None
        return float(score) / 1000 if score is not None else None

    async def size(self) -> int:
        """How many items are scheduled."""
        try:
            return int(await self.client.zcard(self.key))
        except RedisError as exc:
            raise StoreUnavailable(f"Redis error while counting scheduled items: {type(exc).__name__}") from None

    async def _run(self, script: Any, args: list[Any], what: str) -> Any:
        try:
            return await script(keys=[self.key], args=args)
        except RedisError as exc:
            raise StoreUnavailable(f"Redis error while trying to {what}: {type(exc).__name__}") from None


Handler = Callable[[DueItem], Awaitable[None]]


class Scheduler:
    """Carries out due items with ``handlers`` (by ``DueItem.kind``): every ``tick`` seconds it claims what is due,
    runs the handlers (at most ``concurrency`` at once) and marks each done. A handler that raises leaves its item
    to be claimed again once its lease ends (logged), up to :data:`MAX_TRIES` times; an item of an unknown kind is
    dropped (logged)."""

    def __init__(
        self,
        schedule: Schedule,
        handlers: Mapping[str, Handler],
        *,
        tick: float = TICK,
        lease: float = LEASE,
        batch: int = BATCH,
        concurrency: int = CONCURRENCY,
    ) -> None:
        self.schedule = schedule
        self.handlers = dict(handlers)
        self.tick_every = tick
        self.lease = lease
        self.batch = batch
        self._slots = asyncio.Semaphore(concurrency)
        self._down = False
        self._stop = asyncio.Event()

    async def tick(self, *, now: datetime | None = None) -> int:
        """Claim and carry out what is due at ``now`` (default: Redis's clock); returns how many items were
        claimed. Raises ``StoreUnavailable`` when the claim itself fails."""
        claimed = await self.schedule.claim(now=now, lease=self.lease, limit=self.batch)
        if claimed:
            await asyncio.gather(*(self._carry_out(c) for c in claimed))
        return len(claimed)

    def stop(self) -> None:
        """Make :meth:`run` return after the tick in hand."""
        self._stop.set()

    async def run(self) -> None:
        """Tick until :meth:`stop` (or cancelled); a full batch is followed at once by the next claim."""
        while not self._stop.is_set():
            task = asyncio.current_task()
            if task is not None and task.cancelling():  # a cancellation a client library swallowed
                raise asyncio.CancelledError
            try:
                taken = await self.tick()
                if self._down:
                    log.info("scheduler: Redis answers again")
                self._down = False
            except StoreUnavailable as exc:
                if not self._down:
                    log.warning("scheduler: %s; retrying", exc)
                self._down, taken = True, 0
            if taken < self.batch:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), self.tick_every)

    async def _carry_out(self, claimed: Claimed) -> None:
        item = claimed.item
        handler = self.handlers.get(item.kind) if item is not None else None
        if item is None or handler is None:
            log.warning("scheduler: dropped an item this release does not know: %s", claimed.member[:200])
            await self._done(claimed)
            return
        async with self._slots:
            try:
                await handler(item)
            except Exception:
                tries = await self._failed(claimed)
                if tries < MAX_TRIES:
                    log.exception("scheduler: %s of run %s failed; it is tried again later", item.kind, item.run_id)
                    return
                log.exception("scheduler: %s of run %s failed %d times; given up", item.kind, item.run_id, tries)
        await self._done(claimed)

    async def _failed(self, claimed: Claimed) -> int:
        try:
            return await self.schedule.failed(claimed)
        except StoreUnavailable:
            return 0

    async def _done(self, claimed: Claimed) -> None:
        try:
            await self.schedule.done(claimed)
        except StoreUnavailable as exc:  # it comes back after its lease; handlers are idempotent
            log.warning("scheduler: could not mark an item done (%s)", exc)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
