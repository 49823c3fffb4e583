"""Run slots (:mod:`bot.slack.run_slots`, :mod:`bot.store.limits`) through Redis outages, on the real Redis behind a
fault-injecting proxy: a slot whose release, or whose taking, failed in an outage is given back as soon as Redis
answers, in this process at the person's next request and in every other one within about a second; a renewal
never brings back a released slot."""

from __future__ import annotations

import asyncio
import time

import pytest
import redis.asyncio as aioredis

from bot.errors import RunLimitReached, StoreUnavailable
from bot.outage import RETRY_MAX
from bot.slack.run_slots import TOO_BUSY, TOO_MANY_FOR_YOU, RunSlots, Slot, Taking
from bot.store import Keys
from bot.store.batch import Batch
from bot.store.connect import connect_redis
from bot.store.limits import ActiveRuns
from bot.testing.tcp_proxy import TcpProxy

pytestmark = [pytest.mark.real_redis, pytest.mark.redis_kinds("single")]  # a TcpProxy in front of one server

PERSON = {"team_id": "T1", "user": "U1"}


def gate_on(client: aioredis.Redis, prefix: str, *, per_person: int = 3, per_process: int = 3) -> RunSlots:
    return RunSlots(ActiveRuns(client, keys=Keys(prefix)), per_person=per_person, per_process=per_process)


def queued(gate: RunSlots, client: aioredis.Redis) -> tuple[Batch, Taking]:
    """A batch on ``client`` with the person's slot asked for in it (:meth:`RunSlots.queue_enter`), not yet sent."""
    batch = Batch(client)
    taking = gate.queue_enter(batch, **PERSON)
    assert taking is not None
    return batch, taking


async def slots(gate: RunSlots, n: int) -> list[Slot]:
    taken = [await gate.enter(**PERSON) for _ in range(n)]
    assert all(isinstance(s, Slot) for s in taken), taken
    return [s for s in taken if isinstance(s, Slot)]


async def held(real_redis: aioredis.Redis, prefix: str) -> int:
    """The person's slots held now (not lapsed; a slot marked released, given back before its taking landed, is
    not one: :mod:`bot.store.limits`)."""
    return int(await real_redis.zcount(Keys(prefix).active_runs("T1:U1"), f"({int(time.time() * 1000)}", "+inf"))


async def test_slots_whose_release_failed_in_an_outage_do_not_hold_anyone_back_once_redis_answers(
    proxied_redis: tuple[aioredis.Redis, TcpProxy], prefix: str
) -> None:
    """Three runs working (both limits reached), Redis cut as they end: once it is back the next request gets a
    slot at once, under the per-person limit and the per-process one (it used to be told "still working on 3 of
    your requests" for 2 minutes)."""
    client, proxy = proxied_redis
    gate = gate_on(client, prefix)
    try:
        working = await slots(gate, 3)
        with pytest.raises(RunLimitReached) as refused:
            await gate.enter(**PERSON)
        assert refused.value.notice == TOO_BUSY  # the per-process limit (3) as well as the person's (3)
        proxy.cut()
        for slot in working:
            await slot.release()  # raises nothing: owed
        proxy.restore()
        next_one = await gate.enter(**PERSON)
        assert isinstance(next_one, Slot)
        await next_one.release()
    finally:
        await gate.aclose()


async def test_another_process_sees_slots_given_back_soon_after_redis_answers(
    proxied_redis: tuple[aioredis.Redis, TcpProxy], real_redis: aioredis.Redis, prefix: str
) -> None:
    """The person's next request goes to another process: the process whose releases failed gives them back in the
    background as soon as Redis answers (not after the slots' 2-minute lapse)."""
    client, proxy = proxied_redis
    gate, other = gate_on(client, prefix), gate_on(real_redis, prefix)
    try:
        working = await slots(gate, 3)
        proxy.cut()
        for slot in working:
            await slot.release()
        with pytest.raises(RunLimitReached) as refused:
            await other.enter(**PERSON)
        assert refused.value.notice == TOO_MANY_FOR_YOU.format(n=3)  # held meanwhile
        await asyncio.sleep(1.0)  # the outage goes on: retried, still owed
        assert gate.owed
        proxy.restore()
        for _ in range(int(RETRY_MAX * 5 / 0.1)):  # given back within about RETRY_MAX seconds; 5x for a slow box
            if not await held(real_redis, prefix):
                break
            await asyncio.sleep(0.1)
        assert await held(real_redis, prefix) == 0 and not gate.owed
        assert isinstance(await other.enter(**PERSON), Slot)
    finally:
        await gate.aclose()
        await other.aclose()


