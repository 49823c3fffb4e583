"""Who may approve tool calls (``APPROVERS``): the person who started the run (``requester``, the default), anyone in
the run's channel (``channel``), or a list of user ids and user-group ids, because the person who asked is often not
the person who may approve. User groups are resolved with ``usergroups.users.list`` (scope ``usergroups:read``) and
cached for :data:`GROUP_CACHE_SECONDS`.

With ``APPROVAL_POLICY`` (:mod:`bot.approval_policy`, docs/approvals.md) the approvers are the matching rule's:
:meth:`ApproverPolicy.for_call` gives the approvers of one call. What this part of the policy carries out: the
rule's ``approvers`` (``requester``, ``channel``, user ids, user-group ids; ``@handle`` and ``channel:C...`` admit
nobody yet, they are resolved in a later part); nobody may approve a call the rule can't satisfy, nor one needing
more than one approval (quorum is a later part): :func:`bot.slack.approvals.rules.policy_gate` declines such a
call at once, and says which calls are asked (``require``).
"""

from __future__ import annotations

import logging
import time

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.approval_policy import GROUP_ID, USER_ID, Policy, load_policy
from bot.config import Settings
from bot.slack.approvals.rules import blocked_reason, named_rule, not_carried_out, policy_call
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
        rule = named_rule(tool_name, args)
        tool_name, args = policy_call(tool_name, args)
        decision = self.policy.decide(
            tool_name, args, requester=ctx.requester, channel=ctx.channel_id, tool_requires=True, named_rule=rule
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
