"""The job-queue evaluation: taskiq-redis and arq checked against the work queue's requirements, as a table.

``.venv/bin/python -m benchmarks.queue_eval [--redis URL] [--cluster URL] [--only taskiq|arq]``. What it found
and why the queue stays ours: docs/decisions/job-queue.md. Each check runs the library's own worker in
subprocesses (so it can ``kill -9`` one) on the real Redis; the job logs ``{"event": "start"|"done", "n", "pid"}``
on the Redis list ``<queue>:log``. A row says whether the requirement holds now and what the evaluation found
(taskiq 0.13 + taskiq-redis 1.2.4, arq 0.28): a release that changes a finding shows as ``CHANGED``.

The libraries are not dependencies: ``pip install -e '.[queue-eval]'`` brings taskiq-redis; arq can't be installed
beside redis>=8 (arq 0.28 requires ``redis[hiredis]<6``), so try it forced past its pin, outside the venv::

    .venv/bin/pip install --no-deps --target /tmp/arq-pkgs arq==0.28.0
    PYTHONPATH=/tmp/arq-pkgs .venv/bin/python -m benchmarks.queue_eval

Keys use a unique prefix and are deleted at the end (arq's own ``arq:<kind>:<job id>`` keys by their ids). The
checks take about two minutes (arq's reclaim needs ``job_timeout`` + 10 s). ``QUEUE_EVAL_VERBOSE=1`` shows the
workers' own output.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster

from benchmarks._util import table

ROOT = Path(__file__).resolve().parent.parent
Log = list[dict[str, Any]]

TASKIQ_WORKER = r"""
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

ARQ_WORKER = r"""
import asyncio, json, os, sys
import redis.asyncio as aioredis
from arq.connections import RedisSettings
from arq.worker import Worker

host, port, queue, timeout = sys.argv[1:5]
client = aioredis.Redis(host=host, port=int(port))

async def eval_job(ctx, n: int, sleep: float) -> None:
    await client.rpush(queue + ":log", json.dumps({"event": "start", "n": n, "pid": os.getpid()}))
    await asyncio.sleep(sleep)
    await client.rpush(queue + ":log", json.dumps({"event": "done", "n": n, "pid": os.getpid()}))

async def main() -> None:
    worker = Worker(functions=[eval_job], redis_settings=RedisSettings(host=host, port=int(port)),
                    queue_name=queue, job_timeout=float(timeout), poll_delay=0.05, keep_result=0,
                    handle_signals=False)
    await client.rpush(queue + ":log", json.dumps({"event": "ready", "n": 0, "pid": os.getpid()}))
    await worker.async_run()

asyncio.run(main())
"""
IDLE_MS = 1000  # the reclaim window (idle_timeout) given to taskiq's single-Redis broker


class Failed(Exception):
    """The requirement does not hold (the message says what was seen)."""


class Env:
    """One check's Redis, key prefix and worker subprocesses (killed at the end)."""

    def __init__(self, url: str, *, cluster: bool) -> None:
        self.url = url
        self.cluster = cluster
        self.client: Any = RedisCluster.from_url(url) if cluster else aioredis.from_url(url)
        self.queue = f"qeval:{uuid.uuid4().hex[:8]}:"
        self.procs: list[subprocess.Popen[bytes]] = []
        self.arq_jobs: list[str] = []

    def start(self, script: str, *args: str) -> subprocess.Popen[bytes]:
        # Quiet: a killed worker's and a cancelled job's tracebacks are expected here, not news.
        out = None if os.environ.get("QUEUE_EVAL_VERBOSE") else subprocess.DEVNULL
        proc = subprocess.Popen([sys.executable, "-c", script, *args], cwd=ROOT, stdout=out, stderr=out)
        self.procs.append(proc)
        return proc

    async def log(self) -> Log:
        return [json.loads(e) for e in await self.client.lrange(f"{self.queue}:log", 0, -1)]

    async def wait(self, predicate: Callable[[Log], bool], *, seconds: float) -> Log:
        """The job log once ``predicate(log)`` holds; :class:`Failed` after ``seconds``."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            log = await self.log()
            if predicate(log):
                return log
            await asyncio.sleep(0.05)
        raise Failed(f"not within {seconds:g} s (log: {summary(await self.log())})")

    async def ready(self, workers: int) -> None:
        await self.wait(lambda log: sum(e["event"] == "ready" for e in log) >= workers, seconds=30)

    async def kill_the_one_running(self, workers: list[subprocess.Popen[bytes]]) -> None:
        """kill -9 the worker that started job 1."""
        log = await self.wait(lambda log: starts(log, 1) >= 1, seconds=15)
        runner = next(e["pid"] for e in log if e["event"] == "start")
        victim = next(w for w in workers if w.pid == runner)
        os.kill(victim.pid, signal.SIGKILL)
        victim.wait(10)

    async def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(10)
        keys = [k async for k in self.client.scan_iter(match=f"{self.queue}*")]
        keys += [f"arq:{kind}:{j}" for j in self.arq_jobs for kind in ("job", "in-progress", "retry", "result")]
        for key in keys:
            await self.client.delete(key)
        await self.client.aclose()


def done(n: int) -> Callable[[Log], bool]:
    return lambda log: any(e["event"] == "done" and e["n"] == n for e in log)


def starts(log: Log, n: int) -> int:
    return sum(1 for e in log if e["event"] == "start" and e["n"] == n)


def summary(log: Log) -> str:
    return ", ".join(f"{e['event']} {e['n']}" for e in log if e["event"] != "ready") or "empty"


# taskiq-redis ----------------------------------------------------------------------------------------------


def taskiq_kicker(env: Env, *, consumer_id: str = "$") -> Any:
    """A broker for the sending side, with the worker's task name registered: (broker, task)."""
    from taskiq_redis import RedisStreamBroker, RedisStreamClusterBroker

    kind = RedisStreamClusterBroker if env.cluster else RedisStreamBroker
    broker = kind(env.url, queue_name=env.queue, consumer_group_name="eval", consumer_id=consumer_id)

    async def eval_job(n: int, sleep: float) -> None:
        raise AssertionError("runs in the worker subprocess")

    return broker, broker.register_task(eval_job, task_name="eval_job")


