"""The scheduler's sorted set on the real Redis and on fakeredis: claims are atomic and leased, done() keeps an
item scheduled again meanwhile, a debounced item being carried out is due again after a change."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
import redis.asyncio as aioredis

from bot.agent.state import utcnow
from bot.store.schedule import MAX_TRIES, Due, DueItem, Schedule, Scheduler


async def test_a_debounced_item_added_while_it_is_being_carried_out_fires_again(fake_redis: aioredis.Redis) -> None:
    schedule = Schedule(fake_redis, prefix="sched:")
    item = DueItem("home", "T1", "U1")
    await schedule.add(item, after=2.0, keep_earlier=True)
    await schedule.add(item, after=60.0, keep_earlier=True)  # debounced: the earlier time stays
    due = await schedule.due_at(item)
    assert due is not None and due - utcnow().timestamp() < 5
    [claimed] = await schedule.claim(now=utcnow() + timedelta(seconds=3))
    await schedule.add(item, after=2.0, keep_earlier=True)  # a change while it is carried out
    await schedule.done(claimed)
    assert await schedule.due_at(item) is not None  # kept: the change gets its own refresh
    assert len(await schedule.claim(now=utcnow() + timedelta(seconds=5))) == 1


async def test_two_claims_at_once_take_each_item_once(real_redis: aioredis.Redis, prefix: str) -> None:
    schedule = Schedule(real_redis, prefix=prefix)
    for i in range(50):
        await schedule.add(DueItem("deadline", f"r{i}", "q"), after=0)
    later = utcnow() + timedelta(seconds=1)
    first, second = await asyncio.gather(schedule.claim(now=later, limit=40), schedule.claim(now=later, limit=40))
    taken = [c.member for c in first + second]
    assert len(taken) == 50 and len(set(taken)) == 50
    assert await schedule.claim(now=later) == []  # held by their lease
    assert len(await schedule.claim(now=later + timedelta(seconds=61))) == 50  # back after it, if not done


async def test_a_handler_that_keeps_failing_gives_its_item_up_after_max_tries(fake_redis: aioredis.Redis) -> None:

    schedule = Schedule(fake_redis, prefix="sched:")
    calls: list[str] = []

    async def broken(item: DueItem) -> None:
        calls.append(item.run_id)
        raise RuntimeError("a bug")

    scheduler = Scheduler(schedule, {"deadline": broken}, lease=1.0)
    await schedule.add(DueItem("deadline", "r1", "q"), after=0)
    later = utcnow()
    for _ in range(MAX_TRIES + 2):
        later += timedelta(seconds=2)
        await scheduler.tick(now=later)
    assert len(calls) == MAX_TRIES and await schedule.size() == 0


async def test_one_change_drops_items_and_adds_others_each_with_its_own_debounce(fake_redis: aioredis.Redis) -> None:
    """A question closed: its reminders dropped and its people's Home refreshes added (debounced: an earlier one
    kept), in one script call; a deadline in the same call is set as given."""
    schedule = Schedule(fake_redis, prefix="sched:")
    remind, home, deadline = (
        DueItem("remind", "r1", "q", 1),
        DueItem("home", "T1", "U1"),
        DueItem("deadline", "r2", "q"),
    )
    await schedule.add(remind, after=600)
    await schedule.add(home, after=1.0, keep_earlier=True)
    at = utcnow() + timedelta(hours=1)
    await schedule.change(
        add=[Due(home, after=60.0, keep_earlier=True), Due(deadline, at=at), Due(deadline, at=at)],
        drop=[remind, DueItem("remind", "r1", "q", 2)],  # the second was never scheduled: ignored
    )
    assert await schedule.due_at(remind) is None
    home_due = await schedule.due_at(home)
    assert home_due is not None and home_due - utcnow().timestamp() < 5  # the earlier refresh stays
    assert await schedule.due_at(deadline) == pytest.approx(at.timestamp(), abs=0.002)
    await schedule.change(add=[Due(home, after=60.0)])  # not debounced: moved later
    later = await schedule.due_at(home)
    assert later is not None and later - utcnow().timestamp() > 50
    await schedule.change()  # nothing to change: no call
