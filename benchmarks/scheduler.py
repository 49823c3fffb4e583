"""The scheduler that fires deadlines, reminders and escalations (:mod:`bot.store.schedule`): how late a due item
fires while a process runs, and what waiting costs in Redis calls, with 0 and with 100,000 questions waiting.

Run: ``.venv/bin/python -m benchmarks.scheduler [--waiting 100000] [--due 200] [--seconds 10]
[--redis redis://127.0.0.1:6379/0]``

For each case (a baseline with nothing else waiting, then ``--waiting`` items due in a day), ``--due`` items are
spread over the next ``--seconds`` seconds; one :class:`Scheduler` (ticking every 0.5 s, as ``python -m bot`` does)
carries them out with a handler that records how late each fired (by Redis's clock, the one deadlines are judged
by). Redis round trips are counted on the wire (one per packed command), over the whole window and over an idle
second at the end. Keys use a unique prefix and are deleted at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from typing import Any

import redis.asyncio as aioredis

from benchmarks._util import summary, table
from bot.store.schedule import DueItem, Schedule, Scheduler


class CountingConnection(aioredis.Connection):
    """Counts the packed commands written to Redis (one per round trip, pipelines included)."""

    sent = 0

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        CountingConnection.sent += 1
        await super().send_packed_command(command, check_health)


async def redis_now(client: aioredis.Redis) -> float:
    seconds, micros = await client.time()
    return int(seconds) + int(micros) / 1e6


async def run_case(client: aioredis.Redis, *, waiting: int, due: int, seconds: float) -> list[Any]:
    prefix = f"bench:{uuid.uuid4().hex[:8]}:"
    schedule = Schedule(client, prefix=prefix)
    now = await redis_now(client)
    for start in range(0, waiting, 10_000):  # the crowd: due in a day
        members = {
            DueItem("deadline", f"run_{i}", "q1").member(): (now + 86400) * 1000
            for i in range(start, min(waiting, start + 10_000))
        }
        await client.zadd(schedule.key, members)
    due_at: dict[str, float] = {}
    for i in range(due):
        when = now + 1 + seconds * i / max(1, due)
        item = DueItem("deadline", f"due_{i}", "q1")
        due_at[item.run_id] = when
        await client.zadd(schedule.key, {item.member(): int(when * 1000)})
    late_ms: list[float] = []
    fired = asyncio.Event()

    async def handler(item: DueItem) -> None:
        fired_at = await redis_now(client)
        late_ms.append((fired_at - due_at[item.run_id]) * 1000)
        if len(late_ms) == due:
            fired.set()

    scheduler = Scheduler(schedule, {"deadline": handler})
    before = CountingConnection.sent
    t0 = time.perf_counter()
    task = asyncio.ensure_future(scheduler.run())
    await asyncio.wait_for(fired.wait(), seconds + 30)
    window = time.perf_counter() - t0
    calls = CountingConnection.sent - before
    idle_before = CountingConnection.sent
    await asyncio.sleep(2.0)
    idle_calls = (CountingConnection.sent - idle_before) / 2.0
    scheduler.stop()
    await task
    keys = [k async for k in client.scan_iter(match=f"{prefix}*")]
    if keys:
        await client.delete(*keys)
    p50, p99, _mean = summary(late_ms)
    return [f"{waiting:,}", due, p50, p99, f"{max(late_ms):.1f}", f"{calls / window:.1f}", f"{idle_calls:.1f}"]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--waiting", type=int, default=100_000)
    parser.add_argument("--due", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    args = parser.parse_args()
    pool = aioredis.ConnectionPool.from_url(args.redis, connection_class=CountingConnection)
    client = aioredis.Redis(connection_pool=pool)
    await client.ping()
    rows = [
        await run_case(client, waiting=0, due=args.due, seconds=args.seconds),
        await run_case(client, waiting=args.waiting, due=args.due, seconds=args.seconds),
    ]
    await client.aclose()
    print(
        table(
            ["waiting", "fired", "late p50 ms", "late p99 ms", "late max ms", "redis calls/s (firing)", "calls/s idle"],
            rows,
        )
    )


if __name__ == "__main__":
    asyncio.run(main())
