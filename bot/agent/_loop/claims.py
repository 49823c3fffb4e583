"""Claims on a run: answers, withdrawals, time-outs and expiry (:class:`Claims`, held by :class:`~bot.agent.Agent`,
which hands its public methods on; approval decisions: :mod:`bot.agent.decisions`): whether a run can take what a
person sends (:mod:`bot.agent.answers`), claimed exactly once.

Every claim is one compare-and-set in the store, refused once the question's deadline passed by the store's clock;
the loser learns who won (``RunAlreadyResumed``), an expired question is recorded as such (``QuestionExpired``).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Collection
from dataclasses import dataclass
from datetime import timedelta

from bot.agent._loop.stopping import StopRequests
from bot.agent.answers import (
    AnswerCheck,
    Answered,
    Closed,
    Expired,
    Open,
    check_answer,
    deadline_of,
    past_deadline,
    undecided,
)
from bot.agent.approvals import DECLINED
from bot.agent.hooks import NO_HOOKS, RunHooks
from bot.agent.state import Answer, PendingCall, RunState, utcnow
from bot.agent.store import RunStore
from bot.agent.stream import AgentStream, FinishChunk, FinishPayload
from bot.errors import (
    BotError,
    QuestionExpired,
    RunAlreadyResumed,
    RunConflict,
    RunNotFound,
    RunNotResumable,
    ToolCallNotPending,
)

log = logging.getLogger(__name__)

CLOCK_MARGIN = timedelta(minutes=5)  # closer than this to a deadline, ask the store's clock


@dataclass(frozen=True)
class Claimed:
    """A claim that won: the run as saved with it (``running``, the answer on its pending call), to be driven by
    the claiming agent (:meth:`Agent._go_on <bot.agent.agent.Agent>`), or, ``handed_off``, by the process whose
    tool call asked it live (:mod:`bot.agent._loop.live_questions`), which holds the run's lease."""

    state: RunState
    handed_off: bool = False
    waiting: bool = False  # a call of a batch decided while others still wait (the run stays suspended)

    def handed_off_stream(self) -> AgentStream:
        """The stream of a claim whose run goes on in another process: one ``finish`` chunk, ``handed_off``."""
        return _handed_off(self.state)


