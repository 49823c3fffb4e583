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
each value is shown in the request (long ones cut, marked so), and the input is behind Details in at most
:data:`MAX_SHOWN` characters with every key in view (:func:`details_of`: the room shared out fairly, each cut
value marked so, keys that don't fit named in a last detail; a rule's ``arguments: details-only`` keeps them, and
the first message's command, out of the channel). ``tool_use_id`` is the request_key (the caller's own), so a
retried prompt waits for the same approval. The full input is kept with the run (:data:`TOOL_INPUT`), so the
answer carries it as ``updatedInput`` whichever process (or, for a task, whichever ``tasks/get``) reads it.

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

from bot.agent.state import RunState
from bot.agent.text import MAX_ACTION, MAX_CONTEXT, MAX_DETAILS
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


MAX_KEY = 200  # characters of a key shown; a longer one is cut, marked so and made unique (KEY_CUT)
KEY_CUT = "…#{digest}"  # ends a cut key: a digest of the whole key, so two long keys never show as one
PER_KEY = 12  # characters the Details modal adds around each key/value (its name's bold, the value's code block)
MIN_VALUE = 40  # characters of a long value shown at least beside the cut marker, before keys are left out
MORE_KEY = "(keys not shown)"  # the detail listing the keys that did not fit (Claude Code runs them too)
MORE = "{count:,} more keys not shown here (Claude Code runs them too): {names}"


def shown_key(key: object) -> str:
    """An input key as shown: the key as it is, or one over :data:`MAX_KEY` characters cut and ended with a digest
    of the whole key (:data:`KEY_CUT`), so two keys sharing their first characters never show as one."""
    name = str(key)
    if len(name) <= MAX_KEY:
        return name
    tail = KEY_CUT.format(digest=hashlib.sha256(name.encode()).hexdigest()[:12])
    return name[: MAX_KEY - len(tail)] + tail


def _cut(text: str, room: int) -> str:
    """``text`` in at most ``room`` characters: whole, or cut and ended with :data:`CUT` (its whole length)."""
    if len(text) <= room:
        return text
    marker = CUT.format(total=len(text))
    return text[: max(room - len(marker), 0)] + marker


def details_of(tool_input: dict[str, Any]) -> dict[str, str]:
    """The input's key/values as an approval's ``details`` (strings), their keys and values together (with
    :data:`PER_KEY` each for the Details modal's formatting) at most :data:`MAX_SHOWN` characters, so every key
    the approver approves is shown: keys as :func:`shown_key` shows them, the room shared out fairly (short values
    whole, long ones cut to an equal share, each cut one saying so: :data:`CUT`); when not every key fits with
    :data:`MIN_VALUE` of its value, the last detail (:data:`MORE_KEY`) says how many were left out and names them
    (cut)."""
    items = [(shown_key(key), text_of(value)) for key, value in tool_input.items()]
    floor = len(CUT.format(total=MAX_INPUT)) + MIN_VALUE

    def least(name: str, text: str) -> int:
        return len(name) + PER_KEY + min(len(text), floor)

    more_room = len(MORE_KEY) + PER_KEY + 2 * MAX_KEY  # the MORE detail's own room
    kept, left = items, []
    if sum(least(n, t) for n, t in items) > MAX_SHOWN:
        room, kept = MAX_SHOWN - more_room, []
        for n, t in items:
            if least(n, t) > room:
                break
            kept.append((n, t))
            room -= least(n, t)
        left = items[len(kept) :]
    room = MAX_SHOWN - sum(len(n) + PER_KEY for n, _ in kept)
    if left:
        room -= more_room
    shares: dict[int, str] = {}
    order = sorted(range(len(kept)), key=lambda i: len(kept[i][1]))
    for done, i in enumerate(order):
        share = max(room // (len(order) - done), 0)
        shares[i] = _cut(kept[i][1], share)
        room -= len(shares[i])
    out = {n: shares[i] for i, (n, _) in enumerate(kept)}
    if left:
        names = ", ".join(n for n, _ in left)
        more = MORE.format(count=len(left), names="")
        key = MORE_KEY
        while key in out:  # an input key of that name: this one differs
            key += "#"
        out[key[:MAX_KEY]] = more + clip_text(names, 2 * MAX_KEY - len(more))
    return out


def clip_text(text: str, room: int) -> str:
    """``text`` in at most ``room`` characters, ended with an ellipsis when cut."""
    return text if len(text) <= room else text[: max(room - 1, 0)] + "…"


def summary(tool_name: str, tool_input: dict[str, Any]) -> str:
    """One readable line of what would run, for the thread's first message: ``Bash: git push`` (the command),
    ``Write: src/app.py`` (the file), else the tool's name; at most :data:`bot.agent.text.MAX_CONTEXT`."""
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
    Raises :class:`~bot.mcp_server.asker.AskError` (a name over :data:`~bot.agent.text.MAX_ACTION` or on several
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
