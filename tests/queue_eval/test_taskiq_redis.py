"""taskiq + taskiq-redis's stream brokers against the work queue's requirements (issue 13, part 3).

What its source says (taskiq-redis 1.2.4, ``taskiq_redis/redis_broker.py`` and ``redis_cluster_broker.py``):
``RedisStreamBroker.listen`` runs ``XAUTOCLAIM ... min_idle_time=idle_timeout`` (default 10 minutes) only after an
``XREADGROUP`` that returned new messages (``if not fetched: continue``), and nothing refreshes a running job's
idle time (no heartbeat, no lease); the consumer group is created at ``consumer_id="$"`` by default;
``RedisStreamClusterBroker`` has no reclaim at all (``XREADGROUP ">"`` only). Acks are ``XACK`` without ``XDEL``.
Each failing requirement is a strict xfail below, so a release that fixes it turns the test red.
"""

from __future__ import annotations

import asyncio
import os
import signal
from typing import Any

import pytest
import redis.asyncio as aioredis

from tests.queue_eval.conftest import CLUSTER_URL, REAL_REDIS_URL, Procs, done, log_of, starts, wait_log

pytest.importorskip("taskiq_redis", reason="taskiq-redis is not installed (pip install -e '.[queue-eval]')")

from taskiq_redis import RedisStreamBroker, RedisStreamClusterBroker

pytestmark = pytest.mark.real_redis
single_only = pytest.mark.redis_kinds("single")  # RedisStreamBroker speaks to one Redis

WORKER = r"""
import asyncio, json, os, sys
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from taskiq.api import run_receiver_task
from taskiq_redis import RedisStreamBroker, RedisStreamClusterBroker

url, cluster, queue, idle_ms, consumer_id = sys.argv[1:6]
if cluster == "1":
    broker = RedisStreamClusterBroker(url, queue_name=queue, consumer_group_name="eval", consumer_id=consumer_id,
                                      xread_block=200)
    client = RedisCluster.from_url(url)
else:
    broker = RedisStreamBroker(url, queue_name=queue, consumer_group_name="eval", consumer_id=consumer_id,
                               xread_block=200, idle_timeout=int(idle_ms), unacknowledged_lock_timeout=5)
    client = aioredis.from_url(url)

@broker.task(task_name="eval_job")
async def eval_job(n: int, sleep: float) -> None:
    await client.rpush(queue + ":log", json.dumps({"event": "start", "n": n, "pid": os.getpid()}))
    await asyncio.sleep(sleep)
    await client.rpush(queue + ":log", json.dumps({"event": "done", "n": n, "pid": os.getpid()}))

async def main() -> None:
    await broker.startup()
    await client.rpush(queue + ":log", json.dumps({"event": "ready", "n": 0, "pid": os.getpid()}))
    await run_receiver_task(broker)

asyncio.run(main())
"""
IDLE_MS = 1000  # the reclaim window (idle_timeout) the tests give the single-Redis broker


def kicker(queue: str, *, cluster: bool = False, consumer_id: str = "$") -> Any:
    """A broker for the sending side (``web``), with the worker's task name registered."""
    broker: Any
    if cluster:
        broker = RedisStreamClusterBroker(
            CLUSTER_URL, queue_name=queue, consumer_group_name="eval", consumer_id=consumer_id
        )
    else:
        broker = RedisStreamBroker(
            REAL_REDIS_URL, queue_name=queue, consumer_group_name="eval", consumer_id=consumer_id
        )

    async def eval_job(n: int, sleep: float) -> None:
        raise AssertionError("runs in the worker subprocess")

    return broker, broker.register_task(eval_job, task_name="eval_job")


def start_worker(procs: Procs, queue: str, *, cluster: bool = False, consumer_id: str = "$") -> Any:
    url = CLUSTER_URL if cluster else REAL_REDIS_URL
    return procs.start(WORKER, url, "1" if cluster else "0", queue, str(IDLE_MS), consumer_id)


async def wait_ready(client: aioredis.Redis, queue: str, workers: int) -> None:
    """Until ``workers`` workers have started (a loaded machine starts Python slowly)."""
    await wait_log(client, queue, lambda log: sum(e["event"] == "ready" for e in log) >= workers, seconds=30)


async def kill_the_one_running(client: aioredis.Redis, queue: str, workers: list[Any]) -> Any:
    """kill -9 the worker that started job 1; returns the other one."""
    log = await wait_log(client, queue, lambda log: starts(log, 1) >= 1, seconds=15)
    runner = next(e["pid"] for e in log if e["event"] == "start")
    victim = next(w for w in workers if w.pid == runner)
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait(10)
    return next(w for w in workers if w is not victim)


