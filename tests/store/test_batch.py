"""A batch sends the commands of several store objects in one round trip, reads come back parsed, and a Redis error
is a ``StoreUnavailable`` that fills nothing; on a cluster a batch may span slots."""

from __future__ import annotations

import fakeredis
import pytest
import redis.asyncio as aioredis

from bot.errors import StoreUnavailable
from bot.store import Keys
from bot.store.batch import Batch
from bot.store.conversations import ConversationIndex, MessageRef
from bot.store.inbox import Inbox
from bot.testing.tcp_proxy import TcpProxy


@pytest.mark.real_redis
@pytest.mark.redis_kinds("single")  # a TcpProxy in front of one server counts the round trips
async def test_commands_of_several_store_objects_go_in_one_round_trip(
    proxied_redis: tuple[aioredis.Redis, TcpProxy], prefix: str
) -> None:
    client, proxy = proxied_redis
    keys = Keys(prefix)
    index, inbox = ConversationIndex(client, keys=keys), Inbox(client, keys=keys)
    before = proxy.round_trips
    batch = Batch(client)
    index.queue_message(batch, "run-1", key="c1", ref=MessageRef("C1", "1.1", "7"))
    inbox.queue_add(batch, "T1", ["U1", "U2"], run_id="run-1", call="c1", asked_ms=5)
    await batch.run("writing")
    assert proxy.round_trips - before == 1

    before = proxy.round_trips
    reading = Batch(client)
    owners = inbox.queue_owners(reading, "run-1", "c1")
    shown = index.queue_messages(reading, "run-1", "c1", asked="7")
    await reading.run("reading")
    assert proxy.round_trips - before == 1
    assert sorted(owners.value) == [("T1", "U1"), ("T1", "U2")]
    assert shown.value == [MessageRef("C1", "1.1", "7")]


@pytest.mark.real_redis
async def test_a_batch_may_span_cluster_slots(real_redis: aioredis.Redis, prefix: str) -> None:
    """The inbox keys of two people and a run's keys hash to different slots; the batch still runs (the cluster
    client sends each node its part) and every read is filled, in the order queued."""
    keys = Keys(prefix)
    inbox = Inbox(real_redis, keys=keys)
    await inbox.add("T1", ["U1", "U2", "U3"], run_id="run-9", call="c9", asked_ms=1)
    batch = Batch(real_redis)
    snapshots = []
    for user in ("U1", "U2", "U3"):
        batch.pipe.zcard(keys.inbox("T1", user))
        snapshots.append(batch.read(int))
    owners = inbox.queue_owners(batch, "run-9", "c9")
    await batch.run("reading inboxes")
    assert [s.value for s in snapshots] == [1, 1, 1]
    assert len(owners.value) == 3


async def test_a_read_is_there_only_once_its_batch_ran(fake_redis: aioredis.Redis) -> None:
    batch = Batch(fake_redis)
    with pytest.raises(ValueError, match="queue the command"):
        batch.read(int)
    batch.pipe.incr("n")
    n = batch.read(int)
    with pytest.raises(RuntimeError, match="has not run"):
        _ = n.value
    await batch.run("counting")
    assert n.value == 1 and len(batch) == 0
    await Batch(fake_redis).run("nothing")  # an empty batch sends nothing


async def test_a_redis_error_is_store_unavailable_naming_what_failed_and_fills_no_read() -> None:
    server = fakeredis.FakeServer()
    client = fakeredis.FakeAsyncRedis(server=server)
    batch = Batch(client)
    batch.pipe.set("a", "1")
    later = batch.read(bool)
    server.connected = False  # fakeredis: every command now fails with a ConnectionError
    with pytest.raises(StoreUnavailable, match="Redis error while recording a question: ConnectionError"):
        await batch.run("recording a question")
    with pytest.raises(RuntimeError):
        _ = later.value
    await client.aclose()


SCRIPT = "redis.call('SET', KEYS[1], ARGV[1]); return tonumber(ARGV[1]) + 1"


@pytest.mark.real_redis
@pytest.mark.redis_kinds("single")
async def test_a_script_goes_in_the_batch_s_round_trip(
    proxied_redis: tuple[aioredis.Redis, TcpProxy], prefix: str
) -> None:
    """No ``SCRIPT EXISTS`` first (redis-py's pipeline sends one for a script it was given): once Redis knows the
    script, a batch holding it and other commands is one round trip."""
    client, proxy = proxied_redis
    script = client.register_script(SCRIPT)
    await script(keys=[f"{prefix}warm"], args=[0])  # Redis knows it now
    before = proxy.round_trips
    batch = Batch(client)
    batch.script(script, keys=[f"{prefix}s"], args=[41])
    got = batch.read(int)
    batch.pipe.get(f"{prefix}s")
    stored = batch.read(lambda v: v)
    await batch.run("running a script")
    assert proxy.round_trips - before == 1
    assert got.value == 42 and stored.value in ("41", b"41")


async def test_a_script_redis_does_not_know_is_loaded_and_run_once() -> None:
    client = fakeredis.FakeAsyncRedis()  # a fresh server: NOSCRIPT for the script's first call
    script = client.register_script("return redis.call('INCR', KEYS[1])")
    batch = Batch(client)
    batch.script(script, keys=["n"], args=[])
    first = batch.read(int)
    batch.pipe.incr("m")
    await batch.run("counting")
    assert first.value == 1 and int(await client.get("n")) == 1 and int(await client.get("m")) == 1
    await client.aclose()


@pytest.mark.real_redis
async def test_a_batch_s_script_runs_on_a_cluster_too(real_redis: aioredis.Redis, prefix: str) -> None:
    """redis-py's cluster pipeline refuses ``EVALSHA``: there the script goes beside the pipeline, its reply in its
    place among the reads."""
    script = real_redis.register_script(SCRIPT)
    batch = Batch(real_redis)
    batch.pipe.set(f"{prefix}before", "1")
    batch.script(script, keys=[f"{prefix}s"], args=[1])
    got = batch.read(int)
    batch.pipe.get(f"{prefix}before")
    after = batch.read(lambda v: v)
    await batch.run("running a script")
    assert got.value == 2 and after.value in ("1", b"1")
    assert await real_redis.get(f"{prefix}s") in ("1", b"1")