def taskiq_worker(env: Env, *, consumer_id: str = "$") -> subprocess.Popen[bytes]:
    return env.start(TASKIQ_WORKER, env.url, "1" if env.cluster else "0", env.queue, str(IDLE_MS), consumer_id)


async def taskiq_dead_worker(env: Env, *, traffic: bool) -> None:
    broker, task = taskiq_kicker(env, consumer_id="0")
    await broker.startup()
    try:
        workers = [taskiq_worker(env, consumer_id="0") for _ in range(2)]
        await env.ready(2)
        await task.kiq(n=1, sleep=1.0)
        await env.kill_the_one_running(workers)
        if traffic:
            for n in range(100, 130):
                await task.kiq(n=n, sleep=0)
                await asyncio.sleep(0.2)
                if done(1)(await env.log()):
                    break
            await env.wait(done(1), seconds=3)
        else:
            await env.wait(done(1), seconds=IDLE_MS / 1000 * 6)
    finally:
        await broker.shutdown()


async def taskiq_long_job_runs_once(env: Env) -> None:
    broker, task = taskiq_kicker(env, consumer_id="0")
    await broker.startup()
    try:
        for _ in range(2):
            taskiq_worker(env, consumer_id="0")
        await env.ready(2)
        await task.kiq(n=1, sleep=IDLE_MS / 1000 * 3)
        for n in range(100, 120):  # traffic, so that reads return and XAUTOCLAIM runs
            await task.kiq(n=n, sleep=0)
            await asyncio.sleep(0.2)
        log = await env.wait(done(1), seconds=10)
        if starts(log, 1) != 1:
            raise Failed(f"job 1 started {starts(log, 1)} times")
    finally:
        await broker.shutdown()


async def taskiq_queued_before_the_group(env: Env, *, consumer_id: str) -> None:
    broker, task = taskiq_kicker(env, consumer_id=consumer_id)
    try:
        await task.kiq(n=1, sleep=0)  # no startup: no group yet (as after the stream was lost)
        taskiq_worker(env, consumer_id=consumer_id)
        await env.wait(done(1), seconds=5)
    finally:
        await broker.shutdown()


# arq -------------------------------------------------------------------------------------------------------


def host_port(url: str) -> tuple[str, int]:
    address = url.split("://", 1)[1].split("/", 1)[0].rsplit("@", 1)[-1]
    host, _, port = address.rpartition(":")
    return host or "127.0.0.1", int(port or 6379)


def arq_worker(env: Env, *, job_timeout: float) -> subprocess.Popen[bytes]:
    return env.start(ARQ_WORKER, *map(str, host_port(env.url)), env.queue, str(job_timeout))


async def arq_enqueue(env: Env, *, n: int, sleep: float) -> None:
    from arq import create_pool
    from arq.connections import RedisSettings

    host, port = host_port(env.url)
    pool = await create_pool(RedisSettings(host=host, port=port), default_queue_name=env.queue)
    try:
        job = await pool.enqueue_job("eval_job", n, sleep)
        if job is None:
            raise Failed("enqueue_job returned None")
        env.arq_jobs.append(job.job_id)
    finally:
        await pool.aclose()


async def arq_installs_beside_redis_8(env: Env) -> None:
    pin = next(r for r in importlib.metadata.requires("arq") or [] if r.startswith("redis"))
    if "<6" in pin:
        raise Failed(f"arq requires {pin}")


