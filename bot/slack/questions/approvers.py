"""Who may approve tool calls (``APPROVERS``): the person who started the run (``requester``, the default), anyone in
the run's channel (``channel``), or a list of user ids and user-group ids, because the person who asked is often not
the person who may approve. User groups and channels' members are looked up in Slack and cached for
:data:`GROUP_CACHE_SECONDS` (:class:`bot.slack.approvals.people.People`).

With ``APPROVAL_POLICY`` (:mod:`bot.approval_policy`, docs/approvals.md) the approvers are the matching rule's:
:meth:`ApproverPolicy.for_call` gives the approvers of one call: the rule's ``approvers`` (``requester``,
``channel``, user ids, user groups by ``S...`` id or ``@handle``, ``channel:C...``: the members of that channel),
how many distinct approvals it needs (``required``; the requester's own counts only by ``requester_counts``) and
which arguments an approver may edit; a call the rule can't satisfy is approved by nobody
(:func:`bot.slack.approvals.rules.policy_gate` declines it at once, and says which calls are asked: ``require``).
"""

from __future__ import annotations

import logging

from slack_sdk.web.async_client import AsyncWebClient

from bot.agent.stream import ApprovalPayload
from bot.approval_policy import CHANNEL_PREFIX, GROUP_HANDLE, GROUP_ID, USER_ID, Policy
from bot.config import Settings
from bot.slack.approvals.people import CACHE_SECONDS, People
from bot.slack.approvals.rules import blocked_reason, call_decision, named_rule, policy_call, tool_use
from bot.slack.context import Origin, SlackContext

log = logging.getLogger(__name__)

