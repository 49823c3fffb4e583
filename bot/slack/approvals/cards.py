"""The card of an approval request that still waits, wherever it shows: its thread, its DM and channel copies
(``where``), and each approver's App Home (docs/approvals.md). One place decides what an open request offers, so
that every drawing of it (the first post, a quorum's redraw after an approval or a take-back, an edit's redraw, the
Home inbox) shows the same: who may decide, the quorum's progress (:func:`~bot.slack.render.approvals.quorum_line`:
"1 of 2: approved by @alice"), Edit where the rule lets approvers change arguments, and the standing grants' buttons
the rule allows (:meth:`bot.slack.approvals.grants.StandingGrants.scopes`).
"""

from __future__ import annotations

from typing import Any

from bot.agent.stream import ApprovalPayload
from bot.errors import StoreUnavailable
from bot.slack.approvals.grants import StandingGrants
from bot.slack.context import SlackContext
from bot.slack.questions.approvers import RULE_NOTE, ApproverPolicy
from bot.slack.refs import QuestionRef
from bot.slack.render.approvals import QuorumProgress, approval_blocks, shown_edit
from bot.store.conversations import asked_id
from bot.store.quorum import Quorums, asking_of


class OpenCards:
    """Open approval requests' cards: ``approvers`` (``APPROVERS`` or the policy's rules), ``grants`` (the rules'
    standing grants; None without ``APPROVAL_POLICY``), ``quorums`` (the approvals gathered, read for a drawing
    that doesn't come with its progress: App Home; None: not read)."""

    def __init__(
        self, *, approvers: ApproverPolicy, grants: StandingGrants | None, quorums: Quorums | None = None
    ) -> None:
        self.approvers = approvers
        self.grants = grants
        self.quorums = quorums

    def approvers_of(self, approval: ApprovalPayload, ctx: SlackContext) -> ApproverPolicy:
        """The approvers of ``approval``'s call in ``ctx`` (with those its request was escalated to at its deadline,
        kept in its policy notes)."""
        return self.approvers.for_approval(ctx, approval)

    async def progress(self, run_id: str, approval: ApprovalPayload, ctx: SlackContext) -> QuorumProgress | None:
        """Where ``approval``'s quorum stands (None: its call needs one approval, or no store to read). Raises
        ``StoreUnavailable``."""
        approvers = self.approvers_of(approval, ctx)
        if not approvers.quorum:
            return None
        if self.quorums is None:
            return QuorumProgress(approvers.required)
        asking = asking_of(asked_id(approval.asked_at), approval.args, edits=shown_edit(approval))
        tally = await self.quorums.tally(run_id, approval.tool_call_id, asking)
        return QuorumProgress(approvers.required, tally.approvers)

    async def shown_progress(self, run_id: str, approval: ApprovalPayload, ctx: SlackContext) -> QuorumProgress | None:
        """:meth:`progress` to draw a card with, left at none gathered when Redis can't say (the next change
        redraws it)."""
        try:
            return await self.progress(run_id, approval, ctx)
        except StoreUnavailable:
            approvers = self.approvers_of(approval, ctx)
            return QuorumProgress(approvers.required) if approvers.quorum else None

    def blocks(
        self,
        approval: ApprovalPayload,
        ctx: SlackContext,
        *,
        ref: QuestionRef,
        progress: QuorumProgress | None,
        elsewhere: bool = False,
        decides: bool = True,
        viewer: str | None = None,
        gives_grants: bool = True,
    ) -> list[dict[str, Any]]:
        """The open request's Block Kit (:func:`~bot.slack.render.approvals.approval_blocks`) with ``progress`` (a
        quorum's; None: not a quorum) and every control its rule allows; ``elsewhere``: for a copy outside the run's
        channel (an escalation's), whose approvers line names that channel, and which offers no standing grant (it
        goes to the people the request was escalated to, who approve it once: only the rule's own approvers give
        grants, :meth:`~bot.slack.approvals.grants.StandingGrants.may_give`); ``decides`` False: for one viewer who
        may not decide (no controls but *Details*); ``viewer``: the one person it is drawn for (App Home), whose
        grant buttons say "that thread" / "that channel"; ``gives_grants`` False: that viewer may decide but not
        give a grant (:meth:`gives_grants`). Its requester may withdraw it (Cancel) in its thread and their App
        Home, not in a copy elsewhere."""
        approvers = self.approvers_of(approval, ctx)
        rule = approval.policy.get(RULE_NOTE)
        scopes: tuple[str, ...] = ()
        if self.grants is not None and gives_grants and not elsewhere:
            scopes = tuple(self.grants.scopes(ctx, approval.tool_name, approval.args, rule=rule))
        return approval_blocks(
            approval,
            ref=ref,
            approvers=approvers.describe(ctx, elsewhere=elsewhere),
            quorum=progress,
            editable=bool(approvers.editable) and approval.editable,
            grants=scopes,
            decides=decides,
            viewer=viewer,
            withdrawable=bool(ctx.requester) and not elsewhere and viewer in (None, ctx.requester),
            away=viewer is not None,
        )

    async def gives_grants(self, approval: ApprovalPayload, ctx: SlackContext, user: str) -> bool:
        """Whether ``user`` may give the standing grants ``approval``'s rule allows (one of the rule's own
        approvers, not only a person it was escalated to); False without ``APPROVAL_POLICY``. Raises
        ``StoreUnavailable`` / ``SlackRefused`` (a user group's or channel's members looked up)."""
        if self.grants is None:
            return False
        rule = approval.policy.get(RULE_NOTE)
        return await self.grants.may_give(ctx, approval.tool_name, approval.args, by=user, rule=rule)
