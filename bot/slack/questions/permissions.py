"""Who may answer a question or decide an approval request: :class:`Permissions`, the one place that decides it.

Every surface asks it, given the stored run, the call and who is asking: a click on a question's or an approval's
message (in its thread, an ephemeral, an escalated copy), App Home, the answer modal and the decline modal (when
opened and again when submitted), a typed reply or a follow-up mention in the thread. An outside agent's questions
and approval requests (the MCP server, :mod:`bot.mcp_server`) are answered on these same surfaces.

The rule (README, "Who may answer and approve"):

- **An approval request** (``pending.kind == "approval"``) is decided by ``APPROVERS`` only
  (:class:`~bot.slack.questions.approvers.ApproverPolicy`): the requester, anyone in the run's channel, or the people
  and user groups named. Escalation never widens it: the escalation targets are reminded, they do not decide (unless
  they are approvers themselves).
- **A question** is answered by ``ASK_ANSWERERS``: its requester (a run asked for nobody in particular is anyone's
  in its channel), or ``channel``: anyone in the run's channel. Once it was escalated (``ASK_ESCALATE_TO``), its
  escalation targets may answer it too only with ``ASK_ESCALATE_ANSWERS=true``; by default they are reminded only.
- "In the run's channel" is judged by where the request comes from: a request from a channel surface (a message,
  an ephemeral, a thread reply) must come from the run's channel; an escalated copy elsewhere, or a DM, is not it.
  App Home and modals have no channel: a modal is opened only after this same check.

The kind is read from the stored run (the call it waits on), not from the surface: a click crafted on the question
path for an approval's reference gets the approvers' rule.
"""

from __future__ import annotations

import logging
from typing import Literal

from bot.agent.approvals import approval_payload, policy_notes
from bot.agent.state import PendingCall, RunState
from bot.config import Answerers
from bot.slack.context import Origin, SlackContext
from bot.slack.questions.approvers import ApproverPolicy
from bot.store.conversations import ConversationIndex

log = logging.getLogger(__name__)

Kind = Literal["question", "approval"]


def kind_of(state: RunState, call: str, *, expect: Kind) -> Kind:
    """What ``call`` of ``state`` is: the stored pending call's kind when it is that call, else ``expect`` (a call
    no longer waiting: the surface's own kind; nothing can be claimed on it anyway)."""
    pending = state.waiting_call(call)  # the pending call, or one of its batch
    if pending is not None:
        return pending.kind
    return expect


