"""What is written when a question (or approval request) is shown or closed (:class:`QuestionRecords`): the messages
that show it, its deadline, reminders and escalation (:mod:`bot.slack.wait_plan`), and its people's Home inboxes and
refreshes (:mod:`bot.slack.home`), in as few round trips as the store allows:

- shown: one :class:`~bot.store.batch.Batch` (its message, its inbox entries), then one schedule change (deadline,
  first reminder, escalation, Home refreshes): 2 round trips;
- closed: one batch reads who holds it in their inbox and which messages show it, one takes it out of those inboxes,
  one schedule change drops its reminders and escalation and refreshes those Home tabs: 3 round trips, and the
  messages to update are returned.

A store outage loses only the part it hit (logged): a message not recorded is not updated later; a deadline not
scheduled still holds for any answer, judged when someone answers.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from bot.errors import StoreUnavailable
from bot.slack.context import SlackContext
from bot.slack.home import Home
from bot.slack.wait_plan import WaitPlan
from bot.store.batch import Batch
from bot.store.conversations import ConversationIndex, MessageRef, asked_id
from bot.store.schedule import Due, DueItem, Schedule

log = logging.getLogger(__name__)


class QuestionRecords:
    """Records of shown questions in ``index``, ``plan``'s schedule and ``home``'s inboxes (``plan`` / ``home``
    None: not kept)."""

    def __init__(self, *, index: ConversationIndex, plan: WaitPlan | None, home: Home | None) -> None:
        self.index = index
        self.plan = plan
        self.home = home
        schedule = plan.schedule if plan is not None else home.schedule if home is not None else None
        self.schedule: Schedule | None = schedule

    async def shown(
        self,
        ctx: SlackContext,
        run_id: str,
        call: str,
        *,
        ts: str | None,
        approval: bool,
        asked: datetime | None,
        expires_at: datetime | None,
    ) -> None:
        """Question ``call`` of ``run_id`` was just posted as ``ts`` in ``ctx``'s thread (None: not posted): record
        its message, put it in its people's inboxes, schedule its deadline (``expires_at``), reminders, escalation
        and their Home refreshes. Never raises."""
        what = "approval request" if approval else "question"
        people = await self.home.people(ctx, approval=approval, also=[]) if self.home is not None else []
        batch = Batch(self.index.client)
        if ts:
            ref = MessageRef(channel_id=ctx.channel_id, ts=ts, asked=asked_id(asked))
            self.index.queue_message(batch, run_id, key=call, ref=ref)
        if self.home is not None:
            when = int((asked or datetime.now(UTC)).timestamp() * 1000)
            self.home.inbox.queue_add(batch, ctx.team_id, people, run_id=run_id, call=call, asked_ms=when)
        try:
            await batch.run(f"recording a {what}")
        except StoreUnavailable as exc:
            log.warning("run %s: could not record the %s's message and inbox entries: %s", run_id, what, exc)
            people = []  # no inbox entry: no Home to refresh
        due = self.plan.entries(run_id, call, expires_at=expires_at) if self.plan is not None else []
        await self._schedule(run_id, what, add=due + Home.refreshes([(ctx.team_id, p) for p in people]))

    async def closed(
        self, run_id: str, call: str, *, summary: str, asked: datetime | None, ongoing: bool = False
    ) -> list[MessageRef] | None:
        """Question ``call`` of ``run_id`` was decided (answered, expired, withdrawn; ``summary``: how, mrkdwn):
        take it out of its inboxes, drop its reminders and escalation, refresh those Home tabs. ``ongoing``: its
        call goes on (an approved call running), and a later close says how it ended: that one replaces this
        "recently closed" line (:meth:`bot.store.inbox.Inbox.queue_close`). Returns the messages showing it (of the
        asking ``asked``), to update; None when they could not be read. Never raises."""
        batch = Batch(self.index.client)
        owners = self.home.inbox.queue_owners(batch, run_id, call) if self.home is not None else None
        previous = self.home.inbox.queue_previous(batch, run_id, call) if self.home is not None else None
        shown = self.index.queue_messages(batch, run_id, call, asked=asked_id(asked))
        try:
            await batch.run("reading where a question is shown")
        except StoreUnavailable as exc:
            log.warning("run %s: could not read where its question is shown; left as it is: %s", run_id, exc)
            refs, people = None, []
        else:
            refs, people = shown.value, owners.value if owners is not None else []
        if self.home is not None and people:
            writing = Batch(self.index.client)
            line = previous.value if previous is not None else None
            self.home.inbox.queue_close(
                writing, people, run_id=run_id, call=call, summary=summary, previous=line, ongoing=ongoing
            )
            try:
                await writing.run("closing inbox entries")
            except StoreUnavailable as exc:
                log.warning("run %s: could not take its question out of the Home inboxes: %s", run_id, exc)
                people = []
        drop = self.plan.planned(run_id, call) if self.plan is not None else []
        await self._schedule(run_id, "question", add=Home.refreshes(people), drop=drop)
        return refs

    async def _schedule(self, run_id: str, what: str, *, add: list[Due], drop: list[DueItem] | None = None) -> None:
        if self.schedule is None:
            return
        try:
            await self.schedule.change(add=add, drop=drop or [])
        except StoreUnavailable as exc:
            log.warning("run %s: could not change its %s's schedule (deadline, reminders, Home): %s", run_id, what, exc)
