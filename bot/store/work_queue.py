"""A work queue on a Redis stream: ``web`` processes ack Slack and enqueue; ``worker`` processes run the job.

Jobs are JSON objects carrying ``"v"`` (the job shape's version, :data:`JOB_VERSION`) and a unique ``"id"``.
Enqueueing is idempotent: a marker key per job id is set with the XADD in one script, so an XADD resent after its
reply was lost (by redis-py's retry) queues nothing twice. Delivery is at least once: a worker acknowledges
(``XACK`` + ``XDEL``) a job after handling it, whatever the handler did (a job that always fails must not loop);
an acknowledgement an outage refused is retried until Redis answers (:class:`bot.outage.Owed`), else the job
would stay pending under a live worker and be run again, much later, when another reclaims it.

Who died is told by a liveness lease, not by how long a job has been pending: each consumer keeps the key
``Keys.work_lease(name)`` alive (TTL ``lease_ttl`` s, refreshed every third of it, by a task of its own, so a
worker whose slots are all busy keeps it too). Every third of ``lease_ttl`` a worker lists the group's consumers
(``XINFO CONSUMERS``) and, for each other consumer whose lease is gone and that Redis saw idle (no job delivered
or claimed) longer than ``lease_ttl``, moves that consumer's pending jobs to itself in one script (lease still
absent, ``XPENDING`` of that consumer, ``XCLAIM``) and runs them with ``"redelivered": True``. A job pending for a
live consumer is never taken, however long it runs. Workers of the first release (no lease; consumer names
``host:pid``, which this release's ``host:pid:<random>`` never matches) keep their own rule while a deploy rolls:
taken once idle :data:`LEGACY_IDLE` seconds (they touch their jobs every 40 s).

Versions: a worker handles jobs of its version and older ones (its handler upgrades their shape, see
:class:`bot.slack.transport.runner.LazyJobs`). A job of a newer version is left for a newer worker: it is moved
(``XCLAIM``) to the pending list of the consumer ``park:v<version>``, which has no lease; a worker takes parked jobs
of versions it knows (not flagged as redelivered: they never ran), and ignores the others. A deploy never drops
queued work, and an old worker meets a newer job once, not in a loop.

Every key is in the ``{work}`` hash slot (stream, job markers, leases), so all this works on Redis Cluster.

Round trips: ``enqueue`` 1 (the script: ``SET NX`` + ``XADD``); a worker reads up to ``batch`` jobs per
``XREADGROUP``, and never more than it has free slots (a job read into a busy worker would wait there while another
worker may be idle), acks each job in 1 (a script), refreshes its lease in 1 (+1 to keep its jobs' idle time low for
releases that still reclaim by idle time), and scans for dead consumers in 1 + 1 per dead or parked consumer.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import socket
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import RedisError, ResponseError

from bot import outage
from bot.errors import StoreUnavailable
from bot.store.keys import Keys

log = logging.getLogger(__name__)

GROUP = "workers"
JOB_VERSION = 1
JOB_MARKER_TTL = 24 * 3600  # seconds a job id is remembered (longer than any job waits in the stream)
LEASE_TTL = 10.0  # seconds a worker's lease outlives its last refresh (refreshed every third of it)
PARKED = "park:v"  # + a job version: the consumer holding jobs of that version for a worker that knows it
LEGACY_IDLE = 120.0  # seconds: the first release's reclaim_after (its workers, without a lease, touch jobs every 40 s)
_LEGACY_NAME = re.compile(r"[^:]+:\d+")  # the first release's consumer names: host:pid

# KEYS[1] stream, KEYS[2] job marker; ARGV: [1] job JSON, [2] marker ttl s. Returns the entry id, or false when
# this job id was queued already. No MAXLEN: handled jobs are deleted, so the stream holds only unhandled work, and
# trimming would drop a person's click unseen.
_ENQUEUE = """
if not redis.call('SET', KEYS[2], 1, 'NX', 'EX', ARGV[2]) then return false end
return redis.call('XADD', KEYS[1], '*', 'job', ARGV[1])
"""
# KEYS[1] stream, KEYS[2] the owner's lease; ARGV: [1] group, [2] owner, [3] claimer, [4] count. When the lease is
# absent: moves up to count of the owner's pending entries to the claimer and returns them ([id, fields] each);
# deletes the owner from the group once it holds nothing. Two workers claiming the same owner never both get a job.
_CLAIM = """
if redis.call('EXISTS', KEYS[2]) == 1 then return {} end
local pending = redis.call('XPENDING', KEYS[1], ARGV[1], '-', '+', tonumber(ARGV[4]), ARGV[2])
local claimed = {}
if #pending > 0 then
  local ids = {}
  for i, p in ipairs(pending) do ids[i] = p[1] end
  claimed = redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[3], 0, unpack(ids))
