"""Deciding on tool calls from Slack: Approve, Decline (with an optional reason, in a modal) and Details (the call's
full arguments, in a modal). The same path as answers: the bot's own reference in the payload, the run loaded, the
request checked against the run's channel and messages, who may decide (:mod:`bot.slack.questions.permissions`), then
the runtime's check and its exactly-once claim (``Agent.approve_tool_call`` / ``decline_tool_call``). The request
message then says who decided, and once the call ends how it went (ran in N s, or failed).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

from bot.agent.answers import Answered, Open
from bot.agent.approvals import approval_payload
from bot.agent.state import RunState
from bot.agent.stream import AgentStream
from bot.errors import (
    NotAwaitingThisKind,
    RunNotFound,
    StoreUnavailable,
)
from bot.logs import log_context
from bot.slack.context import SlackContext, Where
from bot.slack.questions.answer_modal import LOADING_VIEW, AnswerModal
from bot.slack.questions.answering import LOST_CLAIM, Answering
from bot.slack.questions.attempt import Attempt
from bot.slack.questions.lookup import Found, Say
from bot.slack.questions.notices import GONE, NOT_OPEN, STORE_DOWN, explain
from bot.slack.questions.picks import button_ref
from bot.slack.refs import QuestionRef
from bot.slack.render import modals
from bot.slack.render.approvals import decision_outcome, decline_question, details_text
from bot.slack.replies.thread import Decided

Ack = Callable[..., Awaitable[Any]]


class Approving:
    """Approve / Decline / Details listeners for ``answering``'s agent (who may decide:
    ``answering.permissions``)."""

    def __init__(self, answering: Answering, *, modal: AnswerModal) -> None:
        self.answering = answering
        self.modal = modal

    # --- Approve ---------------------------------------------------------------------------------

    async def on_approve(self, body: dict[str, Any]) -> None:
        """Lazy listener of Approve."""
        where = Where.of_action(body)
        found = await self._found(body, where, self.answering.say_to(where))
        if found is not None:
            state, ctx, call = found
            await self.decide(state, ctx, call, where=where, approved=True, reason=None)

    async def _found(self, body: dict[str, Any], where: Where, say: Say) -> Found | None:
        """The run, context and call a click is about, checked (its message, who may decide:
        :class:`~bot.slack.questions.permissions.Permissions`); or None after telling the person why not."""
        ref = await button_ref(body, say)
        return await self.answering.vet(ref, where, say, expect="approval") if ref is not None else None

    async def decide(
        self, state: RunState, ctx: SlackContext, call: str, *, where: Where, approved: bool, reason: str | None
    ) -> None:
        """Claim the decision on ``call`` (policy already applied) and follow the run it continues."""
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
            await say(NOT_OPEN)
            return
        slot = await self.answering.slot(ctx, say, user=where.user)
        if slot is None:
            return
        async with slot:
            with log_context(run_id=state.run_id, team_id=ctx.team_id, channel_id=ctx.channel_id, user_id=where.user):
                stream = await self._claim(attempt, approved=approved, reason=reason)
                if stream is None:
                    return
                payload = approval_payload(check.pending)
                follower = self.answering.follower
                outcome = decision_outcome(approved=approved, user=where.user, reason=reason)
                if approved:
                    running = f"{outcome} · running…"
                    await follower.close_approval(state.run_id, payload, outcome=running, clicked=clicked, ongoing=True)
                    decided = Decided(tool_call_id=call, payload=payload, outcome=outcome, clicked=clicked)
                    await follower.follow(stream, ctx, decided=decided)
                else:
                    await follower.close_approval(state.run_id, payload, outcome=outcome, clicked=clicked)
                    await follower.follow(stream, ctx)

    async def _claim(self, attempt: Attempt, *, approved: bool, reason: str | None) -> AgentStream | None:
        agent, say = self.answering.agent, attempt.say
        run_id, call, user = attempt.state.run_id, attempt.call, attempt.user
        try:
            if approved:
                return await agent.approve_tool_call(run_id=run_id, tool_call_id=call, approved_by=user)
            return await agent.decline_tool_call(run_id=run_id, tool_call_id=call, reason=reason, declined_by=user)
        except (*LOST_CLAIM, NotAwaitingThisKind):
            tried = "approved" if approved else "declined"
            # as before the Attempt: a lost decision closes no message that was never recorded (clicked=None)
            await self.answering.lost_claim(replace(attempt, clicked=None, tried=tried))
        except RunNotFound:
            await say(GONE)
        except StoreUnavailable:
            await say(STORE_DOWN)
        return None

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
        view_id = context.get(LOADING_VIEW) if context else None
        if not view_id:
            return
        web = self.answering.web

        async def notice(text: str) -> None:
            await web.update_view(view_id, modals.notice_modal(text))

        where = Where.of_action(body)
        if not decline:
            where = Where(user=where.user, surface="home", team_id=where.team_id)  # reading needs no decision right
        found = await self._found(body, where, notice) if decline else await self._found_to_read(body, notice)
        if found is None:
            return
        state, _ctx, call = found
        check = await self.answering.agent.check(state, call)
        if decline and isinstance(check, Answered):  # decided already: by whom, and that this decline is not taken
            recorded = self.answering.recorded(check, state, call, approval=True)
            await notice(explain(check, where.user, recorded=recorded, tried="declined", approval=True))
            return
        pending = check.pending if isinstance(check, Open) else state.pending
        if pending is None or pending.kind != "approval":
            await notice(NOT_OPEN)
            return
        payload = approval_payload(pending)
        if not decline:
            await web.update_view(view_id, modals.notice_modal(details_text(payload), title="Details"))
            return
        if not isinstance(check, Open):
            await notice(NOT_OPEN)
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
        where = Where(user=user, surface="modal", team_id=ctx.team_id)
        await self.decide(state, ctx, call, where=where, approved=False, reason=reason or None)

    async def _decline_form(self, body: dict[str, Any]) -> Found | str:
        user = str((body.get("user") or {}).get("id") or "")
        found = await self.modal.form_question(body)
        if isinstance(found, str):
            return found
        state, ctx, call = found
        where = Where(user=user, surface="modal", team_id=ctx.team_id)
        refused = await self.answering.permissions.refusal(state, ctx, call, user=user, where=where, expect="approval")
        if refused is not None:
            return refused
        check = await self.answering.agent.check(state, call)
        if not isinstance(check, Open) or check.pending.kind != "approval":
            return NOT_OPEN
        return state, ctx, call


ACCEPTED_DECLINE = "decline_accepted"
