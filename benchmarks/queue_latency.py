"""Enqueue -> start latency of the work queue and of the maintained queues evaluated against it (issue 13, part 3).

Run: ``.venv/bin/python -m benchmarks.queue_latency [--rate 100] [--seconds 10] [--redis redis://127.0.0.1:6379/0]
[--cluster redis://127.0.0.1:7000/0]`` (taskiq rows need ``pip install -e '.[queue-eval]'``; a cluster row is left out
when the cluster does not answer).

For each candidate one worker process consumes while this process enqueues ``--rate`` jobs per second for
``--seconds`` seconds (paced on a schedule, not back to back). Each job carries the wall time it was enqueued at; the
worker's handler records ``now - then`` (same machine, same clock) as it starts. The first second is warm-up and not
counted. Candidates: our ``WorkQueue`` (bot/store/work_queue.py), taskiq-redis's ``RedisStreamBroker`` (and its
``RedisStreamClusterBroker`` on the cluster), and arq, which can't be installed beside redis>=8 (arq 0.28 requires
``redis[hiredis]<6``): its rows are measured only when it is importable, forced past its pin with
``pip install --no-deps --target /tmp/arq-pkgs arq==0.28.0`` and ``PYTHONPATH=/tmp/arq-pkgs``. Keys use a unique
prefix and are deleted at the end (arq's own ``arq:job:<id>`` keys are deleted by arq as each job finishes).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from benchmarks._util import percentile, table
from bot.store import Keys, connect_redis
from bot.store.work_queue import WorkQueue

ROOT = Path(__file__).resolve().parents[1]

WORKER = r"""
import asyncio, sys, time
from bot.store import Keys, connect_redis

kind, url, cluster, prefix = sys.argv[1:5]
client = connect_redis(url, cluster=cluster == "1")
lat_key = prefix + "{work}:latency"

async def record(then: float) -> None:
    await client.rpush(lat_key, time.time() - then)

async def ours() -> None:
    from bot.store.work_queue import WorkQueue
    queue = WorkQueue(client, keys=Keys(prefix))
    await client.set(prefix + "ready", 1)
    await queue.consume(lambda job: record(job["t"]))

async def taskiq() -> None:
    from taskiq.api import run_receiver_task
    from taskiq_redis import RedisStreamBroker, RedisStreamClusterBroker
    if cluster == "1":
        broker = RedisStreamClusterBroker(url, queue_name=prefix + "taskiq", consumer_id="0")
    else:
        broker = RedisStreamBroker(url, queue_name=prefix + "taskiq", consumer_id="0")

    @broker.task(task_name="bench")
    async def bench(t: float) -> None:
        await record(t)

    await broker.startup()
    await client.set(prefix + "ready", 1)
    await run_receiver_task(broker)

async def arq() -> None:
    from arq.connections import RedisSettings
    from arq.worker import Worker, func

    async def bench(ctx: dict, t: float) -> None:
        await record(t)

    settings = RedisSettings.from_dsn(url)
    poll = float(kind.split(":")[1])
    worker = Worker(functions=[func(bench, name="bench")], redis_settings=settings, queue_name=prefix + "arq",
                    poll_delay=poll, keep_result=0, handle_signals=False, max_jobs=200)
    await client.set(prefix + "ready", 1)
    await worker.async_run()

