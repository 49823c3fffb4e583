"""WorkQueue on the real Redis (and on a local Redis Cluster): leases tell dead workers, versions strand nothing.

Dead workers are real processes killed with SIGKILL (``WORKER`` below runs ``WorkQueue.consume`` in a subprocess).
Every handler logs ``start`` / ``done`` with its pid on a list in Redis, so a test sees what ran where.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from bot.store import Keys
from bot.store.work_queue import GROUP, PARKED, WorkQueue

ROOT = Path(__file__).resolve().parents[2]
REAL_REDIS_URL = os.environ.get("REDIS_TEST_URL", "redis://127.0.0.1:6379/0")
CLUSTER_URL = os.environ.get("REDIS_TEST_CLUSTER_URL", "redis://127.0.0.1:7000/0")

WORKER = r"""
import asyncio, json, os, sys
from bot.store import Keys, connect_redis
from bot.store.work_queue import WorkQueue

async def main() -> None:
    url, cluster, prefix, ttl, concurrency = sys.argv[1:6]
    client = connect_redis(url, cluster=cluster == "1")
    log_key = Keys(prefix).work() + ":test-log"

    async def handler(job: dict) -> None:
        entry = {"n": job["n"], "pid": os.getpid(), "redelivered": job.get("redelivered", False)}
        await client.rpush(log_key, json.dumps({**entry, "event": "start"}))
        await asyncio.sleep(job.get("sleep", 0))
        while job.get("hold") and not await client.exists(job["hold"]):  # held until the test sets the key
            await asyncio.sleep(0.05)
        await client.rpush(log_key, json.dumps({**entry, "event": "done"}))

    queue = WorkQueue(client, keys=Keys(prefix))
    await queue.consume(handler, lease_ttl=float(ttl), concurrency=int(concurrency), block_ms=100)

asyncio.run(main())
"""


@pytest.fixture
def target(real_redis: aioredis.Redis, redis_kind: str) -> tuple[aioredis.Redis, str, bool]:
    """``(client, url, is_cluster)`` of this test's real Redis (the single one, then the local cluster: see
    tests/conftest.py)."""
    cluster = redis_kind == "cluster"
    return real_redis, CLUSTER_URL if cluster else REAL_REDIS_URL, cluster


class Workers:
    """Worker subprocesses on one queue; each is killed at teardown."""

    def __init__(self, url: str, *, cluster: bool, prefix: str) -> None:
        self.url, self.cluster, self.prefix = url, cluster, prefix
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, *, lease_ttl: float, concurrency: int = 10) -> subprocess.Popen[bytes]:
        args = [self.url, "1" if self.cluster else "0", self.prefix, str(lease_ttl), str(concurrency)]
        proc = subprocess.Popen([sys.executable, "-c", WORKER, *args], cwd=ROOT)
        self.procs.append(proc)
        return proc

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(10)


@pytest.fixture
def workers(target: tuple[aioredis.Redis, str, bool], prefix: str) -> Iterator[Workers]:
    _client, url, cluster = target
    group = Workers(url, cluster=cluster, prefix=prefix)
    yield group
    group.stop_all()


async def log_of(client: aioredis.Redis, prefix: str) -> list[dict[str, Any]]:
    return [json.loads(e) for e in await client.lrange(Keys(prefix).work() + ":test-log", 0, -1)]


async def wait_for(client: aioredis.Redis, prefix: str, predicate: Any, seconds: float) -> list[dict[str, Any]]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        log = await log_of(client, prefix)
        if predicate(log):
            return log
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out; log: {await log_of(client, prefix)}")


async def emptied(client: aioredis.Redis, prefix: str, seconds: float = 10) -> bool:
    """Whether the work stream is empty within ``seconds``: a worker removes a job once its handler returned, so
    just after the handler's "done" the job may still be there."""
    deadline = time.monotonic() + seconds
    for _ in itertools.count():
        if not await client.xlen(Keys(prefix).work()) or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.05)
    return await client.xlen(Keys(prefix).work()) == 0


def done(n: int) -> Any:
    return lambda log: any(e["event"] == "done" and e["n"] == n for e in log)


