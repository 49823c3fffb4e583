"""A batch's **Approve all** (several calls of one turn waiting for approval, :mod:`bot.agent.decisions`): the calls
of the batch still undecided that the clicking person may approve *alone* are approved in one
``Agent.resume(run_id, {tool_call_id: Approve(by=...)})``; a call they may not approve (not among its rule's
approvers), or that needs more than one approval (a quorum is never reached by one person's batch click), is left
to its own request. Each approved call's request then says so; the header says what Approve all did.
"""

from __future__ import annotations

import logging
from typing import Any

from bot.agent.answers import Open, undecided
from bot.agent.approvals import approval_payload
from bot.agent.decisions import Approve
from bot.agent.state import PendingCall, RunState
from bot.errors import NotAwaitingThisKind, RunNotFound, StoreUnavailable
from bot.logs import log_context
from bot.slack.context import Origin, SlackContext
from bot.slack.questions.answering import LOST_CLAIM, Answering
from bot.slack.questions.approvers import ApproverPolicy
from bot.slack.questions.notices import GONE, NOT_HERE, REQUEST_NOT_OPEN, STORE_DOWN
from bot.slack.questions.picks import button_ref
from bot.slack.refs import QuestionRef
from bot.slack.render.approvals import BATCH_WAITS, batch_header_blocks, batch_title, decision_outcome
from bot.slack.replies.thread_writer import Decided
from bot.store.conversations import MessageRef

log = logging.getLogger(__name__)

NONE_ALONE = "There is nothing here you can approve on your own: each call left needs someone else's approval."


def required_of(approvers: ApproverPolicy, ctx: SlackContext, call: PendingCall) -> int:
    """How many distinct approvals ``call`` needs: its request's rule's (:meth:`ApproverPolicy.for_approval`, the
    rule it was asked under; without ``APPROVAL_POLICY``: one)."""
    required: int = approvers.for_approval(ctx, approval_payload(call)).required
    return required


def approved_earlier(state: RunState, *, but: str) -> list[Decided]:
    """The calls of ``state``'s batch approved earlier this round (all but ``but``), each to show how it went once
    the batch goes on (:meth:`~bot.slack.replies.thread_writer.ThreadWriter.follow`'s ``batch``)."""
    pending = state.pending
    if pending is None or not pending.batch:
        return []
    out = []
    for call in pending.calls():
        answer = state.answer_for(call.tool_call_id)
        fresh = answer is not None and answer.answered_at >= pending.suspended_at
        if call.tool_call_id != but and fresh and answer is not None and answer.resume_data == "approved":
            outcome = decision_outcome(approved=True, user=answer.answered_by or "")
            out.append(Decided(tool_call_id=call.tool_call_id, payload=approval_payload(call), outcome=outcome))
    return out


