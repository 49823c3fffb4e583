"""A work queue on a Redis stream: ``web`` processes ack Slack and enqueue; ``worker`` processes run the job.

Jobs are JSON objects carrying ``"v"`` (:data:`JOB_VERSION`, so a deploy can tell jobs queued by an older
release) and a unique ``"id"``. Enqueueing is idempotent: a marker key per job id is set with the XADD in one
script, so an XADD resent after its reply was lost (by redis-py's retry) queues nothing twice. Delivery is at
least once: a worker acknowledges (``XACK`` + ``XDEL``) a job after
handling it, and while it works it refreshes its jobs' idle time (``XCLAIM ... JUSTID``) every
``reclaim_after / 3`` seconds, so only the jobs of a worker that died, idle longer than ``reclaim_after``
seconds, are claimed again (``XAUTOCLAIM``) by a live worker. Handlers must tolerate that repeat (the run
store's compare-and-set makes a repeated answer a no-op "already answered").

Round trips: ``enqueue`` 1 (the script: ``SET NX`` + ``XADD``); a worker reads up to ``batch`` jobs per ``XREADGROUP``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import RedisError, ResponseError

from bot.errors import StoreUnavailable
from bot.store.keys import Keys

log = logging.getLogger(__name__)

GROUP = "workers"
JOB_VERSION = 1
JOB_MARKER_TTL = 24 * 3600  # seconds a job id is remembered (longer than any job waits in the stream)

# KEYS[1] stream, KEYS[2] job marker; ARGV: [1] job JSON, [2] marker ttl s. Returns the entry id, or false when
# this job id was queued already. No MAXLEN: handled jobs are deleted, so the stream holds only unhandled work, and
# trimming would drop a person's click unseen.
_ENQUEUE = """
if not redis.call('SET', KEYS[2], 1, 'NX', 'EX', ARGV[2]) then return false end
return redis.call('XADD', KEYS[1], '*', 'job', ARGV[1])
"""
Handler = Callable[[dict[str, Any]], Awaitable[None]]


class WorkQueue:
    """The job stream at ``Keys.work()`` (it holds only jobs not yet handled: handled ones are deleted)."""

    def __init__(self, client: aioredis.Redis, *, keys: Keys) -> None:
        self.client = client
        self.keys = keys
        self.key = keys.work()
        self._enqueue = client.register_script(_ENQUEUE)
        self._in_flight: set[Any] = set()  # entry ids being handled by this consumer (heartbeated)
        self._redelivered: set[Any] = set()  # entry ids reclaimed from a dead consumer

    async def enqueue(self, job: dict[str, Any]) -> str:
        """Add a job (``"v"`` and a unique ``"id"`` are added when absent); returns its id. Sending the same job
        id twice queues it once. Raises ``StoreUnavailable``."""
        job = {"v": JOB_VERSION, "id": uuid.uuid4().hex, **job}
        try:
            await self._enqueue(
                keys=[self.key, self.keys.work_job(str(job["id"]))],
                args=[json.dumps(job), JOB_MARKER_TTL],
            )
            return str(job["id"])
        except RedisError as exc:
            raise StoreUnavailable(f"Redis error while queueing work: {type(exc).__name__}") from None

    async def consume(
        self,
        handler: Handler,
        *,
        consumer: str | None = None,
        concurrency: int = 200,
        batch: int = 50,
        block_ms: int = 1000,
        reclaim_after: float = 120.0,
        stop: asyncio.Event | None = None,
    ) -> None:
        """Run ``handler`` on jobs until ``stop`` is set (or the task is cancelled), at most ``concurrency``
        at once. Redis errors are logged and retried after a pause; handler errors are logged and the job is
        acknowledged (a job that always fails must not loop forever)."""
        name = consumer or f"{socket.gethostname()}:{os.getpid()}"
        stop = stop or asyncio.Event()
        slots = asyncio.Semaphore(concurrency)
        tasks: set[asyncio.Task[None]] = set()
        await self._ensure_group()
        last_reclaim = last_touch = 0.0
        own_pending = True  # jobs this consumer name took before a restart are read first
        loop = asyncio.get_running_loop()
        while not stop.is_set():
            try:
                entries: list[tuple[Any, dict[Any, Any]]] = []
                if self._in_flight and loop.time() - last_touch > reclaim_after / 3:
                    last_touch = loop.time()
                    await self.client.xclaim(self.key, GROUP, name, 0, list(self._in_flight), justid=True)
                if loop.time() - last_reclaim > reclaim_after / 2:
                    last_reclaim = loop.time()
                    claimed: Any = await self.client.xautoclaim(
                        self.key, GROUP, name, min_idle_time=int(reclaim_after * 1000), count=batch
                    )
                    reclaimed = [e for e in claimed[1] if e and e[1]]
                    self._redelivered.update(entry_id for entry_id, _fields in reclaimed)
                    entries += reclaimed
                # After a Redis error, first re-read this consumer's own pending jobs ("0"): a read whose reply was
                # lost delivered them to us, and they would otherwise wait for the dead-worker reclaim.
                start = "0" if own_pending else ">"
                read: Any = await self.client.xreadgroup(
                    GROUP, name, {self.key: start}, count=batch, block=None if own_pending else block_ms
                )
                own_pending = False
                for _stream, items in read or []:
                    entries += list(items)
            except ResponseError as exc:
                if "NOGROUP" in str(exc):
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
            for entry_id, fields in entries:
                if entry_id in self._in_flight:
                    continue
                self._in_flight.add(entry_id)
                await slots.acquire()
                task = asyncio.ensure_future(self._run(handler, entry_id, fields, slots))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
        if tasks:
            await asyncio.wait(tasks)

    async def _run(self, handler: Handler, entry_id: Any, fields: dict[Any, Any], slots: asyncio.Semaphore) -> None:
        try:
            raw = fields.get(b"job", fields.get("job"))
            job = json.loads(raw) if raw is not None else None
            if isinstance(job, dict):
                if entry_id in self._redelivered:
                    job["redelivered"] = True  # a dead worker held it: the handler may have to finish its work
                await handler(job)
            else:
                log.warning("work queue: dropping a malformed job")
        except Exception:
            log.exception("work queue: job failed")
        finally:
            slots.release()
            self._in_flight.discard(entry_id)
            self._redelivered.discard(entry_id)
            with contextlib.suppress(RedisError):
                async with self.client.pipeline(transaction=True) as pipe:
                    pipe.xack(self.key, GROUP, entry_id)
                    pipe.xdel(self.key, entry_id)
                    await pipe.execute()

    async def _ensure_group(self) -> None:
        try:
            await self.client.xgroup_create(self.key, GROUP, id="0", mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise
