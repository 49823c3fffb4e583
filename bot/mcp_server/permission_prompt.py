"""Claude Code's permission prompts answered in Slack: the ``approve_tool_use`` tool of ``python -m bot mcp``,
for ``claude -p ... --permission-prompt-tool mcp__<server>__approve_tool_use``.

Claude Code (non-interactive) asks it before each tool use it has no standing permission for, with
``{"tool_name": "Bash", "input": {"command": "...", "description": "..."}, "tool_use_id": "toolu_..."}``
(``Write``: ``{"file_path", "content"}``; MCP tools as ``mcp__server__tool``), and reads back the result's first
content block as text holding JSON: ``{"behavior": "allow", "updatedInput": {...}}`` (the input it then runs) or
``{"behavior": "deny", "message": "..."}``; anything else fails closed (observed with Claude Code 2.1.197).

The request is asked as an outside agent's approval (:data:`bot.agent.asking.APPROVAL_TOOL`): its ``action`` is
the tool's name and its ``details`` the input's key/values, so ``APPROVAL_POLICY`` rules match them as they match
the bot's own tools (``tool: Bash``, ``when: {command: {glob: "git *"}}``; :func:`bot.slack.approvals.rules.
policy_call`). The thread's first message quotes what would run (:func:`summary`: the command, the file path),
each value is shown in the request (long ones cut, marked so), and the whole input is behind Details up to
:data:`MAX_SHOWN` characters. ``tool_use_id`` is the request_key (the caller's own), so a retried prompt waits for
the same approval. The full input is kept with the run (:data:`TOOL_INPUT`), so the answer carries it as
``updatedInput`` whichever process (or, for a task, whichever ``tasks/get``) reads it.

The request also carries ``tool_use``, a digest of its caller, tool name and whole input (:func:`tool_use_digest`):
it marks the details as the input that runs, so the rule's ``edit:`` lets an approver change input values in Slack
(each a string: :func:`bot.slack.approvals.rules.editable_call`), which :func:`decision` puts in the
``updatedInput`` (:func:`updated_input`), and the rule's ``grants:`` offer "Approve always" whose grant covers only
that caller's later identical request (:mod:`bot.slack.approvals.grants`): it is then allowed without asking.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from mcp_types import CallToolResult, TextContent

from bot.agent.limits import MAX_ACTION, MAX_CONTEXT, MAX_DETAILS
from bot.agent.state import RunState
from bot.mcp_server.asker import AskError, outcome_of

TOOL = "approve_tool_use"  # the MCP tool's name: --permission-prompt-tool mcp__<server>__approve_tool_use
TOOL_INPUT = "tool_input"  # run metadata: the input Claude Code asked to run (JSON), the allow's updatedInput
MAX_INPUT = 100_000  # characters of the input's JSON kept with the run; a larger input is refused (fails closed)
MAX_SHOWN = MAX_DETAILS - 500  # characters of keys and values shown: within the details bound, and with their
# formatting within the Details modal's one section (Slack: section text <= 3000)
CUT = " … (cut here: {total:,} characters in all; Claude Code runs the whole input)"
SUMMARY_KEYS = ("command", "file_path", "path", "url", "pattern", "query")


def text_of(value: Any) -> str:
    """An input value as shown: a string as it is, anything else as JSON."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def details_of(tool_input: dict[str, Any]) -> dict[str, str]:
    """The input's key/values as an approval's ``details`` (strings), their keys and values together at most
    :data:`MAX_SHOWN` characters: values cut where they would pass it, each cut one saying so."""
    out: dict[str, str] = {}
    room = MAX_SHOWN
    for key, value in tool_input.items():
        name, text = str(key)[:200], text_of(value)
        if room - len(name) <= 0:
            break
        if len(name) + len(text) > room:
            marker = CUT.format(total=len(text))
            keep = max(room - len(name) - len(marker), 0)
            text = text[:keep] + marker if keep else ""
            if len(name) + len(text) > room:
                break
        out[name] = text
        room -= len(name) + len(text)
    return out


def summary(tool_name: str, tool_input: dict[str, Any]) -> str:
    """One readable line of what would run, for the thread's first message: ``Bash: git push`` (the command),
    ``Write: src/app.py`` (the file), else the tool's name; at most :data:`bot.agent.limits.MAX_CONTEXT`."""
    for key in SUMMARY_KEYS:
        value = tool_input.get(key)
        if isinstance(value, str) and value.strip():
            return f"{tool_name}: {value.strip()}"[:MAX_CONTEXT]
    return tool_name[:MAX_CONTEXT]


