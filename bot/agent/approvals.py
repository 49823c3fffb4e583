"""Tool approval: a call that needs a person's OK suspends the run before it runs, and runs at most once per
approval.

- Which calls: a tool with ``require_approval=True``, or every tool but questions (tools that ask a
  person, ``Tool.asks_person``, such as ``ask_user``) when the agent or the run says ``require_tool_approval``.
- A gate (``Agent.approval_gate``, :data:`ApprovalGate`; the Slack layer's is ``APPROVAL_POLICY``'s) may change
  that per call: ask where the tool would not, not ask where it would, or decline at once with a reason (a call
  nobody could approve): the tool never runs and nobody is asked.
- Asking: the call's arguments are validated first (invalid ones go back to the model as a tool error, nobody is
  asked); then the run suspends with a pending call of kind ``approval`` and the stream emits a
  ``tool-call-approval`` chunk.
- Deciding: ``Agent.approve_tool_call`` / ``decline_tool_call`` claim the decision exactly like an answer (one
  compare-and-set wins). Declined: the tool never runs; the model gets ``{"status": "declined", "reason": ...,
  "declined_by": ...}``. Approved: ``executing_since`` is saved, then the tool runs once. A process that dies
  mid-call leaves ``executing_since`` behind: whoever continues the run asks again with ``interrupted`` set (it
  may or may not have run) instead of running it a second time.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from bot.agent._loop.tool_calls import Suspended, ToolRunner
from bot.agent.state import PendingCall, RunState, ToolCall, utcnow
from bot.agent.stream import AgentStream, ApprovalPayload, ToolCallChunk, ToolCallPayload
from bot.agent.tools import Tool, ToolInputError

APPROVED, DECLINED = "approved", "declined"
Save = Callable[[RunState], Awaitable[None]]


def needs_approval(tool: Tool | None, state: RunState, *, agent_wide: bool) -> bool:
    """Whether a call of ``tool`` waits for approval in ``state`` (unknown tools and questions never do)."""
    if tool is None or tool.asks_person:
        return False
    return tool.require_approval or agent_wide or state.require_tool_approval


@dataclass(frozen=True)
class GateVerdict:
    """What an :data:`ApprovalGate` says of one call: whether it waits for approval, or ``decline`` (a reason):
    declined at once."""

    needs_approval: bool
    decline: str | None = None


ApprovalGate = Callable[[Tool, dict[str, Any], RunState, bool], GateVerdict]
"""``gate(tool, args, state, tool_requires)``: the verdict on a call of ``tool`` with ``args`` (validated, defaults
filled in, as an approval request stores them; as the model sent them when invalid) in ``state``;
``tool_requires``: :func:`needs_approval`'s answer. Not asked for questions."""


def verdict_of(
    gate: ApprovalGate | None, tool: Tool, args: dict[str, Any], state: RunState, *, agent_wide: bool
) -> GateVerdict:
    """The verdict on a call of ``tool``: :func:`needs_approval`'s, or ``gate``'s when there is one (questions never
    wait for approval, whatever the gate)."""
    needs = needs_approval(tool, state, agent_wide=agent_wide)
    if gate is None or tool.asks_person:
        return GateVerdict(needs)
    # the arguments as an approval request stores them (defaults filled in), so the gate sees what approvers see;
    # invalid ones: asked or not, the call ends as a tool error (ask_approval, run_tool_call)
    with contextlib.suppress(ToolInputError):
        args = tool.parse_args(args).model_dump(mode="json")
    return gate(tool, args, state, needs)


def decline_at_once(
    runner: ToolRunner,
    tool: Tool,
    state: RunState,
    call: ToolCall,
    args: dict[str, Any],
    out: AgentStream,
    *,
    reason: str,
) -> None:
    """Decline ``call`` without asking anyone: the model gets ``{"status": "declined", "reason": reason, "outcome":
    "unsatisfiable"}`` (invalid arguments: the tool error, as when asking; both through ``runner``)."""
    try:
        tool.parse_args(args)
    except ToolInputError as exc:
        runner.add_result(state, call, {"error": str(exc)}, out, is_error=True)
        return
    result = {"status": DECLINED, "reason": reason, "outcome": "unsatisfiable"}
    runner.add_result(state, call, result, out)


