"""What is scheduled while a question (or approval request) waits: its deadline, its reminders and its escalation
(:class:`WaitPlan`), as items of :mod:`bot.store.schedule`. :mod:`bot.slack.waiting` carries them out.

Settings (:mod:`bot.config`): ``ASK_ON_TIMEOUT``, ``ASK_REMIND_AFTER`` / ``ASK_REMIND_MAX``, ``ASK_ESCALATE_AFTER``
/ ``ASK_ESCALATE_TO``. A question is planned when its message is posted (:meth:`WaitPlan.asked`) and unplanned when
it is closed (:meth:`WaitPlan.closed`); a store outage leaves it unplanned (logged): its deadline then still holds
for any answer, judged when someone answers.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from bot.errors import StoreUnavailable
from bot.store.schedule import DueItem, Schedule

log = logging.getLogger(__name__)

DEADLINE, REMIND, ESCALATE = "deadline", "remind", "escalate"


@dataclass(frozen=True)
class WaitSettings:
    """``on_timeout``: ``resume`` or ``close``; seconds ``remind_after`` / ``escalate_after`` (None: off);
    ``remind_max`` reminders at most; ``escalate_to``: a channel id or comma-separated user / group ids."""

    on_timeout: str = "resume"
    remind_after: float | None = None
    remind_max: int = 1
    escalate_after: float | None = None
    escalate_to: str | None = None


class WaitPlan:
    """Schedules the deadline, reminders and escalation of waiting questions on ``schedule``."""

    def __init__(self, schedule: Schedule, settings: WaitSettings) -> None:
        self.schedule = schedule
        self.settings = settings

    async def asked(self, run_id: str, call: str, *, expires_at: datetime | None) -> None:
        """Plan question ``call`` of ``run_id``, asked now, due by ``expires_at`` (never raises)."""
        s = self.settings
        due: list[tuple[DueItem, datetime | None, float]] = []
        if expires_at is not None:
            due.append((DueItem(DEADLINE, run_id, call), expires_at, 0.0))
        if s.remind_after is not None:
            due.append((DueItem(REMIND, run_id, call, 1), None, s.remind_after))
        if s.escalate_after is not None and s.escalate_to:
            due.append((DueItem(ESCALATE, run_id, call), None, s.escalate_after))
        try:
            await self.schedule.add_all(due)  # one round trip
        except StoreUnavailable as exc:
            log.warning("run %s: could not schedule its question's deadline and reminders: %s", run_id, exc)

    async def remind_again(self, run_id: str, call: str, *, n: int) -> None:
        """Plan reminder ``n`` (the one after ``n - 1``), if the settings allow that many. Raises
        ``StoreUnavailable``."""
        s = self.settings
        if s.remind_after is not None and n <= s.remind_max:
            await self.schedule.add(DueItem(REMIND, run_id, call, n), after=s.remind_after)

    async def later(self, item: DueItem, *, at: datetime) -> None:
        """Come back to ``item`` at ``at`` (a second late: the store's clock has the last word). Raises
        ``StoreUnavailable``."""
        await self.schedule.add(item, at=at + timedelta(seconds=1))

    async def closed(self, run_id: str, call: str) -> None:
        """Drop the reminders and escalation still planned for a question that was answered, expired or withdrawn
        (never raises). Its deadline stays: a question closed as expired by a late click still goes on without an
        answer at its deadline (``ASK_ON_TIMEOUT=resume``); for an answered one it finds nothing to do."""
        items = [DueItem(ESCALATE, run_id, call)]
        items += [DueItem(REMIND, run_id, call, n) for n in range(1, self.settings.remind_max + 1)]
        try:
            await self.schedule.cancel(*items)
        except StoreUnavailable as exc:  # what fires later finds the question closed and does nothing
            log.warning("run %s: could not drop its question's schedule: %s", run_id, exc)
