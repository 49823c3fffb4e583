"""WorkQueue: jobs reach a worker once acknowledged; a dead worker's jobs are reclaimed; bad jobs are dropped."""

from __future__ import annotations

import asyncio
import hashlib
import json
from typing import Any

import pytest
import redis.asyncio as aioredis

from bot.store import Keys, connect_redis
from bot.store.work_queue import _ACK, GROUP, JOB_VERSION, WorkQueue
from bot.testing.tcp_proxy import TcpProxy


async def run_until(queue: WorkQueue, seen: list[dict[str, Any]], n: int, **kwargs: Any) -> None:
    stop = asyncio.Event()

    async def handler(job: dict[str, Any]) -> None:
        seen.append(job)
        if len(seen) >= n:
            stop.set()

    await asyncio.wait_for(queue.consume(handler, stop=stop, block_ms=50, **kwargs), 10)


async def test_jobs_are_handled_once_and_removed(fake_redis: aioredis.Redis, prefix: str) -> None:
    queue = WorkQueue(fake_redis, keys=Keys(prefix))
    for i in range(5):
        await queue.enqueue({"kind": "action", "n": i})
    seen: list[dict[str, Any]] = []
    await run_until(queue, seen, 5)
    assert sorted(j["n"] for j in seen) == [0, 1, 2, 3, 4]
    assert await fake_redis.xlen(Keys(prefix).work()) == 0
    assert (await fake_redis.xpending(Keys(prefix).work(), GROUP))["pending"] == 0


async def test_a_dead_workers_jobs_are_reclaimed(fake_redis: aioredis.Redis, prefix: str) -> None:
    queue = WorkQueue(fake_redis, keys=Keys(prefix))
    await queue.enqueue({"kind": "converse", "n": 1})
    await fake_redis.xgroup_create(Keys(prefix).work(), GROUP, id="0", mkstream=True)
    taken = await fake_redis.xreadgroup(GROUP, "dead-worker", {Keys(prefix).work(): ">"}, count=10)
    assert len(taken[0][1]) == 1  # a worker took it, then died without acknowledging
    await asyncio.sleep(0.3)  # longer than lease_ttl below
    seen: list[dict[str, Any]] = []
    await run_until(queue, seen, 1, lease_ttl=0.2)
    assert [{k: v for k, v in j.items() if k not in ("id", "v")} for j in seen] == [
        {"kind": "converse", "n": 1, "redelivered": True}
    ]  # the handler knows it is a second try


async def test_a_long_job_of_a_live_worker_is_not_taken_again(fake_redis: aioredis.Redis, prefix: str) -> None:
    """A job that runs five times ``lease_ttl`` stays with its live worker: the worker keeps it fresh."""
    queue = WorkQueue(fake_redis, keys=Keys(prefix))
    await queue.enqueue({"kind": "converse", "n": 1})
    started, stop = asyncio.Event(), asyncio.Event()

    async def slow(job: dict[str, Any]) -> None:
        started.set()
        await asyncio.sleep(1.0)
        stop.set()

    worker = asyncio.ensure_future(queue.consume(slow, stop=stop, block_ms=50, lease_ttl=0.2))
    await started.wait()
    stolen = []
    while not stop.is_set():  # another worker looking for dead workers' jobs, more often than the owner
        claimed = await fake_redis.xautoclaim(Keys(prefix).work(), GROUP, "intruder", min_idle_time=200, count=10)
        stolen += claimed[1]
        await asyncio.sleep(0.05)
    await asyncio.wait_for(worker, 10)
    assert stolen == []


async def test_malformed_and_failing_jobs_do_not_stop_the_worker(fake_redis: aioredis.Redis, prefix: str) -> None:
    queue = WorkQueue(fake_redis, keys=Keys(prefix))
    await fake_redis.xadd(Keys(prefix).work(), {"job": "{not json"})
    await queue.enqueue({"boom": True})
    await queue.enqueue({"n": 2})
    seen: list[dict[str, Any]] = []
    stop = asyncio.Event()

    async def handler(job: dict[str, Any]) -> None:
        if job.get("boom"):
            raise RuntimeError("handler bug")
        seen.append(job)
        stop.set()

    await asyncio.wait_for(queue.consume(handler, stop=stop, block_ms=50), 10)
    assert [j["n"] for j in seen] == [2]
    assert await fake_redis.xlen(Keys(prefix).work()) == 0


