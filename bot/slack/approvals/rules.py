"""The Slack layer's reading of ``APPROVAL_POLICY`` (:mod:`bot.approval_policy`) for today's approval flow: what
a rule's fields mean for one call (:func:`policy_call`: an outside agent's request is its action;
:func:`blocked_reason`: nobody may approve it), the runtime's gate (:func:`policy_gate`: ``require`` and the decline
at once), and what the start logs as not carried out yet (:func:`not_carried_out`). Who may approve is
:class:`bot.slack.questions.approvers.ApproverPolicy`'s (``for_call``)."""

from __future__ import annotations

import logging
from typing import Any

from bot.agent.approvals import ApprovalGate, GateVerdict
from bot.agent.asking import APPROVAL_TOOL
from bot.agent.state import RunState
from bot.agent.tools import Tool
from bot.approval_policy import Decision, Policy
from bot.errors import StoreCorrupt
from bot.slack.context import SlackContext

log = logging.getLogger(__name__)


def blocked_reason(decision: Decision) -> str | None:
    """Why nobody may approve a call ``decision`` is about: its rule can't be satisfied for the requester, or it
    needs more than one approval (quorum: a later part of the policy); None when someone may."""
    if decision.unsatisfiable is not None:
        return decision.unsatisfiable
    if decision.required > 1:
        return f"it needs {decision.required} approvals, which this version can't collect yet"
    return None


def policy_gate(policy: Policy) -> ApprovalGate:
    """The agent's :data:`~bot.agent.approvals.ApprovalGate` for ``policy``: the matching rule's ``require``
    (``always`` / ``never``; ``tool``: the tool's say), and a call nobody may approve (:func:`blocked_reason`) is
    declined at once with the reason, never left waiting. An outside agent's approval request (the MCP server's) is
    always asked: its answer is a person's decision (one nobody may give waits, refused, until its deadline). A run
    not started from Slack: the tool decides."""

    def gate(tool: Tool, args: dict[str, Any], state: RunState, tool_requires: bool) -> GateVerdict:
        try:
            ctx = SlackContext.of(state)
        except StoreCorrupt:
            return GateVerdict(tool_requires)
        if tool.id == APPROVAL_TOOL:
            return GateVerdict(True)
        name, call_args = policy_call(tool.id, args)
        decision = policy.decide(
            name, call_args, requester=ctx.requester, channel=ctx.channel_id, tool_requires=tool_requires
        )
        if not decision.needs_approval:
            return GateVerdict(False)
        why = blocked_reason(decision)
        if why is not None:
            log.info("run %s: %s declined at once by rule %r: %s", state.run_id, tool.id, decision.name, why)
            return GateVerdict(
                True, decline=f"nobody can approve it under the approval policy's rule {decision.name!r}: {why}"
            )
        return GateVerdict(True)

    return gate


def policy_call(tool_name: str, args: dict[str, object]) -> tuple[str, dict[str, object]]:
    """The tool name and arguments a policy's rules match on: the call's own, except for an outside agent's approval
    request (the MCP server's ``request_approval``, :data:`~bot.agent.asking.APPROVAL_TOOL`): its ``action`` is the
    tool name and its ``details``, when key/values, the arguments (Markdown details: none)."""
    action = args.get("action")
    if tool_name != APPROVAL_TOOL or not isinstance(action, str):
        return tool_name, args
    details = args.get("details")
    return action, dict(details) if isinstance(details, dict) else {}


def named_rule(tool_name: str, args: dict[str, object]) -> str | None:
    """The policy rule an outside agent's approval request names (its caller's ``policy_rule``, put in the
    request's ``policy_rule`` by the MCP server, :mod:`bot.mcp_server.callers`), or None: the rules match."""
    rule = args.get("policy_rule") if tool_name == APPROVAL_TOOL else None
    return rule if isinstance(rule, str) else None


def not_carried_out(policy: Policy) -> list[str]:
    """A line per rule field of ``policy`` this version reads but does not carry out yet (logged at start, so an
    operator knows; docs/approvals.md, "What is in effect today")."""
    out = []
    for number, rule in enumerate(policy.rules, start=1):
        later = [
            name
            for name, used in (
                (f"required: {rule.required} (such calls are declined at once)", rule.required > 1),
                (f"where: {rule.where}", rule.where != "thread"),
                ("deadline", rule.deadline is not None),
                ("on_deadline", rule.on_deadline is not None),
                ("arguments: details-only", rule.arguments != "shown"),
                ("edit", bool(rule.edit)),
                ("grants", rule.grants != ("once",)),
                (
                    "requester.groups (the requester's groups are not looked up yet: never matches)",
                    bool(rule.requester.groups),
                ),
                (
                    "approvers @handle / channel:C... (they admit nobody yet)",
                    any(a.startswith(("@", "channel:")) for a in rule.approvers),
                ),
            )
            if used
        ]
        if later:
            out.append(f"rule {number} ({rule.name or f'rule {number}'!r}): not carried out yet: " + "; ".join(later))
    return out
