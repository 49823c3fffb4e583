"""Standing grants in Slack (issue 23 part 4; the store: :mod:`bot.store.grants`): where a call's rule allows
(``grants:`` of ``APPROVAL_POLICY``), its request offers "Approve for this thread" / "... in this channel" /
"Approve always (these arguments)" beside Approve (once); the approval then also records a grant, lasting the rule's
``grant_for``. A later call the grant covers runs without asking (:meth:`StandingGrants.gate`, the agent's
approval gate) and the thread says which grant approved it. Each use is audited and counted; the person's grants are
listed on their App Home with Revoke (:mod:`bot.slack.home`).

An outside agent's approval request (the MCP server's ``request_approval``) is never covered and offers no grant:
its answer is a person's decision each time. Claude Code's permission prompt (the MCP server's ``approve_tool_use``,
its request carrying a ``tool_use`` digest of its caller, tool and whole input: :func:`~bot.slack.approvals.rules.
tool_use`) offers the ``always`` grant only ("these arguments": the same caller's same tool with the same input),
where its rule allows it: each prompt opens its own thread, and a channel's grant would cover every caller asking
there, so a grant given on one caller's prompt never covers another caller's.
A grant covers a later call only when that call matches the same
rule, the rule still allows the grant's scope, needs one approval (a quorum is never reached by a grant), and its
giver may still approve it; a grant the giver revokes while a call checks it is either used before the revoke
(counted, and the revoke says so) or not at all (the call is asked).
"""

from __future__ import annotations

import inspect
import logging
from datetime import UTC, datetime, timedelta
from typing import Any

from bot.agent.approvals import ApprovalGate, GateVerdict
from bot.agent.asking import APPROVAL_TOOL
from bot.agent.decisions import args_hash
from bot.agent.state import RunState
from bot.agent.tools import Tool
from bot.approval_policy import Decision, Policy
from bot.errors import StoreCorrupt, StoreUnavailable
from bot.ops import audit
from bot.slack.approvals.rules import named_rule, policy_call, policy_gate, tool_use
from bot.slack.context import SlackContext
from bot.slack.questions.approvers import ApproverPolicy
from bot.slack.render.mrkdwn import clip
from bot.slack.render.safe_text import safe_mrkdwn
from bot.slack.transport.web_api import SlackWeb
from bot.store.grants import Grant as StoredGrant
from bot.store.grants import GrantStore, Scope, new_grant_id, scope_key

log = logging.getLogger(__name__)

STANDING: tuple[Scope, ...] = ("thread", "channel", "always")
SCOPE_WORDS: dict[str, str] = {
    "thread": "for this thread",
    "channel": "in this channel",
    "always": "always, with these arguments",
}
"""How each scope is said on a button, an outcome and the Home list (Slack: button text <= 75 chars)."""


def when(expires_ms: float) -> str:
    """A time as Slack shows it in each reader's time zone (``<!date^...>``), with a UTC fallback."""
    seconds = int(expires_ms)
    fallback = datetime.fromtimestamp(seconds, tz=UTC).strftime("%Y-%m-%d %H:%M UTC")
    return f"<!date^{seconds}^{{date_short_pretty}} {{time}}|{fallback}>"


def covered_note(grant: StoredGrant) -> str:
    """The thread's line for a call a grant approved: "`deploy` ran without asking: a standing grant from @bob
    (for this thread, expires ...) approved it." (mrkdwn)."""
    tool = safe_mrkdwn(clip(policy_call(grant.tool_name, grant.args)[0], 100))  # an outside request: its action
    expires = when(grant.expires_at.timestamp())
    return (
        f":unlock: `{tool}` ran without asking: a standing grant from <@{grant.granted_by}>"
        f" ({SCOPE_WORDS[grant.scope]}, expires {expires}) approved it."
    )


def outside_scopes(tool_name: str, args: dict[str, Any]) -> tuple[Scope, ...]:
    """The scopes a call's grant may have, before its rule says which: all (:data:`STANDING`) for the bot's own
    tools; ``always`` for Claude Code's permission prompt (its ``tool_use`` digest names its caller and whole
    input); none for any other outside agent's request (a person's decision each time)."""
    if tool_name != APPROVAL_TOOL:
        return STANDING
    return ("always",) if tool_use(tool_name, args) is not None else ()