end
if #pending < tonumber(ARGV[4]) then redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], ARGV[2]) end
return claimed
"""
# KEYS[1] stream; ARGV[1] group, ARGV[2] entry id: acknowledge and delete a handled job.
_ACK = """
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
return redis.call('XDEL', KEYS[1], ARGV[2])
"""
Handler = Callable[[dict[str, Any]], Awaitable[None]]


@dataclass(frozen=True)
class QueueStats:
    """What the queue holds: ``jobs`` not yet handled (waiting or being handled), ``in_progress`` of them delivered
    to a worker (or parked for a newer one), and ``oldest_age_s``: seconds since the oldest was queued (by this
    machine's clock against the entry id's time), ``None`` when the queue is empty."""

    jobs: int
    in_progress: int
    oldest_age_s: float | None


def _version(job: dict[str, Any]) -> int | None:
    """The job's shape version (``1`` when absent, as queued by the first release); ``None`` when malformed."""
    v = job.get("v", 1)
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 1 else None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class WorkQueue:
    """The job stream at ``Keys.work()`` (it holds only jobs not yet handled: handled ones are deleted).
    ``version``: the newest job version this process writes and handles (tests make older and newer workers).
    One :meth:`consume` at a time per instance."""

    def __init__(self, client: aioredis.Redis, *, keys: Keys, version: int = JOB_VERSION) -> None:
        self.client = client
        self.keys = keys
        self.key = keys.work()
        self.version = version
        self._enqueue = client.register_script(_ENQUEUE)
        self._claim = client.register_script(_CLAIM)
        self._ack = client.register_script(_ACK)
        self._acks = outage.Owed("acknowledging handled jobs")  # acks an outage refused, retried until it ends
        self._handled: set[Any] = set()  # entry ids handled whose ack is owed: skipped when pending jobs are re-read
        self._in_flight: set[Any] = set()  # entry ids being handled by this consumer

    async def enqueue(self, job: dict[str, Any]) -> str:
        """Add a job (``"v"`` and a unique ``"id"`` are added when absent); returns its id. Sending the same job
        id twice queues it once. Raises ``StoreUnavailable``."""
        job = {"v": self.version, "id": uuid.uuid4().hex, **job}
        try:
            await self._enqueue(
                keys=[self.key, self.keys.work_job(str(job["id"]))],
                args=[json.dumps(job), JOB_MARKER_TTL],
            )
            return str(job["id"])
        except RedisError as exc:
            raise StoreUnavailable(f"Redis error while queueing work: {type(exc).__name__}") from None

    async def stats(self) -> QueueStats:
        """Queue depth and the oldest job's age (3 commands in one pipeline). Raises ``StoreUnavailable``."""
        try:
            async with self.client.pipeline(transaction=False) as pipe:
                pipe.xlen(self.key)
                pipe.xpending(self.key, GROUP)
                pipe.xrange(self.key, "-", "+", count=1)
                length, pending, oldest = await pipe.execute(raise_on_error=False)
        except RedisError as exc:
            raise StoreUnavailable(f"Redis error while reading the work queue: {type(exc).__name__}") from None
        if isinstance(length, Exception):
            raise StoreUnavailable(f"Redis error while reading the work queue: {type(length).__name__}")
        in_progress = 0 if isinstance(pending, Exception) else int(pending["pending"])  # NOGROUP: none taken yet
        age = None
        if oldest and not isinstance(oldest, Exception):
            age = max(0.0, time.time() - int(_text(oldest[0][0]).split("-")[0]) / 1000)
        return QueueStats(jobs=int(length), in_progress=in_progress, oldest_age_s=age)

    async def consume(
        self,
        handler: Handler,
        *,
        consumer: str | None = None,
        concurrency: int = 200,
        batch: int = 50,
        block_ms: int = 1000,
        lease_ttl: float = LEASE_TTL,
        stop: asyncio.Event | None = None,
        grace: float | None = None,
    ) -> None:
        """Run ``handler`` on jobs until ``stop`` is set (or the task is cancelled), at most ``concurrency``
        at once; then finish the jobs in hand (for at most ``grace`` seconds, None: however long they take; a job
        still going then is left unacknowledged, run again elsewhere) and drop the lease. Redis errors are logged
        and retried after a pause; handler errors are logged and the job is acknowledged. ``consumer``: this
        worker's name in the group (default ``host:pid:<random>``); ``lease_ttl``: seconds (see the module
        docstring)."""
        name = consumer or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        stop = stop or asyncio.Event()
        slots = asyncio.Semaphore(concurrency)
        tasks: set[asyncio.Task[None]] = set()
        await self._ensure_group()
        await self._refresh_lease(name, lease_ttl)
        leasing = asyncio.ensure_future(self._keep_lease(name, lease_ttl))
        try:
            await self._loop(
                handler,
                name=name,
                slots=slots,
                tasks=tasks,
                batch=batch,
                concurrency=concurrency,
                block_ms=block_ms,
                lease_ttl=lease_ttl,
                stop=stop,
            )
            if tasks:
                await asyncio.wait(tasks, timeout=grace)
        finally:
            leasing.cancel()
            await self._acks.flush()  # before the lease goes: an unacknowledged job would be run again elsewhere
            await self._acks.aclose()
        with contextlib.suppress(RedisError):
            await self.client.delete(self.keys.work_lease(name))

    async def _loop(
        self,
        handler: Handler,
        *,
        name: str,
        slots: asyncio.Semaphore,
        tasks: set[asyncio.Task[None]],
        batch: int,
        concurrency: int,
        block_ms: int,
        lease_ttl: float,
        stop: asyncio.Event,
    ) -> None:
        loop = asyncio.get_running_loop()
        last_scan = 0.0
        own_pending = True  # jobs this consumer name took before a restart are read first
        while not stop.is_set():
            # Only as many jobs as there are free slots: a job read into a busy worker would wait there, pending
            # (no other worker takes it while this one lives), while another worker may stand idle.
            free = min(batch, concurrency - len(tasks))
            if free <= 0:
                await asyncio.wait(tasks, timeout=block_ms / 1000, return_when=asyncio.FIRST_COMPLETED)
                continue
            entries: list[tuple[Any, dict[Any, Any], bool]] = []  # (entry id, fields, redelivered)
            try:
                if loop.time() - last_scan > lease_ttl / 3:
                    last_scan = loop.time()
                    entries += await self._take_orphans(name, lease_ttl=lease_ttl, batch=free)
                # After a Redis error, first re-read this consumer's own pending jobs ("0"): a read whose reply was
                # lost delivered them to us, and nobody else would take them while our lease lives.
                start = "0" if own_pending else ">"
                read: Any = await self.client.xreadgroup(
                    GROUP,
                    name,
                    {self.key: start},
                    count=batch if own_pending else free,
                    block=None if own_pending else block_ms,
                )
                own_pending = False
                for _stream, items in read or []:
                    entries += [(entry_id, fields, False) for entry_id, fields in items]
            except ResponseError as exc:
                if "NOGROUP" in str(exc) or "no such key" in str(exc):
                    await self._ensure_group()
                    continue
                log.warning("work queue: Redis error %s; retrying", type(exc).__name__)
                await asyncio.sleep(1)
                continue
            except RedisError as exc:
                log.warning("work queue: Redis error %s; retrying", type(exc).__name__)
                own_pending = True
                await asyncio.sleep(1)
                continue
            newer: dict[int, list[Any]] = {}
            for entry_id, fields, redelivered in entries:
                if entry_id in self._in_flight or entry_id in self._handled or not fields:
                    continue
                job = _parse(fields)
                version = _version(job) if job is not None else None
                if version is not None and version > self.version:
                    newer.setdefault(version, []).append(entry_id)
                    continue
                if job is not None and version is not None and redelivered:
                    job["redelivered"] = True  # a dead worker held it: the handler may have to finish its work
                self._in_flight.add(entry_id)
                await slots.acquire()
                task = asyncio.ensure_future(self._run(handler, entry_id, job if version is not None else None, slots))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            if newer and not await self._park(name, newer):
                own_pending = True  # read them again and retry

    async def _take_orphans(self, name: str, *, lease_ttl: float, batch: int) -> list[tuple[Any, dict[Any, Any], bool]]:
        """Move to ``name`` the pending jobs of dead consumers and the parked jobs of versions this worker knows."""
        taken: list[tuple[Any, dict[Any, Any], bool]] = []
        for info in await self.client.xinfo_consumers(self.key, GROUP):
            owner = _text(info.get("name"))
            if owner == name:
                continue
            if owner.startswith(PARKED):
                parked = owner[len(PARKED) :]
                if not parked.isdigit() or int(parked) > self.version:
                    continue  # for a newer worker
                redelivered = False
            elif int(info.get("idle", 0)) <= (LEGACY_IDLE if _LEGACY_NAME.fullmatch(owner) else lease_ttl) * 1000:
                continue  # seen lately
            else:
                redelivered = True
            claimed: Any = await self._claim(
                keys=[self.key, self.keys.work_lease(owner)], args=[GROUP, owner, name, batch]
            )
            if claimed and redelivered:
                log.warning("work queue: %d job(s) of the dead worker %s taken over", len(claimed), owner)
            for entry in claimed or []:
                if entry and entry[1]:  # a script returns an entry's fields as a flat list [name, value, ...]
                    taken.append((entry[0], dict(zip(entry[1][::2], entry[1][1::2], strict=True)), redelivered))
        return taken

    async def _park(self, name: str, newer: dict[int, list[Any]]) -> bool:
        """Leave jobs of newer versions for newer workers (see the module docstring). False on a Redis error."""
        try:
            for version, ids in newer.items():
                await self.client.xclaim(self.key, GROUP, f"{PARKED}{version}", 0, ids, justid=True)
                log.info("work queue: %d job(s) of version %d left for a newer worker", len(ids), version)
        except RedisError as exc:
            log.warning("work queue: Redis error %s while leaving newer jobs; retrying", type(exc).__name__)
            return False
        return True

    async def _refresh_lease(self, name: str, ttl: float) -> None:
        await self.client.set(self.keys.work_lease(name), self.version, px=max(1, int(ttl * 1000)))

    async def _keep_lease(self, name: str, ttl: float) -> None:
        """Refresh the lease every ``ttl / 3`` s, and keep this worker's jobs' idle time low for the releases that
        still reclaim jobs idle 120 s (a deploy from them rolls with both running)."""
        while True:
            await asyncio.sleep(ttl / 3)
            try:
                await self._refresh_lease(name, ttl)
                if self._in_flight:
                    await self.client.xclaim(self.key, GROUP, name, 0, list(self._in_flight), justid=True)
            except RedisError as exc:
                log.warning("work queue: Redis error %s while refreshing the lease", type(exc).__name__)

    async def _run(self, handler: Handler, entry_id: Any, job: dict[str, Any] | None, slots: asyncio.Semaphore) -> None:
        try:
            if job is not None:
                await handler(job)
            else:
                log.warning("work queue: dropping a malformed job")
        except Exception:
            log.exception("work queue: job failed")
        finally:
            slots.release()
            self._in_flight.discard(entry_id)
            if not await self._acked(entry_id):  # an outage: owed (it stays pending: not read again meanwhile)
                self._handled.add(entry_id)
                self._acks.add(lambda: self._acked(entry_id))

    async def _acked(self, entry_id: Any) -> bool:
        """Acknowledge (and delete) a handled job; False when Redis did not answer."""
        try:
            await self._ack(keys=[self.key], args=[GROUP, entry_id])
        except RedisError as exc:
            log.warning("work queue: could not acknowledge a handled job (%s); retrying", type(exc).__name__)
            return False
        self._handled.discard(entry_id)
        return True

    async def _ensure_group(self) -> None:
        """Create the group at the stream's start ("0"), so jobs queued before any worker started are read."""
        try:
            await self.client.xgroup_create(self.key, GROUP, id="0", mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise


def _parse(fields: dict[Any, Any]) -> dict[str, Any] | None:
    raw = fields.get(b"job", fields.get("job"))
    try:
        job = json.loads(raw) if raw is not None else None
    except ValueError:
        return None
    return job if isinstance(job, dict) else None
