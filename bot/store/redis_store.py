"""``RedisRunStore``: runs in Redis (``redis.asyncio``), idempotent compare-and-set saves, deadlines, leases.

Layout: one hash per run at ``Keys.run(run_id)`` with fields ``rev`` (the revision, decimal), ``state`` (the
:class:`RunState` JSON, whose own ``revision`` equals ``rev``), ``wid`` (the id of the write that stored it) and, only
while it is ``running`` (a waiting question costs no more), ``owner`` (who saved it; absent in records saved before it
was kept: their lapsed leases are never taken back), ``waits`` (``"1"`` while a tool's question asked live waits for a
person) and ``seg`` (the revision at which its working segment began: the first ``running`` save after one that was
not, so a stop read from one segment never stops the next, and one read from an orphan stops whoever took it over);
the lease at ``Keys.lease(run_id)`` (same hash slot). One Lua script changes them together, so a reader never sees
them disagree. A lease renewal (:meth:`RedisRunStore.renew_lease`) takes a lapsed lease back for its owner only while
nobody else holds it and the run is still the ``running`` state that owner saved.

Lost replies: every save carries a write id. When Redis applied a save but the reply was lost and the save is
sent again (by redis-py's own retry, or by a caller retrying with the same ``write_id``), the script sees its
own write id at the new revision and answers "applied" instead of a conflict.

Deadlines: ``save(..., not_after=t)`` is refused when Redis's clock (``TIME``) is at or past ``t``, so which
of an answer and a deadline came first is judged by one clock, whichever process writes.

Round trips: ``load`` 1 (HGET, with any reads given ``beside`` it), ``save``/``create`` 1 (EVALSHA). A resume
is load + claim + final save = 3.

Retention (seconds): a suspended run is kept until its question's deadline plus ``retention``; every other run
``retention`` after its last save (default 7 days), so late answers are told "expired" from stored state and
who answered what stays auditable that long.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from bot.agent.state import RunState, utcnow
from bot.errors import QuestionExpired, RunConflict, RunNotFound, RunStopAsked, StoreCorrupt, StoreUnavailable
from bot.store.batch import Batch
from bot.store.keys import Keys

DEFAULT_RETENTION = 7 * 24 * 3600
DEFAULT_LEASE_TTL = 30.0
STOP_TTL = 3600  # seconds a stop request is kept at least (as long as its run, when that is longer)

# KEYS[1] run hash, KEYS[2] lease, KEYS[3] stop request (dropped with the lease). ARGV: [1] expected rev ("0" =
# must not exist), [2] new rev, [3] state JSON, [4] ttl ms, [5] write id, [6] deadline in ms since the epoch ("0" =
# none), [7] lease owner ("" = drop the lease and the stop request), [8] lease ttl ms, [9] "1" = the run starts to
# wait for a person: suspended, or a tool call's question asked live (refused while a stop is asked).
# Returns 1 written, 2 this write was applied before (lost reply), 0 revision mismatch, -1 missing (nothing
# created), -2 deadline passed, -3 a stop is asked (nothing written).
_CAS = """
local cur = redis.call('HGET', KEYS[1], 'rev')
if cur == ARGV[2] and redis.call('HGET', KEYS[1], 'wid') == ARGV[5] then
  return 2
end
if ARGV[1] == '0' then
  if cur then return 0 end
else
  if not cur then return -1 end
  if cur ~= ARGV[1] then return 0 end
end
if ARGV[9] == '1' and redis.call('EXISTS', KEYS[3]) == 1 then return -3 end
if ARGV[6] ~= '0' then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  if now >= tonumber(ARGV[6]) then return -2 end
end
if ARGV[7] ~= '' then
  if not redis.call('HGET', KEYS[1], 'owner') then redis.call('HSET', KEYS[1], 'seg', ARGV[2]) end
  redis.call('HSET', KEYS[1], 'rev', ARGV[2], 'state', ARGV[3], 'wid', ARGV[5], 'owner', ARGV[7])
  if ARGV[9] == '1' then redis.call('HSET', KEYS[1], 'waits', '1') else redis.call('HDEL', KEYS[1], 'waits') end
