"""Runs that only ask a person (:func:`ask_run`): a question from outside the agent (an MCP client's ``ask_user``),
asked and answered exactly as the agent's own questions, with no model turn before or after.

Such a run starts with its question's tool call already queued (the agent's question tool, e.g. ``ask_user``), so
the run suspends on it at once; once answered (or past its deadline, or withdrawn) the tool's result is the run's
outcome and the run completes with ``reply`` as its last text, in whichever process resumed it. The run's
metadata carries ``ASK_ONLY`` (the reply), which is all the runtime needs to know: no new RunState version.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel

from bot.agent.limits import Action, Details
from bot.agent.state import RunState, ToolCall
from bot.agent.tools import Tool, ToolContext

ASK_ONLY = "ask_only"  # metadata key: the run only asks; its value is the reply shown once it is answered
ASKED_BY = "(a question from an agent outside this workspace)"
APPROVAL_TOOL = "request_approval"
ENDED = {  # the run's last text when nobody answered: the reply is for an answer only
    "no_answer": "Nobody answered in time; the agent that asked was told so.",
    "cancelled": "The question was withdrawn; the agent that asked was told so.",
}  # the hidden tool whose call an outside agent's approval request is


class ApprovalRequest(BaseModel):
    """What an outside agent asks a person to approve: ``action`` (one line) and its ``details`` (Markdown, or
    key/values shown one per line); their bounds are :mod:`bot.agent.limits`'s. ``policy_rule``: the approval
    policy rule that decides it, its MCP caller's (:mod:`bot.mcp_server.callers`), else the rules match."""

    action: Action
    details: Details | None = None
    policy_rule: str | None = None  # the asking MCP caller's policy_rule (set by the server, never by the agent)


def approval_tool() -> Tool:
    """The hidden tool (offered to no model) that an outside agent's approval request calls: it waits for a
    person's approval like any tool that needs one, and once approved it only says so."""

    async def execute(args: Any, ctx: ToolContext | None) -> dict[str, Any]:
        return {"status": "approved"}

    return Tool(
        id=APPROVAL_TOOL,
        description="An outside agent asks a person to approve an action.",
        input_schema=ApprovalRequest,
        execute_fn=execute,
        require_approval=True,
        hidden=True,
    )


def ask_run(
    question: dict[str, Any], *, run_id: str, agent_id: str, tool_name: str, reply: str, metadata: dict[str, Any]
) -> RunState:
    """A new run whose only step is ``tool_name`` called with ``question`` (the tool's arguments), ending with
    ``reply`` once the call has its result. The call's id is derived from ``run_id``."""
    call = ToolCall(id=f"ask_{run_id}", name=tool_name, arguments=json.dumps(question))
    return RunState(
        run_id=run_id,
        agent_id=agent_id,
        messages=[
            {"role": "user", "content": ASKED_BY},
            {"role": "assistant", "content": None, "tool_calls": [call.to_message_part()]},
        ],
        queued=[call],
        metadata={**metadata, ASK_ONLY: reply},
    )


def finish_ask_only(state: RunState) -> bool:
    """For a run that only asks and whose question has its result: complete it with its reply (True), or, when
    nobody answered (deadline, withdrawn), with what :data:`ENDED` says; any other run is left as it is (False)."""
    reply = state.metadata.get(ASK_ONLY)
    if reply is None or state.queued or state.pending is not None:
        return False
    decided = [a for a in state.answers if a.tool_call_id == f"ask_{state.run_id}"]
    outcome = decided[-1].outcome if decided else "answer"
    state.messages.append({"role": "assistant", "content": str(reply) if outcome == "answer" else ENDED[outcome]})
    state.status = "completed"
    return True


def ask_outcome(state: RunState) -> dict[str, Any] | None:
    """The question's tool result (the ask_user result shapes: ``{"answer" | "answers", "answer_type",
    "answered_by"}``, ``{"status": "no_answer" | "cancelled", ...}``), or None while it has none."""
    for message in state.messages:
        if message.get("role") == "tool" and message.get("tool_call_id") == f"ask_{state.run_id}":
            try:
                result = json.loads(str(message.get("content") or ""))
            except ValueError:
                return {"error": str(message.get("content"))}
            return result if isinstance(result, dict) else {"result": result}
    return None


def approval_outcome(state: RunState) -> dict[str, Any] | None:
    """The decision on an ended approval run: ``{"status": "approved", "approved_by"}`` or ``{"status":
    "declined", "declined_by", "reason"}`` (no answer in time: declined, reason ``"no answer"``), or None while it
    waits."""
    decided = [a for a in state.answers if a.tool_call_id == f"ask_{state.run_id}"]
    if not decided:
        return None
    last = decided[-1]
    if last.resume_data == "approved":
        return {"status": "approved", "approved_by": last.answered_by}
    return {"status": "declined", "declined_by": last.answered_by, "reason": last.reason}


def asked_tool(state: RunState) -> str | None:
    """The tool a run that only asks called (e.g. ``ask_user`` or :data:`APPROVAL_TOOL`), None for other runs."""
    if ASK_ONLY not in state.metadata:
        return None
    for message in state.messages:
        for call in message.get("tool_calls") or []:
            if isinstance(call, dict) and call.get("id") == f"ask_{state.run_id}":
                return str((call.get("function") or {}).get("name") or "")
    return None
