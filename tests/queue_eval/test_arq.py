"""arq against the work queue's requirements (issue 13, part 3).

arq 0.28 can't be installed beside redis>=8 (its wheel requires ``redis[hiredis]<6,>=4.2.0``; pip:
``ResolutionImpossible``). To try it anyway, forced past its pin, without touching the venv::

    .venv/bin/pip install --no-deps --target /tmp/arq-pkgs arq==0.28.0
    PYTHONPATH=/tmp/arq-pkgs .venv/bin/python -m pytest -p no:cacheprovider tests/queue_eval/test_arq.py

What its source says (``arq/worker.py``): jobs wait in a sorted set (``arq:queue`` by default) polled every
``poll_delay`` (0.5 s); a worker starts a job by setting ``arq:in-progress:<id>`` (WATCH/MULTI, ``PSETEX`` with
``job_timeout + 10`` s, never refreshed) and runs it under ``asyncio.wait_for(job_timeout)``; a job stays in the
sorted set until it finishes, so a dead worker's job is started again once its in-progress key expires. The reclaim
window is therefore the job timeout: a quick reclaim means cutting long jobs. Keys are not hash-tagged, transactions
span several slots, and the client is a plain ``redis.asyncio.Redis``: no Redis Cluster.
"""

from __future__ import annotations

import importlib.metadata
import os
import signal
import time
from typing import Any

import pytest
import redis.asyncio as aioredis

from tests.queue_eval.conftest import CLUSTER_URL, Procs, done, starts, wait_log

pytest.importorskip("arq", reason="arq is not installed (it requires redis<6; see this module's docstring)")

from arq import create_pool
from arq.connections import RedisSettings

pytestmark = pytest.mark.real_redis

WORKER = r"""
import asyncio, json, os, sys
import redis.asyncio as aioredis
from arq.connections import RedisSettings
from arq.worker import Worker

port, queue, timeout = sys.argv[1:4]
client = aioredis.Redis(host="127.0.0.1", port=int(port))

async def eval_job(ctx, n: int, sleep: float) -> None:
    await client.rpush(queue + ":log", json.dumps({"event": "start", "n": n, "pid": os.getpid()}))
    await asyncio.sleep(sleep)
    await client.rpush(queue + ":log", json.dumps({"event": "done", "n": n, "pid": os.getpid()}))

async def main() -> None:
    worker = Worker(functions=[eval_job], redis_settings=RedisSettings(host="127.0.0.1", port=int(port)),
                    queue_name=queue, job_timeout=float(timeout), poll_delay=0.05, keep_result=0,
                    handle_signals=False)
    await client.rpush(queue + ":log", json.dumps({"event": "ready", "n": 0, "pid": os.getpid()}))
    await worker.async_run()

asyncio.run(main())
"""


def start_worker(procs: Procs, queue: str, *, job_timeout: float) -> Any:
    return procs.start(WORKER, "6379", queue, str(job_timeout))


async def enqueue(queue: str, jobs: list[str], *, n: int, sleep: float, port: int = 6379) -> None:
    pool = await create_pool(RedisSettings(host="127.0.0.1", port=port), default_queue_name=queue)
    try:
        job = await pool.enqueue_job("eval_job", n, sleep)
        assert job is not None
        jobs.append(job.job_id)
    finally:
        await pool.aclose()


@pytest.fixture
async def arq_jobs(real_redis: aioredis.Redis) -> Any:
    """Job ids enqueued by the test: arq's per-job keys (``arq:job:<id>``...) are outside the test's prefix."""
    jobs: list[str] = []
    yield jobs
    for job_id in jobs:
        for kind in ("job", "in-progress", "retry", "result"):
            await real_redis.delete(f"arq:{kind}:{job_id}")


async def wait_ready(client: aioredis.Redis, queue: str, workers: int) -> None:
    await wait_log(client, queue, lambda log: sum(e["event"] == "ready" for e in log) >= workers, seconds=30)


@pytest.mark.xfail(
    strict=True,
    reason="arq 0.28 requires redis[hiredis]<6,>=4.2.0: pip can't install it beside redis>=8 (ResolutionImpossible)",
)
def test_arq_installs_beside_redis_8() -> None:
    requires = importlib.metadata.requires("arq") or []
    pin = next(r for r in requires if r.startswith("redis"))
    assert "<6" not in pin, pin


