"""What is written when a question (or approval request) is shown or closed (:class:`QuestionRecords`): the messages
that show it, its deadline, reminders and escalation (:mod:`bot.slack.questions.follow_up_plan`), and its people's Home
inboxes and refreshes (:mod:`bot.slack.home`), in as few round trips as the store allows:

- shown: one :class:`~bot.store.batch.Batch` (its message, its inbox entries, and the schedule change: deadline,
  first reminder, escalation, Home refreshes): 1 round trip;
- closed: one batch reads who holds it in their inbox and which messages show it, one takes it out of those inboxes
  and changes the schedule (drops its reminders and escalation, refreshes those Home tabs): 2 round trips, and the
  messages to update are returned.

A store outage (Redis cut, or out of memory) between the post and its records loses nothing: what was not written
is owed, retried in the background until Redis answers (backoff: :mod:`bot.outage`; for as long as the
question can be answered), so its deadline, reminders and Home entries are there once Redis is back and its
message closes when it is answered. A question closed while its records are still owed closes the message it was
posted as (and nothing owed is written after: no reminder for a question answered). Owed records live in this
process: if it dies in the outage too, a deadline not scheduled still holds for any answer (judged when someone
answers), and a clicked message is closed from Slack's copy of it.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from bot import outage
from bot.agent.stream import ApprovalPayload
from bot.errors import StoreUnavailable
from bot.slack.context import SlackContext
from bot.slack.home import Home
from bot.slack.questions.follow_up_plan import FollowUpPlan
from bot.store.batch import Batch
from bot.store.conversations import ConversationIndex, MessageRef, asked_id
from bot.store.schedule import Due, Schedule

log = logging.getLogger(__name__)

OWED_AT_MOST = timedelta(days=1)  # how long records of a question with no deadline are retried


@dataclass
class _Owed:
    """What a shown question still has to write: its message and inbox entries (``batch``), its schedule
    (``due``), until ``until``."""

    ctx: SlackContext
    ref: MessageRef | None
    people: list[str]
    asked_ms: int
    due: list[Due]
    until: datetime
    batch: bool = True  # the message and inbox entries are still to write
    schedule: bool = True  # the schedule change is still to write
    what: str = "question"
    tries: int = field(default=0)


class QuestionRecords:
    """Records of shown questions in ``index``, ``plan``'s schedule and ``home``'s inboxes (``plan`` / ``home``
    None: not kept)."""

    def __init__(self, *, index: ConversationIndex, plan: FollowUpPlan | None, home: Home | None) -> None:
        self.index = index
        self.plan = plan
        self.home = home
        schedule = plan.schedule if plan is not None else home.schedule if home is not None else None
        self.schedule: Schedule | None = schedule
        self.owed: dict[tuple[str, str], _Owed] = {}  # (run_id, call) -> records not written yet
        self._writing = asyncio.Lock()  # an owed write in flight: a close waits for it
        # the one retry loop for owed store work; each question's records give up at their own time (_Owed.until)
        self.retries = outage.Owed("writing questions' records", give_up=float("inf"))

    async def shown(
        self,
        ctx: SlackContext,
        run_id: str,
        call: str,
        *,
        ts: str | None,
        approval: ApprovalPayload | None,
        asked: datetime | None,
        expires_at: datetime | None,
        tried: int = 0,
    ) -> None:
        """Question ``call`` of ``run_id`` was just posted as ``ts`` in ``ctx``'s thread (None: Slack refused it, on
        try ``tried``: it is posted again later, :data:`~bot.slack.questions.follow_up_plan.ASK_AGAIN`): record its
        message, put it in its people's inboxes (``approval``: the request, when it is one, whose approvers'
        inboxes it goes in too: :meth:`Home.people`), schedule its deadline (``expires_at``), reminders, escalation
        and their Home refreshes. Never raises."""
        what = "approval request" if approval is not None else "question"
        people = await self.home.people(ctx, approval=approval, also=[]) if self.home is not None else []
        ref = MessageRef(channel_id=ctx.channel_id, ts=ts, asked=asked_id(asked)) if ts else None
        when = int((asked or datetime.now(UTC)).timestamp() * 1000)
        refused = tried if ts is None else None
        due = self.plan.entries(run_id, call, expires_at=expires_at, refused=refused) if self.plan is not None else []
        until = expires_at or (asked or datetime.now(UTC)) + OWED_AT_MOST
        owed = _Owed(ctx=ctx, ref=ref, people=people, asked_ms=when, due=due, until=until, what=what)
        if not await self._write(run_id, call, owed):
            self.owed[(run_id, call)] = owed
            self.retries.add(lambda: self._write_owed((run_id, call)))

    async def _write(self, run_id: str, call: str, owed: _Owed) -> bool:
        """Write what ``owed`` still has to, in one batch (its message and inbox entries, its schedule change);
        True when it is written (then nothing is owed)."""
        batch = Batch(self.index.client)
        if owed.batch:
            if owed.ref is not None:
                self.index.queue_message(batch, run_id, key=call, ref=owed.ref)
            if self.home is not None:
                self.home.inbox.queue_add(
                    batch, owed.ctx.team_id, owed.people, run_id=run_id, call=call, asked_ms=owed.asked_ms
                )
        if owed.schedule and self.schedule is not None:
            add = owed.due + Home.refreshes([(owed.ctx.team_id, p) for p in owed.people])
            self.schedule.queue_change(batch, add=add)
        try:
            await batch.run(f"recording a {owed.what}")
        except StoreUnavailable as exc:
            if not owed.tries:
                log.warning(
                    "run %s: could not record the %s's message, inbox entries, deadline, reminders and Home (%s); "
                    "retrying until Redis answers",
                    run_id,
                    owed.what,
                    exc,
                )
            owed.tries += 1
            return False
        owed.batch = owed.schedule = False
        if owed.tries:
            log.info("run %s: its %s's records are written now that Redis answers", run_id, owed.what)
        return True

    async def _write_owed(self, key: tuple[str, str]) -> bool:
        """One try at the records question ``key`` (run id, call) still owes (:class:`bot.outage.Owed`): True
        once nothing is left to try (written, closed meanwhile, or past its deadline: given up)."""
        async with self._writing:
            owed = self.owed.get(key)
            if owed is None:
                return True  # closed meanwhile
            if owed.until <= datetime.now(UTC):
                log.warning("run %s: gave up writing its %s's records (past its deadline)", key[0], owed.what)
                del self.owed[key]
                return True
            if await self._write(*key, owed):
                del self.owed[key]
                return True
            return False  # Redis still does not answer: tried again after the pause

    async def aclose(self) -> None:
        """Stop retrying owed records (those left are logged). Raises nothing."""
        await self.retries.aclose()
        for run_id, _call in self.owed:
            log.warning("run %s: its question's records were never written (the store did not answer)", run_id)

    async def closed(
        self, run_id: str, call: str, *, summary: str, asked: datetime | None, ongoing: bool = False
    ) -> list[MessageRef] | None:
        """Question ``call`` of ``run_id`` was decided (answered, expired, withdrawn; ``summary``: how, mrkdwn):
        take it out of its inboxes, drop its reminders and escalation, refresh those Home tabs. ``ongoing``: its
        call goes on (an approved call running), and a later close says how it ended: that one replaces this
        "recently closed" line (:meth:`bot.store.inbox.Inbox.queue_close`). Returns the messages showing it (of the
        asking ``asked``), to update; None when they could not be read. Records it still owed (an outage when it was
        shown) are not written any more; the message it was posted as is among those returned. Its inbox and schedule
        change, refused (an outage, out of memory), is owed and retried until Redis answers. Never raises."""
        owed = None
        if (run_id, call) in self.owed:
            async with self._writing:  # an owed write in flight finishes first
                owed = self.owed.pop((run_id, call), None)
        unrecorded = [owed.ref] if owed is not None and owed.batch and owed.ref is not None else []
        batch = Batch(self.index.client)
        owners = self.home.inbox.queue_owners(batch, run_id, call) if self.home is not None else None
        previous = self.home.inbox.queue_previous(batch, run_id, call) if self.home is not None else None
        shown = self.index.queue_messages(batch, run_id, call, asked=asked_id(asked))
        try:
            await batch.run("reading where a question is shown")
        except StoreUnavailable as exc:
            log.warning("run %s: could not read where its question is shown; left as it is: %s", run_id, exc)
            refs, people = (unrecorded or None), []
        else:
            known = {(r.channel_id, r.ts) for r in shown.value}
            refs = shown.value + [r for r in unrecorded if (r.channel_id, r.ts) not in known]
            people = owners.value if owners is not None else []
        line = previous.value if previous is not None and people else None
        drop = self.plan.planned(run_id, call) if self.plan is not None else []

        async def write() -> bool:
            """One try at taking it out of the inboxes and changing the schedule; True once written."""
            writing = Batch(self.index.client)
            if self.home is not None and people:
                self.home.inbox.queue_close(
                    writing, people, run_id=run_id, call=call, summary=summary, previous=line, ongoing=ongoing
                )
            if self.schedule is not None:
                self.schedule.queue_change(writing, add=Home.refreshes(people), drop=drop)
            try:
                await writing.run("closing a question's inbox entries and schedule")
            except StoreUnavailable:
                return False
            return True

        if not await write():
            # owed: its people's open Home tabs would show it, with live buttons, and its reminders would go on
            log.warning(
                "run %s: could not take its question out of the Home inboxes, nor change its schedule (reminders, "
                "Home); retrying until Redis answers",
                run_id,
            )
            self.retries.add(write)
        return refs
