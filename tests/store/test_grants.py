"""The standing grants' store (bot.store.grants): the frozen fixture of each released Grant version loads and is
used; a use is counted and an expired grant covers nothing; only its giver revokes it, once; and the race: a grant
revoked while calls check it, on the real Redis from two clients, and from two OS processes (one revoking, one
using), is used either before the revoke (each such use counted in what the revoke reports) or not at all."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from bot.agent.decisions import args_hash
from bot.agent.state import utcnow
from bot.errors import StoreCorrupt, UnknownSchemaVersion
from bot.store import Keys
from bot.store.grants import Grant, GrantStore, new_grant_id

FIXTURES = Path(__file__).parent.parent / "fixtures"
ROOT = Path(__file__).resolve().parents[2]
REAL_REDIS_URL = os.environ.get("REDIS_TEST_URL", "redis://127.0.0.1:6379/0")
CLUSTER_URL = os.environ.get("REDIS_TEST_CLUSTER_URL", "redis://127.0.0.1:7000/0")
ROUNDS = 30
USES = 6  # calls checking the grant at once per round

WORKER = r"""
import asyncio, json, sys
from bot.store import Keys, connect_redis
from bot.store.grants import GrantStore

async def pop(client, key):
    while True:  # short blocks: a client's socket timeout is shorter than a long BLPOP
        got = await client.blpop([key], timeout=1)
        if got is not None:
            return got[1]

async def main() -> None:
    url, cluster, prefix, role, rounds, uses = sys.argv[1:7]
    client = connect_redis(url, cluster=cluster == "1")
    store = GrantStore(client, keys=Keys(prefix))
    await client.rpush(f"{prefix}race:ready", role)
    for n in range(int(rounds)):
        job = json.loads(await pop(client, f"{prefix}race:go:{role}:{n}"))
        if role == "use":
            got = await asyncio.gather(*(store.use("T1", job["key"]) for _ in range(int(uses))))
            out = sum(g is not None and g.grant_id == job["grant_id"] for g in got)
        else:
            out = await store.revoke("T1", "U1", job["grant_id"])
        await client.rpush(f"{prefix}race:done:{n}", json.dumps({"role": role, "out": out}))
    await client.aclose()

asyncio.run(main())
"""


def grant(*, by: str = "U1", expires_in: timedelta = timedelta(hours=1), **fields: Any) -> Grant:
    now = utcnow()
    base: dict[str, Any] = {
        "grant_id": new_grant_id(),
        "team_id": "T1",
        "granted_by": by,
        "scope": "thread",
        "tool_name": "deploy",
        "rule": "prod deploys",
        "channel_id": "C1",
        "thread_ts": "1.2",
        "granted_at": now,
        "expires_at": now + expires_in,
    }
    return Grant.model_validate({**base, **fields})


def test_every_frozen_grant_fixture_loads_and_the_current_one_round_trips() -> None:
    found = sorted(FIXTURES.glob("grant_v*.json"))
    assert {p.stem for p in found} == {"grant_v1"}, "add a frozen fixture for each released Grant version"
    raw = found[-1].read_text().strip()
    loaded = Grant.from_json(raw)
    assert loaded.model_dump_json() == raw
    assert loaded.scope_key() == "always:deploy:0123456789abcdef"
    newer = json.loads(raw) | {"schema_version": 2}
    with pytest.raises(UnknownSchemaVersion):
        Grant.from_json(json.dumps(newer))
    with pytest.raises(StoreCorrupt):
        Grant.from_json(json.dumps(json.loads(raw) | {"surprise": 1}))


async def test_a_stored_fixture_grant_is_used_and_counted(fake_redis: aioredis.Redis, prefix: str) -> None:
    store = GrantStore(fake_redis, keys=Keys(prefix))
    frozen = Grant.from_json((FIXTURES / "grant_v1.json").read_text())
    now = utcnow()
    moved = frozen.model_copy(update={"granted_at": now, "expires_at": now + timedelta(days=7)})  # times from now
    await store.give(moved)
    used = await store.use("T1", moved.scope_key())
    assert used is not None and used.grant_id == frozen.grant_id and used.args == frozen.args
    assert await store.revoke("T1", "U0BOB0001", frozen.grant_id) == 1


async def test_an_expired_grant_covers_nothing_and_only_its_giver_revokes_it_once(
    fake_redis: aioredis.Redis, prefix: str
) -> None:
    store = GrantStore(fake_redis, keys=Keys(prefix))
    old = grant(expires_in=-timedelta(seconds=1))
    await store.give(old)
    assert await store.peek("T1", old.scope_key()) is None and await store.use("T1", old.scope_key()) is None
    assert await store.of_person("T1", "U1") == []
    live = grant(scope="always", channel_id="", thread_ts="", args_hash=args_hash({"env": "prod"}))
    await store.give(live)
    assert [g.grant_id for g in await store.of_person("T1", "U1")] == [live.grant_id]
    assert await store.revoke("T1", "U2", live.grant_id) is None  # another person's: not theirs to revoke
    assert (await store.use("T1", live.scope_key())) is not None
    assert await store.revoke("T1", "U1", live.grant_id) == 1
    assert await store.revoke("T1", "U1", live.grant_id) is None  # once
    assert await store.use("T1", live.scope_key()) is None


async def test_a_second_grant_of_the_same_person_on_a_scope_replaces_the_first(
    fake_redis: aioredis.Redis, prefix: str
) -> None:
    store = GrantStore(fake_redis, keys=Keys(prefix))
    first, second = grant(), grant(expires_in=timedelta(hours=3))
    await store.give(first)
    await store.give(second)
    assert [g.grant_id for g in await store.of_person("T1", "U1")] == [second.grant_id]


async def test_a_grant_revoked_while_calls_check_it_is_used_before_the_revoke_or_not_at_all(
    real_redis: aioredis.Redis, connect_real_redis: Callable[[], aioredis.Redis], prefix: str
) -> None:
    """Many rounds: one client revokes while another client's calls check the grant at the same moment. Every use
    that succeeded is counted in what the revoke reports (none is lost or invented), and after the revoke no use
    succeeds."""
    keys = Keys(prefix)
    revoker = GrantStore(real_redis, keys=keys)
    checker = GrantStore(connect_real_redis(), keys=keys)
    saw_both_orders = {"before": 0, "after": 0}  # rounds where some use won the race / where the revoke won all
    for _ in range(30):
        given = grant()
        await revoker.give(given)
        key = given.scope_key()
        results = await asyncio.gather(
            *(checker.use("T1", key) for _ in range(4)),
            revoker.revoke("T1", "U1", given.grant_id),
            *(checker.use("T1", key) for _ in range(4)),
        )
        uses = [r for r in results if isinstance(r, Grant)]
        revoked = results[4]
        assert revoked == len(uses)  # each use that succeeded happened before the revoke, and was counted
        assert await checker.use("T1", key) is None  # and nothing after it
        saw_both_orders["before" if uses else "after"] += 1
    assert sum(saw_both_orders.values()) == 30


@pytest.fixture
def workers(redis_kind: str, prefix: str) -> Iterator[Callable[[str], subprocess.Popen[bytes]]]:
    """``workers(role)``: a ``python`` OS process (``WORKER``) that uses (``"use"``) or revokes (``"revoke"``) the
    grant of each round on this test's real Redis; killed at teardown."""
    cluster = redis_kind == "cluster"
    url = CLUSTER_URL if cluster else REAL_REDIS_URL
    procs: list[subprocess.Popen[bytes]] = []

    def start(role: str) -> subprocess.Popen[bytes]:
        args = [url, "1" if cluster else "0", prefix, role, str(ROUNDS), str(USES)]
        procs.append(subprocess.Popen([sys.executable, "-c", WORKER, *args], cwd=ROOT))
        return procs[-1]

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)