@pytest.mark.redis_kinds("single")
@pytest.mark.xfail(
    strict=True,
    reason="a dead worker's job starts again only when its in-progress key expires, job_timeout + 10 s after it "
    "started (300 + 10 s by default); nothing tells a dead worker sooner",
)
async def test_arq_a_dead_workers_job_is_finished_by_another_worker_within_a_lease_ttl(
    real_redis: aioredis.Redis, procs: Procs, prefix: str, arq_jobs: list[str]
) -> None:
    queue = f"{prefix}arq"
    workers = [start_worker(procs, queue, job_timeout=60) for _ in range(2)]  # jobs may run up to a minute
    await wait_ready(real_redis, queue, 2)
    await enqueue(queue, arq_jobs, n=1, sleep=1.0)
    log = await wait_log(real_redis, queue, lambda log: starts(log, 1) >= 1, seconds=15)
    runner = next(e["pid"] for e in log if e["event"] == "start")
    victim = next(w for w in workers if w.pid == runner)
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait(10)
    await wait_log(real_redis, queue, done(1), seconds=12)  # a 10 s lease, and slack


@pytest.mark.redis_kinds("single")
async def test_arq_a_dead_workers_job_is_finished_after_job_timeout_plus_10_s(
    real_redis: aioredis.Redis, procs: Procs, prefix: str, arq_jobs: list[str]
) -> None:
    """What it does do: with job_timeout=2 s the job is started again 12 s after it first started."""
    queue = f"{prefix}arq"
    workers = [start_worker(procs, queue, job_timeout=2) for _ in range(2)]
    await wait_ready(real_redis, queue, 2)
    await enqueue(queue, arq_jobs, n=1, sleep=1.0)
    log = await wait_log(real_redis, queue, lambda log: starts(log, 1) >= 1, seconds=15)
    started = time.monotonic()
    runner = next(e["pid"] for e in log if e["event"] == "start")
    victim = next(w for w in workers if w.pid == runner)
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait(10)
    await wait_log(real_redis, queue, done(1), seconds=25)
    assert time.monotonic() - started > 10


@pytest.mark.redis_kinds("single")
@pytest.mark.xfail(
    strict=True,
    reason="the reclaim window is job_timeout: a job running longer is cancelled by its own worker "
    "(asyncio.wait_for) and fails, so a long job and a quick reclaim exclude each other",
)
async def test_arq_a_job_longer_than_the_reclaim_window_runs_once_to_its_end(
    real_redis: aioredis.Redis, procs: Procs, prefix: str, arq_jobs: list[str]
) -> None:
    queue = f"{prefix}arq"
    for _ in range(2):
        start_worker(procs, queue, job_timeout=2)
    await wait_ready(real_redis, queue, 2)
    await enqueue(queue, arq_jobs, n=1, sleep=4.0)
    log = await wait_log(real_redis, queue, done(1), seconds=20)
    assert starts(log, 1) == 1, log


@pytest.mark.redis_kinds("cluster")
@pytest.mark.xfail(
    strict=True,
    reason="no Redis Cluster: a plain redis.asyncio.Redis client, keys without hash tags, and enqueue's "
    "WATCH/MULTI spans arq:job:<id> and the queue's key (other slots)",
)
async def test_arq_cluster_a_job_is_enqueued_and_run(real_redis: aioredis.Redis, prefix: str) -> None:
    port = int(CLUSTER_URL.rsplit(":", 1)[1].split("/")[0])
    jobs: list[str] = []
    try:
        await enqueue(f"{prefix}arq", jobs, n=1, sleep=0, port=port)
    finally:
        for job_id in jobs:
            await real_redis.delete(f"arq:job:{job_id}")


@pytest.mark.redis_kinds("single")
async def test_arq_jobs_queued_before_any_worker_are_run(
    real_redis: aioredis.Redis, procs: Procs, prefix: str, arq_jobs: list[str]
) -> None:
    queue = f"{prefix}arq"
    await enqueue(queue, arq_jobs, n=1, sleep=0)
    start_worker(procs, queue, job_timeout=5)
    await wait_log(real_redis, queue, done(1), seconds=30)
