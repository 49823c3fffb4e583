"""What is scheduled while a question (or approval request) waits: its deadline, its reminders and its escalation
(:class:`FollowUpPlan`), as items of :mod:`bot.store.schedule`. :mod:`bot.slack.questions.follow_ups` carries them out.

Settings (:mod:`bot.config`): ``ASK_ON_TIMEOUT``, ``ASK_REMIND_AFTER`` / ``ASK_REMIND_MAX``, ``ASK_ESCALATE_AFTER``
/ ``ASK_ESCALATE_TO``. A question is planned when its message is posted (:meth:`FollowUpPlan.entries`) and unplanned
when it is closed (:meth:`FollowUpPlan.planned`), both written by :mod:`bot.slack.questions.records`; a store
outage leaves it unplanned (logged): its deadline then still holds for any answer, judged when someone answers.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from bot.store.schedule import Due, DueItem, Schedule

log = logging.getLogger(__name__)

DEADLINE, REMIND, ESCALATE = "deadline", "remind", "escalate"
# One message to a target (a user or channel id) for what is queued for it: DueItem(kind, run_id=team_id, key=target)
ESCALATE_TO, REMIND_TO = "escalate_to", "remind_to"
ASK_AGAIN = "ask_again"  # a question Slack refused to post, posted again: DueItem(ASK_AGAIN, run_id, call, try)
ASK_AGAIN_FIRST = 30.0
"""Seconds after a refused post that a question is posted again (doubled each try, at most an hour apart)."""
ASK_AGAIN_TRIES = 10
"""Tries at most after the first post (about 8.5 hours of them); then it waits unseen until its deadline (logged)."""
CONTINUE = "continue"  # a run a stopping process could not finish, gone on with elsewhere: DueItem(CONTINUE, run_id)
REPLY_AGAIN = "reply_again"  # a run's reply Slack refused to show, posted again: DueItem(REPLY_AGAIN, run_id)
REPLY_AGAIN_AFTER = 30.0
"""Seconds after Slack refused (part of) a run's reply that it is posted again (then a minute after each refusal)."""
REPLY_AGAIN_TRIES = 10
COALESCE_SECONDS = 10.0
"""How long the escalations (reminders) due to one target wait for each other: those that fall due within it are sent
as one message (:meth:`FollowUpPlan.notice_message`)."""


@dataclass(frozen=True)
class FollowUpSettings:
    """``on_timeout``: ``resume`` or ``close``; seconds ``remind_after`` / ``escalate_after`` (None: off);
    ``remind_max`` reminders at most; ``escalate_to``: a channel id or comma-separated user / group ids."""

    on_timeout: str = "resume"
    remind_after: float | None = None
    remind_max: int = 1
    escalate_after: float | None = None
    escalate_to: str | None = None


class FollowUpPlan:
    """Schedules the deadline, reminders and escalation of waiting questions on ``schedule``."""

    def __init__(self, schedule: Schedule, settings: FollowUpSettings) -> None:
        self.schedule = schedule
        self.settings = settings

    def entries(self, run_id: str, call: str, *, expires_at: datetime | None, refused: int | None = None) -> list[Due]:
        """What to schedule for question ``call`` of ``run_id``, asked now, due by ``expires_at``: its deadline,
        first reminder and escalation, as the settings say; ``refused``: Slack refused to post it, on this try
        (0: the first post): it is posted again later (:data:`ASK_AGAIN`, up to :data:`ASK_AGAIN_TRIES` times)."""
        s = self.settings
        due: list[Due] = []
        if refused is not None and refused < ASK_AGAIN_TRIES:
            later = min(ASK_AGAIN_FIRST * 2**refused, 3600.0)
            due.append(Due(DueItem(ASK_AGAIN, run_id, call, refused + 1), after=later))
        elif refused is not None:
            log.error(
                "run %s: Slack refused question %s %d times; it waits unseen until its deadline",
                run_id,
                call,
                refused + 1,
            )
        if expires_at is not None:
            due.append(Due(DueItem(DEADLINE, run_id, call), at=expires_at))
        if s.remind_after is not None:
            due.append(Due(DueItem(REMIND, run_id, call, 1), after=s.remind_after))
        if s.escalate_after is not None and s.escalate_to:
            due.append(Due(DueItem(ESCALATE, run_id, call), after=s.escalate_after))
        return due

    async def remind_again(self, run_id: str, call: str, *, n: int) -> None:
        """Plan reminder ``n`` (the one after ``n - 1``), if the settings allow that many. Raises
        ``StoreUnavailable``."""
        s = self.settings
        if s.remind_after is not None and n <= s.remind_max:
            await self.schedule.add(DueItem(REMIND, run_id, call, n), after=s.remind_after)

    async def reply_again(self, run_id: str, *, posted: int = 0, tries: int = 0) -> None:
        """Plan posting run ``run_id``'s reply again (:data:`REPLY_AGAIN`), Slack having refused some of it:
        :data:`REPLY_AGAIN_AFTER` seconds from now, then a minute after each try Slack refused (``tries`` so far, at
        most :data:`REPLY_AGAIN_TRIES`), from the message ``posted`` (those before it were posted again). Raises
        ``StoreUnavailable``."""
        if tries >= REPLY_AGAIN_TRIES:
            log.error("run %s: Slack refused its reply %d times; given up", run_id, tries)
            return
        after = REPLY_AGAIN_AFTER if tries == 0 else 60.0
        await self.schedule.add(DueItem(REPLY_AGAIN, run_id, str(tries), posted), after=after)

    async def continue_later(self, run_id: str, *, after: float) -> None:
        """Plan going on with run ``run_id`` (:data:`CONTINUE`) in whichever process's scheduler comes to it
        ``after`` seconds from now: this process stops with the run unfinished (its lease lapses by then). Raises
        ``StoreUnavailable``."""
        await self.schedule.add(DueItem(CONTINUE, run_id, ""), after=after)

    async def notice_message(self, kind: str, team_id: str, target: str) -> None:
        """Plan the one ``kind`` message (:data:`ESCALATE_TO`, :data:`REMIND_TO`) that sends what is queued for
        ``target`` (team ``team_id``), :data:`COALESCE_SECONDS` from now; one already planned sooner is kept (so
        those due together share it). Raises ``StoreUnavailable``."""
        item = DueItem(kind, team_id, target)
        await self.schedule.add(item, after=COALESCE_SECONDS, keep_earlier=True)

    async def later(self, item: DueItem, *, at: datetime) -> None:
        """Come back to ``item`` at ``at`` (a second late: the store's clock has the last word). Raises
        ``StoreUnavailable``."""
        await self.schedule.add(item, at=at + timedelta(seconds=1))

    def planned(self, run_id: str, call: str) -> list[DueItem]:
        """What to drop when question ``call`` was answered, expired or withdrawn: its reminders and escalation. Its
        deadline stays: a question closed as expired by a late click still goes on without an answer at its deadline
        (``ASK_ON_TIMEOUT=resume``); for an answered one it finds nothing to do."""
        items = [DueItem(ESCALATE, run_id, call)]
        return items + [DueItem(REMIND, run_id, call, n) for n in range(1, self.settings.remind_max + 1)]