async def test_a_slot_taken_as_redis_goes_down_is_given_back_once_it_answers(
    proxied_redis: tuple[aioredis.Redis, TcpProxy], real_redis: aioredis.Redis, prefix: str
) -> None:
    """Redis applies the taking of a slot and the outage loses its reply: the request is refused as the store being
    down (true: nothing was taken for it), and the slot Redis holds is given back once it answers."""
    client, proxy = proxied_redis
    gate = gate_on(client, prefix)
    try:
        proxy.cut_at(containing=b"active:", when="applied")
        with pytest.raises(StoreUnavailable):
            await gate.enter(**PERSON)
        assert await held(real_redis, prefix) == 1 and not gate.process_slots.locked()
        proxy.restore()
        for _ in range(int(RETRY_MAX * 5 / 0.1)):
            if not await held(real_redis, prefix):
                break
            await asyncio.sleep(0.1)
        assert await held(real_redis, prefix) == 0
        assert len(await slots(gate_on(real_redis, prefix), 3)) == 3  # the whole limit, in another process too
    finally:
        await gate.aclose()


async def test_a_renewal_that_lands_after_the_release_does_not_bring_the_slot_back(
    real_redis: aioredis.Redis, prefix: str
) -> None:
    """A slot's background renewal can reach Redis after its release (its cancel comes too late): the slot stays
    released (a renewal used to add it again, to hold the person's count for another 2 minutes)."""
    active = ActiveRuns(real_redis, keys=Keys(prefix))
    assert await active.acquire("T1:U1", slot="a", limit=3)
    await active.release("T1:U1", slots=["a"])
    assert not await active.renew("T1:U1", slot="a")
    assert await held(real_redis, prefix) == 0
    assert await active.acquire("T1:U1", slot="b", limit=3) and await active.renew("T1:U1", slot="b")
    assert 119_000 < await real_redis.pttl(Keys(prefix).active_runs("T1:U1")) <= 120_000


async def test_a_slot_asked_for_in_another_batch_is_used_once_or_given_back_unused(
    proxied_redis: tuple[aioredis.Redis, TcpProxy], real_redis: aioredis.Redis, prefix: str
) -> None:
    """A click's slot goes with its run's load (:meth:`RunSlots.queue_enter`): used, it is the person's slot; dropped
    (the answer could not be taken), nothing stays held; past the person's limit it is refused as ``enter`` is."""
    client, _proxy = proxied_redis
    gate = gate_on(client, prefix, per_person=1)
    try:
        batch, taking = queued(gate, client)
        await batch.run("a test")
        assert await held(real_redis, prefix) == 1
        await taking.drop()
        assert await held(real_redis, prefix) == 0 and not gate.owed
        batch, taking = queued(gate, client)
        await batch.run("a test")
        slot = await taking.take()
        await taking.drop()  # settled already: nothing
        assert await held(real_redis, prefix) == 1
        batch, second = queued(gate, client)
        await batch.run("a test")
        with pytest.raises(RunLimitReached) as refused:
            await second.take()
        assert refused.value.notice == TOO_MANY_FOR_YOU.format(n=1)
        await slot.release()
        assert await held(real_redis, prefix) == 0
    finally:
        await gate.aclose()


