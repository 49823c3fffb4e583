"""``connect_redis`` with ``cluster``: the cluster client, bounded connections that wait (as the single client's
pool does), and every store operation accepted by a real cluster (no cross-slot refusal)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import ConnectionError, MaxConnectionsError

from bot.store import Keys, connect_redis
from tests.conftest import REAL_CLUSTER_URL
from tests.store.test_cluster_slots import exercise

pytestmark = pytest.mark.real_redis


@pytest.mark.redis_kinds("cluster")
async def test_a_burst_waits_for_a_connection_instead_of_failing(real_redis: aioredis.Redis, prefix: str) -> None:
    """100 commands at once on 2 connections per node: redis-py's own cluster client fails some at once
    (``MaxConnectionsError``); the bot's waits and does them all."""
    burst = [f"{prefix}{{burst}}:{i}" for i in range(100)]  # one slot: every command on the same node
    plain = RedisCluster.from_url(REAL_CLUSTER_URL, max_connections=2)
    try:
        results = await asyncio.gather(*(plain.set(k, 1, ex=60) for k in burst), return_exceptions=True)
        assert any(isinstance(r, MaxConnectionsError) for r in results)
    finally:
        await plain.aclose()
    client = connect_redis(REAL_CLUSTER_URL, cluster=True, max_connections=2)
    try:
        assert isinstance(client, RedisCluster)
        assert await asyncio.gather(*(client.set(k, 2, ex=60) for k in burst)) == [True] * 100
        async with client.pipeline(transaction=False) as pipe:
            for k in burst:
                pipe.get(k)
            assert await pipe.execute() == [b"2"] * 100
    finally:
        await client.aclose()


@pytest.mark.redis_kinds("cluster")
async def test_a_command_waits_for_a_free_connection_only_so_long(real_redis: aioredis.Redis, prefix: str) -> None:
    client = connect_redis(REAL_CLUSTER_URL, cluster=True, max_connections=1, wait_timeout=0.2)
    try:
        holder = asyncio.ensure_future(client.blpop([f"{prefix}nothing"], timeout=1))
        await asyncio.sleep(0.05)
        with pytest.raises(ConnectionError, match="no free Redis connection"):
            await client.get(f"{prefix}other")
        assert await holder is None
        assert await client.get(f"{prefix}other") is None  # free again
    finally:
        await client.aclose()


@pytest.mark.redis_kinds("cluster")
async def test_a_new_clients_first_burst_goes_to_the_right_nodes(real_redis: aioredis.Redis, prefix: str) -> None:
    """redis-py 8.1 routes a new cluster client's first commands before it has the slot map: each draws a MOVED and
    every 5th MOVED closes the connections the others are using (their commands fail, some with AttributeError).
    The bot's client learns the map first."""
    keys = [f"{prefix}{{k{i}}}" for i in range(60)]  # spread over the three nodes
    await asyncio.gather(*(real_redis.set(k, 1, ex=60) for k in keys))
    for _ in range(10):  # redis-py's own client failed about one round in five here
        client = connect_redis(REAL_CLUSTER_URL, cluster=True)
        try:
            assert await asyncio.gather(*(client.get(k) for k in keys)) == [b"1"] * 60
        finally:
            await client.aclose()


async def test_every_store_operation_is_accepted(real_redis: aioredis.Redis, prefix: str) -> None:
    """The slot checker's exercise on the real Redis: a cluster refuses a script or transaction across slots
    (``CROSSSLOT``, or redis-py before sending), so passing here means none of them spans slots."""
    await exercise(real_redis, Keys(prefix))  # type: ignore[arg-type]
    assert [k async for k in real_redis.scan_iter(match=f"{prefix}*")]  # it wrote, on every node it needed


def test_a_cluster_client_is_built_from_any_nodes_url() -> None:
    client: Any = connect_redis("redis://127.0.0.1:7000/0", cluster=True)
    assert isinstance(client, RedisCluster)
    assert isinstance(connect_redis("redis://127.0.0.1:6379/0"), aioredis.Redis)


async def _move_slot(slot: int, keys: list[str], *, source: int, to: int) -> None:
    """Move ``slot`` (holding ``keys``, and whatever keys other tests running beside this one have in it) from the
    node on port ``source`` to the one on ``to``, as ``redis-cli --cluster reshard`` does: every key of the slot
    goes (a key left behind on ``source`` is lost to every client once the slot is ``to``'s: another test's GET
    read None)."""
    nodes = {p: aioredis.Redis(host="127.0.0.1", port=p) for p in (7000, 7001, 7002)}
    try:
        src_id, dst_id = [(await nodes[p].execute_command("CLUSTER MYID")).decode() for p in (source, to)]
        await nodes[to].execute_command("CLUSTER SETSLOT", slot, "IMPORTING", src_id)
        await nodes[source].execute_command("CLUSTER SETSLOT", slot, "MIGRATING", dst_id)
        await nodes[source].execute_command("MIGRATE", "127.0.0.1", to, "", 0, 5000, "KEYS", *keys)
        while held := await nodes[source].execute_command("CLUSTER GETKEYSINSLOT", slot, 100):
            await nodes[source].execute_command("MIGRATE", "127.0.0.1", to, "", 0, 5000, "KEYS", *held)
        for node in nodes.values():
            await node.execute_command("CLUSTER SETSLOT", slot, "NODE", dst_id)
    finally:
        for node in nodes.values():
            await node.aclose()


@pytest.mark.redis_kinds("cluster")
async def test_a_run_whose_slot_moved_is_saved_on_its_new_node(real_redis: aioredis.Redis, prefix: str) -> None:
    """A reshard moves a run's slot while a process holds the old map: its next save draws MOVED, the client follows
    it, and the compare-and-set script finds the run, lease and all, on the new node (they share the slot)."""
    from redis.crc import key_slot

    from bot.agent.state import RunState
    from bot.store import RedisRunStore

    client: Any = connect_redis(REAL_CLUSTER_URL, cluster=True)
    store = RedisRunStore(client, prefix=prefix)
    try:
        state = await store.create(RunState(run_id=f"moving-{prefix}", agent_id="a", status="running"), owner="p")
        keys = Keys(prefix)
        slot = key_slot(keys.run(state.run_id).encode())
        home = int(client.nodes_manager.get_node_from_slot(slot).port)
        away = next(p for p in (7000, 7001, 7002) if p != home)
        moved = [keys.run(state.run_id), keys.lease(state.run_id)]
        await _move_slot(slot, moved, source=home, to=away)
        try:
            saved = await store.save(state.model_copy(update={"status": "completed"}), owner="p")
            assert saved.revision == 2 and (await store.load(state.run_id)).status == "completed"
            assert int(client.nodes_manager.get_node_from_slot(slot).port) == away
        finally:
            await _move_slot(slot, moved, source=away, to=home)
    finally:
        await client.aclose()
