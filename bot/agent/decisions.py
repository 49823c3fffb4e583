"""Decisions keyed by ``tool_call_id``: :meth:`Agent.resume(run_id, decisions) <bot.agent.agent.Agent.resume>`, the
one way to answer what a run waits on (as openai-agents' ``RunState.approve`` / ``reject`` then ``Runner.run``,
and pydantic-ai's ``DeferredToolResults``).

A decision is one of:

- :class:`Approve` ``(by, arguments, scope)``: run the call; ``arguments``, when given, replace the model's
  (validated against the tool's schema; the model is told a person changed them, before and after); ``scope``:
  what the approver's OK covers (``once``, or a standing grant's scope the deployment keeps: recorded, see
  docs/approvals.md);
- :class:`Decline` ``(by, reason)``: never run it; the model gets ``{"status": "declined", "reason", ...}``;
- :class:`Reply` ``(data, by)``: the answer to a question (``ask_user``'s label(s) or text).

Several approvals the model asked for in one turn are one **batch** (the run's pending call and its ``batch``,
:class:`~bot.agent.state.PendingCall`): ``resume`` takes decisions for any of them at once. Each decision is
claimed exactly once (one compare-and-set on the run, checked against the deadline by the store's clock, like an
answer); the run goes on once every call of the batch is decided, and the calls then run (or not) in the order the
model made them. Until then ``resume`` records the decisions given and returns a stream that only says
``suspended``.

Everything is checked before anything changes: an unknown or no longer pending ``tool_call_id`` raises
``ToolCallNotPending`` (or ``RunAlreadyResumed``, naming who decided it), a decision of the wrong kind
``NotAwaitingThisKind``, edited arguments the tool's schema refuses ``AnswerError``; then nothing is recorded.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from bot.agent.answers import Answered, Expired, Open, check_answer, deadline_of, undecided
from bot.agent.approvals import APPROVED, DECLINED, edited_of, schema_tool, takes_edits
from bot.agent.hooks import RunHooks
from bot.agent.model import MAX_ARGUMENT_DEPTH
from bot.agent.state import Answer, PendingCall, ResumeData, RunState, utcnow
from bot.agent.store import RunStore
from bot.agent.stream import AgentStream, FinishChunk, FinishPayload
from bot.agent.text import nested_deeper_than
from bot.agent.tools import Tool, ToolInputError
from bot.errors import (
    AnswerError,
    NotAwaitingThisKind,
    QuestionExpired,
    RunAlreadyResumed,
    RunNotResumable,
    ToolCallNotPending,
)

ONCE = "once"
CLOCK_MARGIN = timedelta(minutes=5)  # closer than this to a deadline, the store's clock is asked (as for answers)


def args_hash(args: Mapping[str, Any]) -> str:
    """A call's arguments' fingerprint, the audit's and the standing grants' name for "these arguments": sha256 of
    their canonical JSON (sorted keys, no spaces), its first 16 hex digits."""
    text = json.dumps(args, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


MAX_SCOPE = 64  # characters of a scope name


@dataclass(frozen=True, kw_only=True)
class Approve:
    """Run the call. ``by``: who approved (e.g. a Slack user id); ``arguments``: the arguments it runs with instead
    of the model's (the whole object, validated against the tool's schema); ``scope``: what the OK covers
    (``once``, the default; another name, e.g. ``thread``, is recorded on the answer for the deployment's standing
    grants: the runtime itself runs this call only); ``decided_at``: when the decision was made, when that was
    before it is claimed (a quorum the last approval completed in time, claimed by the scheduler at the call's
    deadline): the deadline is judged at that moment, not at the claim's (None: the claim is the decision). A
    ``decided_at`` before the call was asked, or after now, is an ``AnswerError``."""

    by: str | None = None
    arguments: dict[str, Any] | None = None
    scope: str = ONCE
    decided_at: datetime | None = None


@dataclass(frozen=True, kw_only=True)
class Decline:
    """Don't run the call: the model is told, with ``reason`` (optional, stripped) and ``by``."""

    by: str | None = None
    reason: str | None = None


@dataclass(frozen=True)
class Reply:
    """The answer to a question (``ask_user``: a label, several labels, or typed text), given ``by`` someone."""

    data: ResumeData
    by: str | None = None


CallDecision = Approve | Decline | Reply
"""One decision of :meth:`Agent.resume <bot.agent.agent.Agent.resume>`'s ``decisions`` (keyed by ``tool_call_id``)."""


def answer_of(decision: Approve | Decline, call: PendingCall, tool: Tool | None) -> Answer:
    """The :class:`~bot.agent.state.Answer` recorded for ``decision`` on the approval ``call`` (answered at its
    ``decided_at``, else now). Raises ``AnswerError`` for edited arguments ``tool`` refuses (or a scope that is not
    a short name)."""
    now = decision.decided_at if isinstance(decision, Approve) and decision.decided_at is not None else utcnow()
    if isinstance(decision, Decline):
        reason = decision.reason.strip() if decision.reason and decision.reason.strip() else None
        return Answer(
            tool_call_id=call.tool_call_id,
            resume_data=DECLINED,
            answered_by=decision.by,
            answered_at=now,
            reason=reason,
        )
    scope = decision.scope
    if not scope or len(scope) > MAX_SCOPE or not scope.replace("_", "").replace("-", "").isalnum():
        raise AnswerError(f"scope must be a short name such as once or thread (got {scope!r})")
    arguments = None
    if decision.arguments is not None:
        if tool is None:
            raise AnswerError(f"the arguments of {call.tool_name} can't be edited: the agent has no such tool now")
        try:
            if nested_deeper_than(decision.arguments, MAX_ARGUMENT_DEPTH):
                raise ToolInputError(f"nested too deeply (more than {MAX_ARGUMENT_DEPTH} levels)")
            arguments = tool.parse_args(dict(decision.arguments)).model_dump(mode="json")
        except ToolInputError as exc:
            raise AnswerError(f"edited arguments: {exc}") from None
        if arguments == call.args:
            arguments = None  # not changed after all
    edited = edited_of(call) if arguments is None else None
    if edited is not None:  # edited before (Edit): the arguments and their editor go with the decision, which is
        # all a call of a batch keeps once the batch's first call runs (bot.agent.approvals.decided_in_batch)
        arguments = dict(call.args)
    return Answer(
        tool_call_id=call.tool_call_id,
        resume_data=APPROVED,
        answered_by=decision.by,
        answered_at=now,
        arguments=arguments,
        scope=None if scope == ONCE else scope,
        edited_by=edited.by if edited is not None and edited.by != decision.by else None,
    )