@single_only
@pytest.mark.xfail(
    strict=True,
    reason="RedisStreamBroker.listen runs XAUTOCLAIM only after an XREADGROUP that returned new messages "
    "('if not fetched: continue'): in a quiet queue a dead worker's job is never taken over",
)
async def test_taskiq_a_dead_workers_job_is_finished_by_another_worker(
    real_redis: aioredis.Redis, procs: Procs, prefix: str
) -> None:
    queue = f"{prefix}taskiq"
    broker, task = kicker(queue, consumer_id="0")
    await broker.startup()
    workers = [start_worker(procs, queue, consumer_id="0") for _ in range(2)]
    await wait_ready(real_redis, queue, 2)
    await task.kiq(n=1, sleep=1.0)
    await kill_the_one_running(real_redis, queue, workers)
    try:
        await wait_log(real_redis, queue, done(1), seconds=IDLE_MS / 1000 * 6)
    finally:
        await broker.shutdown()


@single_only
async def test_taskiq_under_traffic_a_dead_workers_job_is_taken_after_idle_timeout(
    real_redis: aioredis.Redis, procs: Procs, prefix: str
) -> None:
    """What it does do: with new jobs arriving, the survivor's read returns something and its XAUTOCLAIM follows."""
    queue = f"{prefix}taskiq"
    broker, task = kicker(queue, consumer_id="0")
    await broker.startup()
    workers = [start_worker(procs, queue, consumer_id="0") for _ in range(2)]
    await wait_ready(real_redis, queue, 2)
    await task.kiq(n=1, sleep=1.0)
    await kill_the_one_running(real_redis, queue, workers)
    try:
        for n in range(100, 130):  # traffic
            await task.kiq(n=n, sleep=0)
            await asyncio.sleep(0.2)
            if done(1)(await log_of(real_redis, queue)):
                break
        await wait_log(real_redis, queue, done(1), seconds=3)
    finally:
        await broker.shutdown()


@single_only
@pytest.mark.xfail(
    strict=True,
    reason="no heartbeat or lease: a job running longer than idle_timeout is XAUTOCLAIMed by a live worker "
    "(even its own) and runs twice",
)
async def test_taskiq_a_job_longer_than_the_reclaim_window_runs_once(
    real_redis: aioredis.Redis, procs: Procs, prefix: str
) -> None:
    queue = f"{prefix}taskiq"
    broker, task = kicker(queue, consumer_id="0")
    await broker.startup()
    for _ in range(2):
        start_worker(procs, queue, consumer_id="0")
    await wait_ready(real_redis, queue, 2)
    await task.kiq(n=1, sleep=IDLE_MS / 1000 * 3)
    try:
        for n in range(100, 120):  # traffic, so that reads return and XAUTOCLAIM runs
            await task.kiq(n=n, sleep=0)
            await asyncio.sleep(0.2)
        log = await wait_log(real_redis, queue, done(1), seconds=10)
        assert starts(log, 1) == 1, log
    finally:
        await broker.shutdown()


@pytest.mark.redis_kinds("cluster")
@pytest.mark.xfail(
    strict=True,
    reason="RedisStreamClusterBroker has no reclaim at all (listen is XREADGROUP '>' only): a dead worker's "
    "job stays pending forever",
)
async def test_taskiq_cluster_a_dead_workers_job_is_finished_by_another_worker(
    real_redis: aioredis.Redis, procs: Procs, prefix: str
) -> None:
    queue = f"{prefix}taskiq"
    broker, task = kicker(queue, cluster=True, consumer_id="0")
    await broker.startup()
    workers = [start_worker(procs, queue, cluster=True, consumer_id="0") for _ in range(2)]
    await wait_ready(real_redis, queue, 2)
    await task.kiq(n=1, sleep=1.0)
    await kill_the_one_running(real_redis, queue, workers)
    try:
        for n in range(100, 130):  # traffic too
            await task.kiq(n=n, sleep=0)
            await asyncio.sleep(0.2)
        await wait_log(real_redis, queue, done(1), seconds=3)
    finally:
        await broker.shutdown()


@single_only
@pytest.mark.xfail(
    strict=True,
    reason="consumer_id defaults to '$': the group is created at the stream's end, so jobs queued before it "
    "exists are never delivered",
)
async def test_taskiq_default_jobs_queued_before_the_group_exists_are_run(
    real_redis: aioredis.Redis, procs: Procs, prefix: str
) -> None:
    queue = f"{prefix}taskiq"
    broker, task = kicker(queue)
    await task.kiq(n=1, sleep=0)  # no startup: no group yet (as after the stream was lost)
    start_worker(procs, queue)
    try:
        await wait_log(real_redis, queue, done(1), seconds=5)
    finally:
        await broker.shutdown()


@single_only
async def test_taskiq_with_consumer_id_0_jobs_queued_before_the_group_exists_are_run(
    real_redis: aioredis.Redis, procs: Procs, prefix: str
) -> None:
    """Configurable: ``consumer_id="0"`` creates the group at the stream's start."""
    queue = f"{prefix}taskiq"
    broker, task = kicker(queue, consumer_id="0")
    await task.kiq(n=1, sleep=0)
    start_worker(procs, queue, consumer_id="0")
    try:
        await wait_log(real_redis, queue, done(1), seconds=5)
    finally:
        await broker.shutdown()
