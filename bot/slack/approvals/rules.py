"""The Slack layer's reading of ``APPROVAL_POLICY`` (:mod:`bot.approval_policy`): what a rule's fields mean for one
call (:func:`policy_call`: an outside agent's request is its action; :func:`blocked_reason`: nobody may approve it),
the runtime's gate (:func:`policy_gate`: ``require``, the decline at once, the rule's deadline and the notes kept
with the request: its rule, how its arguments are shown, where it is asked), and what the start logs as not carried
out yet (:func:`not_carried_out`). Who may approve is :class:`bot.slack.questions.approvers.ApproverPolicy`'s
(``for_call``)."""

from __future__ import annotations

import logging
from typing import Any

from bot.agent.approvals import ApprovalGate, GateVerdict
from bot.agent.asking import APPROVAL_TOOL
from bot.agent.state import RunState
from bot.agent.tools import Tool
from bot.approval_policy import Decision, Escalation, Policy
from bot.errors import StoreCorrupt
from bot.slack.approvals.people import People
from bot.slack.context import SlackContext

log = logging.getLogger(__name__)

ESCALATE = "escalate"  # the policy note of a rule's on_deadline: escalate (the ids and handles to ask then)
DEADLINE = "deadline"  # ... and of its deadline (seconds; None: ASK_TTL_SECONDS)


def blocked_reason(decision: Decision) -> str | None:
    """Why nobody may approve a call ``decision`` is about: its rule can't be satisfied for the requester (too few
    people could approve it, :func:`bot.approval_policy.unsatisfiable`); None when someone may."""
    return decision.unsatisfiable


def policy_gate(policy: Policy, *, people: People | None = None) -> ApprovalGate:
    """The agent's :data:`~bot.agent.approvals.ApprovalGate` for ``policy``: the matching rule's ``require``
    (``always`` / ``never``; ``tool``: the tool's say), and a call nobody may approve (:func:`blocked_reason`) is
    declined at once with the reason, never left waiting. An outside agent's approval request (the MCP server's) is
    always asked: its answer is a person's decision (one nobody may give waits, refused, until its deadline). A run
    not started from Slack: the tool decides. Rules' ``requester.groups`` are matched on the requester's groups,
    looked up through ``people`` (cached; without it, no requester is in any group)."""

    async def gate(tool: Tool, args: dict[str, Any], state: RunState, tool_requires: bool) -> GateVerdict:
        try:
            ctx = SlackContext.of(state)
        except StoreCorrupt:
            return GateVerdict(tool_requires)
        outside = tool.id == APPROVAL_TOOL  # always asked (see above); the rule says how and where
        decision = await call_decision(
            policy,
            tool.id,
            args,
            requester=ctx.requester,
            channel=ctx.channel_id,
            tool_requires=tool_requires or outside,
            people=people,
        )
        notes: dict[str, Any] = {"rule": decision.name, "arguments": decision.arguments, "where": decision.where}
        if isinstance(decision.on_deadline, Escalation):
            notes[ESCALATE] = list(decision.on_deadline.escalate)
            notes[DEADLINE] = decision.deadline  # seconds (None: ASK_TTL_SECONDS), as long again once escalated
        if outside:
            return GateVerdict(True, notes=notes, rule=decision.name)
        if not decision.needs_approval:
            return GateVerdict(False, rule=decision.name)
        why = blocked_reason(decision)
        if why is not None:
            log.info("run %s: %s declined at once by rule %r: %s", state.run_id, tool.id, decision.name, why)
            return GateVerdict(
                True,
                decline=f"nobody can approve it under the approval policy's rule {decision.name!r}: {why}",
                rule=decision.name,
            )
        return GateVerdict(True, deadline=decision.deadline, notes=notes, rule=decision.name)

    return gate


async def call_decision(
    policy: Policy,
    tool_name: str,
    args: dict[str, Any],
    *,
    requester: str,
    channel: str,
    tool_requires: bool,
    people: People | None = None,
) -> Decision:
    """The rule deciding a call of ``tool_name`` with ``args`` asked by ``requester`` (a user id; ``""``: nobody in
    particular) in ``channel``, as the gate decides it (so its ``arguments`` say how the request shows them): an
    outside agent's request by its action and details (:func:`policy_call`) or its caller's named rule
    (:func:`named_rule`), rules' ``requester.groups`` matched on the requester's groups looked up through
    ``people`` (without it: in no group). Raises what ``people``'s look-ups raise."""
    among = tuple(dict.fromkeys(g for rule in policy.rules for g in rule.requester.groups))
    name, call_args = policy_call(tool_name, args)
    groups: set[str] = set()
    if among and people is not None and requester:
        groups = await people.groups_of(requester, among=among)
    return policy.decide(
        name,
        call_args,
        requester=requester,
        channel=channel,
        tool_requires=tool_requires,
        requester_groups=groups,
        named_rule=named_rule(tool_name, args),
    )


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


def tool_use(tool_name: str, args: dict[str, object]) -> str | None:
    """The ``tool_use`` digest of an outside agent's approval request that is Claude Code's permission prompt (the
    MCP server's ``approve_tool_use``: its ``details`` are the input that runs, so the rule's ``edit:`` and
    ``grants:`` apply), or None for any other call."""
    digest = args.get("tool_use") if tool_name == APPROVAL_TOOL else None
    return digest if isinstance(digest, str) and digest else None


EDIT_MAX = 3000  # characters of a value editable in Slack (plain_text_input max_length / initial_value)


def editable_call(tool_name: str, args: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """What the Edit modal edits of a call: its arguments' JSON schema and its arguments. A tool's own come from
    its spec (None here); a permission prompt's (:func:`tool_use`) are its ``details``, each a required string of
    at most :data:`EDIT_MAX` characters (the input's own types are not known here: a value that is not a string in
    the input, or was shown cut, can't be changed, ``bot.mcp_server.permission_prompt.updated_input``)."""
    if tool_use(tool_name, args) is None:
        return None
    details = args.get("details")
    shown = {k: v for k, v in details.items() if isinstance(v, str)} if isinstance(details, dict) else {}
    schema = {
        "type": "object",
        "properties": {k: {"type": "string", "maxLength": EDIT_MAX} for k, v in shown.items() if len(v) <= EDIT_MAX},
        "required": list(shown),
    }
    return schema, shown


def with_edited(tool_name: str, args: dict[str, Any], edited: dict[str, Any]) -> dict[str, Any]:
    """The call's arguments once the Edit modal gave ``edited`` (of :func:`editable_call`'s arguments): for a
    permission prompt its ``details`` replaced, else ``edited`` itself."""
    if tool_use(tool_name, args) is None:
        return edited
    return {**args, "details": edited}