else
  redis.call('HSET', KEYS[1], 'rev', ARGV[2], 'state', ARGV[3], 'wid', ARGV[5])
  redis.call('HDEL', KEYS[1], 'owner', 'seg', 'waits')
end
redis.call('PEXPIRE', KEYS[1], ARGV[4])
if ARGV[7] ~= '' then
  redis.call('SET', KEYS[2], ARGV[7], 'PX', ARGV[8])
else
  redis.call('DEL', KEYS[2], KEYS[3])
end
return 1
"""

# KEYS[1] run hash, KEYS[2] lease, KEYS[3] stop request. ARGV: [1] who asked, [2] the revision of the run as read
# while it was running ("" = it was not), [3] ttl ms. 1 asked (a live lease on the working segment that was read,
# or the run is still at that revision: an orphan, taken over later, however late), kept as long as the run (at
# least ttl): its driver may die before its next step, and whoever takes it over later is stopped by it; 0 nothing
# works (it asked, ended or moved on to another segment since it was read, or it waits for a person now: a tool's
# question asked live since it was read).
_STOP = """
local run = redis.call('HMGET', KEYS[1], 'rev', 'seg', 'waits')
if run[3] == '1' then return 0 end
local this_segment = ARGV[2] ~= '' and (not run[2] or tonumber(run[2]) <= tonumber(ARGV[2]))
if (this_segment and redis.call('EXISTS', KEYS[2]) == 1) or run[1] == ARGV[2] then
  local keep = math.max(redis.call('PTTL', KEYS[1]), tonumber(ARGV[3]))
  redis.call('SET', KEYS[3], ARGV[1], 'PX', keep)
  return 1
