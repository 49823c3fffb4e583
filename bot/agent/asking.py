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

from pydantic import BaseModel, Field

from bot.agent.state import RunState, ToolCall
from bot.agent.text import Action, Details
from bot.agent.tools import Tool, ToolContext

ASK_ONLY = "ask_only"  # metadata key: the run only asks; its value is the reply shown once it is answered
ASKED_BY = "(a question from an agent outside this workspace)"
APPROVAL_TOOL = "request_approval"  # the hidden tool whose call an outside agent's approval request is
ASKER = "the agent that asked"
"""Who withdrew a question its asking agent gave up on (a client's cancellation, ``tasks/cancel``): the withdrawal
answer's ``answered_by`` (no Slack user: the audit trail says ``by=asker``, :mod:`bot.ops.audit`)."""
ENDED = {  # the run's last text when nobody answered: the reply is for an answer only
    "no_answer": "Nobody answered in time; the agent that asked was told so.",
    "cancelled": "The question was withdrawn; the agent that asked was told so.",
    "cancelled_by_asker": "The agent that asked withdrew the question.",
    "unasked": "Nobody was asked: it was approved as the approval policy allows; the agent that asked was told so.",
}


class ApprovalRequest(BaseModel):
    """What an outside agent asks a person to approve: ``action`` (one line) and its ``details`` (Markdown, or
    key/values shown one per line); their bounds are :mod:`bot.agent.text`'s. ``policy_rule``: the approval
    policy rule that decides it, its MCP caller's (:mod:`bot.mcp_server.callers`), else the rules match."""

    action: Action
    details: Details | None = None
    policy_rule: str | None = None  # the asking MCP caller's policy_rule (set by the server, never by the agent)
    tool_use: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    """Set by the MCP server's ``approve_tool_use`` only (Claude Code's permission prompt, never by the agent): the
    SHA-256 of its caller, tool name and whole input. It marks ``details`` as the input that runs, so the policy
    rule's ``edit:`` and ``grants:`` apply (an edit becomes the ``updatedInput``), and ties a standing grant to that
    caller and that very input (:mod:`bot.slack.approvals.grants`)."""


def approval_tool() -> Tool:
    """The hidden tool (offered to no model) that an outside agent's approval request calls: it waits for a
    person's approval like any tool that needs one, and once approved it only says so."""

    async def execute(args: Any, ctx: ToolContext | None) -> dict[str, Any]:
        details = getattr(args, "details", None)  # as approved (an approver may have edited them)
        return {"status": "approved", **({"details": details} if isinstance(details, dict) else {})}

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
    outcome: str = decided[-1].outcome if decided else "answer"
    if not decided and _ran_with(state, f"ask_{state.run_id}") is not None:
        outcome = "unasked"  # an approval that ran unasked (the deployment's gate let it: a standing grant)
    if outcome == "cancelled" and decided[-1].answered_by == ASKER:  # not "... was told so": it withdrew it
        outcome = "cancelled_by_asker"
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
    """The decision on an ended approval run: ``{"status": "approved", "approved_by"}`` (with ``"details"``: the
    key/values as approved, when an approver edited them; with ``"approved_by": None, "covered": True`` when it
    ran unasked, the deployment's approval gate letting it: a standing grant) or ``{"status": "declined",
    "declined_by", "reason"}`` (no answer in time: declined, reason ``"no answer"``), or None while it waits."""
    call = f"ask_{state.run_id}"
    decided = [a for a in state.answers if a.tool_call_id == call]
    ran = _ran_with(state, call)
    if not decided:
        if ran is None:
            return None
        return {"status": "approved", "approved_by": None, "covered": True}
    last = decided[-1]
    if last.resume_data == "approved":
        edited = ran.get("details") if ran is not None else None
        asked = _asked_with(state, call).get("details")
        changed = isinstance(edited, dict) and edited != asked
        return {"status": "approved", "approved_by": last.answered_by, **({"details": edited} if changed else {})}
    return {"status": "declined", "declined_by": last.answered_by, "reason": last.reason}


def _ran_with(state: RunState, call: str) -> dict[str, Any] | None:
    """The approval tool's result for ``call`` once it ran (``{"status": "approved", "details"?}``), else None. An
    edited call's result follows a note for the model (one line: :func:`bot.agent.approvals.edit_note`)."""
    for message in state.messages:
        if message.get("role") == "tool" and message.get("tool_call_id") == call:
            try:
                result = json.loads(str(message.get("content") or "").rsplit("\n", 1)[-1])
            except ValueError:
                return None
            return result if isinstance(result, dict) and result.get("status") == "approved" else None
    return None


def _asked_with(state: RunState, call: str) -> dict[str, Any]:
    """The arguments ``call`` was asked with (the run's own tool call), ``{}`` when unreadable."""
    for message in state.messages:
        for part in message.get("tool_calls") or []:
            if isinstance(part, dict) and part.get("id") == call:
                try:
                    args = json.loads(str((part.get("function") or {}).get("arguments") or "{}"))
                except ValueError:
                    return {}
                return args if isinstance(args, dict) else {}
    return {}


def asked_tool(state: RunState) -> str | None:
    """The tool a run that only asks called (e.g. ``ask_user`` or :data:`APPROVAL_TOOL`), None for other runs."""
    if ASK_ONLY not in state.metadata:
        return None
    for message in state.messages:
        for call in message.get("tool_calls") or []:
            if isinstance(call, dict) and call.get("id") == f"ask_{state.run_id}":
                return str((call.get("function") or {}).get("name") or "")
    return None
