"""Whether a run can take an answer now: the one place that decides it (the Slack layer asks, then renders).

:func:`check_answer` returns one of:

- :class:`Open` - the run waits for this answer (``pending`` is the question; a run that is ``running`` waits
  too when the question was asked from inside a live tool call, see :mod:`bot.agent._loop.live_questions`);
- :class:`Answered` - it was answered already (``answer`` says by whom and when; or withdrawn, its ``outcome``
  ``cancelled``);
- :class:`Expired` - the question's deadline passed (or the run was closed as expired, or went on without an
  answer) with no answer;
- :class:`Closed` - the run is not waiting for this answer (finished, failed, running, or waiting on another
  question: ``waiting_on`` names it).

A pending approval may carry a ``batch`` (other approvals of the same turn, :mod:`bot.agent.decisions`): each of
them is open on its own until decided; a decided one is :class:`Answered` while the others still wait.

The deadline is judged here by the caller's clock for an early answer to the person; the claim itself is
judged again by the store's clock (:mod:`bot.agent.store`), which wins.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from bot.agent.state import Answer, PendingCall, RunState, RunStatus


@dataclass(frozen=True)
class Open:
    pending: PendingCall
    kind: Literal["open"] = "open"


@dataclass(frozen=True)
class Answered:
    answer: Answer
    kind: Literal["answered"] = "answered"


@dataclass(frozen=True)
class Expired:
    expires_at: datetime | None
    kind: Literal["expired"] = "expired"


@dataclass(frozen=True)
class Closed:
    status: RunStatus
    waiting_on: str | None = None
    kind: Literal["closed"] = "closed"


AnswerCheck = Open | Answered | Expired | Closed


def check_answer(state: RunState, tool_call_id: str | None, *, now: datetime) -> AnswerCheck:
    """Can ``state`` take an answer to ``tool_call_id`` (``None``: to whatever it waits on) at ``now``?"""
    pending = state.pending
    asked = tool_call_id or (pending.tool_call_id if pending is not None else None)
    answered = state.answer_for(asked)  # asked None: the latest answer of the run
    earlier_round = (
        answered is not None
        and pending is not None
        and pending.resume is None
        and asked == pending.tool_call_id
        and answered.answered_at < pending.suspended_at
    )
    if earlier_round:
        answered = None  # a decision of an earlier round: the call was asked again (an interrupted approval)
    if answered is not None and (asked is not None or state.status != "suspended"):
        if answered.outcome == "no_answer":  # nobody answered by its deadline (the run went on, or waits on
            # the rest of its batch)
            timed_out = _call_of(pending, answered.tool_call_id)
            return Expired(timed_out.expires_at if timed_out is not None else None)
        return Answered(answered)
    asked_call = _call_of(pending, asked)  # the pending call itself, or one of its batch (bot.agent.decisions)
    if pending is not None and asked_call is not None and state.status == "expired":
        return Expired(asked_call.expires_at)
    waiting = state.status == "suspended" or (state.status == "running" and pending is not None and pending.live_owner)
    if waiting and pending is not None and pending.resume is None:
        if asked_call is None:
            return Closed(state.status, waiting_on=pending.tool_call_id)
        if past_deadline(asked_call, now):  # each call of a batch by its own deadline
            return Expired(asked_call.expires_at)
        return Open(asked_call)
    return Closed(state.status)


def past_deadline(call: PendingCall, now: datetime) -> bool:
    """Whether ``call``'s deadline (``expires_at``; None: none) has passed at ``now``."""
    return call.expires_at is not None and now >= call.expires_at


def deadline_of(state: RunState, tool_call_id: str | None) -> datetime | None:
    """The deadline of ``state``'s pending call ``tool_call_id`` (itself or one of its batch; None: the pending
    call), or None: none, or no such call waits."""
    pending = state.pending
    call = _call_of(pending, tool_call_id or (pending.tool_call_id if pending is not None else None))
    return call.expires_at if call is not None else None


def _call_of(pending: PendingCall | None, tool_call_id: str | None) -> PendingCall | None:
    """The call of ``pending`` (itself or one of its batch) whose id is ``tool_call_id``, or None."""
    if pending is None:
        return None
    return next((c for c in pending.calls() if c.tool_call_id == tool_call_id), None)


def undecided(state: RunState) -> list[PendingCall]:
    """The calls of ``state``'s pending approval batch (the pending call and its ``batch``) no one has decided yet
    this round, in order; empty when the run waits on nothing (a question: itself while unanswered)."""
    pending = state.pending
    if pending is None or pending.resume is not None:
        return []
    out = []
    for call in pending.calls():
        answer = state.answer_for(call.tool_call_id)
        if answer is None or answer.answered_at < pending.suspended_at:  # none, or one of an earlier round
            out.append(call)
    return out


def question_of(state: RunState, matches: Callable[[str], bool]) -> str | None:
    """The ``tool_call_id`` of the run's question that ``matches(tool_call_id)`` accepts: the pending one first,
    then an answered one (so a late click learns who answered). ``None`` when no question matches."""
    if state.pending is not None:
        for call in state.pending.calls():  # the pending call, then the rest of its batch
            if matches(call.tool_call_id):
                return call.tool_call_id
    for answer in reversed(state.answers):
        if matches(answer.tool_call_id):
            return answer.tool_call_id
    return None
