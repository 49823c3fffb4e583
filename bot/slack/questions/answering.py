"""Taking answers from Slack: clicks, menu picks, Submit, the answer modal, typed replies, and Retry.

Every path runs the same way: read the question reference the bot itself put in the payload (block_id / value,
:mod:`bot.slack.refs`), load the run, check that the request comes from the run's channel (and thread, and one of
the messages the bot posted for that question), apply the answer policy (who may answer), then ask the runtime
whether the run can take the answer (:meth:`bot.agent.Agent.check_answer`, the one place that decides) and render
what it says. Messages are updated from the stored question, never from the payload.

Who may answer or decide is :class:`bot.slack.questions.permissions.Permissions`'s to say, for every surface. Refusals
reach the person on the surface they used (:meth:`SlackWeb.tell`).

The answer modal's flow is in :mod:`bot.slack.questions.answer_modal`; it ends in :meth:`Answering.take` like the
others.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Any

from bot.agent import Agent
from bot.agent.answers import AnswerCheck, Answered, Expired, Open, undecided
from bot.agent.ask_user import AskUserPayload
from bot.agent.forms import FormReply
from bot.agent.state import PendingCall, ResumeData, RunState
from bot.agent.stream import AgentStream
from bot.agent.text import is_blank
from bot.config import Answerers
from bot.errors import (
    AnswerError,
    QuestionExpired,
    RunAlreadyResumed,
    RunConflict,
    RunLimitReached,
    RunNotFound,
    RunNotResumable,
    SlackRefused,
    StoreCorrupt,
    StoreUnavailable,
    ToolCallNotPending,
)
from bot.logs import log_context
from bot.ops import audit
from bot.slack.context import REDELIVERED, Origin, SlackContext
from bot.slack.questions.attempt import Attempt
from bot.slack.questions.lookup import Found, QuestionLookup, Say
from bot.slack.questions.messages import QuestionMessages
from bot.slack.questions.notices import (
    EXPIRED_OUTCOME,
    GONE,
    MULTI_HINT,
    NOT_OPEN,
    STORE_DOWN,
    STORE_UNKNOWN,
    UNKNOWN_BUTTON,
    explain,
)
from bot.slack.questions.permissions import Kind, Permissions
from bot.slack.questions.picks import Pick, asked_question, label, resume_data, said, ticked
from bot.slack.questions.typed_answers import labels_in_text
from bot.slack.refs import BadReference, QuestionRef, parse_index
from bot.slack.render import blocks as bk
from bot.slack.render.approvals import decision_outcome
from bot.slack.replies.thread_writer import Decided, ThreadWriter
from bot.slack.run_slots import RunSlots, Slot, Taking
from bot.slack.transport.web_api import SlackWeb
from bot.store.batch import Batch
from bot.store.conversations import ConversationIndex, MessageRef

log = logging.getLogger(__name__)

UNKNOWN_CLAIM_WAIT = 15.0
"""Seconds a claim that met a Redis failure waits for Redis to say whether it was made (:meth:`Answering.settle`)."""
LOST_CLAIM = (RunAlreadyResumed, QuestionExpired, RunNotResumable, RunConflict, ToolCallNotPending)
"""What a claim raises when it lost to another write; :meth:`Answering.lost_claim` says what the run shows now."""


def answered_line(quoted: str, *, user: str) -> str:
    """The mrkdwn line a question's messages show once ``user`` answered it: ``quoted`` is the answer as
    :func:`bot.slack.questions.picks.said` quotes it (safe, in bold)."""
    return f":white_check_mark: <@{user}> answered: {quoted}"


class Answering:
    """Takes answers for ``agent``'s runs; see the module docstring."""

    def __init__(
        self,
        *,
        agent: Agent,
        index: ConversationIndex,
        web: SlackWeb,
        writer: ThreadWriter,
        messages: QuestionMessages,
        answerers: Answerers,
        gate: RunSlots,
        permissions: Permissions,
    ) -> None:
        self.agent = agent
        self.gate = gate
        self.index = index
        self.web = web
        self.writer = writer
        self.messages = messages  # the questions' messages: posted, redrawn, closed
        self.answerers: Answerers = answerers
        self.permissions = permissions  # who may answer and decide: the one place
        self.lookup = QuestionLookup(agent=agent, index=index, permissions=permissions)  # finds what a request names

    # --- finding questions (the lookup's) --------------------------------------------------------------

    async def find(self, ref: QuestionRef, say: Say, *, where: Origin | None = None) -> Found | None:
        """The run, context and question ``ref`` names: :meth:`QuestionLookup.find
        <bot.slack.questions.lookup.QuestionLookup.find>` (a click from the App Home renews it, as :meth:`vet`)."""
        batch = Batch(self.index.client)
        if where is not None:
            self._seen_in_home(batch, where)
        return await self.lookup.find(ref, say, where=where, beside=batch)

    async def find_or_reason(self, ref: QuestionRef) -> Found | str:
        """The question ``ref`` names, or what the person would be told: :meth:`QuestionLookup.find_or_reason
        <bot.slack.questions.lookup.QuestionLookup.find_or_reason>`."""
        return await self.lookup.find_or_reason(ref)

    async def vet(self, ref: QuestionRef, where: Origin, say: Say, *, expect: Kind = "question") -> Found | None:
        """The question ``ref`` names, if ``where.user`` may answer or decide it: :meth:`QuestionLookup.vet
        <bot.slack.questions.lookup.QuestionLookup.vet>`."""
        batch = Batch(self.index.client)  # the run's load's own (QuestionLookup.find makes one when given none)
        self._seen_in_home(batch, where)
        return await self.lookup.vet(ref, where, say, expect=expect, beside=batch)

    def _seen_in_home(self, batch: Batch, where: Origin) -> None:
        """A click from the App Home renews its watched mark (:meth:`Home.queue_seen`), in ``batch``; nothing for
        any other surface."""
        if where.surface == "home" and self.messages.home is not None and where.team_id:
            self.messages.home.queue_seen(batch, where.team_id, where.user)

    def say_to(self, where: Origin, ctx: SlackContext | None = None) -> Say:
        """Tell ``where.user`` privately, on the surface they used (see :meth:`SlackWeb.tell`); a modal's answers go
        to the run's thread."""
        channel, thread = where.channel_id, where.thread_ts
        if where.surface == "modal" and ctx is not None:
            channel, thread = ctx.channel_id, ctx.thread_ts

        async def say(text: str) -> None:
            await self.web.tell(where.user, text, channel=channel, thread_ts=thread)

        return say

    # --- clicks: option buttons, menus, Submit ---------------------------------------------------

    async def on_click(self, body: dict[str, Any]) -> None:
        """Lazy listener of option buttons, the single-choice menu, Submit and a form question's Decline (the ack
        was sent already)."""
        where = Origin.of_action(body)
        say = self.say_to(where)
        action = (body.get("actions") or [{}])[0]
        action_id = str(action.get("action_id", ""))
        try:
            if action_id == bk.ACT_SELECT:
                ref, _ = QuestionRef.from_block_id(str(action.get("block_id", "")))
                index = parse_index(str((action.get("selected_option") or {}).get("value", "")))
                pick: Pick = lambda p: label(p, index)  # noqa: E731
            elif action_id == bk.ACT_FORM_DECLINE:
                ref, _ = QuestionRef.from_value(str(action.get("value", "")))
                pick = lambda _p: FormReply(action="decline")  # noqa: E731
            elif action_id == bk.ACT_SUBMIT:
                ref, _ = QuestionRef.from_value(str(action.get("value", "")))
                picked = ticked(body, ref)
                if not picked:
                    await say("Select at least one option, then Submit.")
                    return
                pick = lambda p: [label(p, parse_index(v)) for v in picked]  # noqa: E731
            else:
                ref, index = QuestionRef.from_value(str(action.get("value", "")))
                pick = lambda p: label(p, index)  # noqa: E731
        except BadReference:
            await say(UNKNOWN_BUTTON)
            return
        with log_context(run_id=ref.run_id, team_id=where.team_id, channel_id=where.channel_id, user_id=where.user):
            # the clicker's run slot is asked for with the run's load (one round trip): given back unused when the
            # answer can't be taken
            batch = Batch(self.index.client)
            taking = self.gate.queue_enter(batch, team_id=where.team_id, user=where.user) if where.team_id else None
            self._seen_in_home(batch, where)
            try:
                found = await self.lookup.vet(ref, where, say, beside=batch)
                if found is not None:
                    await self.take(Attempt.of(found, where=where, say=say), pick=pick, taking=taking)
            finally:
                if taking is not None:
                    await taking.drop()  # nothing when the answer used it

    async def answer_typed(self, state: RunState, ctx: SlackContext, where: Origin, text: str) -> None:
        """A typed reply to the run's open question (the caller applied the policy): the text itself, or for
        multi select the options it names."""
        pending = state.pending
        if pending is None or is_blank(text):
            return
        say = self.say_to(where)
        if pending.kind == "approval":  # decided by its buttons only: a reply is not a decision
            await say("Use the Approve or Decline button of the request above.")
            return
        payload = AskUserPayload.model_validate(pending.suspend_payload)
        answer: ResumeData = text
        if payload.selection_mode == "multi_select":
            picked = labels_in_text(text, payload.labels)
            if picked is None:
                await say(MULTI_HINT)
                return
            answer = picked
        found = (state, ctx, pending.tool_call_id)
        await self.take(Attempt.of(found, where=where, say=say), pick=lambda _p: answer)

    # --- the claim -------------------------------------------------------------------------------

    async def take(self, attempt: Attempt, *, pick: Pick, taking: Taking | None = None) -> None:
        """Claim the answer ``pick`` picks in ``attempt`` (policy already applied); on success update the question's
        messages (``attempt.clicked`` among them) and follow the resumed run (in a run slot: past the limits
        nothing is taken). ``taking``: the answerer's slot, asked for already (:meth:`RunSlots.queue_enter`; the
        caller drops it when it is not used)."""
        check = await self.agent.check(attempt.state, attempt.call)
        if self.own_earlier_claim(check, attempt.user):
            if taking is not None:
                await taking.drop()  # the run continued here takes its requester's slot
            await self.finish_own_claim(attempt)
            return
        if not isinstance(check, Open):
            await self.not_open(check, replace(attempt, tried=self.tried(attempt.state, attempt.call, pick)))
            return
        if check.pending.kind != "question":  # an approval is decided by Approve / Decline, never answered
            await attempt.say(NOT_OPEN)
            return
        # the answerer's request makes it work
        slot = await self.slot(attempt.ctx, attempt.say, user=attempt.user, run_id=attempt.state.run_id, taking=taking)
        if slot is None:
            return
        async with slot:
            await self._claim(attempt, check.pending, pick=pick)

    async def _claim(self, attempt: Attempt, pending: PendingCall, *, pick: Pick) -> None:
        payload = AskUserPayload.model_validate(pending.suspend_payload)
        try:
            data = resume_data(payload, pick(payload))
        except AnswerError as exc:
            await attempt.say(f"I couldn't take that answer: {exc}")
            return

        async def resume() -> AgentStream:
            return await self.agent.resume_stream(
                data,
                run_id=attempt.state.run_id,
                tool_call_id=attempt.call,
                answered_by=attempt.user,
                loaded=attempt.state,
            )

        tried = said(payload, data, allow_user_mentions=self.writer.allow_user_mentions)  # quoted once, for both
        outcome = answered_line(tried, user=attempt.user)
        await self.settle(replace(attempt, tried=tried), pending, claim=resume, outcome=outcome)

    async def settle(
        self,
        attempt: Attempt,
        pending: PendingCall,
        *,
        claim: Callable[[], Awaitable[AgentStream]],
        outcome: str,
        summary: str = "answered",
        batch: Sequence[Decided] = (),
    ) -> None:
        """Make ``claim`` (an answer, a withdrawal: ``attempt``'s) on ``pending``; then close its messages with
        ``outcome`` (mrkdwn; ``summary`` its notification suffix), ``attempt.clicked`` among them even if it was
        never recorded, and follow the run (``batch``: the calls of its approval batch approved earlier, each card
        then saying how its call went: :meth:`ThreadWriter.follow
        <bot.slack.replies.thread_writer.ThreadWriter.follow>`). A claim that can't be made is explained to
        ``attempt.user`` instead (:meth:`lost_claim`)."""
        say = attempt.say
        stream: AgentStream | None
        try:
            stream = await claim()
        except AnswerError as exc:
            await say(f"I couldn't take that answer: {exc}")
            return
        except LOST_CLAIM:
            await self.lost_claim(attempt)
            return
        except RunNotFound:
            await say(GONE)
            return
        except StoreUnavailable:  # the claim may have been applied all the same (its reply lost): look again
            made, stream = await self.claimed_after_all(attempt)
            if not made:
                return
        await self.messages.close_pending(
            attempt.state.run_id,
            pending,
            outcome=outcome,
            summary=summary,
            clicked=attempt.clicked,
            ctx=attempt.ctx,
            state=attempt.state,  # a withdrawn request of a batch: the rest of it is withdrawn with it
        )
        if attempt.from_home:
            await self._home_now(attempt)
        if stream is not None:  # None: the claim was made, and its run goes on elsewhere
            await self.writer.follow(stream, attempt.ctx, batch=batch)

    async def _home_now(self, attempt: Attempt) -> None:
        """An answer or decision taken from ``attempt.user``'s App Home: their Home published again now, before the
        run goes on, so what they clicked leaves "Waiting for you" at once (a new user's trial: it stayed, its buttons
        live, for the scheduled refresh's 2 to 3 s). Where Redis or Slack fails, the scheduled refresh still comes."""
        home = self.messages.home
        if home is None or not attempt.ctx.team_id:
            return
        try:
            await home.publish(attempt.ctx.team_id, attempt.user)
        except (StoreUnavailable, SlackRefused) as exc:
            log.info("%s's Home not published at once (%s); its scheduled refresh follows", attempt.user, exc)
        except Exception:  # the network, a timeout, a bug: never in the way of the run going on (a break-it pass)
            log.exception("%s's Home not published at once; its scheduled refresh follows", attempt.user)

    async def claimed_after_all(self, attempt: Attempt) -> tuple[bool, AgentStream | None]:
        """Redis failed while ``attempt``'s claim (an answer, a decision, a withdrawal) was sent: it may or may not
        have been applied. Read the run again as Redis comes back (:meth:`read_again`): ``(True, its stream)`` when
        the claim was made (the call holds an answer by ``attempt.user``, given since it was asked) and nobody drives
        the run (this process holds its lease: the stream goes on from where the claim left it, on the caller's run
        slot), ``(True, None)`` when made and another process went on with it; ``(False, None)`` after telling the
        person: not made ("nothing was recorded"), Redis still down (not known yet), the run gone."""
        run_id, call, say = attempt.state.run_id, attempt.call, attempt.say
        try:
            state = await self.read_again(run_id)
        except StoreUnavailable:
            await say(STORE_UNKNOWN)
            return False, None
        except StoreCorrupt:
            state = None
        if state is None:
            await say(GONE)
            return False, None
        answer = state.answer_for(call)
        asked = attempt.state.waiting_call(call)  # this asking (a tool call may ask more than once)
        since = asked.suspended_at if asked is not None else None
        if answer is None or answer.answered_by != attempt.user or (since is not None and answer.answered_at < since):
            await say(STORE_DOWN)
            return False, None
        log.info("run %s: a claim whose reply was lost in an outage was made; going on with it", run_id)
        try:
            return True, await self.take_over(state)
        except StoreUnavailable:  # Redis failed again: the run's next touch goes on with it
            return True, None

    async def take_over(self, state: RunState) -> AgentStream | None:
        """Run ``state`` going on from where it was left, when no live process drives it (:meth:`Agent.is_orphaned
        <bot.agent.Agent.is_orphaned>`: this process holds the lease of a write whose reply was lost); None when
        another process drives it or it went on meanwhile. Raises ``StoreUnavailable``."""
        try:
            if await self.agent.is_orphaned(state):
                return await self.agent.retry_stream(run_id=state.run_id)
        except (RunNotResumable, RunNotFound, StoreCorrupt):
            pass
        return None

    async def read_again(self, run_id: str) -> RunState | None:
        """Run ``run_id`` as stored, read again after a write met a Redis failure (it may have been applied): each
        second while Redis fails, for at most :data:`UNKNOWN_CLAIM_WAIT` seconds; None when there is no such run.
        Raises ``StoreUnavailable`` (Redis still down) and ``StoreCorrupt``."""
        until = time.monotonic() + UNKNOWN_CLAIM_WAIT
        while True:
            try:
                return await self.agent.get_run(run_id)
            except RunNotFound:
                return None
            except StoreUnavailable:
                if time.monotonic() >= until:
                    raise
                await asyncio.sleep(1.0)

    async def slot(
        self,
        ctx: SlackContext,
        say: Say,
        *,
        user: str | None = None,
        run_id: str | None = None,
        taking: Taking | None = None,
    ) -> Slot | None:
        """A run slot charged to ``user`` (default: ``ctx``'s requester), whose request makes the run work, or None
        after telling the person why not (the limits, or the store down); ``run_id``: the run it is for
        (:meth:`Slot.bind`: given back with the save that ends its segment); ``taking``: that slot asked for
        already (:meth:`RunSlots.queue_enter`), used when it is the same person's in ``ctx``'s team."""
        person = f"{ctx.team_id}:{user or ctx.requester}"
        try:
            if taking is not None and not taking.settled and taking.person == person:
                slot = await taking.take()
            else:
                slot = await self.gate.enter(team_id=ctx.team_id, user=user or ctx.requester)
        except RunLimitReached as refused:
            await say(refused.notice)
            return None
        except StoreUnavailable:
            await say(STORE_DOWN)
            return None
        if run_id is not None:
            slot.bind(run_id)
        return slot

    async def lost_claim(self, attempt: Attempt) -> None:
        """After ``attempt``'s claim lost (someone answered first, it expired, the run moved on): tell its person
        what the stored run says now (see :meth:`not_open`)."""
        loaded = await self.lookup.load(attempt.state.run_id, attempt.say)
        if loaded is None:
            return
        now = replace(attempt, state=loaded[0])  # the run as stored now
        check = await self.agent.check(now.state, now.call)
        if self.own_earlier_claim(check, now.user):
            await self.finish_own_claim(now)
            return
        if isinstance(check, Open):  # a concurrent write that was not an answer: nothing taken
            await now.say("Someone else changed this conversation at the same moment; please try again.")
        else:
            await self.not_open(check, now)

    @staticmethod
    def own_earlier_claim(check: AnswerCheck, user: str) -> bool:
        """Whether an answer or decision job finds its own earlier claim: it is redelivered (its first delivery's
        worker died, :data:`bot.slack.context.REDELIVERED`) and the call holds ``user``'s answer. (A second
        click by the same person is its own job, not a redelivery: still a duplicate.)"""
        return REDELIVERED.get() and isinstance(check, Answered) and check.answer.answered_by == user

    async def finish_own_claim(self, attempt: Attempt) -> None:
        """Do what the first delivery of ``attempt``'s claim did not live to do: nothing to tell or count; close the
        question's messages (``attempt.clicked`` among them) while the run still holds that answer unused (its
        worker died before the run went on), then continue the run if nobody drives it."""
        state, ctx, call, clicked = attempt.state, attempt.ctx, attempt.call, attempt.clicked
        pending = state.pending
        answer = state.answer_for(call)
        if pending is not None and pending.tool_call_id == call and pending.resume is not None and answer:
            if pending.kind == "approval":
                approved = answer.resume_data == "approved"
                outcome = decision_outcome(approved=approved, user=answer.answered_by or "", reason=answer.reason)
            else:
                payload = AskUserPayload.model_validate(pending.suspend_payload)
                outcome = self.answered_outcome(payload, answer.resume_data, user=answer.answered_by or "")
            await self.messages.close_pending(
                state.run_id, pending, outcome=outcome, summary="answered", clicked=clicked, ctx=ctx
            )
        await self.continue_orphan(state, ctx, wait=True)  # the dead worker's lease may still stand

    def answered_outcome(self, payload: AskUserPayload, data: ResumeData, *, user: str) -> str:
        """The mrkdwn line a question's messages show once ``user`` answered it with ``data``
        (:func:`answered_line`)."""
        return answered_line(said(payload, data, allow_user_mentions=self.writer.allow_user_mentions), user=user)

    async def not_open(self, check: AnswerCheck, attempt: Attempt) -> None:
        """Tell ``attempt.user`` why the question can't take their attempt (``check``: what the runtime said), and do
        what that outcome needs: close an expired question's messages (``attempt.clicked`` among them), or continue
        a run whose answer is recorded but that nobody drives. The refusal is audited (``attempt.kind``:
        ``approval`` for a decision, when the call is no longer pending to tell). An answered question's notice
        says what was recorded, by whom, and whether ``attempt.tried`` was
        (:func:`bot.slack.questions.notices.explain`)."""
        state, call, user, kind = attempt.state, attempt.call, attempt.user, attempt.kind
        if isinstance(check, Answered):
            audit.duplicate(state, call, user=user, kind=kind)
        else:
            reason: audit.RefusalReason = "expired" if isinstance(check, Expired) else "closed"
            audit.refused(state, call, user=user, reason=reason, kind=kind)
        recorded = self.recorded(check, state, call, approval=kind == "approval")
        await attempt.say(explain(check, user, recorded=recorded, tried=attempt.tried, approval=kind == "approval"))
        if isinstance(check, Expired):
            await self.expire(state, call, clicked=attempt.clicked)
        elif isinstance(check, Answered):
            await self.continue_orphan(state, attempt.ctx)

    def recorded(self, check: AnswerCheck, state: RunState, call: str, *, approval: bool) -> str | None:
        """The answer recorded on ``call`` as the notices quote it (:func:`bot.slack.questions.picks.said`; for an
        approval ``"approved"`` / ``"declined"``); None when ``check`` holds no person's answer."""
        if not isinstance(check, Answered) or check.answer.outcome != "answer":
            return None
        data = check.answer.resume_data
        if approval:
            return "approved" if data == "approved" else "declined"
        allow = self.writer.allow_user_mentions
        return said(asked_question(state, call), data, allow_user_mentions=allow)

    def tried(self, state: RunState, call: str, pick: Pick) -> str | None:
        """What ``pick`` picks on question ``call`` of ``state`` (an answered one's, read from the run), quoted as
        the notices quote answers; None when it can't be told (the question is not readable, the pick is not
        one of its options)."""
        payload = asked_question(state, call)
        if payload is None:
            return None
        try:
            return said(payload, pick(payload), allow_user_mentions=self.writer.allow_user_mentions)
        except (AnswerError, BadReference):
            return None

    async def expire(
        self, state: RunState, call: str, *, clicked: MessageRef | None = None, whole: bool = False
    ) -> RunState:
        """Close question ``call`` of ``state`` as expired (stored status and its messages, ``clicked`` among them
        even if never recorded). A call of a batch of approvals closes alone while another call of it waits for a
        later deadline, unless ``whole`` (its run closed at the deadline: every call of it still undecided closes
        too). Raises nothing: a store outage leaves the messages as they are."""
        before = state
        try:
            state = await self.agent.expire(state, call, whole=whole)
        except StoreUnavailable:
            return state
        pending = next((c for c in undecided(state) if c.tool_call_id == call), None)
        if pending is not None:
            ctx = None
            with contextlib.suppress(StoreCorrupt):
                ctx = SlackContext.of(state)
            batch = before if state.status == "expired" else None  # closed whole: the batch's other calls too
            await self.messages.close_pending(
                state.run_id, pending, outcome=EXPIRED_OUTCOME, summary="expired", clicked=clicked, ctx=ctx, state=batch
            )
        if state.status == "expired":  # closed without an answer: so is the thread's agent session
            with contextlib.suppress(StoreCorrupt):
                await self.writer.show_stored(state, SlackContext.of(state))
        return state

    async def continue_orphan(
        self, state: RunState, ctx: SlackContext, *, stopping: bool = False, wait: bool = False
    ) -> bool:
        """Continue a run that took its answer but that no live process drives (its process died, or the claim's
        reply was lost); True when this process took it over. ``stopping``: a stop of it was just taken, so it
        stops before its first step and runs nothing: it needs no run slot (at a limit it would otherwise stay
        ``running`` until a later touch). ``wait``: a redelivered job's (its worker died, whose lease may still
        stand): waits for that lease to lapse (:meth:`Agent.is_orphaned <bot.agent.Agent.is_orphaned>`)."""
        try:
            if not await self.agent.is_orphaned(state, wait=wait):
                return False
            slot = None if stopping else await self.gate.enter(team_id=ctx.team_id, user=ctx.requester)
        except RunLimitReached:
            return False  # at a limit: it is continued on a later touch
        except StoreUnavailable:
            return False
        async with slot if slot is not None else contextlib.nullcontext():
            try:
                stream = await self.agent.retry_stream(run_id=state.run_id)
            except (RunNotResumable, RunNotFound, StoreUnavailable, StoreCorrupt):
                return False
            log.info("run %s: continuing it; its answer was recorded but nobody was driving it", state.run_id)
            await self.writer.follow(stream, ctx)
            return True