async def test_a_grant_revoked_in_one_process_while_another_process_uses_it_is_used_before_the_revoke_or_not_at_all(
    real_redis: aioredis.Redis, prefix: str, workers: Callable[[str], subprocess.Popen[bytes]]
) -> None:
    """Two OS processes on the real Redis, both waiting for each round's go: one revokes the round's grant while the
    other's calls check it (``USES`` at once). Every use that succeeded is counted in what the revoke reports (none
    lost or invented), and after the revoke no use succeeds."""
    store = GrantStore(real_redis, keys=Keys(prefix))
    procs = [workers("use"), workers("revoke")]
    for _ in procs:  # both are connected and waiting for round 0's go
        await pop(real_redis, f"{prefix}race:ready", procs=procs)
    orders = {"some used first": 0, "revoked first": 0}
    for n in range(ROUNDS):
        given = grant()
        await store.give(given)
        job = json.dumps({"key": given.scope_key(), "grant_id": given.grant_id})
        first, second = ("use", "revoke") if n % 2 else ("revoke", "use")  # either one told first
        await real_redis.rpush(f"{prefix}race:go:{first}:{n}", job)
        await real_redis.rpush(f"{prefix}race:go:{second}:{n}", job)
        results = {}
        for _ in procs:
            result = json.loads(await pop(real_redis, f"{prefix}race:done:{n}", procs=procs))
            results[result["role"]] = result["out"]
        assert results["revoke"] == results["use"]  # each use that succeeded came before the revoke, counted
        assert await store.use("T1", given.scope_key()) is None  # and nothing after it
        orders["some used first" if results["use"] else "revoked first"] += 1
    assert sum(orders.values()) == ROUNDS
    assert [proc.wait(60) for proc in procs] == [0, 0]


async def pop(client: aioredis.Redis, key: str, *, procs: list[subprocess.Popen[bytes]]) -> bytes:
    """The next item of list ``key`` (short BLPOPs: the client's socket timeout is shorter than a long one); fails
    when a worker process has ended with an error meanwhile, or after two minutes (a budget for a loaded machine)."""
    for _ in range(120):
        got = await client.blpop([key], timeout=1)
        if got is not None:
            return bytes(got[1])
        assert all(proc.poll() in (None, 0) for proc in procs), "a worker process failed"
    pytest.fail(f"nothing came on {key} within two minutes")