async def test_a_slot_asked_for_in_a_batch_that_failed_is_given_back_once_redis_answers(
    proxied_redis: tuple[aioredis.Redis, TcpProxy], real_redis: aioredis.Redis, prefix: str
) -> None:
    """The batch carrying a slot's taking was applied with its reply lost: the slot is owed back, and given back as
    soon as Redis answers (never held until it lapses)."""
    client, proxy = proxied_redis
    gate = gate_on(client, prefix, per_person=1)
    try:
        batch, taking = queued(gate, client)
        proxy.cut_at(containing=b"active:", when="applied")
        with pytest.raises(StoreUnavailable):
            await batch.run("a test")
        with pytest.raises(StoreUnavailable):
            await taking.take()
        assert gate.owed
        proxy.restore()
        next_one = await gate.enter(**PERSON)  # the owed one dropped in the same script
        assert isinstance(next_one, Slot)
        await next_one.release()
        assert await held(real_redis, prefix) == 0
    finally:
        await gate.aclose()


async def test_a_taking_that_lands_after_its_owed_release_takes_nothing(
    proxied_redis: tuple[aioredis.Redis, TcpProxy], real_redis: aioredis.Redis, prefix: str
) -> None:
    """A request given up while its slot's taking is stalled in the network (a Redis stall longer than the caller
    waits, or shutdown): the slot is owed back, and the release goes out on another connection, so it can reach
    Redis first. The taking that lands after it takes nothing (it used to hold the person's slot for 2 minutes:
    "still working on 1 of your requests" while nothing ran)."""
    client, proxy = proxied_redis
    gate = gate_on(client, prefix, per_person=1)
    try:
        proxy.hold_next(containing=b"active:", seconds=1.0)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(gate.enter(**PERSON), 0.2)
        assert gate.owed and not gate.process_slots.locked()
        await gate.pay_owed()  # reaches Redis before the held taking
        await asyncio.sleep(1.3)  # the taking has landed
        assert await held(real_redis, prefix) == 0
        (landed,) = await _members(real_redis, prefix)  # what the late taking left: a marker, not a slot
        assert not await gate.active.renew("T1:U1", slot=landed)  # nor does a renewal bring it back
        assert await held(real_redis, prefix) == 0
        async with await gate.enter(**PERSON):
            assert await held(real_redis, prefix) == 1
    finally:
        await gate.aclose()


@pytest.mark.parametrize("pay", ["retry", "next taking"])
async def test_a_slot_asked_for_in_a_batch_given_up_in_flight_is_not_held_once_the_batch_lands(
    proxied_redis: tuple[aioredis.Redis, TcpProxy], real_redis: aioredis.Redis, prefix: str, pay: str
) -> None:
    """As above for a slot asked for beside other reads (:meth:`RunSlots.queue_enter`): the batch is given up in
    flight, the slot owed back before the batch lands; once it has, the person may start a run at once. The owed
    slot is given back by the background retry, or dropped in the person's next taking (its script)."""
    client, proxy = proxied_redis
    gate = gate_on(client, prefix, per_person=1)
    try:
        batch, taking = queued(gate, client)
        proxy.hold_next(containing=b"active:", seconds=1.0)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(batch.run("a test"), 0.2)
        await taking.drop()  # its reply never came: owed back
        assert gate.owed
        if pay == "retry":
            await gate.pay_owed()
        else:
            async with await gate.enter(**PERSON):  # drops the owed one first, in its own script
                assert await held(real_redis, prefix) == 1  # this one only
            assert not gate.owed
        await asyncio.sleep(1.3)  # the batch has landed
        assert await held(real_redis, prefix) == 0
        async with await gate.enter(**PERSON):
            pass
    finally:
        await gate.aclose()


async def _members(real_redis: aioredis.Redis, prefix: str) -> list[str]:
    members = await real_redis.zrange(Keys(prefix).active_runs("T1:U1"), 0, -1)
    return [m.decode() if isinstance(m, bytes) else str(m) for m in members]