end
return 0
"""

# KEYS[1] lease, KEYS[2] run hash; ARGV: [1] owner, [2] ttl ms, [3] the revision the owner drives. 1 renewed (or
# taken back: it lapsed, nobody took it, and the run is still the running state this owner saved), 0 held by
# someone else, or the run moved on (another process took it over and saved, or it ended, or expired).
_RENEW = """
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
local run = redis.call('HMGET', KEYS[2], 'rev', 'owner')
if not holder and run[1] == ARGV[3] and run[2] == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
return 0
"""


class Rider:
    """Commands to send with the save that next stops a run working (its status no longer ``running``: the end of
    its working segment), in the same round trip, e.g. giving back the run slot of the request that made it work:
    ``queue(batch)`` queues them in that save's :class:`~bot.store.batch.Batch` (idempotent writes: the batch may be
    sent twice). ``sent``: True once a save carried them. See :meth:`RedisRunStore.ride`."""

    def __init__(self, queue: Callable[[Batch], None]) -> None:
        self.queue = queue
        self.sent = False


def new_write_id() -> str:
    """A unique id for one logical write (reused when that write is retried)."""
    return secrets.token_hex(8)


class RedisRunStore:
    """Run store on Redis; implements :class:`bot.agent.store.RunStore` (see the module docstring).

    ``client``: a ``redis.asyncio.Redis`` (``decode_responses`` either way); use
    :func:`bot.store.connect_redis` for retries and health checks. ``retention`` and ``lease_ttl`` in seconds.
    """

    def __init__(
        self,
        client: aioredis.Redis,
        *,
        prefix: str | None = None,
        retention: int = DEFAULT_RETENTION,
        lease_ttl: float = DEFAULT_LEASE_TTL,
    ) -> None:
        self.client = client
        self.keys = Keys(prefix) if prefix is not None else Keys()
        self.retention = retention
        self.lease_ttl = lease_ttl
        self._cas = client.register_script(_CAS)
        self._renew = client.register_script(_RENEW)
        self._stop = client.register_script(_STOP)
        self._riders: dict[str, list[Rider]] = {}  # run_id -> what rides with its next segment-ending save

    def ride(self, run_id: str, rider: Rider) -> None:
        """Send ``rider`` with this process's next save of ``run_id`` that stops it working, once;
        :meth:`forget_ride` when that no longer matters."""
        self._riders.setdefault(run_id, []).append(rider)

    def forget_ride(self, run_id: str, rider: Rider) -> None:
        """Drop ``rider`` (given to :meth:`ride`) if no save took it yet."""
        riders = self._riders.get(run_id)
        if riders is not None and rider in riders:
            riders.remove(rider)
            if not riders:
                del self._riders[run_id]

    def ttl_for(self, state: RunState) -> int:
        """Seconds to keep a record in this state after a save: a suspended run until its question's deadline
        plus ``retention`` (a batch of approvals: its latest call's deadline), any other ``retention``."""
        pending = state.pending
        deadlines = [c.expires_at for c in pending.calls() if c.expires_at is not None] if pending is not None else []
        if state.status == "suspended" and deadlines:
            left = (max(deadlines) - utcnow()).total_seconds()
            return max(1, int(left) + 1) + self.retention
        return self.retention

    async def create(self, state: RunState, *, owner: str, write_id: str | None = None) -> RunState:
        """Store a new run (revision 1). Raises ``RunConflict`` if the id exists, ``StoreUnavailable``."""
        return await self._write(state.model_copy(update={"revision": 0}), owner=owner, write_id=write_id)

    async def load(self, run_id: str, *, beside: Batch | None = None) -> RunState:
        """Load a run; ``beside``: a batch of other reads, run with the load (one round trip). Raises
        ``RunNotFound``, ``StoreCorrupt`` (with ``run_id``), ``StoreUnavailable``."""
        batch = beside if beside is not None else Batch(self.client)
        batch.pipe.hget(self.keys.run(run_id), "state")
        got = batch.read(lambda value: value)
        await batch.run("loading a run")
        raw: Any = got.value
        if raw is None:
            raise RunNotFound(run_id)
        try:
            state = RunState.from_json(raw)
        except StoreCorrupt as exc:
            exc.run_id = run_id
            raise
        if state.run_id != run_id:
            wrong = StoreCorrupt(f"record under run {run_id} belongs to run {state.run_id}")
            wrong.run_id = run_id
            raise wrong
        return state

    async def save(
        self,
        state: RunState,
        *,
        owner: str,
        not_after: datetime | None = None,
        write_id: str | None = None,
    ) -> RunState:
        """Compare-and-set on ``state.revision`` (must be >= 1); see the module docstring.

        ``write_id``: pass the same value when retrying one logical write (a fresh one is made otherwise).
        Raises ``RunConflict``, ``RunNotFound``, ``QuestionExpired`` (``not_after`` passed), ``StoreUnavailable``.
        """
        if state.revision < 1:
            raise ValueError("save() needs a loaded or created state (revision >= 1); use create()")
        return await self._write(state, owner=owner, not_after=not_after, write_id=write_id)

    async def renew_lease(self, run_id: str, *, owner: str, revision: int) -> bool:
        """Extend ``owner``'s lease by ``lease_ttl``; a lease that lapsed (the owner could not renew it in time)
        and that nobody took is taken back while the run is still at ``revision`` (the one ``owner`` drives).
        False: another process holds it, or the run moved on (taken over and saved, ended, expired). One round
        trip. Raises ``StoreUnavailable``."""
        keys = [self.keys.lease(run_id), self.keys.run(run_id)]
        try:
            renewed = await self._renew(keys=keys, args=[owner, int(self.lease_ttl * 1000), str(revision)])
        except RedisError as exc:
            raise StoreUnavailable(f"Redis error while renewing a lease: {type(exc).__name__}") from None
        return int(renewed) == 1

    async def lease_owner(self, run_id: str) -> str | None:
        """Who holds the run's lease, or None. Raises ``StoreUnavailable``."""
        try:
            value: Any = await self.client.get(self.keys.lease(run_id))
        except RedisError as exc:
            raise StoreUnavailable(f"Redis error while reading a lease: {type(exc).__name__}") from None
        if value is None:
            return None
        return value.decode() if isinstance(value, bytes) else str(value)

    async def request_stop(self, state: RunState, *, by: str) -> bool:
        """Ask whoever drives run ``state.run_id`` (as just loaded) to stop it (``by``: who asked), if it works:
        while a process holds its lease, or, for a ``running`` run nobody drives (an orphan, stopped by whoever
        takes it over), while it is still at ``state.revision``. False when nothing works: it asked, ended or moved
        on to another working segment since ``state`` was read, so no later segment (the reply to an answer, a
        Retry) is stopped by it. The request lasts as long as the run (at least an hour: a driver may die before its
        next step, and whoever takes the run over, however late, is stopped by it), or until the save that ends the
        run's working segment. One round trip. Raises ``StoreUnavailable``."""
        run_id = state.run_id
        keys = [self.keys.run(run_id), self.keys.lease(run_id), self.keys.stop(run_id)]
        revision = str(state.revision) if state.status == "running" else ""
        try:
            asked = await self._stop(keys=keys, args=[by, revision, STOP_TTL * 1000])
        except RedisError as exc:
            raise StoreUnavailable(f"Redis error while asking a run to stop: {type(exc).__name__}") from None
        return int(asked) == 1

    async def stop_requested(self, run_id: str) -> str | None:
        """Who asked run ``run_id`` to stop (``""`` when nobody said), or None. Raises ``StoreUnavailable``."""
        try:
            value: Any = await self.client.get(self.keys.stop(run_id))
        except RedisError as exc:
            raise StoreUnavailable(f"Redis error while reading a stop request: {type(exc).__name__}") from None
        if value is None:
            return None
        return value.decode() if isinstance(value, bytes) else str(value)

    async def now(self) -> datetime:
        """Redis's clock (``TIME``), by which deadlines are judged. Raises ``StoreUnavailable``."""
        try:
            seconds, micros = await self.client.time()
        except RedisError as exc:
            raise StoreUnavailable(f"Redis error while reading its clock: {type(exc).__name__}") from None
        return datetime.fromtimestamp(int(seconds) + int(micros) / 1e6, tz=UTC)

    async def _write(
        self, state: RunState, *, owner: str, not_after: datetime | None = None, write_id: str | None = None
    ) -> RunState:
        new = state.model_copy(update={"revision": state.revision + 1, "updated_at": utcnow()})
        deadline = int(not_after.timestamp() * 1000) if not_after is not None else 0
        batch = Batch(self.client)
        batch.script(
            self._cas,
            keys=[self.keys.run(state.run_id), self.keys.lease(state.run_id), self.keys.stop(state.run_id)],
            args=[
                str(state.revision),
                str(new.revision),
                new.to_json(),
                self.ttl_for(new) * 1000,
                write_id or new_write_id(),
                deadline,
                owner if new.status == "running" else "",
                int(self.lease_ttl * 1000),
                "1" if new.status == "suspended" or new.asks_live else "0",  # it starts to wait for a person
            ],
        )
        result = batch.read(int)
        riding = list(self._riders.get(state.run_id, ())) if new.status != "running" else []
        for rider in riding:
            rider.queue(batch)
        await batch.run("saving a run")
        for rider in riding:
            rider.sent = True
            self.forget_ride(state.run_id, rider)
        code = result.value
        if code in (1, 2):
            return new
        if code == -1:
            raise RunNotFound(state.run_id)
        if code == -3:
            raise RunStopAsked(state.run_id, by=await self.stop_requested(state.run_id) or "")
        if code == -2:
            pending = state.pending
            raise QuestionExpired(
                run_id=state.run_id, tool_call_id=pending.tool_call_id if pending else None, expires_at=not_after
            )
        raise RunConflict(state.run_id)