class Permissions:
    """Who may answer and decide: ``answerers`` (``ASK_ANSWERERS``), ``approvers`` (``APPROVERS``),
    ``escalate_answers`` (``ASK_ESCALATE_ANSWERS``: escalation targets may answer questions, never approvals);
    escalations are read from ``index``."""

    def __init__(
        self,
        *,
        answerers: Answerers,
        approvers: ApproverPolicy,
        index: ConversationIndex,
        escalate_answers: bool = False,
    ) -> None:
        self.answerers: Answerers = answerers
        self.approvers = approvers
        self.index = index
        self.escalate_answers = escalate_answers

    async def refusal(
        self,
        state: RunState,
        ctx: SlackContext,
        call: str,
        *,
        user: str,
        where: Origin | None = None,
        expect: Kind = "question",
    ) -> str | None:
        """None when ``user`` may answer (or decide) call ``call`` of ``state`` from ``where`` (None: a surface
        with no channel, e.g. a modal's submission); otherwise what to tell them. ``expect``: the surface's kind,
        used only for a call no longer pending. Raises ``StoreUnavailable`` (reading an escalation)."""
        kind = kind_of(state, call, expect=expect)
        if kind == "approval":
            approvers = self.approvers
            pending = state.waiting_call(call)
            if pending is not None:  # APPROVAL_POLICY: the call's rule decides (a batch: each call's own)
                approvers = approvers.for_approval(ctx, approval_payload(pending))
            elif approvers.policy is not None:  # decided already: nothing can be claimed; the caller says by whom
                return None
            if await approvers.admits(ctx, user, where=where):
                return None
            return approvers.refusal(ctx, user)
        if self.is_answerer(ctx, user, where=where):
            return None
        if self.escalate_answers and await self._escalated_to(user, run_id=state.run_id, call=call, where=where):
            return None
        return self.question_refusal(ctx)

    async def details_refusal(
        self, ctx: SlackContext, pending: PendingCall, *, user: str, where: Origin | None = None
    ) -> str | None:
        """None when ``user`` may read the Details of approval ``pending`` from ``where``; otherwise what to tell
        them. A request whose rule says ``arguments: details-only`` (its policy notes) keeps its arguments to
        the requester and the people who may decide it (its rule's approvers, and those it was escalated to);
        any other's are in the channel already, so anyone may read them."""
        notes = policy_notes(pending)
        if notes.get("arguments") != "details-only" or (ctx.requester and user == ctx.requester):
            return None
        approvers = self.approvers.for_approval(ctx, approval_payload(pending))  # the rule it was asked under
        if await approvers.admits(ctx, user, where=where):
            return None
        return (
            "Only the people who can approve or decline this request (and who asked for it) can read its Details:"
            " the approval policy keeps its arguments out of the channel."
        )

    def is_answerer(self, ctx: SlackContext, user: str, *, where: Origin | None = None) -> bool:
        """Whether ``user`` is one of the question's own answerers (``ASK_ANSWERERS``, escalation aside): the
        requester, or for ``channel`` (or a run with no requester) anyone whose request comes from the run's
        channel. Also who may press Retry on a failed run."""
        if self.answerers == "requester" and ctx.requester:
            return user == ctx.requester
        return self._from_run_channel(where, ctx, "channel")

    def stop_refusal(self, ctx: SlackContext, user: str, *, where: Origin | None = None) -> str | None:
        """None when ``user`` may stop the run of ``ctx`` (saying ``stop``, Slack's Stop of its agent session): who
        may answer its questions (:meth:`is_answerer`: the requester, or with ``ASK_ANSWERERS=channel`` anyone in
        its channel); else what they are told."""
        if self.is_answerer(ctx, user, where=where):
            return None
        if self.answerers == "requester" and ctx.requester:
            return f"Only <@{ctx.requester}> can stop this."
        return f"Only people in <#{ctx.channel_id}> can stop this."

    def question_refusal(self, ctx: SlackContext) -> str:
        """What someone not allowed to answer a question of ``ctx`` is told."""
        if self.answerers == "requester" and ctx.requester:
            return f"Only <@{ctx.requester}> can answer this question."
        return f"Only people in <#{ctx.channel_id}> can answer this question."

    @staticmethod
    def _from_run_channel(where: Origin | None, ctx: SlackContext, spec: str) -> bool:
        """For a channel-wide rule (``spec == "channel"``, or a run with no requester): the request comes from the
        run's channel, or from a surface with no channel (App Home, a modal). Other rules: True."""
        if spec != "channel" and (spec != "requester" or ctx.requester):
            return True
        return where is None or where.channel_id is None or where.channel_id == ctx.channel_id

    async def _escalated_to(self, user: str, *, run_id: str, call: str, where: Origin | None) -> bool:
        """Whether question ``call`` was escalated to ``user``, or to the channel the request comes from (the
        person is then remembered, so their modal's submission, which has no channel, passes too). Raises
        ``StoreUnavailable``."""
        escalated = await self.index.escalated(run_id, call)
        if user in escalated:
            return True
        channel = where.channel_id if where is not None else None
        if channel and channel in escalated:
            await self.index.escalate(run_id, key=call, to=[user])
            return True
        return False

    def escalation_answers(self, kind: Kind) -> bool:
        """Whether the escalation targets of a call of ``kind`` may answer it (a question, with
        ``ASK_ESCALATE_ANSWERS=true``; never an approval)."""
        return kind == "question" and self.escalate_answers
