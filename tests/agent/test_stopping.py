"""A model turn raced against a stop of its run (:class:`bot.agent._loop.stopping.StopRequests`): a stop cancels the
turn and raises ``Stopped`` once; a cancellation of the run's own task is never taken for a stop, never lost, and
a cancellation that task swallowed earlier does not turn a stop into one."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
import redis.asyncio as aioredis

from bot.agent._loop.stopping import Stopped, StopRequests
from bot.store import RedisRunStore


async def turn(started: asyncio.Event, *, swallow: bool = False, fail: bool = False) -> str:
    """A model turn that waits until cancelled; ``swallow``: it ignores the cancel and returns (as a client that
    catches it to close its stream and returns what it had); ``fail``: it raises an error of its own instead."""
    started.set()
    try:
        await asyncio.sleep(30)
    except asyncio.CancelledError:
        if fail:
            raise RuntimeError("the stream broke while closing") from None
        if swallow:
            return "what it had"
        raise
    return "done"


@pytest.fixture
def stops(fake_redis: aioredis.Redis, prefix: str) -> StopRequests:
    return StopRequests(RedisRunStore(fake_redis, prefix=prefix))


async def test_a_stop_cancels_the_turn_and_raises_stopped(stops: StopRequests) -> None:
    started = asyncio.Event()
    driving = asyncio.ensure_future(stops.unless_stopped("r1", turn(started)))
    await started.wait()
    stops.asked("r1", "U_ALICE")
    with pytest.raises(Stopped) as stopped:
        await driving
    assert stopped.value.by == "U_ALICE"


async def test_a_stop_after_a_cancel_the_task_swallowed_earlier_is_still_a_stop(stops: StopRequests) -> None:
    """``Task.cancelling()`` counts every cancel requested and not uncancelled, swallowed ones too: read against
    the count at the turn's start, or a stop after one is taken for the task's own cancellation."""
    started = asyncio.Event()

    async def driver() -> str:
        me = asyncio.current_task()
        assert me is not None
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(30)  # cancelled below, and the cancel swallowed (e.g. a timeout's clean-up)
        assert me.cancelling() == 1
        return await stops.unless_stopped("r2", turn(started))

    driving = asyncio.ensure_future(driver())
    await asyncio.sleep(0)
    driving.cancel()
    await started.wait()
    stops.asked("r2", "U_BOB")
    with pytest.raises(Stopped):
        await driving


@pytest.mark.parametrize("how", ["swallow", "fail"])
async def test_the_tasks_own_cancel_is_not_lost_when_the_turn_swallows_it(stops: StopRequests, how: str) -> None:
    """The run's task is cancelled (its process shuts down) while the turn catches the cancel and returns, or
    raises an error of its own: the task still ends cancelled, not carried on with the turn's result or error."""
    started = asyncio.Event()
    step = turn(started, swallow=how == "swallow", fail=how == "fail")
    driving = asyncio.ensure_future(stops.unless_stopped("r3", step))
    await started.wait()
    driving.cancel()
    with pytest.raises(asyncio.CancelledError):
        await driving
    assert driving.cancelled()


async def test_the_tasks_own_cancel_is_not_taken_for_a_stop(stops: StopRequests) -> None:
    started = asyncio.Event()
    driving = asyncio.ensure_future(stops.unless_stopped("r4", turn(started)))
    await started.wait()
    stops.asked("r4", "U_ALICE")  # a stop and the task's own cancel at once: the cancel wins, the stop stays known
    driving.cancel()
    with pytest.raises(asyncio.CancelledError):
        await driving
    with pytest.raises(Stopped):
        stops.check("r4")


async def test_a_turn_that_ends_first_gives_its_result_and_the_stop_is_seen_next(stops: StopRequests) -> None:
    async def quick() -> str:
        return "text"

    assert await stops.unless_stopped("r5", quick()) == "text"
    stops.asked("r5", "U_ALICE")
    with pytest.raises(Stopped):
        stops.check("r5")
