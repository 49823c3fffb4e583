"""How bookkeeping owed to Redis since an outage is retried (one rule for every kind): a run slot whose release failed
(:mod:`bot.slack.run_slots`), a question's records not written after its post (:mod:`bot.slack.questions.records`),
a run's save (:mod:`bot.agent._loop.saving`), closing a question's messages (:class:`Owed`,
:mod:`bot.slack.replies.thread_writer`). Each is retried in the background after :data:`RETRY_FIRST` seconds,
doubling to :data:`RETRY_MAX`, so it lands within about a second of Redis answering again: never left to an expiry
(a slot's 2 minutes, a lease's 30 s) during which people would be told something untrue ("still working").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterator

log = logging.getLogger(__name__)

RETRY_FIRST = 0.05  # seconds before the first retry
RETRY_MAX = 1.0  # seconds between retries at most, however long the outage


def pauses() -> Iterator[float]:
    """The pauses (seconds) before each retry: :data:`RETRY_FIRST`, doubling, then :data:`RETRY_MAX` forever."""
    pause = RETRY_FIRST
    while True:
        yield pause
        pause = min(pause * 2, RETRY_MAX)


Attempt = Callable[[], Awaitable[bool]]
"""One try of owed work: True when it is done (Redis answered), False to be tried again later. Raises nothing."""


class Owed:
    """Work owed to Redis since an outage, each tried again with :func:`pauses` until it is done or ``give_up``
    seconds have passed since it was owed (then ``what`` is logged as lost), in one background task."""

    def __init__(self, what: str, *, give_up: float = 600.0) -> None:
        self.what = what
        self.give_up = give_up
        self.attempts: list[tuple[float, Attempt]] = []  # (when it was owed, loop time; the attempt)
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    def add(self, attempt: Attempt) -> None:
        """Owe ``attempt`` (its first try failed): try it again in the background."""
        self.attempts.append((asyncio.get_running_loop().time(), attempt))
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._retry())

    async def _retry(self) -> None:
        waits = pauses()
        while self.attempts and not self._closed:
            await asyncio.sleep(next(waits))
            now = asyncio.get_running_loop().time()
            for item in list(self.attempts):
                owed_at, attempt = item
                if now - owed_at > self.give_up:
                    log.error("gave up %s after %.0f s: the store did not answer", self.what, self.give_up)
                    self._done(item)
                elif await attempt():
                    self._done(item)
                else:
                    break  # the store still does not answer: wait before trying the others

    async def flush(self) -> None:
        """Try everything owed once more now (e.g. at shutdown). Raises nothing."""
        for item in list(self.attempts):
            if await item[1]():
                self._done(item)

    def _done(self, item: tuple[float, Attempt]) -> None:
        """Forget ``item``: done (or given up). It may be gone already: :meth:`flush` (at shutdown) and the
        background retry can both be trying it at once, and both see it done."""
        with contextlib.suppress(ValueError):
            self.attempts.remove(item)

    async def aclose(self) -> None:
        """Stop retrying (what is left is logged). Raises nothing. The retry loop also ends at its next look
        should the cancel be lost inside a store call (Python 3.11's ``asyncio.wait_for`` can lose one)."""
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self.attempts:
            log.warning("%d of %s never done: the store did not answer", len(self.attempts), self.what)