@pytest.mark.real_redis
async def test_a_long_job_is_not_run_again_while_its_worker_lives(
    target: tuple[aioredis.Redis, str, bool], workers: Workers, prefix: str
) -> None:
    """Jobs running 2.5x the lease TTL, on a worker whose only slot is busy (its reading loop waits for the slot, so
    only a lease kept by a task of its own shows it alive), with another worker scanning for dead ones (and taking
    the second job: a busy worker reads no more jobs than it has free slots)."""
    client, _url, _cluster = target
    queue = WorkQueue(client, keys=Keys(prefix))
    for n in (1, 2):
        await queue.enqueue({"n": n, "sleep": 2.5})
    busy = workers.start(lease_ttl=1.0, concurrency=1)
    await wait_for(client, prefix, lambda log: len(log) >= 1, 15)  # it runs the first
    workers.start(lease_ttl=1.0)
    log = await wait_for(client, prefix, lambda log: done(1)(log) and done(2)(log), 20)
    starts = [e for e in log if e["event"] == "start"]
    assert sorted(e["n"] for e in starts) == [1, 2], log  # each started once
    assert [e["pid"] for e in starts if e["n"] == 1] == [busy.pid] and not any(e["redelivered"] for e in starts)


@pytest.mark.real_redis
async def test_a_dead_workers_job_is_taken_over_within_the_lease_ttl(
    target: tuple[aioredis.Redis, str, bool], workers: Workers, prefix: str
) -> None:
    """kill -9 a worker mid-job: a live worker runs the job again (flagged ``redelivered``) about one lease TTL
    later, not after a fixed reclaim time (the first release waited 120 s)."""
    client, _url, _cluster = target
    doomed = workers.start(lease_ttl=1.0)
    survivor = workers.start(lease_ttl=1.0)
    await WorkQueue(client, keys=Keys(prefix)).enqueue({"n": 1, "sleep": 1.0})
    log = await wait_for(client, prefix, lambda log: len(log) >= 1, 15)
    victim = doomed if log[0]["pid"] == doomed.pid else survivor
    heir = survivor if victim is doomed else doomed
    os.kill(victim.pid, signal.SIGKILL)
    killed = time.monotonic()
    victim.wait(10)
    log = await wait_for(client, prefix, lambda log: any(e["pid"] == heir.pid for e in log), 10)
    taken_after = time.monotonic() - killed
    log = await wait_for(client, prefix, done(1), 10)
    assert [(e["event"], e["pid"] == heir.pid, e["redelivered"]) for e in log] == [
        ("start", False, False),
        ("start", True, True),
        ("done", True, True),
    ]
    assert taken_after < 1.0 * 2 + 1.0, taken_after  # lease TTL + a scan period (a third of it) + slack
    assert await emptied(client, prefix)


@pytest.mark.real_redis
async def test_a_newer_job_is_left_by_an_old_worker_for_a_new_one(
    target: tuple[aioredis.Redis, str, bool], prefix: str
) -> None:
    """An old worker meets a version-2 job once, leaves it pending (parked, not dropped, not re-read in a loop); a
    version-2 worker started later runs it, as a first run."""
    client, _url, _cluster = target
    old, new = WorkQueue(client, keys=Keys(prefix), version=1), WorkQueue(client, keys=Keys(prefix), version=2)
    seen_old: list[dict[str, Any]] = []
    seen_new: list[dict[str, Any]] = []
    stop_old, stop_new = asyncio.Event(), asyncio.Event()

    async def old_handler(job: dict[str, Any]) -> None:
        seen_old.append(job)

    async def new_handler(job: dict[str, Any]) -> None:
        seen_new.append(job)
        stop_new.set()

    working = asyncio.ensure_future(old.consume(old_handler, consumer="old", stop=stop_old, block_ms=50, lease_ttl=0.3))
    await new.enqueue({"n": 2})
    await old.enqueue({"n": 1})
    await asyncio.sleep(1.2)  # several scans of the old worker
    assert [j["n"] for j in seen_old] == [1]
    pending = await client.xpending_range(Keys(prefix).work(), GROUP, "-", "+", 10)
    assert [(p["consumer"], p["times_delivered"]) for p in pending] == [(f"{PARKED}2".encode(), 1)]
    await asyncio.wait_for(new.consume(new_handler, consumer="new", stop=stop_new, block_ms=50, lease_ttl=0.3), 10)
    stop_old.set()
    await asyncio.wait_for(working, 10)
    assert [(j["n"], j["v"], j.get("redelivered", False)) for j in seen_new] == [(2, 2, False)]
    assert await client.xlen(Keys(prefix).work()) == 0
    consumers = {c["name"] for c in await client.xinfo_consumers(Keys(prefix).work(), GROUP)}
    assert f"{PARKED}2".encode() not in consumers  # emptied, so removed


