"""What happens while a question (or approval request) waits, carried out when it is due (:class:`FollowUps`, the
handlers of :class:`bot.store.schedule.Scheduler`): the deadline, reminders and escalation planned by
:mod:`bot.slack.questions.follow_up_plan`.

Each handler loads the run and asks the runtime whether the question is still open (the one place that decides,
:mod:`bot.agent.answers`); anything answered, withdrawn or closed meanwhile is left alone. Handlers are idempotent
(the scheduler is at least once): the deadline is a claim in the store, a reminder is posted once per number
(:meth:`ConversationIndex.tell_once`), an escalation once.

- **Deadline.** ``ASK_ON_TIMEOUT=resume`` (default): the run goes on without an answer (``Agent.time_out``: the
  tool is told ``no_answer``; an approval is declined, reason "no answer"), the question's messages show it
  expired, and the agent's next message is posted in the thread. ``close``: the question only expires. A question
  asked live by a running tool (:mod:`bot.agent._loop.live_questions`) is closed by that tool's own process. An
  approval whose quorum was complete before the deadline, its claim never made, is approved then instead (as its
  completer's: :meth:`Approving.completed_in_time <bot.slack.approvals.deciding.Approving.completed_in_time>`).
- **Reminder** ``n``: the requester (and, for an approval, each person who may decide it: ``APPROVERS``, or its
  policy rule's users, user groups' and named channels' members) is mentioned in the thread; then the next one
  is planned, up to ``ASK_REMIND_MAX``. Reminders to one person that fall due within ``COALESCE_SECONDS`` of each
  other are one message: a DM listing them (a channel, for questions asked of anyone).
- **Escalation**: the question is posted to ``ASK_ESCALATE_TO`` (a channel, or a DM to each person, user groups
  expanded), saying where it comes from; every message of the question is updated when it closes. Escalation widens
  who is reminded, never who may decide (:mod:`bot.slack.questions.permissions`): an approval stays its approvers'; a
  question may be answered by its targets only with ``ASK_ESCALATE_ANSWERS=true`` (otherwise the escalated message is a
  reminder without controls). Escalations to one target that fall due within ``COALESCE_SECONDS`` are one message
  (several questions: a list linking their threads), so a flood of questions is not a flood of DMs.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from bot.agent.answers import Answered, Expired, Open
from bot.agent.approvals import approval_payload, policy_notes
from bot.agent.ask_user import AskUserPayload
from bot.agent.state import PendingCall, RunState, utcnow
from bot.agent.stream import ApprovalPayload
from bot.agent.text import is_blank
from bot.errors import (
    RunAlreadyResumed,
    RunConflict,
    RunNotFound,
    RunNotResumable,
    SlackRefused,
    StoreCorrupt,
)
from bot.slack.approvals.rules import DEADLINE as DEADLINE_NOTE
from bot.slack.approvals.rules import ESCALATE as ESCALATE_NOTE
from bot.slack.context import SlackContext
from bot.slack.home import HOME
from bot.slack.questions.answering import Answering
from bot.slack.questions.approvers import ESCALATED_TO, RULE_NOTE, ApproverPolicy
from bot.slack.questions.follow_up_plan import (
    ASK_AGAIN,
    CONTINUE,
    DEADLINE,
    ESCALATE,
    ESCALATE_TO,
    REMIND,
    REMIND_TO,
    REPLY_AGAIN,
    FollowUpPlan,
)
from bot.slack.questions.notices import EXPIRED_OUTCOME
from bot.slack.refs import QuestionRef
from bot.slack.render import blocks as bk
from bot.slack.render.approvals import approval_title
from bot.slack.render.mrkdwn import clip, escape, how_long
from bot.store.conversations import MessageRef, NoticeKind, Queued, asked_id
from bot.store.schedule import DueItem, Handler

if TYPE_CHECKING:
    from bot.slack.approvals.deciding import Approving

log = logging.getLogger(__name__)

AGAIN_LINE = ":repeat: Posted again: Slack refused this reply when it was written."
AT_DEADLINE = 1
"""The ``n`` of an escalation notice queued when an approval request's rule escalated it at its deadline (0: an
``ASK_ESCALATE_AFTER`` escalation)."""
NO_ANSWER_OUTCOME = ":hourglass: No answer in time; I went on without one."
NO_DECISION_OUTCOME = ":hourglass: No decision in time: declined (no answer)."


class FollowUps:
    """Handlers of the waiting questions of ``answering``'s agent; ``approvers`` names whom to remind of approvals."""

    def __init__(
        self,
        answering: Answering,
        *,
        plan: FollowUpPlan,
        approvers: ApproverPolicy,
        approving: Approving | None = None,
    ) -> None:
        self.answering = answering
        self.approving = approving  # a quorum completed in time is carried through at its deadline
        self.agent = answering.agent
        self.writer = answering.writer
        self.messages = answering.messages
        self.plan = plan
        self.approvers = approvers

    def handlers(self) -> dict[str, Handler]:
        """``{kind: handler}`` for :class:`bot.store.schedule.Scheduler`."""
        handlers: dict[str, Handler] = {
            DEADLINE: self.on_deadline,
            REMIND: self.on_remind,
            REMIND_TO: self.on_reminder_message,
            ESCALATE: self.on_escalate,
            ESCALATE_TO: self.on_escalation_message,
            ASK_AGAIN: self.on_ask_again,
            REPLY_AGAIN: self.on_reply_again,
            CONTINUE: self.on_continue,
        }
        if self.messages.home is not None:
            handlers[HOME] = self.messages.home.on_refresh
        return handlers

    async def _open(self, item: DueItem) -> tuple[RunState, SlackContext, PendingCall] | None:
        """The run and its question ``item.key`` if that question still waits, else None."""
        try:
            state = await self.agent.get_run(item.run_id)
            ctx = SlackContext.of(state)
        except (RunNotFound, StoreCorrupt):
            return None
        check = await self.agent.check(state, item.key)
        return (state, ctx, check.pending) if isinstance(check, Open) else None

    # --- a question Slack refused to post ----------------------------------------------------------------------

    async def on_ask_again(self, item: DueItem) -> None:
        """Question ``item.key`` of run ``item.run_id`` was refused by Slack when it was posted (try ``item.n``
        comes): post it again, while it waits and shows in no message (a refusal again plans the next try:
        :meth:`~bot.slack.questions.follow_up_plan.FollowUpPlan.entries`)."""
        found = await self._open(item)
        if found is None:
            return
        state, ctx, pending = found
        if await self.answering.index.messages(state.run_id, item.key, asked=asked_id(pending.suspended_at)):
            return  # shown by now (a copy, or another process's try)
        log.info("run %s: posting question %s again (try %d)", state.run_id, item.key, item.n)
        ts = await self.messages.ask_again(state.run_id, pending, ctx, tried=item.n)
        if ts is not None and await self._open(item) is None:  # answered (from Home), withdrawn or expired while it
            await self._close_settled(state.run_id, pending)  # was posted: what was just posted closes too

    async def on_reply_again(self, item: DueItem) -> None:
        """Slack refused some of run ``item.run_id``'s reply when it was written (past the client's retries): post
        it again, whole (its last text, :meth:`RunState.last_text <bot.agent.state.RunState.last_text>`), under a
        line saying why, while the run is still as it ended (completed, its thread's last run). ``item.n``: the
        messages of it posted again already (each is posted once); ``item.key``: the tries so far. A part Slack
        refuses again is tried again a minute later, from that part
        (:meth:`~bot.slack.questions.follow_up_plan.FollowUpPlan.reply_again`), at most
        :data:`~bot.slack.questions.follow_up_plan.REPLY_AGAIN_TRIES` tries."""
        try:
            state = await self.agent.get_run(item.run_id)
            ctx = SlackContext.of(state)
        except (RunNotFound, StoreCorrupt):
            return
        text = state.last_text()
        thread = await self.answering.index.thread(ctx.team_id, channel_id=ctx.channel_id, thread_ts=ctx.thread_ts)
        if state.status != "completed" or is_blank(text) or (thread is not None and thread.run_id != state.run_id):
            return  # it went on (a newer run took the thread, which shows its own reply)
        mentions = self.writer.allow_user_mentions
        parts = bk.reply_messages(text, allow_user_mentions=mentions, room=len(AGAIN_LINE))
        for n, (said, blocks) in enumerate(parts[item.n :], start=item.n):
            shown = [*(bk.task_lines([AGAIN_LINE]) if n == 0 else []), *(blocks or [])]
            if await self.answering.web.post(ctx.channel_id, thread_ts=ctx.thread_ts, text=said, blocks=shown) is None:
                tries = int(item.key or 0) + 1
                await self.plan.reply_again(state.run_id, posted=n, tries=tries)
                return
        log.info("run %s: its reply, refused by Slack before, posted again", state.run_id)

    async def on_continue(self, item: DueItem) -> None:
        """Run ``item.run_id`` was left unfinished by a process that stopped (SIGTERM) before its work in flight
        was done: go on with it here once no process drives it (its lease lapsed; :meth:`Answering.continue_orphan
        <bot.slack.questions.answering.Answering.continue_orphan>`), its reply posted in its thread. Nothing when it
        ended, waits for a person, or is driven again (a message in its thread took it over first)."""
        try:
            state = await self.agent.get_run(item.run_id)
            ctx = SlackContext.of(state)
        except (RunNotFound, StoreCorrupt):
            return
        if state.status == "running" and await self.answering.continue_orphan(state, ctx, wait=True):
            log.info("run %s: gone on with here after the process driving it stopped", state.run_id)

    # --- the deadline ----------------------------------------------------------------------------------------

    async def on_deadline(self, item: DueItem) -> None:
        """At the question's deadline: go on without an answer, or only close it (``ASK_ON_TIMEOUT``)."""
        try:
            state = await self.agent.get_run(item.run_id)
            ctx = SlackContext.of(state)
        except (RunNotFound, StoreCorrupt):
            return
        check = await self.agent.check(state, item.key)
        pending = state.waiting_call(item.key)  # the pending call, or one of its batch
        if isinstance(check, Open) and check.pending.expires_at is not None:  # early by the store's clock
            await self.plan.later(item, at=check.pending.expires_at)
            return
        if isinstance(check, Answered) and state.pending is not None and state.pending.resume is not None:
            # decided (a quorum carried through at this deadline, a click) and its run left undriven (the claim's
            # reply lost in an outage, or its process died before going on): go on with it here
            decided = next((c for c in state.pending.calls() if c.tool_call_id == item.key), None)
            if (
                decided is not None
                and decided.kind == "approval"
                and self.approving is not None
                and await self.agent.is_orphaned(state)
            ):
                await self.approving.go_on_claimed(state, ctx, decided)
            return
        if not isinstance(check, Expired) or pending is None or state.pending is None:
            return
        if pending.live_owner is not None:
            return  # the tool call that asked it closes it at its deadline
        if state.pending.resume is not None:  # went on already; or this deadline's claim was made (its reply lost
            # in an outage, or its process died before going on) and nobody drives the run: go on with it here
            answer = state.answer_for(item.key)
            if answer is not None and answer.outcome == "no_answer" and await self.agent.is_orphaned(state):
                closed = _timed_out(pending)
                await self.messages.close_pending(state.run_id, pending, outcome=closed, summary="expired", state=state)
                await self.answering.continue_orphan(state, ctx)
            return
        if pending.kind == "approval":
            if self.approving is not None and await self.approving.completed_in_time(state, ctx, pending):
                return
            if await self._escalate_at_deadline(state, ctx, pending):
                return
        thread = await self.answering.index.thread(ctx.team_id, channel_id=ctx.channel_id, thread_ts=ctx.thread_ts)
        moved_on = thread is not None and thread.run_id != state.run_id  # a newer run took the thread
        if self.plan.settings.on_timeout == "close" or moved_on:  # closed: a batch can't go on without this call
            await self.answering.expire(state, item.key, whole=True)
            return
        for _ in range(3):  # a write racing this one: look again
            try:
                stream = await self.agent.time_out(run_id=item.run_id, tool_call_id=item.key)
                break
            except RunConflict:
                continue
            except (RunAlreadyResumed, RunNotResumable):
                return
        else:
            raise RunConflict(item.run_id)
        outcome = _timed_out(pending)
        batch = None if stream.waiting else state  # alone while other calls of its batch wait for later deadlines
        await self.messages.close_pending(state.run_id, pending, outcome=outcome, summary="expired", state=batch)
        if stream.waiting:
            log.info("run %s: no decision on %s by its deadline; the rest of its batch waits", state.run_id, item.key)
        else:
            log.info("run %s: no answer by the deadline; going on without one", state.run_id)
        await self.writer.follow(stream, ctx)

    async def _escalate_at_deadline(self, state: RunState, ctx: SlackContext, pending: PendingCall) -> bool:
        """At the deadline of an approval request whose policy rule says ``on_deadline: {escalate: [...]}`` (its
        notes, :data:`bot.slack.approvals.rules.ESCALATE`), not escalated yet: give it the rule's deadline again
        (``Agent.extend_approval``), let the people named decide it too (:data:`ESCALATED_TO`), send each of them
        (user groups expanded) a DM copy linking the thread, and say so in the thread. True when it did (or another
        write came first: a decision, or the same escalation by another process); False: not this rule's.

        Their Home entries and DMs are queued before the request changes, so a Redis refusal anywhere up to the
        extension is tried again by the scheduler as a whole; the DMs go out as escalation messages
        (:meth:`on_escalation_message`: at least once, each person once, tried again while Slack refuses). After the
        extension (which a retry sees, and so does not escalate twice) come the thread's notice, then the new
        deadline's schedule entry (a refusal there: the scheduler's retry finds the deadline early and reschedules
        it). Raises ``StoreUnavailable``."""
        notes = policy_notes(pending)
        targets = notes.get(ESCALATE_NOTE)
        if not isinstance(targets, list) or not targets or notes.get(ESCALATED_TO):
            return False
        seconds = notes.get(DEADLINE_NOTE) or self.agent.ask_ttl or 3600
        waited = timedelta(seconds=float(seconds))
        until = utcnow() + waited
        request = approval_payload(pending)
        approvers = self.approvers.for_call(
            ctx, request.tool_name, request.args, escalated_to=targets, rule=request.policy.get(RULE_NOTE)
        )
        people: list[str] = []
        for target in (str(t) for t in targets):
            people += sorted(await approvers.group_members(target)) if target.startswith(("S", "@")) else [target]
        people = list(dict.fromkeys(people))
        home = self.messages.home
        if home is not None:  # in their Home inboxes too, as its rule's approvers' (the card there checks who may
            # decide when drawn)
            when = pending.suspended_at
            await home.asked(ctx, state.run_id, pending.tool_call_id, asked_at=when, approval=request, also=people)
        for person in people:  # sent once the extension below lets them decide (a message queued while it
            # still waits for it finds it closed, and the retry queues it again)
            await self.answering.index.queue_notice(
                "escalation", ctx.team_id, target=person, run_id=state.run_id, key=pending.tool_call_id, n=AT_DEADLINE
            )
            await self.plan.notice_message(ESCALATE_TO, ctx.team_id, person)
        try:
            await self.agent.extend_approval(
                run_id=state.run_id, tool_call_id=pending.tool_call_id, expires_at=until, notes={ESCALATED_TO: targets}
            )
        except (RunConflict, RunNotResumable):
            return True
        named = ", ".join(f"<@{p}>" for p in people) or "nobody (the groups named have no members)"
        left = how_long(waited.total_seconds())
        text = f":rotating_light: No decision in time: escalated to {named}, who may decide for {left} more."
        await self.answering.web.post(ctx.channel_id, thread_ts=ctx.thread_ts, text=text)
        await self.plan.schedule.add(DueItem(DEADLINE, state.run_id, pending.tool_call_id), at=until)
        log.info("run %s: approval request escalated at its deadline to %s", state.run_id, ", ".join(map(str, targets)))
        return True

    # --- reminders -------------------------------------------------------------------------------------------

    async def on_remind(self, item: DueItem) -> None:
        """Reminder ``item.n`` is due: queue it for each person it reminds (the requester, or the run's channel for
        a question asked of nobody in particular; for an approval also those who may decide it: :meth:`_reminded`)
        and plan their next reminder message (:meth:`on_reminder_message`); plan the question's next reminder."""
        found = await self._open(item)
        if found is None:
            return
        state, ctx, pending = found
        for target in await self._reminded(ctx, pending):
            await self.answering.index.queue_notice(
                "reminder", ctx.team_id, target=target, run_id=state.run_id, key=item.key, n=item.n
            )
            await self.plan.notice_message(REMIND_TO, ctx.team_id, target)
        await self.plan.remind_again(state.run_id, item.key, n=item.n + 1)

    async def on_reminder_message(self, item: DueItem) -> None:
        """Remind ``item.key`` (a user id, or a channel id; team ``item.run_id``) of what is queued for it and
        still waits, in one message: one question in its own thread, mentioning them; several as one message
        listing them (a DM to a person, a post in a channel). Posted, then marked, so a process that dies in
        between leaves it to be posted (at least once)."""
        team_id, target = item.run_id, item.key
        queued, due = await self._due("reminder", team_id, target=target)
        if len(due) == 1:
            _q, _state, ctx, pending = due[0]
            who = f"<@{target}>" if target.startswith(("U", "W")) else "Anyone here"
            what = "approval request" if pending.kind == "approval" else "question"
            text = f":bell: {who}: the {what} above is still waiting (asked {_ago(pending.suspended_at)} ago)."
            await self.answering.web.post(ctx.channel_id, thread_ts=ctx.thread_ts, text=text)
        elif due:
            whom = "for you" if target.startswith(("U", "W")) else "here for an answer"
            head = f":bell: {len(due)} questions and requests are still waiting {whom}:"
            await self._post_list(target, head, due)
        await self._sent("reminder", team_id, target=target, queued=queued, due=due)

    async def _reminded(self, ctx: SlackContext, pending: PendingCall) -> list[str]:
        """Whom a reminder of ``pending`` is for: the requester (or the run's channel when there is none) and, for
        an approval, each person who may decide it (its rule's approvers: users, user groups' members, named
        channels' members: :meth:`~bot.slack.questions.approvers.ApproverPolicy.deciders`)."""
        targets = [ctx.requester or ctx.channel_id]
        if pending.kind == "approval":
            targets += await self.messages.cards.approvers_of(approval_payload(pending), ctx).deciders(ctx)
        return list(dict.fromkeys(t for t in targets if t))

    # --- escalation ------------------------------------------------------------------------------------------

    async def on_escalate(self, item: DueItem) -> None:
        """Question ``item.key`` is due to be escalated: record its targets (:class:`Permissions` lets them answer
        only where ``ASK_ESCALATE_ANSWERS`` says so, never an approval), list it in their Home inboxes when they may
        answer it, and queue it for each target's next escalation message (:meth:`on_escalation_message`, planned
        :data:`~bot.slack.questions.follow_up_plan.COALESCE_SECONDS` ahead: escalations to one target falling due
        together are one message). Raises ``StoreUnavailable`` (the scheduler tries it again; done twice, it changes
        nothing more)."""
        found = await self._open(item)
        if found is None:
            return
        state, ctx, pending = found
        index = self.answering.index
        targets = await self._targets()
        await index.escalate(state.run_id, key=item.key, to=targets)
        home = self.messages.home
        approval = approval_payload(pending) if pending.kind == "approval" else None
        if home is not None and self.answering.permissions.escalation_answers(pending.kind):
            people = [t for t in targets if t.startswith(("U", "W"))]
            await home.asked(ctx, state.run_id, item.key, asked_at=pending.suspended_at, approval=approval, also=people)
        for target in targets:
            await index.queue_notice("escalation", ctx.team_id, target=target, run_id=state.run_id, key=item.key)
            await self.plan.notice_message(ESCALATE_TO, ctx.team_id, target)
        if targets and await index.tell_once(state.run_id, tool_call_id=item.key, user="", topic=ESCALATED_NOTE):
            answers = self.answering.permissions.escalation_answers(pending.kind)
            after = self.plan.settings.escalate_after or (utcnow() - pending.suspended_at).total_seconds()
            text = escalation_note(targets, kind=pending.kind, after=after, answers=answers)
            await self.answering.web.post(ctx.channel_id, thread_ts=ctx.thread_ts, text=text)

    async def on_escalation_message(self, item: DueItem) -> None:
        """Post to ``item.key`` (a channel or user id; team ``item.run_id``) what is queued for it and still waits,
        in one message: one question as itself (its controls, where the target may act on it), several as a list
        linking each thread. Each question is posted to a target once (posted, then marked); if it closed
        meanwhile, what was just posted is closed too."""
        team_id, target = item.run_id, item.key
        queued, due = await self._due("escalation", team_id, target=target)
        if len(due) == 1:
            q, state, ctx, pending = due[0]
            await self._escalate_one(target, state, ctx, pending, at_deadline=q.n == AT_DEADLINE)
        elif due:
            await self._post_list(target, f":arrow_up: {len(due)} questions and requests are still waiting:", due)
        await self._sent("escalation", team_id, target=target, queued=queued, due=due)
        for _q, state, _ctx, pending in due:
            if await self._open(DueItem(ESCALATE, state.run_id, pending.tool_call_id)) is None:
                await self._close_settled(state.run_id, pending)  # answered while it was being escalated

    async def _escalate_one(
        self, target: str, state: RunState, ctx: SlackContext, pending: PendingCall, *, at_deadline: bool
    ) -> None:
        """Post one escalated question to ``target`` and record the message as one of the question's. Raises
        ``SlackRefused`` (tried again by the scheduler) and ``StoreUnavailable``."""
        index = self.answering.index
        call = pending.tool_call_id
        text, blocks = await self._escalation_message(state.run_id, call, ctx, pending, at_deadline=at_deadline)
        posted = await self.answering.web.post_to(target, text=text, blocks=blocks)
        if posted is None:
            raise SlackRefused(f"Slack refused the escalation of run {state.run_id} to {target}")
        channel_id, ts = posted
        there = MessageRef(channel_id=channel_id, ts=ts, asked=asked_id(pending.suspended_at))
        await index.add_message(state.run_id, key=pending.tool_call_id, ref=there)
        if channel_id != target:  # a DM: its D… id is where its clicks come from
            await index.escalate(state.run_id, key=pending.tool_call_id, to=[channel_id])

    # --- one message per target ------------------------------------------------------------------------------

    async def _due(self, kind: NoticeKind, team_id: str, *, target: str) -> tuple[list[Queued], list[Waiter]]:
        """What is queued for ``target``'s next ``kind`` message, and of it what still waits and was not sent to
        them yet."""
        index = self.answering.index
        queued = await index.queued_notices(kind, team_id, target=target)
        due: list[Waiter] = []
        for q in sorted(queued, key=lambda q: -q.n):  # a question queued twice (reminders 1 and 2) is listed once
            if any((d[0].run_id, d[0].key) == (q.run_id, q.key) for d in due):
                continue
            found = await self._open(DueItem(kind, q.run_id, q.key))
            if found is None:
                continue
            if not await index.was_told(q.run_id, tool_call_id=q.key, user="", topic=_topic(kind, target, q.n)):
                due.append((q, *found))
        return queued, due

    async def _sent(
        self, kind: NoticeKind, team_id: str, *, target: str, queued: list[Queued], due: list[Waiter]
    ) -> None:
        """Mark what was just sent to ``target`` (each once) and take the queue's entries read out of it."""
        index = self.answering.index
        for q, *_found in due:
            await index.tell_once(q.run_id, tool_call_id=q.key, user="", topic=_topic(kind, target, q.n))
        await index.notices_sent(kind, team_id, target=target, items=queued)

    async def _post_list(self, target: str, head: str, due: list[Waiter]) -> None:
        """Post to ``target`` one message listing ``due`` (each with where and by whom it was asked, how long ago,
        and a link to its thread, where it is answered)."""
        home = self.messages.home
        lines: list[str] = []
        for _q, state, ctx, pending in due[:MAX_LISTED]:
            call = pending.tool_call_id
            link = await home.thread_link(state.run_id, call, ctx) if home is not None else None
            if pending.kind == "approval":
                what = f"Approval to run *{escape(approval_payload(pending).tool_name)}*"
            else:
                what = escape(clip(AskUserPayload.model_validate(pending.suspend_payload).question, 150))
            by = f"asked by <@{ctx.requester}>" if ctx.requester else "asked of anyone there"
            line = f"• {what} · in <#{ctx.channel_id}>, {by} {_ago(pending.suspended_at)} ago"
            lines.append(line + (f" · <{link}|Open the thread>" if link else ""))
        if len(due) > MAX_LISTED:
            lines.append(f"…and {len(due) - MAX_LISTED} more.")
        text = clip(head + "\n" + "\n".join(lines), 3000)
        blocks = [{"type": "section", "text": {"type": "mrkdwn", "text": text}}]
        if await self.answering.web.post_to(target, text=head, blocks=blocks) is None:
            raise SlackRefused(f"Slack refused a message listing waiting questions to {target}")

    async def _escalation_message(
        self, run_id: str, call: str, ctx: SlackContext, pending: PendingCall, *, at_deadline: bool = False
    ) -> tuple[str, list[dict[str, Any]]]:
        """The escalated question: where it comes from (linked to its thread), then the question or request;
        ``at_deadline``: an approval request its rule escalated when nobody decided it in time."""
        ref = QuestionRef.of(run_id, call)
        home = self.messages.home
        link = await home.thread_link(run_id, call, ctx) if home is not None else None
        ago = _ago(pending.suspended_at)
        by = f"asked by <@{ctx.requester}>" if ctx.requester else "asked of anyone there"
        head = ":arrow_up: Escalated from"
        if at_deadline:
            head = ":rotating_light: No decision in time: escalated to you from"
        note = f"{head} <#{ctx.channel_id}>: {by} {ago} ago"
        note += f" · <{link}|Open the thread>" if link else "."
        if pending.kind == "approval":  # decided by its approvers only: those among the targets can decide here
            payload = approval_payload(pending)
            blocks = await self._open_card(run_id, payload, ctx, ref=ref)
            text = f"{approval_title(payload)} (escalated)"
        else:
            question = AskUserPayload.model_validate(pending.suspend_payload)
            text = f"{escape(clip(question.question, 2000))} (escalated)"
            if self.answering.permissions.escalation_answers("question"):
                blocks = bk.question_blocks(question, ref=ref, requester=None, answerers="channel", in_thread=False)
            else:  # a reminder: the targets may not answer it (ASK_ESCALATE_ANSWERS=false)
                who = f"<@{ctx.requester}>" if ctx.requester else f"people in <#{ctx.channel_id}>"
                said = f"*{escape(clip(question.question, 2000))}*\nWaiting for {who} to answer in its thread."
                blocks = [{"type": "section", "text": {"type": "mrkdwn", "text": said}}]
        return text, [{"type": "context", "elements": [{"type": "mrkdwn", "text": note}]}, *blocks]

    async def _open_card(
        self, run_id: str, payload: ApprovalPayload, ctx: SlackContext, *, ref: QuestionRef
    ) -> list[dict[str, Any]]:
        """An escalated copy of an open approval request: its card as in its thread (its quorum's progress, Edit,
        grants: :class:`~bot.slack.approvals.cards.OpenCards`), naming the run's channel; the progress left at
        none gathered when Redis can't say (the next change redraws it)."""
        cards = self.messages.cards
        progress = await cards.shown_progress(run_id, payload, ctx)
        return cards.blocks(payload, ctx, ref=ref, progress=progress, elsewhere=True)

    async def _close_settled(self, run_id: str, pending: PendingCall) -> None:
        """Close every message of a question that was settled while it was being escalated, saying how."""
        state = await self.agent.get_run(run_id)
        answer = state.answer_for(pending.tool_call_id)
        if answer is not None and answer.answered_at >= pending.suspended_at:
            outcome = (
                f":white_check_mark: Settled by <@{answer.answered_by}>." if answer.answered_by else NO_ANSWER_OUTCOME
            )
        else:
            outcome = EXPIRED_OUTCOME
        ctx = SlackContext.of(state)
        await self.messages.close_pending(run_id, pending, outcome=outcome, summary="closed", ctx=ctx)

    async def _targets(self) -> list[str]:
        """``ASK_ESCALATE_TO`` as posting targets: a channel id, or user ids with user groups expanded."""
        spec = self.plan.settings.escalate_to or ""
        people: list[str] = []
        for target in [t for t in spec.split(",") if t]:
            if target.startswith("S"):
                people += sorted(await self.approvers.group_members(target))
            else:
                people.append(target)
        return list(dict.fromkeys(people))


