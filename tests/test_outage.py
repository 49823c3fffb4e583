"""Owed store work (:class:`bot.outage.Owed`): one attempt tried by the background retry and by ``flush`` (at
shutdown) at once is done once, and neither fails for the other having forgotten it."""

from __future__ import annotations

import asyncio

from bot.outage import RETRY_FIRST, Owed


async def test_an_attempt_done_by_the_retry_and_a_flush_at_once_is_forgotten_once() -> None:
    owed = Owed("test work")
    gate, second, tries = asyncio.Event(), asyncio.Event(), []

    async def attempt() -> bool:
        tries.append(1)
        if len(tries) == 1:
            return False  # the first background try: the store still does not answer
        second.set()
        await gate.wait()  # the store answers, slowly: both tries are in flight at once
        return True

    owed.add(attempt)
    await asyncio.wait_for(second.wait(), 5)  # the retry's second try is in flight
    flushing = asyncio.ensure_future(owed.flush())  # and the shutdown's
    await asyncio.sleep(0)
    gate.set()
    await flushing
    await asyncio.sleep(RETRY_FIRST)
    assert owed.attempts == [] and owed._task is not None and owed._task.done()
    assert owed._task.exception() is None  # it raised ValueError (list.remove of an item gone) before
    await owed.aclose()