def tool_use_digest(tool_name: str, tool_input: dict[str, Any], *, caller: str) -> str:
    """The SHA-256 (hex) of ``caller``'s (its name; ``""``: the implicit caller) request to run ``tool_name`` with
    the whole ``tool_input``: the approval's ``tool_use`` (:class:`bot.agent.asking.ApprovalRequest`), so a standing
    grant given on it covers only the same caller's same request, never another caller's, nor another input whose
    shown (cut) details look alike."""
    what = json.dumps([caller, tool_name, tool_input], sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(what.encode()).hexdigest()


def approval_request(tool_name: str, tool_input: dict[str, Any], *, caller: str) -> dict[str, Any]:
    """The approval's arguments for ``caller``'s (its name) Claude Code request to use ``tool_name`` with
    ``tool_input``: ``{"action": tool_name, "details": key/values, "tool_use": digest}`` (:func:`tool_use_digest`).
    Raises :class:`~bot.mcp_server.asker.AskError` (a name over :data:`~bot.agent.limits.MAX_ACTION` or on several
    lines, an input over :data:`MAX_INPUT`)."""
    if not tool_name.strip() or "\n" in tool_name or len(tool_name) > MAX_ACTION:
        raise AskError(f"tool_name must be one line of 1-{MAX_ACTION} characters")
    if len(json.dumps(tool_input, ensure_ascii=False)) > MAX_INPUT:
        raise AskError(f"the input is too long to be approved in Slack (at most {MAX_INPUT:,} characters of JSON)")
    details = details_of(tool_input)
    digest = tool_use_digest(tool_name, tool_input, caller=caller)
    return {"action": tool_name, **({"details": details} if details else {}), "tool_use": digest}


def updated_input(tool_input: dict[str, Any], approved: object) -> dict[str, Any] | str:
    """The input Claude Code runs: ``tool_input`` with each value an approver changed in Slack (``approved``: the
    details as approved, :func:`bot.agent.asking.approval_outcome`'s ``details``; None: not edited) put in its
    place, as the string they typed. A changed value that can't be put back (its input value not a string, or shown
    cut in Slack, or a key the input does not have) gives a reason (str) instead: the answer is then a deny."""
    if not isinstance(approved, dict):
        return tool_input
    shown, out = details_of(tool_input), dict(tool_input)
    for key, text in approved.items():
        if shown.get(key) == text:
            continue
        original = tool_input.get(key)
        if not isinstance(original, str) or shown.get(key) != original or not isinstance(text, str):
            return f"`{key}` was changed in Slack, but only a string shown whole can be edited"
        out[key] = text
    return out


def decision(outcome: dict[str, Any], tool_input: dict[str, Any]) -> dict[str, Any]:
    """Claude Code's answer of an approval's ``outcome`` (:func:`bot.mcp_server.asker.outcome_of`'s): ``{"behavior":
    "allow", "updatedInput": ...}`` once approved (by a person, or unasked under a standing grant): ``tool_input``,
    with the values an approver edited in Slack in their place (:func:`updated_input`), else ``{"behavior": "deny",
    "message": who declined and why}`` (nobody in time, withdrawn, an edit that can't be carried out)."""
    status = outcome.get("status")
    if status == "approved":
        updated = updated_input(tool_input, outcome.get("details"))
        if isinstance(updated, str):
            return {"behavior": "deny", "message": f"Not allowed: {updated}."}
        return {"behavior": "allow", "updatedInput": updated}
    by, reason = outcome.get("declined_by") or outcome.get("cancelled_by"), outcome.get("reason")
    if status == "no_answer" or reason == "no answer" or not by:
        message = "Nobody approved this in Slack in time; it was not allowed."
    elif status == "declined" and str(by).startswith(("U", "W")):
        message = f"Declined in Slack by {by}" + (f": {reason}" if reason else ".")
    else:  # withdrawn (the agent that asked gave up)
        message = f"Withdrawn by {by}; it was not allowed."
    return {"behavior": "deny", "message": message}


def decision_text(outcome: dict[str, Any], tool_input: dict[str, Any]) -> str:
    """:func:`decision` as the tool's text (its JSON: what Claude Code reads)."""
    return json.dumps(decision(outcome, tool_input), ensure_ascii=False)


def decision_result(state: RunState) -> CallToolResult:
    """The tool's result for an ended approval run (a task's): :func:`decision_text` of its outcome and the input
    kept with it, as one text content block, as the blocking call returns it."""
    kept = state.metadata.get(TOOL_INPUT)
    tool_input = json.loads(kept) if isinstance(kept, str) else {}
    return CallToolResult(content=[TextContent(type="text", text=decision_text(outcome_of(state), tool_input))])