class Claims:
    """The claims of one agent: on ``store``, as ``owner`` (the agent's lease id); ``stops`` and ``driving`` (the run
    ids the agent drives now) are the agent's; ``hooks`` are told of each claim. A claim that wins returns
    :class:`Claimed`: the agent drives the run on from there."""

    def __init__(
        self,
        store: RunStore,
        *,
        owner: str,
        stops: StopRequests,
        driving: Collection[str],
        hooks: RunHooks = NO_HOOKS,
    ) -> None:
        self.store = store
        self.owner = owner
        self.stops = stops
        self.driving = driving
        self.hooks = hooks  # told of each claim and expiry

    async def cancel_question(
        self, *, run_id: str, tool_call_id: str | None = None, cancelled_by: str | None = None
    ) -> Claimed:
        """Withdraw the question (or approval request) a run waits on: the run goes on, the tool told it was
        cancelled (``ask_user``: ``{"status": "cancelled", "cancelled_by": ...}``; an MCP server's question:
        ``cancel``; an approval: declined, reason ``"cancelled"``). Raises as ``Agent.resume_stream``."""
        state = await self.store.load(run_id)
        pending = await self.require_open(state, tool_call_id or _first_undecided(state))
        approval = pending.kind == "approval"
        answer = Answer(
            tool_call_id=pending.tool_call_id,
            resume_data=DECLINED if approval else "",
            answered_by=cancelled_by,
            answered_at=utcnow(),
            reason="cancelled" if approval else None,
            outcome="cancelled",
        )
        return await self.claim(state, pending, answer)

    async def stop(self, *, run_id: str, stopped_by: str | None = None) -> bool:
        """Ask the process driving run ``run_id`` to stop it at its next step (before its next model turn or tool
        call, once that process learns it: at once here, else within ``lease_renew_every``; see
        :mod:`bot.agent._loop.stopping`); the run's stream then finishes with status ``stopped``. An orphaned run
        (``running``, nobody drives it) is stopped by whoever takes it over, before its first step. True when the
        request was taken; False when nothing works: the run waits for an answer (suspended, or a tool call's question
        asked live waits; withdraw it with :meth:`cancel_question`), ended, or is unknown; such a request stops
        nothing later either. Raises
        ``StoreUnavailable``, ``StoreCorrupt``."""
        try:
            state = await self.store.load(run_id)
        except RunNotFound:
            return False
        if state.asks_live:  # a tool call's question waits (asked live): it waits, as a suspended run does
            return False
        if not await self.store.request_stop(state, by=stopped_by or ""):
            return False
        if run_id in self.driving:  # driven here: known at once
            self.stops.asked(run_id, stopped_by or "")
        return True

    async def time_out(self, *, run_id: str, tool_call_id: str | None = None) -> Claimed:
        """Go on without an answer once the question's deadline passed (by the store's clock): the tool is told
        nobody answered (``ask_user``: ``{"status": "no_answer", "waited_seconds": N}``; an MCP server's question:
        ``cancel``; an approval: declined, reason ``"no answer"``). Exactly once, against answers too: whichever
        claim the store takes first wins. Each call of a batch of approvals times out by its own deadline
        (``tool_call_id``; None: every call of it whose deadline passed); the run goes on once no call of the
        batch is left undecided, else it waits on (``Claimed.waiting``). Raises ``RunNotFound``,
        ``RunAlreadyResumed`` (answered in time), ``RunNotResumable`` (its deadline has not passed, or it waits
        for nothing), ``RunConflict`` (another write raced this one), ``StoreUnavailable``."""
        state = await self.store.load(run_id)
        left = undecided(state) if state.pending is not None and state.pending.batch else []
        deadlines = [c.expires_at for c in left] + [deadline_of(state, tool_call_id)]
        now = utcnow()
        if any(at is not None and now >= at - CLOCK_MARGIN for at in deadlines):
            now = await self.store.now()  # the store's clock judges the deadlines (the batch's calls' too), once
        due = [c for c in left if past_deadline(c, now)]  # a batch's calls whose own deadline passed
        sweep = tool_call_id is None
        tool_call_id = tool_call_id or (due[0].tool_call_id if due else _first_undecided(state))
        check = check_answer(state, tool_call_id, now=now)
        pending = state.waiting_call(tool_call_id) or state.pending  # the pending call, or one of its batch
        decided = (
            state.answer_for(tool_call_id) if left and tool_call_id not in {c.tool_call_id for c in left} else None
        )
        if isinstance(check, Answered) or decided is not None:  # a call of a batch: timed out already too
            answer = check.answer if isinstance(check, Answered) else decided
            assert answer is not None
            raise RunAlreadyResumed(
                run_id=run_id,
                tool_call_id=answer.tool_call_id,
                answered_by=answer.answered_by,
                answered_at=answer.answered_at,
            )
        waiting = pending is not None and pending.resume is None and state.status in ("suspended", "expired")
        if not isinstance(check, Expired) or pending is None or not waiting:
            why = "its deadline has not passed" if isinstance(check, Open) else "it waits for no answer"
            raise RunNotResumable(run_id, state.status, why)
        if pending.live_owner is not None:
            raise RunNotResumable(run_id, state.status, "the tool call that asked closes its own question")
        approval = pending.kind == "approval"
        answer = Answer(
            tool_call_id=pending.tool_call_id,
            resume_data=DECLINED if approval else "",
            answered_at=utcnow(),
            reason="no answer" if approval else None,
            outcome="no_answer",
        )
        others = [c for c in left if c.tool_call_id != pending.tool_call_id] if approval else []
        if others and state.status == "suspended":  # a batch of approvals (closed as a whole, ``expired``: all
            # of it ends)
            ending = [pending, *(c for c in due if c in others and sweep)]  # swept: every call past its deadline
            if len(ending) <= len(others):  # some call of it still waits for a decision
                return await self._time_out_alone(state, ending, answer)
        return await self.claim(state, pending, answer, deadline=False)

    async def _time_out_alone(self, state: RunState, ending: list[PendingCall], answer: Answer) -> Claimed:
        """Record ``answer`` (nobody decided in time) for each call of ``ending``, calls of a batch whose other
        calls still wait for their own deadlines: the run stays suspended. One compare-and-set."""
        given = [answer.model_copy(update={"tool_call_id": c.tool_call_id}) for c in ending]
        waiting = state.model_copy(update={"status": "suspended", "answers": [*state.answers, *given]})
        saved = await self.store.save(waiting, owner=self.owner)
        for call, also in zip(ending, given, strict=True):
            self.hooks.on_claimed(state, call, also)
        return Claimed(saved, waiting=True)

    async def claim(self, state: RunState, pending: PendingCall, answer: Answer, *, deadline: bool = True) -> Claimed:
        """Claim ``answer`` for ``pending`` (one compare-and-set wins, before the deadline by the store's clock):
        the run is continued here, or, for a question asked live by a tool call whose process still holds the
        run's lease, in that process (``Claimed.handed_off``; see :mod:`bot.agent._loop.live_questions`)."""
        # a batch of approvals (bot.agent.decisions): the others still undecided end the same way (withdrawn, or
        # past the deadline), and the run goes on from its first call
        head = state.pending if state.pending is not None and state.pending.batch else pending
        others = [c for c in undecided(state) if c.tool_call_id != answer.tool_call_id and head is state.pending]
        more = [answer.model_copy(update={"tool_call_id": c.tool_call_id}) for c in others]
        answers = [*state.answers, answer, *more]
        resume = next(a for a in reversed(answers) if a.tool_call_id == head.tool_call_id)
        claimed = state.model_copy(
            update={
                "status": "running",
                "pending": head.model_copy(update={"resume": resume}),
                "answers": answers,
                "error": None,
                "turns": 0,
            }
        )
        live = pending.live_owner  # asked from inside a tool call: hand the answer to its process, if it lives
        # (this very process, while it drives the run, lives: its lease may have lapsed meanwhile, and be taken back)
        here = live == self.owner and state.run_id in self.driving
        hand_off = live is not None and (here or await self.store.lease_owner(state.run_id) == live)
        try:
            owner = live if hand_off and live is not None else self.owner
            not_after = pending.expires_at if deadline else None  # going on without an answer needs none
            claimed = await self.store.save(claimed, owner=owner, not_after=not_after)
        except RunConflict:
            if deadline:
                await self.require_open(await self.store.load(state.run_id), pending.tool_call_id)
            raise  # still open after a conflict: another write raced this one; the caller may try again
        except QuestionExpired:
            await self._mark_expired(state)
            raise
        self.hooks.on_claimed(state, pending, answer)
        for call, also in zip(others, more, strict=True):
            self.hooks.on_claimed(state, call, also)
        return Claimed(claimed, handed_off=hand_off)

    async def check(self, state: RunState, tool_call_id: str | None = None) -> AnswerCheck:
        """Whether ``state`` can take an answer to ``tool_call_id`` now (see :mod:`bot.agent.answers`). A deadline
        is judged by the store's clock (one extra round trip, only when this process's clock says it is near or
        past), so a process whose clock runs fast never closes a question early. Raises ``StoreUnavailable``."""
        deadline = deadline_of(state, tool_call_id)
        now = utcnow()
        if deadline is not None and now >= deadline - CLOCK_MARGIN:
            now = await self.store.now()
        return check_answer(state, tool_call_id, now=now)

    async def expire(self, state: RunState, tool_call_id: str | None = None, *, whole: bool = False) -> RunState:
        """Close ``state``'s question (``tool_call_id``: that call of a batch; None: the one it waits on first) if
        its deadline passed unanswered: the run's status becomes ``expired``; a batch of approvals only once no
        call of it is still open, or ``whole``: closed as a whole (it can't go on without that call). Returns the
        state as stored afterwards (unchanged when there was nothing to close). Raises ``StoreUnavailable``."""
        if isinstance(await self.check(state, tool_call_id), Expired):
            await self._mark_expired(state, whole=whole)
            return await self.store.load(state.run_id)
        return state

    # --- answers ---------------------------------------------------------------------------------

    async def require_open(self, state: RunState, tool_call_id: str | None) -> PendingCall:
        """The pending call ``tool_call_id`` names, or the typed error that says why it can't take an answer."""
        match await self.check(state, tool_call_id):
            case Open(pending=pending):
                return pending
            case Answered(answer=answer):
                raise RunAlreadyResumed(
                    run_id=state.run_id,
                    tool_call_id=answer.tool_call_id,
                    answered_by=answer.answered_by,
                    answered_at=answer.answered_at,
                )
            case Expired(expires_at=expires_at):
                await self._mark_expired(state)
                raise QuestionExpired(run_id=state.run_id, tool_call_id=tool_call_id, expires_at=expires_at)
            case Closed(waiting_on=waiting_on) if waiting_on is not None and tool_call_id is not None:
                raise ToolCallNotPending(
                    run_id=state.run_id, tool_call_id=tool_call_id, pending_tool_call_id=waiting_on
                )
            case Closed(status=status):
                raise RunNotResumable(state.run_id, status, "it is not waiting for an answer")
        raise AssertionError("unreachable")

    async def _mark_expired(self, state: RunState, *, whole: bool = False) -> None:
        """Record that the run's question expired unanswered (best effort: a newer write wins). A batch of approvals
        is marked only once no call of it is still open (a call's own deadline passing leaves the others open), or
        ``whole``: closed as a whole."""
        if state.status != "suspended" or state.pending is None:
            return
        if not whole and state.pending.batch and any(not past_deadline(c, utcnow()) for c in undecided(state)):
            return  # (a lone question: its check, by the store's clock near the deadline, said it expired)
        with contextlib.suppress(BotError):
            await self.store.save(state.model_copy(update={"status": "expired"}), owner=self.owner)
            log.info("run %s: question expired unanswered", state.run_id)
            self.hooks.on_expired(state, state.pending)


def _first_undecided(state: RunState) -> str | None:
    """The first call of ``state``'s approval batch nobody decided yet (None: no batch, or all decided)."""
    if state.pending is None or not state.pending.batch:
        return None
    left = undecided(state)
    return left[0].tool_call_id if left else None


def _handed_off(state: RunState) -> AgentStream:
    """The stream of a claim whose run goes on in another process: one ``finish`` chunk, ``handed_off``."""
    stream = AgentStream(state.run_id, handed_off=True)

    async def body() -> RunState:
        stream.emit(FinishChunk(state.run_id, FinishPayload(status="handed_off", text="")))
        return state

    stream._start(body())
    return stream