class StandingGrants:
    """Standing grants of ``policy``'s rules, kept in ``store``; ``approvers`` says who may approve a call (a grant's
    giver must still be one); ``web`` posts the thread's line of a covered call."""

    def __init__(self, store: GrantStore, *, policy: Policy, approvers: ApproverPolicy, web: SlackWeb) -> None:
        self.store = store
        self.policy = policy
        self.approvers = approvers
        self.web = web

    def scopes(self, ctx: SlackContext, tool_name: str, args: dict[str, Any], *, rule: object = None) -> list[Scope]:
        """The standing grants an approver may give on a call of ``tool_name`` with ``args`` in ``ctx`` (in
        :data:`STANDING` order; none for a call needing more than one approval); ``rule``: the rule its request was
        asked under (its policy notes' ``rule``; else the matching one)."""
        standing = self._decide(ctx, tool_name, args, rule=rule).rule.standing_grants
        return [s for s in outside_scopes(tool_name, args) if s in standing]

    async def may_give(
        self, ctx: SlackContext, tool_name: str, args: dict[str, Any], *, by: str, rule: object = None
    ) -> bool:
        """Whether ``by`` may give a standing grant on this call: one of its rule's own approvers (``rule``: the
        rule its request was asked under), wherever they ask from; not a person it was only escalated to
        (``on_deadline: escalate``), who decides that request once. Raises ``StoreUnavailable`` /
        ``SlackRefused`` as :meth:`~bot.slack.questions.approvers.ApproverPolicy.admits` (a user group's or a
        channel's members looked up)."""
        return await self.approvers.for_call(ctx, tool_name, args, rule=rule).admits(ctx, by, where=None)

    def _decide(self, ctx: SlackContext, tool_name: str, args: dict[str, Any], *, rule: object = None) -> Decision:
        """The decision of ``rule`` (the name the call's request or gate decided under; the one place that
        matched it, with the requester's user groups) for this call, else of the rule that matches it."""
        name, call_args = policy_call(tool_name, args)
        return self.policy.decide(
            name,
            call_args,
            requester=ctx.requester,
            channel=ctx.channel_id,
            tool_requires=True,
            named_rule=rule if isinstance(rule, str) and rule else named_rule(tool_name, args),
        )

    def key(self, scope: Scope, ctx: SlackContext, tool_name: str, args: dict[str, Any]) -> str:
        """The scope key a grant of ``scope`` on this call is kept under (:func:`bot.store.grants.scope_key`)."""
        return scope_key(
            scope, tool_name=tool_name, channel_id=ctx.channel_id, thread_ts=ctx.thread_ts, args_hash=args_hash(args)
        )

    async def give(
        self,
        scope: Scope,
        ctx: SlackContext,
        *,
        by: str,
        tool_name: str,
        args: dict[str, Any],
        run_id: str,
        tool_call_id: str,
        rule: object = None,
    ) -> StoredGrant | None:
        """Record the grant ``by`` gave approving ``tool_call_id`` (``scope`` must be one the call's rule allows, and
        ``by`` one of the rule's own approvers, as :meth:`_covering` asks of a grant it uses: else None, nothing
        recorded; a person the request was escalated to decides it, and it alone). Raises ``StoreUnavailable``."""
        if scope not in self.scopes(ctx, tool_name, args, rule=rule):
            return None
        decision = self._decide(ctx, tool_name, args, rule=rule)
        if not await self.may_give(ctx, tool_name, args, by=by, rule=decision.name):
            return None
        now = await self.store.now()
        grant = StoredGrant(
            grant_id=new_grant_id(),
            team_id=ctx.team_id,
            granted_by=by,
            scope=scope,
            tool_name=tool_name,
            rule=decision.name,
            channel_id=ctx.channel_id if scope != "always" else "",
            thread_ts=ctx.thread_ts if scope == "thread" else "",
            args_hash=args_hash(args) if scope == "always" else "",
            args=args if scope == "always" else {},
            granted_at=now,
            expires_at=now + timedelta(seconds=decision.grant_for),
            run_id=run_id,
            tool_call_id=tool_call_id,
        )
        await self.store.give(grant)
        audit.grant_given(grant.model_dump(mode="json"))
        return grant

    async def _covering(
        self, ctx: SlackContext, tool: Tool, args: dict[str, Any], *, count: bool, rule: str | None
    ) -> StoredGrant | None:
        """The grant that covers this call (its use counted when ``count``: :meth:`GrantStore.use
        <bot.store.grants.GrantStore.use>`; else a look), or None."""
        decision = self._decide(ctx, tool.id, args, rule=rule)
        standing = decision.rule.standing_grants
        if not standing:
            return None
        approvers = self.approvers.for_call(ctx, tool.id, args, rule=decision.name)
        for scope in outside_scopes(tool.id, args):
            if scope not in standing:
                continue
            key = self.key(scope, ctx, tool.id, args)
            for grant in await self.store.live(ctx.team_id, key):  # several people's, several rules': any that fits
                if grant.rule != decision.name or not await approvers.admits(ctx, grant.granted_by, where=None):
                    continue
                if not count:
                    return grant
                used = await self.store.use(ctx.team_id, key, grant_id=grant.grant_id)
                if used is not None:  # (else it lapsed or was revoked meanwhile: the next one)
                    return used
        return None

    def gate(self) -> ApprovalGate:
        """The agent's approval gate: ``policy``'s (:func:`~bot.slack.approvals.rules.policy_gate`), and a call that
        would be asked but a live grant covers runs unasked (its use counted, audited and told in the thread when
        it runs: ``GateVerdict.use``). With Redis down, grants cover nothing (the call is asked)."""
        base = policy_gate(self.policy, people=self.approvers.people)

        async def gate(tool: Tool, args: dict[str, Any], state: RunState, tool_requires: bool) -> GateVerdict:
            said = base(tool, args, state, tool_requires)
            verdict = await said if inspect.isawaitable(said) else said
            if not verdict.needs_approval or verdict.decline is not None:
                return verdict
            try:
                ctx = SlackContext.of(state)
            except StoreCorrupt:
                return verdict
            try:
                if await self._covering(ctx, tool, args, count=False, rule=verdict.rule) is None:
                    return verdict
            except (StoreUnavailable, StoreCorrupt):
                return verdict

            async def use() -> bool:
                try:
                    grant = await self._covering(ctx, tool, args, count=True, rule=verdict.rule)
                except (StoreUnavailable, StoreCorrupt):
                    return False
                if grant is None:
                    return False  # revoked or expired since the look: asked after all
                audit.grant_used(state, tool.id, args_hash(args), grant.model_dump(mode="json"))
                await self.web.post(ctx.channel_id, thread_ts=ctx.thread_ts, text=covered_note(grant))
                return True

            return GateVerdict(False, use=use, rule=verdict.rule, notes=verdict.notes)

        return gate
