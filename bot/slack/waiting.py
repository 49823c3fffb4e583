"""What happens while a question (or approval request) waits, carried out when it is due (:class:`Waiting`, the
handlers of :class:`bot.store.schedule.Scheduler`): the deadline, reminders and escalation planned by
:mod:`bot.slack.wait_plan`.

Each handler loads the run and asks the runtime whether the question is still open (the one place that decides,
:mod:`bot.agent.answers`); anything answered, withdrawn or closed meanwhile is left alone. Handlers are idempotent
(the scheduler is at least once): the deadline is a claim in the store, a reminder is posted once per number
(:meth:`ConversationIndex.tell_once`), an escalation once.

- **Deadline.** ``ASK_ON_TIMEOUT=resume`` (default): the run goes on without an answer (``Agent.time_out``: the
  tool is told ``no_answer``; an approval is declined, reason "no answer"), the question's messages show it
  expired, and the agent's next message is posted in the thread. ``close``: the question only expires. A question
  asked live by a running tool (:mod:`bot.agent.live_questions`) is closed by that tool's own process.
- **Reminder** ``n``: a message in the thread mentioning the requester (and, for an approval, the approvers named in
  ``APPROVERS``); then the next one is planned, up to ``ASK_REMIND_MAX``.
- **Escalation**: the question is posted to ``ASK_ESCALATE_TO`` (a channel, or a DM to each person, user groups
  expanded), saying where it comes from; those people may answer too (:meth:`Answering.allowed`); every message of
  the question is updated when it closes.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from bot.agent.answers import Expired, Open
from bot.agent.approvals import approval_payload
from bot.agent.ask_user import AskUserPayload
from bot.agent.state import PendingCall, RunState, utcnow
from bot.errors import RunAlreadyResumed, RunConflict, RunNotFound, RunNotResumable, StoreCorrupt
from bot.slack import blocks as bk
from bot.slack.answering import Answering
from bot.slack.approval_blocks import approval_blocks, approval_title
from bot.slack.approvers import ApproverPolicy
from bot.slack.context import SlackContext
from bot.slack.home import HOME
from bot.slack.mrkdwn import clip, escape, how_long
from bot.slack.notices import EXPIRED_OUTCOME
from bot.slack.refs import QuestionRef
from bot.slack.wait_plan import DEADLINE, ESCALATE, REMIND, WaitPlan
from bot.store.conversations import MessageRef, asked_id
from bot.store.schedule import DueItem, Handler

log = logging.getLogger(__name__)

NO_ANSWER_OUTCOME = ":hourglass: No answer in time; I went on without one."
NO_DECISION_OUTCOME = ":hourglass: No decision in time: declined (no answer)."


class Waiting:
    """Handlers of the waiting questions of ``answering``'s agent; ``approvers`` names whom to remind of approvals."""

    def __init__(self, answering: Answering, *, plan: WaitPlan, approvers: ApproverPolicy) -> None:
        self.answering = answering
        self.agent = answering.agent
        self.follower = answering.follower
        self.plan = plan
        self.approvers = approvers

    def handlers(self) -> dict[str, Handler]:
        """``{kind: handler}`` for :class:`bot.store.schedule.Scheduler`."""
        handlers: dict[str, Handler] = {DEADLINE: self.on_deadline, REMIND: self.on_remind, ESCALATE: self.on_escalate}
        if self.follower.home is not None:
            handlers[HOME] = self.follower.home.on_refresh
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

    # --- the deadline ----------------------------------------------------------------------------------------

    async def on_deadline(self, item: DueItem) -> None:
        """At the question's deadline: go on without an answer, or only close it (``ASK_ON_TIMEOUT``)."""
        try:
            state = await self.agent.get_run(item.run_id)
            ctx = SlackContext.of(state)
        except (RunNotFound, StoreCorrupt):
            return
        check = await self.agent.check(state, item.key)
        pending = state.pending
        if isinstance(check, Open) and check.pending.expires_at is not None:  # early by the store's clock
            await self.plan.later(item, at=check.pending.expires_at)
            return
        if not isinstance(check, Expired) or pending is None or pending.tool_call_id != item.key:
            return
        if pending.live_owner is not None:
            return  # the tool call that asked it closes it at its deadline
        if pending.resume is not None:
            return  # went on already
        thread = await self.answering.index.thread(ctx.team_id, channel_id=ctx.channel_id, thread_ts=ctx.thread_ts)
        moved_on = thread is not None and thread.run_id != state.run_id  # a newer run took the thread
        if self.plan.settings.on_timeout == "close" or moved_on:
            await self.answering.expire(state, item.key)
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
        await self.follower.close_pending(state.run_id, pending, outcome=_timed_out(pending), summary="expired")
        log.info("run %s: no answer by the deadline; going on without one", state.run_id)
        await self.follower.follow(stream, ctx)

    # --- reminders -------------------------------------------------------------------------------------------

    async def on_remind(self, item: DueItem) -> None:
        """Reminder ``item.n``: mention who the question waits for, in its thread; plan the next one. Posted, then
        marked, so a process that dies in between leaves it to be posted (at least once)."""
        found = await self._open(item)
        if found is None:
            return
        state, ctx, pending = found
        index, topic = self.answering.index, f"remind{item.n}"
        if not await index.was_told(state.run_id, tool_call_id=item.key, user="", topic=topic):
            what = "approval request" if pending.kind == "approval" else "question"
            who = [f"<@{ctx.requester}>"] if ctx.requester else ["Anyone here"]
            if pending.kind == "approval":
                who += [f"<@{u}>" if not u.startswith("S") else f"<!subteam^{u}>" for u in self.approvers.named()]
            waited = _ago(pending.suspended_at)
            text = f":bell: {', '.join(dict.fromkeys(who))}: the {what} above is still waiting (asked {waited} ago)."
            await self.answering.web.post(ctx.channel_id, thread_ts=ctx.thread_ts, text=text)
            await index.tell_once(state.run_id, tool_call_id=item.key, user="", topic=topic)
        await self.plan.remind_again(state.run_id, item.key, n=item.n + 1)

    # --- escalation ------------------------------------------------------------------------------------------

    async def on_escalate(self, item: DueItem) -> None:
        """Post the question to each of ``ASK_ESCALATE_TO`` (each once: posted, then marked), and let those people
        answer it; if it closed meanwhile, close what was just posted too."""
        found = await self._open(item)
        if found is None:
            return
        state, ctx, pending = found
        index = self.answering.index
        targets = await self._targets()
        await index.escalate(state.run_id, key=item.key, to=targets)
        home = self.follower.home
        if home is not None:
            people = [t for t in targets if t.startswith(("U", "W"))]
            approval = pending.kind == "approval"
            await home.asked(ctx, state.run_id, item.key, asked_at=pending.suspended_at, approval=approval, also=people)
        text, blocks = await self._escalation_message(state.run_id, item.key, ctx, pending)
        for target in targets:
            topic = f"escalated:{target}"
            if await index.was_told(state.run_id, tool_call_id=item.key, user="", topic=topic):
                continue
            posted = await self.answering.web.post_to(target, text=text, blocks=blocks)
            if posted is not None:
                channel_id, ts = posted
                there = MessageRef(channel_id=channel_id, ts=ts, asked=asked_id(pending.suspended_at))
                await index.add_message(state.run_id, key=item.key, ref=there)
                if channel_id != target:  # a DM: its D… id answers too (the person is allowed by id)
                    await index.escalate(state.run_id, key=item.key, to=[channel_id])
            await index.tell_once(state.run_id, tool_call_id=item.key, user="", topic=topic)
        if await self._open(item) is None:  # answered while it was being escalated: close the new messages too
            await self._close_settled(state.run_id, pending)

    async def _escalation_message(
        self, run_id: str, call: str, ctx: SlackContext, pending: PendingCall
    ) -> tuple[str, list[dict[str, Any]]]:
        """The escalated question: where it comes from (linked to its thread), then the question or request."""
        ref = QuestionRef.of(run_id, call)
        home = self.follower.home
        link = await home.thread_link(run_id, call, ctx) if home is not None else None
        ago = _ago(pending.suspended_at)
        note = f":arrow_up: Escalated from <#{ctx.channel_id}>: asked by <@{ctx.requester}> {ago} ago"
        note += f" · <{link}|Open the thread>" if link else "."
        if pending.kind == "approval":
            payload = approval_payload(pending)
            blocks = approval_blocks(payload, ref=ref, approvers="You may decide too")
            text = f"{approval_title(payload)} (escalated)"
        else:
            question = AskUserPayload.model_validate(pending.suspend_payload)
            blocks = bk.question_blocks(question, ref=ref, requester=None, answerers="channel")
            text = f"{escape(clip(question.question, 2000))} (escalated)"
        return text, [{"type": "context", "elements": [{"type": "mrkdwn", "text": note}]}, *blocks]

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
        await self.follower.close_pending(run_id, pending, outcome=outcome, summary="closed")

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


def _timed_out(pending: PendingCall) -> str:
    return NO_DECISION_OUTCOME if pending.kind == "approval" else NO_ANSWER_OUTCOME


def _ago(when: datetime) -> str:
    return how_long((utcnow() - when).total_seconds())
