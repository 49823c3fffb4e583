"""Continuing the call a run stopped on, once the run goes on: an answered question, a decided approval, or a
call that was cut short.

- A question's tool runs again with the answer (``ToolContext.resume_data``, and the payload it suspended with).
  A tool that suspended in the middle of its work (it has no suspend schema of its own, e.g. an MCP tool whose
  server asked for input) has ``executing_since`` saved first, like an approved tool: if the process dies while
  it runs, the call is not run again unasked.
- A question that got no answer (its deadline passed: ``Agent.time_out``) or was withdrawn
  (``Agent.cancel_question``): a question tool (``ask_user``) is not run again, the model gets
  :func:`unanswered`; a tool that suspended mid-work runs again with ``""`` as its answer (an MCP server then gets
  ``cancel``).
- An approval: :func:`bot.agent.approvals.run_decided` (a timed-out or withdrawn one is declined).
- Cut short: a question asked live by a tool call whose process is gone (``live_owner``), or a tool that was
  running again with its answer when its process died (``executing_since``): the call may or may not have done
  its work, so a person is asked whether to run it again (an ``interrupted`` approval), never the tool itself.
"""

from __future__ import annotations

from typing import Any

from bot.agent._loop.tool_calls import ToolRunner
from bot.agent.approvals import Save, policy_notes, run_decided, suspend
from bot.agent.state import Answer, PendingCall, RunState, ToolCall, utcnow
from bot.agent.stream import AgentStream, ToolCallChunk, ToolCallPayload
from bot.agent.tools import Tool


async def continue_pending(
    runner: ToolRunner, state: RunState, pending: PendingCall, out: AgentStream, *, save: Save
) -> None:
    """Carry on with ``pending`` (already taken off ``state``), its call run by ``runner`` (its tools, the result's
    bound: :class:`bot.agent._loop.tool_calls.ToolRunner`). Raises ``Suspended`` when it asks again, and what
    ``save`` raises (``RunConflict``, ``StoreUnavailable``)."""
    tool = runner.tools.get(pending.tool_name)
    call = ToolCall(id=pending.tool_call_id, name=pending.tool_name, arguments="")
    cut_short = pending.live_owner is not None or (pending.kind == "question" and pending.executing_since is not None)
    if cut_short:
        if tool is None:
            error = {"error": f"unknown tool {pending.tool_name!r}"}
            runner.add_result(state, call, error, out, is_error=True)
            return
        notes = policy_notes(pending) if pending.kind == "approval" else None
        suspend(state, pending.tool_call_id, tool, pending.args, ask_ttl=runner.ask_ttl, interrupted=True, notes=notes)
    resume = pending.resume
    question_tool = tool is not None and tool.asks_person  # e.g. ask_user
    if pending.kind == "question" and resume is not None and resume.outcome != "answer" and question_tool:
        runner.add_result(state, call, unanswered(pending, resume), out)  # told, not run again
        return
    if pending.kind == "approval":
        await run_decided(runner, state, pending, out, save=save)
        return
    if tool is not None and not tool.asks_person:  # it suspended mid-work: leave a trace before it goes on
        state.pending = pending.model_copy(update={"executing_since": utcnow()})
        await save(state)
        state.pending = None
        out.emit(ToolCallChunk(state.run_id, ToolCallPayload(call.id, call.name, dict(pending.args))))  # runs again
    await runner.run(state, call, pending.args, out, resume=pending.resume, suspended=pending.suspend_payload)


def records_an_answer(pending: PendingCall, tool: Tool | None) -> bool:
    """Whether continuing ``pending`` (a call of ``tool``) only records what a person said: a question tool's
    (``Tool.asks_person``, e.g. ``ask_user``) question asked by its own suspension, whatever its outcome. It runs
    nothing, so a stop does not keep it from the conversation (the answer a person gave is never dropped)."""
    return pending.kind == "question" and tool is not None and tool.asks_person and pending.live_owner is None


def unanswered(pending: PendingCall, resume: Answer) -> dict[str, Any]:
    """The tool result of a question that got no answer: ``{"status": "no_answer", "waited_seconds": N}`` (its
    deadline passed) or ``{"status": "cancelled", "cancelled_by": ...}`` (withdrawn)."""
    if resume.outcome == "no_answer":
        waited = max(0, round((resume.answered_at - pending.suspended_at).total_seconds()))
        return {"status": "no_answer", "waited_seconds": waited}
    result: dict[str, Any] = {"status": "cancelled"}
    if resume.answered_by:
        result["cancelled_by"] = resume.answered_by
    return result