def ask_approval(
    runner: ToolRunner, tool: Tool, state: RunState, call: ToolCall, args: dict[str, Any], out: AgentStream
) -> None:
    """Suspend the run on ``call`` until a person decides (raises :class:`Suspended`; its deadline ``runner.ask_ttl``);
    invalid arguments become a tool error for the model instead (returns; its text bounded by ``runner``)."""
    try:
        valid = tool.parse_args(args).model_dump(mode="json")
    except ToolInputError as exc:
        runner.add_result(state, call, {"error": str(exc)}, out, is_error=True)
        return
    suspend(state, call.id, tool, valid, ask_ttl=runner.ask_ttl, interrupted=False)


def suspend(
    state: RunState, tool_call_id: str, tool: Tool, args: dict[str, Any], *, ask_ttl: float | None, interrupted: bool
) -> None:
    """Make ``state`` wait for a decision on ``tool_call_id``; raises :class:`Suspended`."""
    now = utcnow()
    state.pending = PendingCall(
        kind="approval",
        tool_call_id=tool_call_id,
        tool_name=tool.id,
        args=args,
        suspend_payload={"tool_name": tool.id, "args": args, "description": tool.description},
        suspended_at=now,
        expires_at=now + timedelta(seconds=ask_ttl) if ask_ttl is not None else None,
        interrupted=interrupted,
    )
    state.status = "suspended"
    raise Suspended()


async def run_decided(
    runner: ToolRunner, state: RunState, pending: PendingCall, out: AgentStream, *, save: Save
) -> None:
    """Carry out the decision claimed on ``pending`` (the run's pending approval, already taken off ``state``), the
    call run by ``runner`` (:class:`bot.agent._loop.tool_calls.ToolRunner`: its tools, the result's bound, live
    questions while it runs)."""
    call = ToolCall(id=pending.tool_call_id, name=pending.tool_name, arguments="")
    decision = pending.resume
    tool = runner.tools.get(pending.tool_name)
    if decision is None or decision.resume_data != APPROVED:
        result: dict[str, Any] = {"status": "declined", "reason": decision.reason if decision else None}
        if decision is not None and decision.answered_by:
            result["declined_by"] = decision.answered_by
        if decision is not None and decision.outcome != "answer":
            result["outcome"] = decision.outcome  # nobody decided in time, or the request was withdrawn
        runner.add_result(state, call, result, out)
        return
    if pending.executing_since is not None and tool is not None:  # a run of it was cut short: ask again
        suspend(state, pending.tool_call_id, tool, pending.args, ask_ttl=runner.ask_ttl, interrupted=True)
    state.pending = pending.model_copy(update={"executing_since": utcnow()})
    await save(state)  # the trace that makes it run at most once per approval
    state.pending = None
    # it runs now: a ``tool-call`` chunk, as for any call that starts (the one before the approval request was
    # another segment's), so the stream's consumer shows it running (Slack: "is running restart_service...")
    out.emit(ToolCallChunk(state.run_id, ToolCallPayload(call.id, call.name, dict(pending.args))))
    await runner.run(state, call, pending.args, out)


def approval_payload(pending: PendingCall) -> ApprovalPayload:
    """The ``tool-call-approval`` chunk's payload for a pending approval."""
    stored = pending.suspend_payload
    return ApprovalPayload(
        tool_call_id=pending.tool_call_id,
        tool_name=pending.tool_name,
        args=dict(pending.args),
        description=str(stored.get("description") or ""),
        interrupted=pending.interrupted,
        expires_at=pending.expires_at,
        asked_at=pending.suspended_at,
    )