GROUP_CACHE_SECONDS = CACHE_SECONDS
ESCALATED_TO = "escalated_to"  # the policy note of a request escalated at its deadline: who it went to
RULE_NOTE = "rule"  # the policy note naming the rule a request was asked under (bot.slack.approvals.rules)
MAX_DMS = 50  # approvers one request is sent to by DM (``where: dm``); the rest see it in the thread
MAX_REMINDED = 100  # approvers a request reminds and lists in App Home (each a views.publish); the rest: the thread


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
        people: People | None = None,
        required: int = 1,
        requester_counts: bool = True,
        rule: str | None = None,
        editable: tuple[str, ...] = (),
    ) -> None:
        self.spec = spec
        self.client = client
        self.policy = policy
        self.blocked = blocked
        self.required = required  # distinct approvals needed (a quorum above 1: bot.store.quorum)
        self.requester_counts = requester_counts  # whether the requester's own approval counts
        self.rule = rule  # the policy rule these approvers are of (its name), None without APPROVAL_POLICY
        self.editable = editable  # the arguments an approver may change before approving (the rule's ``edit``)
        if entries is None:
            entries = (spec,) if spec in ("requester", "channel") else tuple(spec.split(","))
        self.entries = entries
        self.users = {i for i in entries if USER_ID.fullmatch(i)}
        self.groups = [i for i in entries if GROUP_ID.fullmatch(i) or GROUP_HANDLE.fullmatch(i)]
        self.channels = [i[len(CHANNEL_PREFIX) :] for i in entries if i.startswith(CHANNEL_PREFIX)]
        self.people = people if people is not None else People(client)  # groups' and channels' members, cached

    def for_approval(self, ctx: SlackContext, approval: ApprovalPayload) -> ApproverPolicy:
        """The approvers of an approval request already asked (``approval``, in ``ctx``): those of the rule it was
        asked under, as its policy notes recorded it (``rule``), with those it was escalated to. Every decision on a
        request (who may approve, how many, Edit, grants, Approve all, reminders, Home) goes through here, so each
        is made under the same rule in every process: a rule matched on the requester's user groups is not matched
        again from a cache that may not know them (another process, a restart)."""
        return self.for_call(
            ctx,
            approval.tool_name,
            approval.args,
            escalated_to=approval.policy.get(ESCALATED_TO, ()),
            rule=approval.policy.get(RULE_NOTE),
        )

    def for_call(
        self,
        ctx: SlackContext,
        tool_name: str,
        args: dict[str, object],
        *,
        escalated_to: object = (),
        rule: object = None,
    ) -> ApproverPolicy:
        """The approvers of a call of ``tool_name`` with ``args`` in ``ctx``: these (no policy), or the rule's
        (sharing the group cache): ``rule``, the name of the rule it was asked under (:meth:`for_approval`), else
        the matching one; and ``escalated_to`` (the ids and handles its request was escalated to at its deadline: a
        rule's ``on_deadline: escalate``, kept in the request's policy notes); blocked when the rule can't be
        satisfied for ``ctx.requester``."""
        if self.policy is None:
            return self
        rule = rule if isinstance(rule, str) and rule else named_rule(tool_name, args)
        original_name, prompt = tool_name, tool_use(tool_name, args) is not None
        tool_name, args = policy_call(tool_name, args)
        decision = self.policy.decide(
            tool_name,
            args,
            requester=ctx.requester,
            channel=ctx.channel_id,
            tool_requires=True,
            named_rule=rule,
            requester_groups=self.people.known_groups_of(ctx.requester) if ctx.requester else (),
        )
        blocked = blocked_reason(decision)
        entries = decision.approvers
        if isinstance(escalated_to, (list, tuple)):  # on_deadline: escalate: they may decide too, once escalated
            entries = tuple(dict.fromkeys([*entries, *(str(e) for e in escalated_to)]))
        spec = entries[0] if entries in (("requester",), ("channel",)) else ",".join(entries)
        return ApproverPolicy(
            spec,
            client=self.client,
            entries=entries,
            blocked=blocked,
            people=self.people,
            required=decision.required,
            requester_counts=decision.requester_counts,
            rule=decision.name,
            editable=decision.edit if tool_name == original_name or prompt else (),
        )

    @property
    def quorum(self) -> bool:
        """Whether a call needs several distinct approvals (``required`` above 1)."""
        return self.required > 1

    def excludes_requester(self, ctx: SlackContext, user: str) -> bool:
        """Whether ``user`` is the requester of ``ctx`` and their own approval doesn't count (``requester_counts``
        false: by default once more than one approval is required)."""
        return not self.requester_counts and bool(ctx.requester) and user == ctx.requester

    def channel_wide(self, requester: str) -> bool:
        """Whether anyone in the run's channel may decide, for a run of ``requester`` (``""``: nobody in
        particular): an entry ``channel``, or ``requester`` when the run has none, whatever else is listed beside
        it; never when :attr:`blocked`. The one reading of it: :meth:`admits` and :meth:`describe` use it, and so
        does the MCP server's ``approvals_anyone_in_channel`` refusal
        (:func:`bot.mcp_server.callers.check_approval`)."""
        if self.blocked is not None:
            return False
        return any(entry == "channel" or (entry == "requester" and not requester) for entry in self.entries)

    async def for_request(self, ctx: SlackContext, tool_name: str, args: dict[str, object]) -> ApproverPolicy:
        """:meth:`for_call` under the rule the approval gate will decide the request by
        (:func:`bot.slack.approvals.rules.call_decision`: the requester's user groups looked up as the gate looks
        them up): the approvers the request will be decided by, before it is asked."""
        if self.policy is None:
            return self
        decision = await call_decision(
            self.policy,
            tool_name,
            args,
            requester=ctx.requester,
            channel=ctx.channel_id,
            tool_requires=True,
            people=self.people,
        )
        return self.for_call(ctx, tool_name, args, rule=decision.name)

    async def admits(self, ctx: SlackContext, user: str, *, where: Origin | None) -> bool:
        """Whether ``user`` may decide on a tool call of the run in ``ctx``, asking from ``where`` (None: a surface
        with no channel, e.g. a modal's submission): the requester; a channel-wide entry (``channel``, or
        ``requester`` of a run asked for nobody in particular) only from the run's channel or a surface with none;
        the named users and user groups' members from anywhere. Nobody when :attr:`blocked`."""
        if self.blocked is not None or self.excludes_requester(ctx, user):
            return False
        in_channel = where is None or where.channel_id is None or where.channel_id == ctx.channel_id
        if in_channel and self.channel_wide(ctx.requester):
            return True
        for entry in self.entries:
            if entry == "channel" or (entry == "requester" and not ctx.requester):
                continue  # channel-wide: above
            elif entry == "requester":
                if user == ctx.requester:
                    return True
            elif entry in self.users:
                if user == entry:
                    return True
            elif entry in self.groups:
                if user in await self.group_members(entry):
                    return True
            elif entry.startswith(CHANNEL_PREFIX) and user in await self.people.channel_members(entry[8:]):
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
        if self.quorum:
            return self._describe_quorum(ctx, here)
        if self.spec == "channel":
            return f"Anyone in {here} can approve or decline"
        if self.spec == "requester":
            if not ctx.requester:
                return f"Anyone in {here} can approve or decline"
            return f"Waiting for <@{ctx.requester}> to approve or decline"
        names = [f"<@{u}>" for u in sorted(self.users)] + self._group_names()
        if "requester" in self.entries and ctx.requester:
            names.insert(0, f"<@{ctx.requester}>")
        if self.channel_wide(ctx.requester):
            names.insert(0, f"anyone in {here}")
        return "Waiting for " + ", ".join(names or ["nobody yet"]) + " to approve or decline"

    def _describe_quorum(self, ctx: SlackContext, here: str) -> str:
        """``describe`` of a call needing ``required`` approvals: who may give them, and that the requester's
        doesn't count when it doesn't."""
        names = [f"<@{u}>" for u in sorted(self.users) if not self.excludes_requester(ctx, u)]
        names += self._group_names()
        if "requester" in self.entries and ctx.requester and self.requester_counts:
            names.insert(0, f"<@{ctx.requester}>")
        if self.channel_wide(ctx.requester):
            names.insert(0, f"anyone in {here}")
        text = f"Needs {self.required} approvals from " + ", ".join(names or ["nobody yet"])
        if not self.requester_counts and ctx.requester:
            text += f" (not <@{ctx.requester}>, who asked)"
        return text + "; one decline is enough to decline"

    async def people_to_ask(self, ctx: SlackContext, *, limit: int = MAX_DMS) -> list[str]:
        """The user ids a request asked by DM (a rule's ``where: dm``) goes to: the named users, the members of the
        named user groups, the requester when their approval counts (not for ``channel`` or ``channel:C...``:
        a channel is asked in the channel); at most ``limit``, in that order."""
        people = sorted(self.users)
        if "requester" in self.entries and ctx.requester and self.requester_counts:
            people.insert(0, ctx.requester)
        for group in self.groups:
            people += sorted(await self.group_members(group))
        out = [p for p in dict.fromkeys(people) if not self.excludes_requester(ctx, p)]
        return out[:limit]

    async def deciders(self, ctx: SlackContext, *, limit: int = MAX_REMINDED) -> list[str]:
        """The people who may decide on this call, as reminders and App Home inboxes need them (docs/approvals.md
        "Reminders and App Home"): :meth:`people_to_ask`'s (the named users, the requester when their approval
        counts, the named user groups' members), then the members of the channels named (``channel:C...``,
        :class:`~bot.slack.approvals.people.People`, the app's own bot user left out); never the requester whose
        approval doesn't count, nobody when :attr:`blocked`. A channel-wide entry (``channel``: anyone in the run's
        channel) names nobody in particular: the requester's inbox and the thread are where they see it. At most
        ``limit``, in that order."""
        if self.blocked is not None:
            return []
        people = await self.people_to_ask(ctx, limit=limit)
        if self.channels:
            me = await self.people.app_user()  # a channel's members include the app's bot user
            for channel in self.channels:
                people += sorted(m for m in await self.people.channel_members(channel) if m != me)
        out = [p for p in dict.fromkeys(people) if not self.excludes_requester(ctx, p)]
        return out[:limit]

    def _group_names(self) -> list[str]:
        """The approver groups and channels as mrkdwn: ``<!subteam^S1>`` (a handle whose id is known: the same; else
        ``@handle``), ``members of <#C1>``."""
        names = []
        for group in self.groups:
            group_id = group if GROUP_ID.fullmatch(group) else self.people.known_group_id(group)
            names.append(f"<!subteam^{group_id}>" if group_id else group)
        return names + [f"members of <#{c}>" for c in self.channels]

    def refusal(self, ctx: SlackContext, user: str | None = None) -> str:
        """What someone not allowed to decide is told (``user``: who asked, when known)."""
        if self.blocked is not None:
            return f"Nobody can approve this: {self.blocked}."
        if user is not None and self.excludes_requester(ctx, user):
            return (
                f"This needs {self.required} approvals from people other than you: your own request can't count"
                " toward them."
            )
        if self.spec == "channel" or (self.spec == "requester" and not ctx.requester):
            return f"Only people in <#{ctx.channel_id}> can approve or decline this."
        if self.channel_wide(ctx.requester):
            return f"Only people in <#{ctx.channel_id}> and the configured approvers can approve or decline this."
        if self.spec == "requester":
            return f"Only <@{ctx.requester}> can approve or decline this."
        return "Only the configured approvers can approve or decline this."

    async def group_members(self, group: str) -> set[str]:
        """The members of user group ``group`` (an ``S...`` id or ``@handle``; :class:`People`, cached a minute;
        the last known members, or none, when Slack refuses)."""
        return await self.people.group_members(group)


def approver_policy(settings: Settings, *, client: AsyncWebClient, rules: Policy | None) -> ApproverPolicy:
    """``APPROVERS``', or with ``APPROVAL_POLICY`` its ``rules`` (its file as loaded once the settings were
    checked: :func:`~bot.approval_policy.load_policy`)."""
    return ApproverPolicy(settings.approvers, client=client, policy=rules)