async def arq_dead_worker(env: Env, *, job_timeout: float, within: float) -> None:
    workers = [arq_worker(env, job_timeout=job_timeout) for _ in range(2)]
    await env.ready(2)
    await arq_enqueue(env, n=1, sleep=1.0)
    await env.kill_the_one_running(workers)
    await env.wait(done(1), seconds=within)


async def arq_long_job_runs_once(env: Env) -> None:
    for _ in range(2):
        arq_worker(env, job_timeout=2)
    await env.ready(2)
    await arq_enqueue(env, n=1, sleep=4.0)
    try:
        log = await env.wait(done(1), seconds=20)
    except Failed as exc:
        raise Failed(f"cancelled at job_timeout, never done ({exc})") from None
    if starts(log, 1) != 1:
        raise Failed(f"job 1 started {starts(log, 1)} times")


async def arq_cluster_enqueue(env: Env) -> None:
    try:
        await arq_enqueue(env, n=1, sleep=0)
    except Failed:
        raise
    except Exception as exc:
        raise Failed(f"enqueue failed: {type(exc).__name__}") from None


async def arq_queued_before_any_worker(env: Env) -> None:
    await arq_enqueue(env, n=1, sleep=0)
    arq_worker(env, job_timeout=5)
    await env.wait(done(1), seconds=30)


# the checks ------------------------------------------------------------------------------------------------

Check = Callable[[Env], Awaitable[None]]
# (library, requirement, on the cluster?, the evaluation's finding: holds?, the check)
CHECKS: list[tuple[str, str, bool, bool, Check]] = [
    (
        "taskiq",
        "a killed worker's job finishes elsewhere (quiet queue)",
        False,
        False,
        lambda env: taskiq_dead_worker(env, traffic=False),
    ),
    ("taskiq", "... under traffic, after idle_timeout", False, True, lambda env: taskiq_dead_worker(env, traffic=True)),
    ("taskiq", "a job longer than the reclaim window runs once", False, False, taskiq_long_job_runs_once),
    (
        "taskiq",
        "Redis Cluster: a killed worker's job finishes elsewhere",
        True,
        False,
        lambda env: taskiq_dead_worker(env, traffic=True),
    ),
    (
        "taskiq",
        "jobs queued before a group exists run (default consumer_id)",
        False,
        False,
        lambda env: taskiq_queued_before_the_group(env, consumer_id="$"),
    ),
    (
        "taskiq",
        "... with consumer_id='0'",
        False,
        True,
        lambda env: taskiq_queued_before_the_group(env, consumer_id="0"),
    ),
    ("arq", "installs beside redis>=8", False, False, arq_installs_beside_redis_8),
    (
        "arq",
        "a killed worker's job finishes elsewhere within a 10 s lease",
        False,
        False,
        lambda env: arq_dead_worker(env, job_timeout=60, within=12),
    ),
    (
        "arq",
        "... after job_timeout + 10 s (job_timeout 2 s)",
        False,
        True,
        lambda env: arq_dead_worker(env, job_timeout=2, within=25),
    ),
    ("arq", "a job longer than the reclaim window runs once to its end", False, False, arq_long_job_runs_once),
    ("arq", "Redis Cluster: a job is enqueued and run", True, False, arq_cluster_enqueue),
    ("arq", "jobs queued before any worker run", False, True, arq_queued_before_any_worker),
]
MODULES = {"taskiq": "taskiq_redis", "arq": "arq"}


async def run(check: Check, url: str, *, cluster: bool) -> tuple[bool, str]:
    env = Env(url, cluster=cluster)
    try:
        await check(env)
        return True, ""
    except Failed as exc:
        return False, str(exc)
    finally:
        await env.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--cluster", default="redis://127.0.0.1:7000/0", help="a cluster node ('' to skip)")
    parser.add_argument("--only", choices=sorted(MODULES), help="one library's checks")
    args = parser.parse_args()
    rows: list[list[object]] = []
    changed = 0
    for library, requirement, on_cluster, found, check in CHECKS:
        if args.only and library != args.only:
            continue
        if importlib.util.find_spec(MODULES[library]) is None:
            rows.append([library, requirement, "not installed", "yes" if found else "no", "skipped"])
            continue
        if on_cluster and not args.cluster:
            rows.append([library, requirement, "no cluster given", "yes" if found else "no", "skipped"])
            continue
        holds, detail = await run(check, args.cluster if on_cluster else args.redis, cluster=on_cluster)
        same = holds == found
        changed += not same
        rows.append(
            [
                library,
                requirement,
                ("yes" if holds else "no: " + detail)[:70],
                "yes" if found else "no",
                "same" if same else "CHANGED",
            ]
        )
    print("the job-queue requirements (docs/decisions/job-queue.md), checked now against the evaluation's findings")
    print(table(["library", "requirement", "holds now", "found", "finding"], rows))
    if changed:
        print(f"{changed} finding(s) changed: re-read docs/decisions/job-queue.md")


if __name__ == "__main__":
    asyncio.run(main())