asyncio.run(ours() if kind == "ours" else taskiq() if kind == "taskiq" else arq())
"""


async def sender(kind: str, url: str, *, cluster: bool, prefix: str) -> tuple[Any, Any]:
    """``(send(t), close())`` for a candidate."""
    if kind == "ours":
        client = connect_redis(url, cluster=cluster)
        queue = WorkQueue(client, keys=Keys(prefix))

        async def send_ours(t: float) -> None:
            await queue.enqueue({"t": t})

        return send_ours, client.aclose
    if kind.startswith("arq"):
        from arq import create_pool
        from arq.connections import RedisSettings

        pool = await create_pool(RedisSettings.from_dsn(url), default_queue_name=prefix + "arq")

        async def send_arq(t: float) -> None:
            await pool.enqueue_job("bench", t)

        return send_arq, pool.aclose
    from taskiq_redis import RedisStreamBroker, RedisStreamClusterBroker

    broker: Any = (RedisStreamClusterBroker if cluster else RedisStreamBroker)(
        url, queue_name=prefix + "taskiq", consumer_id="0"
    )

    async def bench(t: float) -> None:  # runs in the worker
        return None

    task = broker.register_task(bench, task_name="bench")
    await broker.startup()

    async def send_taskiq(t: float) -> None:
        await task.kiq(t=t)

    return send_taskiq, broker.shutdown


async def _at_least(count: Any, n: int) -> bool:
    return int(await count) >= n


async def until(check: Any, *, seconds: float) -> None:
    """Poll ``await check()`` every 50 ms until it is true or ``seconds`` passed."""
    deadline = time.monotonic() + seconds
    for _ in range(int(seconds / 0.05) + 1):
        if await check() or time.monotonic() > deadline:
            return
        await asyncio.sleep(0.05)


async def measure(kind: str, url: str, *, cluster: bool, rate: float, seconds: float) -> list[float] | None:
    """Latencies in ms after the warm-up second; ``None`` when the candidate can't run here."""
    try:
        if kind == "taskiq":
            import taskiq_redis  # noqa: F401
        elif kind.startswith("arq"):
            import arq  # noqa: F401
    except ImportError:
        return None
    prefix = f"bench:{uuid.uuid4().hex[:8]}:"
    client = connect_redis(url, cluster=cluster)
    args = [kind, url, "1" if cluster else "0", prefix]
    worker = await asyncio.create_subprocess_exec(sys.executable, "-c", WORKER, *args, cwd=ROOT)
    lat_key = prefix + "{work}:latency"
    try:
        send, close = await sender(kind, url, cluster=cluster, prefix=prefix)
        await until(lambda: client.exists(prefix + "ready"), seconds=60)
        await asyncio.sleep(0.5)
        n = int(rate * (seconds + 1))
        start = time.monotonic()
        for i in range(n):
            await asyncio.sleep(max(0.0, start + i / rate - time.monotonic()))
            await send(time.time())
        await until(lambda: _at_least(client.llen(lat_key), n), seconds=10)
        values = [float(v) * 1000 for v in await client.lrange(lat_key, 0, -1)]
        await close()
        return values[int(rate) :]
    finally:
        worker.kill()
        await worker.wait()
        for key in [k async for k in client.scan_iter(match=f"{prefix}*")]:
            await client.delete(key)
        await client.aclose()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=100.0, help="jobs per second")
    parser.add_argument("--seconds", type=float, default=10.0, help="measured seconds (after 1 s of warm-up)")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--cluster", default="redis://127.0.0.1:7000/0", help="a cluster node ('' to skip)")
    args = parser.parse_args()
    targets = [("redis", args.redis, False)]
    if args.cluster:
        probe = connect_redis(args.cluster, cluster=True, retries=0)
        try:
            await probe.ping()
            targets.append(("cluster", args.cluster, True))
        except Exception as exc:
            print(f"(no cluster rows: {args.cluster} did not answer: {type(exc).__name__})")
        finally:
            await probe.aclose()
    rows: list[list[object]] = []
    names = {
        "ours": "WorkQueue (ours)",
        "taskiq": "taskiq-redis stream broker",
        "arq:0.5": "arq 0.28 (poll_delay 0.5 s, its default)",
        "arq:0.05": "arq 0.28 (poll_delay 0.05 s)",
    }
    for target, url, cluster in targets:
        for kind in ("ours", "taskiq", "arq:0.5", "arq:0.05"):
            if kind.startswith("arq") and cluster:
                rows.append([names[kind], target, "no cluster support", "", "", "", ""])
                continue
            values = await measure(kind, url, cluster=cluster, rate=args.rate, seconds=args.seconds)
            if values is None:
                missing = "not installable beside redis>=8" if kind.startswith("arq") else "not installed"
                rows.append([names[kind], target, missing, "", "", "", ""])
                continue
            expected = int(args.rate * args.seconds)
            p50, p99 = percentile(values, 50), percentile(values, 99)
            ok = "yes" if p99 < 50 and len(values) == expected else "no"
            rows.append([names[kind], target, f"{len(values)}/{expected}", p50, p99, max(values, default=0.0), ok])
    print(f"enqueue -> start at {args.rate:g} jobs/s for {args.seconds:g} s, one worker process")
    print(table(["queue", "Redis", "jobs started", "p50 ms", "p99 ms", "max ms", "p99 < 50 ms"], rows))


if __name__ == "__main__":
    asyncio.run(main())