@pytest.mark.real_redis
async def test_an_older_job_is_taken_by_a_new_worker(target: tuple[aioredis.Redis, str, bool], prefix: str) -> None:
    client, _url, _cluster = target
    await WorkQueue(client, keys=Keys(prefix), version=1).enqueue({"n": 1})
    seen: list[dict[str, Any]] = []
    stop = asyncio.Event()

    async def handler(job: dict[str, Any]) -> None:
        seen.append(job)
        stop.set()

    new = WorkQueue(client, keys=Keys(prefix), version=3)
    await asyncio.wait_for(new.consume(handler, stop=stop, block_ms=50, lease_ttl=0.3), 10)
    assert [(j["n"], j["v"]) for j in seen] == [(1, 1)]  # the handler upgrades it (LazyJobs.upgrade)


@pytest.mark.real_redis
async def test_jobs_queued_before_the_group_exists_or_after_the_stream_was_lost_are_handled(
    target: tuple[aioredis.Redis, str, bool], prefix: str
) -> None:
    client, _url, _cluster = target
    queue = WorkQueue(client, keys=Keys(prefix))
    await queue.enqueue({"n": 1})  # no consumer group yet
    assert not [g for g in await client.xinfo_groups(Keys(prefix).work())]
    seen: list[int] = []
    stop = asyncio.Event()

    async def handler(job: dict[str, Any]) -> None:
        seen.append(job["n"])
        if job["n"] == 1:  # the stream (and its group) is lost, e.g. a Redis restarted without persistence
            await client.delete(Keys(prefix).work())
            await queue.enqueue({"n": 2})
        else:
            stop.set()

    await asyncio.wait_for(queue.consume(handler, stop=stop, block_ms=50, lease_ttl=0.3), 10)
    assert seen == [1, 2]


@pytest.mark.real_redis
async def test_stats_tell_the_depth_and_the_oldest_jobs_age(
    target: tuple[aioredis.Redis, str, bool], prefix: str
) -> None:
    client, _url, _cluster = target
    queue = WorkQueue(client, keys=Keys(prefix))
    empty = await queue.stats()
    assert (empty.jobs, empty.in_progress, empty.oldest_age_s) == (0, 0, None)
    for n in range(3):
        await queue.enqueue({"n": n})
    await asyncio.sleep(0.2)
    await client.xgroup_create(Keys(prefix).work(), GROUP, id="0")
    await client.xreadgroup(GROUP, "someone", {Keys(prefix).work(): ">"}, count=1)
    stats = await queue.stats()
    assert (stats.jobs, stats.in_progress) == (3, 1)
    assert stats.oldest_age_s is not None and 0.15 < stats.oldest_age_s < 5


@pytest.mark.real_redis
async def test_a_busy_worker_does_not_hoard_jobs_an_idle_one_could_run(
    target: tuple[aioredis.Redis, str, bool], workers: Workers, prefix: str
) -> None:
    """A worker reads only as many jobs as it has free slots: with its one slot busy, the jobs queued behind go to
    another worker started later (they waited behind the long job, pending on the busy worker, while the other
    worker stood idle). The first job is held until the others are done, so however slowly the second worker starts
    (a loaded machine, a parallel suite), they can only be done by it, and only if the first worker left them."""
    client, _url, _cluster = target
    queue = WorkQueue(client, keys=Keys(prefix))
    release = Keys(prefix).work() + ":test-release"
    await queue.enqueue({"n": 0, "hold": release})
    for n in range(1, 4):
        await queue.enqueue({"n": n, "sleep": 0.2})
    first = workers.start(lease_ttl=1.0, concurrency=1)
    await wait_for(client, prefix, lambda log: len(log) >= 1, 15)
    second = workers.start(lease_ttl=1.0, concurrency=1)
    try:
        await wait_for(client, prefix, lambda log: all(done(n)(log) for n in range(1, 4)), 30)
    finally:
        await client.set(release, "1")
    log = await wait_for(client, prefix, done(0), 15)
    starts = [e for e in log if e["event"] == "start"]
    assert sorted(e["n"] for e in starts) == [0, 1, 2, 3], log  # each once
    assert [e["pid"] for e in starts if e["n"] == 0] == [first.pid], log
    assert {e["pid"] for e in starts} == {first.pid, second.pid}, log