@dataclass(frozen=True)
class Recorded:
    """What :func:`record` did: ``state`` as saved; ``complete``: every call of the batch is decided (the run is
    ``running`` and must be driven); ``answers``: the answers it recorded, with the call each is for."""

    state: RunState
    complete: bool
    answers: tuple[tuple[PendingCall, Answer], ...]


async def record(
    store: RunStore,
    state: RunState,
    decisions: Mapping[str, Approve | Decline],
    *,
    tools: Mapping[str, Tool],
    owner: str,
    now_of_store: Callable[[], Awaitable[datetime]],
    hooks: RunHooks,
) -> Recorded:
    """Check ``decisions`` (approvals, keyed by ``tool_call_id``) against ``state``'s pending batch and record them in
    one compare-and-set (refused past the deadline by the store's clock). Raises as the module docstring says, and
    ``QuestionExpired``, ``RunConflict`` (another write raced this one: try again), ``StoreUnavailable``;
    ``now_of_store()``: the store's clock (asked only within :data:`CLOCK_MARGIN` of the deadline)."""
    if not decisions:
        raise AnswerError("no decisions given: name at least one pending tool_call_id")
    pending = state.pending
    claimed_now = [k for k, d in decisions.items() if not (isinstance(d, Approve) and d.decided_at is not None)]
    deadlines = [at for at in (deadline_of(state, tool_call_id) for tool_call_id in decisions) if at is not None]
    now = utcnow()
    if deadlines and now >= min(deadlines) - CLOCK_MARGIN:
        now = await now_of_store()  # near or past the deadline: the store's clock judges (the claim is refused too)
    # the claim is refused past the deadlines of the decisions it makes now (one made earlier is judged at its time)
    deadline = min((at for at in (deadline_of(state, k) for k in claimed_now) if at is not None), default=None)
    pairs: list[tuple[PendingCall, Answer]] = []
    for tool_call_id, decision in decisions.items():
        at = decision.decided_at if isinstance(decision, Approve) and decision.decided_at is not None else None
        if at is not None and at > now:
            now = await now_of_store()  # this process's clock may lag the one that stamped it
            if at > now:
                raise AnswerError(f"decided_at {at.isoformat()} is after now")
        check = check_answer(state, tool_call_id, now=at or now)
        if isinstance(check, Answered):
            answer = check.answer
            raise RunAlreadyResumed(
                run_id=state.run_id,
                tool_call_id=answer.tool_call_id,
                answered_by=answer.answered_by,
                answered_at=answer.answered_at,
            )
        if isinstance(check, Expired):
            raise QuestionExpired(run_id=state.run_id, tool_call_id=tool_call_id, expires_at=check.expires_at)
        if not isinstance(check, Open):
            if check.waiting_on is not None:
                raise ToolCallNotPending(
                    run_id=state.run_id, tool_call_id=tool_call_id, pending_tool_call_id=check.waiting_on
                )
            raise RunNotResumable(state.run_id, check.status, "it is not waiting for a decision")
        call = check.pending
        if call.kind != "approval":
            raise NotAwaitingThisKind(run_id=state.run_id, tool_call_id=tool_call_id, waits_for=call.kind)
        if at is not None and at < call.suspended_at:
            raise AnswerError(f"decided_at {at.isoformat()} is before the call was asked")
        if isinstance(decision, Approve) and decision.arguments is not None and not takes_edits(call):
            raise AnswerError(f"{call.tool_name}'s calls take no edited arguments in this agent's framework")
        tool = schema_tool(call) or tools.get(call.tool_name)  # a framework's call: checked against its kept schema
        pairs.append((call, answer_of(decision, call, tool)))
    assert pending is not None
    answers = [*state.answers, *(a for _, a in pairs)]
    after = state.model_copy(update={"answers": answers})
    left = undecided(after)
    complete = not left
    if complete:
        head = after.answer_for(pending.tool_call_id)
        after = after.model_copy(
            update={
                "status": "running",
                "pending": pending.model_copy(update={"resume": head}),
                "error": None,
                "turns": 0,
            }
        )
    saved = await store.save(after, owner=owner, not_after=deadline)  # suspended: no lease kept
    for call, answer in pairs:
        hooks.on_claimed(state, call, answer)
    return Recorded(saved, complete, tuple(pairs))


def still_waiting(state: RunState) -> AgentStream:
    """The stream of decisions that left some calls of the batch undecided: one ``finish`` chunk, ``suspended``."""
    stream = AgentStream(state.run_id, waiting=True)

    async def body() -> RunState:
        stream.emit(FinishChunk(state.run_id, FinishPayload(status="suspended", text="")))
        return state

    stream._start(body())
    return stream
