"""Deciding on tool calls from Slack: Approve, Decline (with an optional reason, in a modal) and Details (the call's
full arguments, in a modal). The same path as answers: the bot's own reference in the payload, the run loaded, the
request checked against the run's channel and messages, who may decide (:mod:`bot.slack.questions.permissions`), then
the runtime's check and its exactly-once claim (``Agent.approve_tool_call`` / ``decline_tool_call``). The request
message then says who decided, and once the call ends how it went (ran in N s, or failed). Edit before approving is
:mod:`bot.slack.approvals.editing`'s, on this path.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any, Literal, cast

from bot.agent.answers import Answered, Open, undecided
from bot.agent.approvals import APPROVED, approval_payload, edit_count
from bot.agent.decisions import Approve
from bot.agent.state import PendingCall, RunState
from bot.agent.stream import AgentStream
from bot.errors import (
    NotAwaitingThisKind,
    QuestionExpired,
    RunAlreadyResumed,
    RunNotFound,
    RunNotResumable,
    StoreUnavailable,
    ToolCallNotPending,
)
from bot.logs import log_context
from bot.slack.approvals.batch import ApprovingAll, approved_earlier
from bot.slack.approvals.grants import SCOPE_WORDS, when
from bot.slack.context import Origin, SlackContext
from bot.slack.questions.answer_modal import AnswerModal
from bot.slack.questions.answering import LOST_CLAIM, Answering
from bot.slack.questions.approvers import RULE_NOTE
from bot.slack.questions.attempt import Attempt
from bot.slack.questions.lookup import Found, Say
from bot.slack.questions.notices import GONE, REQUEST_NOT_OPEN, STORE_DOWN, explain
from bot.slack.questions.picks import button_ref
from bot.slack.refs import QuestionRef
from bot.slack.render import modals
from bot.slack.render.approvals import (
    BATCH_WAITS,
    QuorumProgress,
    decision_outcome,
    decline_question,
    details_text,
    quorum_line,
    quorum_outcome,
    scope_of_action,
)
from bot.slack.replies.thread_writer import Decided
from bot.store.conversations import MessageRef, asked_id
from bot.store.grants import Scope
from bot.store.quorum import ABSENT, AGAIN, DONE, REACHED, Quorums, Tally, asking_of

Ack = Callable[..., Awaitable[Any]]
log = logging.getLogger(__name__)


EDITED_SINCE = "It now shows the arguments as they are; approve again if they are right."


class Approving:
    """Approve / Decline / Details listeners for ``answering``'s agent (who may decide:
    ``answering.permissions``); ``all``: a batch's Approve all (:class:`~bot.slack.approvals.batch.ApprovingAll`)."""

    def __init__(self, answering: Answering, *, modal: AnswerModal, quorums: Quorums) -> None:
        self.answering = answering
        self.modal = modal
        self.quorums = quorums  # the approvals gathered toward each quorum (bot.store.quorum)
        self.all = ApprovingAll(answering)

    # --- Approve ---------------------------------------------------------------------------------

    async def on_approve(self, body: dict[str, Any]) -> None:
        """Lazy listener of Approve, and of the Approve buttons that also give a standing grant ("for this thread",
        ...: the scope is the button's, :func:`~bot.slack.render.approvals.scope_of_action`)."""
        where = Origin.of_action(body)
        found = await self.found_for(body, where, self.answering.say_to(where))
        if found is not None:
            state, ctx, call = found
            action = (body.get("actions") or [{}])[0]
            scope = scope_of_action(str(action.get("action_id", "")))
            _ref, shown = QuestionRef.from_value(str(action.get("value", "")))  # parsed already by found_for
            await self.decide(state, ctx, call, where=where, approved=True, reason=None, scope=scope, shown=shown)

    async def found_for(self, body: dict[str, Any], where: Origin, say: Say) -> Found | None:
        """The run, context and call a click is about, checked (its message, who may decide:
        :class:`~bot.slack.questions.permissions.Permissions`); or None after telling the person why not."""
        ref = await button_ref(body, say)
        return await self.answering.vet(ref, where, say, expect="approval") if ref is not None else None

    async def decide(
        self,
        state: RunState,
        ctx: SlackContext,
        call: str,
        *,
        where: Origin,
        approved: bool,
        reason: str | None,
        scope: str = "once",
        shown: int | None = None,
    ) -> None:
        """Claim the decision on ``call`` (policy already applied) and follow the run it continues; ``scope``: an
        approval's standing grant (``once``: none), recorded once the claim won, when the call's rule allows it;
        ``shown``: which arguments the approver saw (a button's :func:`~bot.slack.render.approvals.shown_edit`;
        None: the caller shows them itself, as the Edit form does): an approval of arguments edited since is
        refused, and the clicked copy redrawn with the current ones."""
        say = self.answering.say_to(where, ctx)
        # the message clicked is closed with the recorded messages, recorded or not
        attempt = Attempt.of((state, ctx, call), where=where, say=say, kind="approval")
        clicked = attempt.clicked
        check = await self.answering.agent.check(state, call)
        if self.answering.own_earlier_claim(check, where.user):
            await self.answering.finish_own_claim(attempt)
            return
        if not isinstance(check, Open):
            await self.answering.not_open(check, replace(attempt, tried="approved" if approved else "declined"))
            return
        if check.pending.kind != "approval":
            await say(REQUEST_NOT_OPEN)
            return
        if approved and shown is not None and shown != edit_count(check.pending):
            await self._edited_since(state, ctx, check.pending, say=say, clicked=clicked)
            return
        outcome = decision_outcome(approved=approved, user=where.user, reason=reason)
        by = where.user
        if approved:
            tally = await self._count(state, ctx, check.pending, where=where, say=say, clicked=clicked)
            if tally is None:  # a quorum still gathering (its progress shown), or told why not
                return
            if len(tally.approvers) > 1:
                outcome = quorum_outcome(tally.approvers, required=len(tally.approvers))
            by = tally.completed_by or by  # carried through for the quorum: its decision is the completer's
        slot = await self.answering.slot(ctx, say, user=where.user)
        if slot is None:
            return
        async with slot:
            with log_context(run_id=state.run_id, team_id=ctx.team_id, channel_id=ctx.channel_id, user_id=where.user):
                stream = await self._claim(attempt, approved=approved, reason=reason, scope=scope, by=by)
                if stream is None:
                    return
                given = (
                    await self._give(scope, ctx, check.pending, run_id=state.run_id, user=where.user, say=say)
                    if approved
                    else None
                )
                if given is not None:
                    outcome = decision_outcome(approved=approved, user=where.user, reason=reason, grant=given)
                await self.follow(
                    stream, (state, ctx, check.pending), approved=approved, outcome=outcome, clicked=clicked
                )

    async def _edited_since(
        self, state: RunState, ctx: SlackContext, pending: PendingCall, *, say: Say, clicked: MessageRef | None
    ) -> None:
        """An Approve click on a copy of ``pending``'s request drawn before its arguments were last edited: not
        counted (an approval is of the arguments its approver saw); the person is told, and the copy they clicked
        (with every other) redrawn with the current arguments and progress."""
        payload = approval_payload(pending)
        by = f" by <@{payload.edited.by}>" if payload.edited is not None else ""
        await say(f"Not approved: the arguments were changed{by} after this copy was drawn. {EDITED_SINCE}")
        progress = await self.answering.messages.cards.shown_progress(state.run_id, payload, ctx)
        await self.answering.messages.show_quorum(state.run_id, payload, ctx, progress=progress, clicked=clicked)

    async def follow(
        self,
        stream: AgentStream,
        decided: tuple[RunState, SlackContext, PendingCall],
        *,
        approved: bool,
        outcome: str,
        clicked: MessageRef | None = None,
    ) -> None:
        """After the claim of a decision on ``decided`` (the run as loaded before it, its context, the call):
        close its request with ``outcome`` (mrkdwn; ``clicked``: the message acted on, recorded or not) and follow
        ``stream``: the rest of a batch still waits, or the approved call runs (its card then says how it went), or
        the declined one does not."""
        state, ctx, pending = decided
        call, payload = pending.tool_call_id, approval_payload(pending)
        writer, messages = self.answering.writer, self.answering.messages
        if [c for c in undecided(state) if c.tool_call_id != call]:  # the rest of its batch waits
            waits = f"{outcome} · {BATCH_WAITS}" if approved else outcome
            await messages.close_approval(state.run_id, payload, ctx=ctx, outcome=waits, clicked=clicked)
            await writer.follow(stream, ctx)
        elif approved:
            running = f"{outcome} · running…"
            await messages.close_approval(
                state.run_id, payload, ctx=ctx, outcome=running, clicked=clicked, ongoing=True
            )
            done = Decided(tool_call_id=call, payload=payload, outcome=outcome, clicked=clicked)
            await writer.follow(stream, ctx, decided=done, batch=approved_earlier(state, but=call))
        else:
            await messages.close_approval(state.run_id, payload, ctx=ctx, outcome=outcome, clicked=clicked)
            await writer.follow(stream, ctx, batch=approved_earlier(state, but=call))

    async def completed_in_time(self, state: RunState, ctx: SlackContext, pending: PendingCall) -> bool:
        """At ``pending``'s deadline (the scheduler's): when its rule's quorum was completed before it (the last
        approval counted in time, but its claim was never made: its person at their run limit, Redis failing after
        the count, its process gone), claim the approval as the completer's, at the moment it completed
        (:class:`~bot.agent.decisions.Approve` ``decided_at``), and follow the run. True when it did, or another
        write came first (the same carry-through elsewhere, a late click's); False: no quorum, or not complete in
        time (the deadline goes on as usual). Raises ``StoreUnavailable`` (the scheduler tries again)."""
        payload = approval_payload(pending)
        approvers = self.answering.permissions.approvers.for_approval(ctx, payload)
        if not approvers.quorum or pending.expires_at is None:
            return False
        asking = asking_of(asked_id(pending.suspended_at), pending.args, edits=edit_count(pending))
        tally = await self.quorums.tally(state.run_id, pending.tool_call_id, asking)
        at = tally.completed_at
        if not tally.complete or at is None or at > pending.expires_at or not tally.completed_by:
            return False
        approve = Approve(by=tally.completed_by, decided_at=at)
        try:
            stream = await self.answering.agent.resume(state.run_id, {pending.tool_call_id: approve}, loaded=state)
        except QuestionExpired:
            return False  # not in time by the store's clock after all: the deadline goes on
        except (RunAlreadyResumed, RunNotResumable, ToolCallNotPending, RunNotFound, StoreUnavailable) as exc:
            return await self._decided_meanwhile(state.run_id, ctx, pending, exc)
        outcome = quorum_outcome(tally.approvers, required=len(tally.approvers))
        log.info("run %s: its quorum was complete by the deadline; approved as %s's", state.run_id, at.isoformat())
        await self.follow(stream, (state, ctx, pending), approved=True, outcome=outcome)
        return True

    async def _decided_meanwhile(
        self, run_id: str, ctx: SlackContext, pending: PendingCall, exc: Exception
    ) -> Literal[True]:
        """:meth:`completed_in_time`'s claim failed with ``exc``: decided meanwhile (a click's), or made by this
        very claim with its reply lost (Redis failed under it, or a retry of it found it made). A decision that
        nobody drives on is gone on with here (:meth:`go_on_claimed`). Raises ``exc`` (``StoreUnavailable``) when
        no decision was made, for the scheduler to try again."""
        try:
            now = await self.answering.agent.get_run(run_id)
        except RunNotFound:
            return True
        answer = now.answer_for(pending.tool_call_id)
        if answer is None or answer.answered_at < pending.suspended_at:  # none this asking
            if isinstance(exc, StoreUnavailable):
                raise exc
            return True  # not resumable, or another call waits: whatever closed it says so
        if now.status == "running" and await self.answering.agent.is_orphaned(now):
            await self.go_on_claimed(now, ctx, pending)
        return True

    async def go_on_claimed(self, state: RunState, ctx: SlackContext, pending: PendingCall) -> None:
        """At ``pending``'s deadline, its decision claimed (by :meth:`completed_in_time` whose reply an outage lost,
        or a process that died before going on) and nobody driving the run (the caller checked): close its request
        as decided (a quorum's approvers named) and go on with the run here."""
        answer = state.answer_for(pending.tool_call_id)
        if answer is None:
            return
        approved, payload = answer.resume_data == APPROVED, approval_payload(pending)
        if answer.answered_by:
            outcome = decision_outcome(approved=approved, user=answer.answered_by)
        else:  # decided through the runtime's API, by nobody named
            outcome = ":white_check_mark: Approved" if approved else ":no_entry_sign: Declined"
        if approved:
            progress = await self.answering.messages.cards.progress(state.run_id, payload, ctx)
            if progress is not None and len(progress.approvers) > 1:
                outcome = quorum_outcome(progress.approvers, required=len(progress.approvers))
        await self.answering.messages.close_approval(state.run_id, payload, ctx=ctx, outcome=outcome)
        await self.answering.continue_orphan(state, ctx)

    # --- quorum (issue 23 part 2) ----------------------------------------------------------------------

    async def _count(
        self,
        state: RunState,
        ctx: SlackContext,
        pending: PendingCall,
        *,
        where: Origin,
        say: Say,
        clicked: MessageRef | None,
    ) -> Tally | None:
        """Count ``where.user``'s approval of ``pending`` toward its rule's quorum: the tally when the decision is
        to be claimed now (one approval needed; or the quorum is complete: this approval completed it, which exactly
        one approval does across processes (:class:`~bot.store.quorum.Quorums`), or an earlier one did whose claim
        was never made), else None after showing the progress (or telling the person why it doesn't count)."""
        approvers = self.answering.permissions.approvers.for_approval(ctx, approval_payload(pending))
        if not approvers.quorum:
            return Tally(status=REACHED, approvers=(where.user,), completed_by=where.user)
        asking = asking_of(asked_id(pending.suspended_at), pending.args, edits=edit_count(pending))
        try:
            tally = await self.quorums.approve(
                state.run_id, pending.tool_call_id, asking, user=where.user, required=approvers.required
            )
        except StoreUnavailable:
            await say(STORE_DOWN)
            return None
        if tally.complete:  # this approval completed it, or one before did and the run still waits (checked by the
            # caller): that click's claim was never made (its person's run slot was full, Redis failed, its process
            # died, or it is on its way: the claim is exactly-once), so this click carries the decision through
            return tally
        progress = QuorumProgress(approvers.required, tally.approvers)
        if tally.status == AGAIN:
            await say(f"Your approval is already counted ({quorum_line(progress)}).")
        payload = approval_payload(pending)
        await self.answering.messages.show_quorum(state.run_id, payload, ctx, progress=progress, clicked=clicked)
        return None

    async def on_take_back(self, body: dict[str, Any]) -> None:
        """Lazy listener of "Take back my approval": the person's approval no longer counts toward the quorum
        (refused once the quorum is complete: the call runs)."""
        where = Origin.of_action(body)
        say = self.answering.say_to(where)
        found = await self.found_for(body, where, say)
        if found is None:
            return
        state, ctx, call = found
        say = self.answering.say_to(where, ctx)
        check = await self.answering.agent.check(state, call)
        if not isinstance(check, Open) or check.pending.kind != "approval":
            await say(REQUEST_NOT_OPEN)
            return
        pending = check.pending
        approvers = self.answering.permissions.approvers.for_approval(ctx, approval_payload(pending))
        asking = asking_of(asked_id(pending.suspended_at), pending.args, edits=edit_count(pending))
        try:
            tally = await self.quorums.withdraw(state.run_id, pending.tool_call_id, asking, user=where.user)
        except StoreUnavailable:
            await say(STORE_DOWN)
            return
        if tally.status == DONE:
            await say("Too late to take it back: it already has all the approvals it needs.")
            return
        if tally.status == ABSENT:
            await say("You haven't approved this, so there is nothing to take back.")
            return
        progress = QuorumProgress(approvers.required, tally.approvers)
        await say(f"Your approval is taken back ({quorum_line(progress)}).")
        payload = approval_payload(pending)
        clicked = where.message_in(ctx)
        await self.answering.messages.show_quorum(state.run_id, payload, ctx, progress=progress, clicked=clicked)

    async def _claim(
        self, attempt: Attempt, *, approved: bool, reason: str | None, scope: str = "once", by: str | None = None
    ) -> AgentStream | None:
        """Claim the decision ``attempt`` makes (by ``attempt.user``, or ``by``: whose the decision is, the
        quorum's completer when another approver's click carries it through); its stream, or None after telling
        the person why not. A claim Redis failed under is read again as Redis comes back
        (:meth:`Answering.claimed_after_all <bot.slack.questions.answering.Answering.claimed_after_all>`)."""
        agent, say = self.answering.agent, attempt.say
        run_id, call, user = attempt.state.run_id, attempt.call, by or attempt.user
        try:
            if approved:
                return await agent.resume(run_id, {call: Approve(by=user, scope=scope)}, loaded=attempt.state)
            return await agent.decline_tool_call(run_id=run_id, tool_call_id=call, reason=reason, declined_by=user)
        except (*LOST_CLAIM, NotAwaitingThisKind):
            tried = "approved" if approved else "declined"
            # as before the Attempt: a lost decision closes no message that was never recorded (clicked=None)
            await self.answering.lost_claim(replace(attempt, clicked=None, tried=tried))
        except RunNotFound:
            await say(GONE)
        except StoreUnavailable:  # it may have been made all the same (its reply lost): look again
            _made, stream = await self.answering.claimed_after_all(replace(attempt, user=user))
            return stream
        return None

    async def _give(
        self, scope: str, ctx: SlackContext, pending: PendingCall, *, run_id: str, user: str, say: Say
    ) -> str | None:
        """Record the standing grant ``user`` gave approving ``pending`` (``scope`` ``once``: none); what the
        request then says of it ("for this thread, until ..."), or None."""
        grants = self.answering.messages.grants
        if scope == "once" or grants is None or scope not in SCOPE_WORDS:
            return None
        try:
            grant = await grants.give(
                cast(Scope, scope),
                ctx,
                by=user,
                tool_name=pending.tool_name,
                args=pending.args,
                run_id=run_id,
                tool_call_id=pending.tool_call_id,
                rule=approval_payload(pending).policy.get(RULE_NOTE),
            )
        except StoreUnavailable:
            await say("Approved once: I couldn't record the standing grant (storage is unavailable); ask again later.")
            return None
        if grant is None:  # not one of the rule's own approvers (the request was escalated to them)
            await say("Approved once: standing grants are given by the rule's own approvers.")
            return None
        return f"{SCOPE_WORDS[grant.scope]} until {when(grant.expires_at.timestamp())}"

    # --- Decline (a modal with an optional reason) and Details -------------------------------------

    async def open_modal(self, ack: Ack, body: dict[str, Any], context: Any) -> None:
        """Decline and Details (ack side): open a loading modal at once (the trigger lives 3 s)."""
        await self.modal.open_modal(ack, body, context)

    async def on_open_decline(self, body: dict[str, Any], context: Any) -> None:
        """Decline (lazy): the loading modal becomes the reason form, or a notice."""
        await self._fill_modal(body, context, decline=True)

    async def on_open_details(self, body: dict[str, Any], context: Any) -> None:
        """Details (lazy): the loading modal shows the call's full arguments."""
        await self._fill_modal(body, context, decline=False)

    async def _fill_modal(self, body: dict[str, Any], context: Any, *, decline: bool) -> None:
        opened = self.modal.loading_view(context)
        if opened is None:
            return
        view_id, notice = opened
        web = self.answering.web

        clicked = where = Origin.of_action(body)
        if not decline:  # reading needs no decision right, but a details-only request's (below)
            where = Origin(user=where.user, surface="home", team_id=where.team_id)
        found = await self.found_for(body, where, notice) if decline else await self._found_to_read(body, notice)
        if found is None:
            return
        state, ctx, call = found
        check = await self.answering.agent.check(state, call)
        if decline and isinstance(check, Answered):  # decided already: by whom, and that this decline is not taken
            recorded = self.answering.recorded(check, state, call, approval=True)
            await notice(explain(check, where.user, recorded=recorded, tried="declined", approval=True))
            return
        pending = check.pending if isinstance(check, Open) else state.waiting_call(call) or state.pending
        if pending is None or pending.kind != "approval":
            await notice(REQUEST_NOT_OPEN)
            return
        payload = approval_payload(pending)
        if not decline:
            try:
                refused = await self.answering.permissions.details_refusal(
                    ctx, pending, user=clicked.user, where=clicked
                )
            except StoreUnavailable:
                await notice(STORE_DOWN)
                return
            if refused is not None:
                await notice(refused)
                return
            await web.update_view(view_id, modals.notice_modal(details_text(payload), title="Details"))
            return
        if not isinstance(check, Open):
            await notice(REQUEST_NOT_OPEN)
            return
        ref = QuestionRef.of(state.run_id, call)
        meta = self.modal.metadata(
            run_id=state.run_id, call=ref.call, user=where.user, view_id=view_id, asked=pending.suspended_at
        )
        await web.update_view(view_id, modals.decline_modal(decline_question(payload), private_metadata=meta))

    async def _found_to_read(self, body: dict[str, Any], say: Say) -> Found | None:
        """The run, context and call a click names (no decision right needed: reading the details); or None after
        telling the person why not."""
        ref = await button_ref(body, say)
        return await self.answering.find(ref, say) if ref is not None else None

    async def ack_decline(self, ack: Ack, body: dict[str, Any], context: Any) -> None:
        """A submitted decline form (ack side): a form not opened for this person, someone not allowed, or a call
        no longer waiting get an error in the modal; otherwise it closes and :meth:`on_decline` claims it."""
        found = await self._decline_form(body)
        if isinstance(found, str):
            await ack(response_action="errors", errors={modals.DECLINE_INPUT_BLOCK: found})
            return
        context[ACCEPTED_DECLINE] = True
        await ack()

    async def on_decline(self, body: dict[str, Any], context: Any) -> None:
        """A submitted decline form (lazy): claim the decision with the reason given (if any)."""
        if not (context and context.get(ACCEPTED_DECLINE)):
            return
        found = await self._decline_form(body)
        user = str((body.get("user") or {}).get("id") or "")
        if isinstance(found, str):
            await self.answering.web.tell(user, found)
            return
        state, ctx, call = found
        reason = modals.decline_reason(body.get("view") or {})
        where = Origin(user=user, surface="modal", team_id=ctx.team_id)
        await self.decide(state, ctx, call, where=where, approved=False, reason=reason or None)

    async def _decline_form(self, body: dict[str, Any]) -> Found | str:
        opened = await self.open_form(body)
        return opened if isinstance(opened, str) else opened[0]

    async def open_form(self, body: dict[str, Any]) -> tuple[Found, PendingCall] | str:
        """The approval a submitted form (Decline's reason, Edit's arguments) is about and its pending call, if
        the person may still decide it; or what to tell them."""
        user = str((body.get("user") or {}).get("id") or "")
        found = await self.modal.form_question(body)
        if isinstance(found, str):
            return found
        state, ctx, call = found
        where = Origin(user=user, surface="modal", team_id=ctx.team_id)
        refused = await self.answering.permissions.refusal(state, ctx, call, user=user, where=where, expect="approval")
        if refused is not None:
            return refused
        check = await self.answering.agent.check(state, call)
        if not isinstance(check, Open) or check.pending.kind != "approval":
            return REQUEST_NOT_OPEN
        return found, check.pending


ACCEPTED_DECLINE = "decline_accepted"