class ApprovingAll:
    """The Approve all listener for ``answering``'s agent (who may decide: ``answering.permissions``)."""

    def __init__(self, answering: Answering) -> None:
        self.answering = answering

    async def alone(self, state: RunState, ctx: SlackContext, *, where: Origin) -> list[PendingCall]:
        """The undecided calls of ``state``'s batch ``where.user`` may approve alone (in order), each still open (a
        call past its own deadline is left to it: the scheduler declines or escalates it)."""
        permissions = self.answering.permissions
        out = []
        for call in undecided(state):
            if call.kind != "approval" or required_of(permissions.approvers, ctx, call) > 1:
                continue
            if not isinstance(await self.answering.agent.check(state, call.tool_call_id), Open):
                continue
            refused = await permissions.refusal(
                state, ctx, call.tool_call_id, user=where.user, where=where, expect="approval"
            )
            if refused is None:
                out.append(call)
        return out

    async def on_approve_all(self, body: dict[str, Any]) -> None:
        """Lazy listener of Approve all (the ack was sent already)."""
        where = Origin.of_action(body)
        say = self.answering.say_to(where)
        ref = await button_ref(body, say)
        if ref is None:
            return
        loaded = await self.answering.lookup.load(ref.run_id, say)
        if loaded is None:
            return
        state, ctx = loaded
        if where.channel_id != ctx.channel_id or (where.thread_ts and where.thread_ts != ctx.thread_ts):
            await say(NOT_HERE)  # the header lives in the run's thread only
            return
        if state.pending is None or not state.pending.batch or not ref.matches(state.pending.tool_call_id):
            await say(REQUEST_NOT_OPEN)
            return
        try:
            calls = await self.alone(state, ctx, where=where)
        except StoreUnavailable:
            await say(STORE_DOWN)
            return
        if not calls:
            await say(NONE_ALONE if undecided(state) else REQUEST_NOT_OPEN)
            return
        slot = await self.answering.slot(ctx, say, user=where.user)
        if slot is None:
            return
        try:
            with log_context(run_id=state.run_id, team_id=ctx.team_id, channel_id=ctx.channel_id, user_id=where.user):
                await self._approve(state, ctx, calls, where=where, body=body)
        finally:
            await slot.release()

    async def _header(self, where: Origin, ctx: SlackContext, head: QuestionRef) -> MessageRef | None:
        """The message Approve all was clicked on (the click's ``container``: the payload's word) when it is this
        batch's header: in the run's thread, and showing the header's block when read back from Slack (the header
        is not recorded); else None. A forged ``container`` made the bot rewrite any of its messages in the channel
        with the header (a break-it pass)."""
        clicked = where.message_in(ctx)
        if clicked is None:
            return None
        message = await self.answering.web.message(clicked.channel_id, clicked.ts)
        if message is not None and head.shown_in(message, part="batch-head"):
            return clicked
        log.warning("run %s: the message Approve all was clicked on is not its header; left as it is", head.run_id)
        return None

    async def _approve(
        self, state: RunState, ctx: SlackContext, calls: list[PendingCall], *, where: Origin, body: dict[str, Any]
    ) -> None:
        say = self.answering.say_to(where, ctx)
        agent = self.answering.agent
        try:
            stream = await agent.resume(
                state.run_id, {c.tool_call_id: Approve(by=where.user) for c in calls}, loaded=state
            )
        except (*LOST_CLAIM, NotAwaitingThisKind):
            await say("Some of these calls were decided meanwhile; decide the rest one by one.")
            return
        except RunNotFound:
            await say(GONE)
            return
        except StoreUnavailable:
            await say(STORE_DOWN)
            return
        left = [c for c in undecided(state) if c not in calls]
        outcome = decision_outcome(approved=True, user=where.user) + " (Approve all)"
        shown = outcome + (f" · {BATCH_WAITS}" if left else " · running…")
        writer, messages = self.answering.writer, self.answering.messages
        for call in calls:
            await messages.close_approval(
                state.run_id, approval_payload(call), ctx=ctx, outcome=shown, ongoing=not left
            )
        mine = [Decided(tool_call_id=c.tool_call_id, payload=approval_payload(c), outcome=outcome) for c in calls]
        earlier = [d for d in approved_earlier(state, but="") if d.tool_call_id not in {c.tool_call_id for c in calls}]
        assert state.pending is not None
        note = f"<@{where.user}> approved {len(calls)} of {len(state.pending.calls())} with Approve all"
        note += f"; {len(left)} still wait{'s' if len(left) == 1 else ''} for a decision." if left else "."
        head = QuestionRef.of(state.run_id, state.pending.tool_call_id)
        if (header := await self._header(where, ctx, head)) is not None:
            payload = approval_payload(state.pending)
            if left:
                blocks = batch_header_blocks(payload, ref=head, note=note)
            else:
                blocks = [b for b in batch_header_blocks(payload, ref=head, note=note) if b["type"] != "actions"]
            await self.answering.web.update(header.channel_id, header.ts, text=batch_title(payload), blocks=blocks)
        await writer.follow(stream, ctx, batch=[] if left else [*earlier, *mine])
