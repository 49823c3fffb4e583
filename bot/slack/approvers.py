"""Who may approve tool calls (``APPROVERS``): the person who started the run (``requester``, the default), anyone in
the run's channel (``channel``), or a list of user ids and user-group ids, because the person who asked is often not
the person who may approve. User groups are resolved with ``usergroups.users.list`` (scope ``usergroups:read``) and
cached for :data:`GROUP_CACHE_SECONDS`.

With ``APPROVAL_POLICY`` (:mod:`bot.approval_policy`, docs/approvals.md) the approvers are the matching rule's:
:meth:`ApproverPolicy.for_call` gives the approvers of one call. What this part of the policy carries out: the
rule's ``approvers`` (``requester``, ``channel``, user ids, user-group ids; ``@handle`` and ``channel:C...`` admit
nobody yet, they are resolved in a later part); nobody may approve a call the rule can't satisfy, nor one needing
more than one approval (quorum is a later part): :func:`policy_gate` declines such a call at once, and says which
calls are asked (``require``).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.agent.approvals import ApprovalGate, GateVerdict
from bot.agent.asking import APPROVAL_TOOL
from bot.agent.state import RunState
from bot.agent.tools import Tool
from bot.approval_policy import GROUP_ID, USER_ID, Decision, Policy, load_policy
from bot.config import Settings
from bot.errors import StoreCorrupt
from bot.slack.context import SlackContext, Where

log = logging.getLogger(__name__)

GROUP_CACHE_SECONDS = 60.0


class ApproverPolicy:
    """``spec``: ``requester``, ``channel`` or ``"U1,S2,..."`` (validated by :mod:`bot.config`); ``policy``: the
    ``APPROVAL_POLICY`` file's, whose rules then say who approves each call (:meth:`for_call`; ``spec`` is then
    unused). ``blocked``: why nobody may approve (a rule that can't be satisfied for its requester)."""

    def __init__(
        self,
        spec: str,
        *,
        client: AsyncWebClient,
        policy: Policy | None = None,
        entries: tuple[str, ...] | None = None,
        blocked: str | None = None,
        members: dict[str, tuple[float, set[str]]] | None = None,
    ) -> None:
        self.spec = spec
        self.client = client
        self.policy = policy
        self.blocked = blocked
        if entries is None:
            entries = (spec,) if spec in ("requester", "channel") else tuple(spec.split(","))
        self.entries = entries
        self.users = {i for i in entries if USER_ID.fullmatch(i)}
        self.groups = [i for i in entries if GROUP_ID.fullmatch(i)]
        self._members: dict[str, tuple[float, set[str]]] = members if members is not None else {}

    def for_call(self, ctx: SlackContext, tool_name: str, args: dict[str, object]) -> ApproverPolicy:
        """The approvers of a call of ``tool_name`` with ``args`` in ``ctx``: these (no policy), or the matching
        rule's (sharing the group cache); blocked when the rule can't be satisfied for ``ctx.requester`` or needs
        more than one approval (not carried out yet)."""
        if self.policy is None:
            return self
        tool_name, args = policy_call(tool_name, args)
        decision = self.policy.decide(
            tool_name, args, requester=ctx.requester, channel=ctx.channel_id, tool_requires=True
        )
        blocked = blocked_reason(decision)
        entries = decision.approvers
        spec = entries[0] if entries in (("requester",), ("channel",)) else ",".join(entries)
        return ApproverPolicy(spec, client=self.client, entries=entries, blocked=blocked, members=self._members)

    async def admits(self, ctx: SlackContext, user: str, *, where: Where | None) -> bool:
        """Whether ``user`` may decide on a tool call of the run in ``ctx``, asking from ``where`` (None: a surface
        with no channel, e.g. a modal's submission): the requester; a channel-wide entry (``channel``, or
        ``requester`` of a run asked for nobody in particular) only from the run's channel or a surface with none;
        the named users and user groups' members from anywhere. Nobody when :attr:`blocked`."""
        if self.blocked is not None:
            return False
        in_channel = where is None or where.channel_id is None or where.channel_id == ctx.channel_id
        for entry in self.entries:
            if entry == "channel" or (entry == "requester" and not ctx.requester):
                if in_channel:
                    return True
            elif entry == "requester":
                if user == ctx.requester:
                    return True
            elif entry in self.users:
                if user == entry:
                    return True
            elif entry in self.groups and user in await self.group_members(entry):
                return True
        return False

    async def may_approve(self, ctx: SlackContext, user: str) -> bool:
        """Whether ``user`` may decide on tool calls of the run in ``ctx``, wherever they ask from (see
        :meth:`admits`)."""
        return await self.admits(ctx, user, where=None)

    def describe(self, ctx: SlackContext, *, elsewhere: bool = False) -> str:
        """Who may decide, as mrkdwn for the approval message (it mentions them); ``elsewhere``: for a copy posted
        outside the run's channel (an escalation), which names that channel."""
        here = f"<#{ctx.channel_id}>" if elsewhere else "this channel"
        if self.blocked is not None:
            return f"Nobody can approve this: {self.blocked}; it will be declined at its deadline"
        if self.spec == "channel":
            return f"Anyone in {here} can approve or decline"
        if self.spec == "requester":
            if not ctx.requester:
                return f"Anyone in {here} can approve or decline"
            return f"Waiting for <@{ctx.requester}> to approve or decline"
        names = [f"<@{u}>" for u in sorted(self.users)] + [f"<!subteam^{g}>" for g in self.groups]
        if "requester" in self.entries and ctx.requester:
            names.insert(0, f"<@{ctx.requester}>")
        if "channel" in self.entries:
            names.insert(0, f"anyone in {here}")
        return "Waiting for " + ", ".join(names or ["nobody yet"]) + " to approve or decline"

    def refusal(self, ctx: SlackContext) -> str:
        """What someone not allowed to decide is told."""
        if self.blocked is not None:
            return f"Nobody can approve this: {self.blocked}."
        if self.spec == "channel" or (self.spec == "requester" and not ctx.requester):
            return f"Only people in <#{ctx.channel_id}> can approve or decline this."
        if self.spec == "requester":
            return f"Only <@{ctx.requester}> can approve or decline this."
        return "Only the configured approvers can approve or decline this."

    def named(self) -> list[str]:
        """The user ids and user-group ids named in ``APPROVERS`` (empty for ``requester`` / ``channel``, and with
        ``APPROVAL_POLICY``: reminders and Home inboxes then go to the requester only, a later part)."""
        if self.policy is not None:
            return []
        return sorted(self.users) + self.groups

    async def group_members(self, group: str) -> set[str]:
        """The members of user group ``group`` (``usergroups.users.list``, cached a minute; the last known
        members, or none, when Slack refuses)."""
        cached = self._members.get(group)
        if cached is not None and time.monotonic() - cached[0] < GROUP_CACHE_SECONDS:
            return cached[1]
        try:
            resp = await self.client.usergroups_users_list(usergroup=group)
            members = {str(u) for u in resp.get("users") or []}
        except SlackApiError as exc:
            log.warning("usergroups.users.list failed for %s: %s", group, exc.response.get("error"))
            members = cached[1] if cached is not None else set()
        self._members[group] = (time.monotonic(), members)
        return members


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


def approver_policy(settings: Settings, *, client: AsyncWebClient) -> ApproverPolicy:
    """``APPROVERS``', or with ``APPROVAL_POLICY`` its rules' (the file read again: :mod:`bot.config` checked it at
    start; raises :class:`~bot.approval_policy.PolicyError` if it changed for the worse since), logging a warning
    per rule field not carried out yet (:func:`not_carried_out`)."""
    if settings.approval_policy is None:
        return ApproverPolicy(settings.approvers, client=client)
    policy = load_policy(settings.approval_policy)
    for line in not_carried_out(policy):
        log.warning("APPROVAL_POLICY %s: %s", settings.approval_policy, line)
    return ApproverPolicy(settings.approvers, client=client, policy=policy)


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
                    "approvers @handle / channel:C... (they admit nobody yet)",
                    any(a.startswith(("@", "channel:")) for a in rule.approvers),
                ),
            )
            if used
        ]
        if later:
            out.append(f"rule {number} ({rule.name or f'rule {number}'!r}): not carried out yet: " + "; ".join(later))
    return out