@pytest.mark.parametrize("path", ["enter", "batch"])
async def test_a_taking_redis_py_sent_twice_whose_first_send_lands_after_the_run_takes_nothing(
    proxied_redis: tuple[aioredis.Redis, TcpProxy], real_redis: aioredis.Redis, prefix: str, path: str
) -> None:
    """A taking stalled in the network past the client's socket timeout: redis-py sends it again on another
    connection, that send is granted, the run works and ends (or, asked for with a click's load, the answer can't
    be taken: given back unused). Then the stalled first send lands: it takes nothing (it held the person's only
    slot for 2 minutes, and nothing was owed to undo it)."""
    _client, proxy = proxied_redis
    client = connect_redis(f"redis://127.0.0.1:{proxy.port}/0", socket_timeout=0.3)  # 10 s in production
    gate = gate_on(client, prefix, per_person=1)
    try:
        await client.ping()
        proxy.hold_next(containing=b"active:", seconds=1.5)
        if path == "enter":
            async with await gate.enter(**PERSON):  # the second send, granted
                assert await held(real_redis, prefix) == 1
        else:
            batch, taking = queued(gate, client)
            await batch.run("a test")
            await taking.drop()  # the question was no longer open
        assert not gate.owed and await held(real_redis, prefix) == 0
        await asyncio.sleep(1.6)  # the first send has landed
        assert await held(real_redis, prefix) == 0
        async with await gate.enter(**PERSON):
            pass
    finally:
        await gate.aclose()
        await client.aclose()


async def test_a_process_whose_clock_is_behind_takes_no_other_processs_slot_with_it(
    real_redis: aioredis.Redis, prefix: str
) -> None:
    """A script whose times are stale (a process whose clock is behind by more than a slot's lapse time, as a send
    stalled that long is) never shortens the person's set's expiry nor lowers a held slot's lapse time: another
    process's working run keeps its slot, renewals included (the set was deleted with it, or the slot lapsed)."""
    keys = Keys(prefix)
    here = ActiveRuns(real_redis, keys=keys)
    behind = ActiveRuns(real_redis, keys=keys, clock=lambda: time.time() - 200)
    assert await here.acquire("T1:U1", slot="working", limit=3)
    lapse = await real_redis.zscore(keys.active_runs("T1:U1"), "working")
    await behind.acquire("T1:U1", slot="late", limit=3)
    await behind.release("T1:U1", slots=["gone"], mark=True)
    await behind.acquire("T1:U1", slot="working", limit=3)  # the working run's taking, its first send landing late
    assert await behind.renew("T1:U1", slot="working")  # still held, and its lapse time not lowered
    assert await real_redis.zscore(keys.active_runs("T1:U1"), "working") == lapse
    assert await real_redis.pttl(keys.active_runs("T1:U1")) > 110_000
    assert await held(real_redis, prefix) == 1
    assert await here.renew("T1:U1", slot="working")


@pytest.mark.parametrize("path", ["slot", "unused taking"])
async def test_a_release_given_up_in_flight_is_owed_back(
    proxied_redis: tuple[aioredis.Redis, TcpProxy], real_redis: aioredis.Redis, prefix: str, path: str
) -> None:
    """A slot's release is given up before it reached Redis (shutdown, a stall past the caller's wait; here it is
    held back, then its connection dropped): it is owed and given back once Redis answers (it was owed only on a
    Redis error: the slot stayed held until it lapsed, 2 minutes)."""
    client, proxy = proxied_redis
    gate = gate_on(client, prefix, per_person=1)
    try:
        if path == "slot":
            slot = await gate.enter(**PERSON)
            release = slot.release()
        else:
            batch, taking = queued(gate, client)
            await batch.run("a test")
            release = taking.drop()
        proxy.hold_next(containing=b"active:", seconds=1.0)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(release, 0.2)
        proxy.cut()  # the held release never reaches Redis
        proxy.restore()
        assert gate.owed
        await gate.pay_owed()
        assert await held(real_redis, prefix) == 0
    finally:
        await gate.aclose()