async def test_jobs_carry_a_version_and_an_id_and_a_resent_enqueue_queues_once(
    fake_redis: aioredis.Redis, prefix: str
) -> None:
    """An XADD resent after its reply was lost (redis-py retries it) must not queue the job twice."""
    queue = WorkQueue(fake_redis, keys=Keys(prefix))
    job_id = await queue.enqueue({"n": 1})
    again = await queue.enqueue({"id": job_id, "n": 1})  # the same job sent again
    assert again == job_id
    await queue.enqueue({"n": 2})
    entries = await fake_redis.xrange(Keys(prefix).work())
    jobs = [json.loads(fields[b"job"]) for _id, fields in entries]
    assert [j["n"] for j in jobs] == [1, 2]
    assert all(j["v"] == JOB_VERSION and j["id"] for j in jobs)


@pytest.mark.real_redis
@pytest.mark.redis_kinds("single")  # a TcpProxy in front of one server
async def test_an_enqueue_whose_reply_is_lost_queues_the_job_once(real_redis: aioredis.Redis, prefix: str) -> None:
    """Redis adds the job, the reply is lost, redis-py's retry sends the same script again: still one job."""
    async with TcpProxy("127.0.0.1", 6379) as proxy:
        client = connect_redis(f"redis://127.0.0.1:{proxy.port}/0")
        try:
            queue = WorkQueue(client, keys=Keys(prefix))
            proxy.lose_next_reply(containing=b"lost-reply-job")
            await queue.enqueue({"kind": "lost-reply-job"})
            assert proxy.replies_lost == 1
            assert await real_redis.xlen(Keys(prefix).work()) == 1
        finally:
            await client.aclose()


async def test_a_first_release_workers_job_is_left_to_its_own_rule_while_a_deploy_rolls(
    fake_redis: aioredis.Redis, prefix: str
) -> None:
    """A consumer named ``host:pid`` (the first release: no lease, it touches its jobs every 40 s) is not taken for
    dead after lease_ttl; a lease-less consumer of this release (any other name) is."""
    queue = WorkQueue(fake_redis, keys=Keys(prefix))
    key = Keys(prefix).work()
    await fake_redis.xgroup_create(key, GROUP, id="0", mkstream=True)
    await queue.enqueue({"n": 1})
    await fake_redis.xreadgroup(GROUP, "oldhost:4242", {key: ">"}, count=10)
    await queue.enqueue({"n": 2})
    await fake_redis.xreadgroup(GROUP, "newhost:4242:a1b2c3", {key: ">"}, count=10)
    await asyncio.sleep(0.3)  # longer than lease_ttl below
    seen: list[dict[str, Any]] = []
    await run_until(queue, seen, 1, lease_ttl=0.2)
    assert [j["n"] for j in seen] == [2]
    pending = await fake_redis.xpending_range(key, GROUP, "-", "+", 10)
    assert [p["consumer"] for p in pending] == [b"oldhost:4242"]


@pytest.mark.real_redis
@pytest.mark.redis_kinds("single")  # a TcpProxy in front of one server
async def test_a_job_handled_as_redis_goes_down_is_acknowledged_once_it_is_back(
    proxied_redis: tuple[aioredis.Redis, TcpProxy], real_redis: aioredis.Redis, prefix: str
) -> None:
    """Redis is cut (1 s) as a handled job's acknowledgement goes out: once it is back the job is acknowledged and
    gone, handled once. It stayed pending and was handled again and again (seven times in one run of this test)."""
    client, proxy = proxied_redis
    queue, stop, handled = WorkQueue(client, keys=Keys(prefix)), asyncio.Event(), asyncio.Event()
    ack = hashlib.sha1(_ACK.encode()).hexdigest().encode()  # the acknowledgement's EVALSHA

    runs: list[int] = []

    async def handler(job: dict[str, Any]) -> None:
        runs.append(job["n"])
        proxy.cut_at(containing=ack, when="request", lasting=1.0)
        handled.set()

    await WorkQueue(real_redis, keys=Keys(prefix)).enqueue({"n": 1})
    worker = asyncio.ensure_future(queue.consume(handler, stop=stop, block_ms=50))
    try:
        await asyncio.wait_for(handled.wait(), 10)
        key = Keys(prefix).work()
        for _ in range(100):
            if proxy.cuts and not proxy.down and (await real_redis.xpending(key, GROUP))["pending"] == 0:
                break
            await asyncio.sleep(0.1)
        assert runs == [1] and proxy.cuts == 1
        assert (await real_redis.xpending(key, GROUP))["pending"] == 0 and await real_redis.xlen(key) == 0
    finally:
        stop.set()
        await asyncio.wait_for(worker, 10)