MAX_LISTED = 20  # questions one escalation message lists at most
ESCALATED_NOTE = "escalated-note"  # the ``tell_once`` topic of the thread's note that a question was escalated


def escalation_note(targets: list[str], *, kind: str, after: float, answers: bool) -> str:
    """The note in a question's own thread when ``ASK_ESCALATE_AFTER`` (``after``, seconds) escalated it to
    ``targets`` (user ids, or a channel id): whom, and whether they may answer it too (``answers``:
    ``ASK_ESCALATE_ANSWERS``, questions only). Posted once (:data:`ESCALATED_NOTE`), as an approval escalated at its
    deadline says so in its thread. ``"No answer after 30 minutes: escalated to <@U1> and <#C1>. They may answer it
    too."``"""
    named = [f"<#{t}>" if t.startswith(("C", "G")) else f"<@{t}>" for t in targets]
    whom = ", ".join(named[:-1]) + f" and {named[-1]}" if len(named) > 1 else named[0]
    what = "decision" if kind == "approval" else "answer"
    text = f":arrow_up: No {what} after {how_long(after)}: escalated to {whom}."
    if answers:
        text += " Anyone there may answer it too." if named[0].startswith("<#") else " They may answer it too."
    return text


Waiter = tuple[Queued, RunState, SlackContext, PendingCall]
"""A queued question that still waits: its queue entry, run, Slack context and pending call."""


def _topic(kind: NoticeKind, target: str, n: int) -> str:
    """The ``tell_once`` topic marking that ``target`` got ``kind`` (reminder ``n``) of a question."""
    if kind == "escalation":  # an approval escalated at its deadline (n: AT_DEADLINE) is news to one told before
        return f"escalated{n or ''}:{target}"
    return f"remind{n}:{target}"


def _timed_out(pending: PendingCall) -> str:
    return NO_DECISION_OUTCOME if pending.kind == "approval" else NO_ANSWER_OUTCOME


def _ago(when: datetime) -> str:
    return how_long((utcnow() - when).total_seconds())
