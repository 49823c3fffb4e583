"""The decision for one tool call: :meth:`Policy.decide` tries the rules in order, the first that matches decides
(:class:`Decision`), and ``why`` keeps every rule tried with each condition checked (:class:`Tried`, :class:`Check`),
which ``python -m bot policy explain`` prints. :func:`unsatisfiable` says why a rule can't get enough approvals for
a requester (such a call is declined at once, never left waiting)."""

from __future__ import annotations

import fnmatch
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from bot.approval_policy.conditions import lookup
from bot.approval_policy.rules import REQUESTER, RUN_CHANNEL, Arguments, Escalation, Grant, Rule


@dataclass(frozen=True)
class Check:
    """One condition checked for a rule: ``what`` (``tool``, ``requester``, ``when amount``), ``detail`` (what
    was compared), ``held``."""

    what: str
    detail: str
    held: bool


@dataclass(frozen=True)
class Tried:
    """A rule tried for a call: its number (from 1), its name, the checks and whether all held."""

    number: int
    name: str
    checks: tuple[Check, ...]

    @property
    def matched(self) -> bool:
        """Whether every check held."""
        return all(c.held for c in self.checks)


@dataclass(frozen=True)
class Decision:
    """What the policy says of one call.

    - ``rule`` / ``number`` / ``name``: the rule that matched (numbers count from 1);
    - ``needs_approval``: whether the call waits for a person (``require``, or the tool's own say);
    - ``approvers``, ``required``, ``requester_counts``, ``where``, ``deadline`` (seconds; None: ``ASK_TTL_SECONDS``),
      ``on_deadline``, ``arguments``, ``edit``, ``grants``: the rule's, defaults applied;
    - ``unsatisfiable``: why the call can't get enough approvals for this requester (it is declined at once,
      never left waiting), or None;
    - ``why``: every rule tried, in order, up to and including the match, with each condition checked.
    """

    rule: Rule
    number: int
    name: str
    needs_approval: bool
    unsatisfiable: str | None
    why: tuple[Tried, ...]

    @property
    def approvers(self) -> tuple[str, ...]:
        """The rule's approvers (``requester``, ``channel``, ``channel:C...``, ids, ``@handles``)."""
        return self.rule.approvers

    @property
    def required(self) -> int:
        """Distinct approvals needed."""
        return self.rule.required

    @property
    def requester_counts(self) -> bool:
        """Whether the requester's own approval counts."""
        return self.rule.counts_requester

    @property
    def where(self) -> str:
        """``thread``, ``dm`` or ``channel:C...``."""
        return self.rule.where

    @property
    def deadline(self) -> int | None:
        """Seconds, or None for ``ASK_TTL_SECONDS``."""
        return self.rule.deadline

    @property
    def on_deadline(self) -> Literal["decline"] | Escalation:
        """``decline`` or an :class:`Escalation`."""
        return self.rule.on_deadline or "decline"

    @property
    def arguments(self) -> Arguments:
        """``shown`` or ``details-only``."""
        return self.rule.arguments

    @property
    def edit(self) -> tuple[str, ...]:
        """Argument names an approver may change."""
        return self.rule.edit

    @property
    def grants(self) -> tuple[Grant, ...]:
        """The grants an approver may give (``once`` first, always)."""
        return self.rule.grants

    @property
    def grant_for(self) -> int:
        """Seconds a standing grant given under this rule lasts."""
        return self.rule.grant_for


def rule_name(rule: Rule, number: int) -> str:
    """A rule's name, or ``rule N`` when it has none."""
    return rule.name or f"rule {number}"


class Policy:
    """A loaded, validated policy: ``rules`` in order (the last matches every call); ``source``: the file it came
    from, or a description (``APPROVERS``)."""

    def __init__(self, rules: Sequence[Rule], *, source: str) -> None:
        self.rules = tuple(rules)
        self.source = source

    @classmethod
    def from_approvers(cls, spec: str) -> Policy:
        """The one-rule policy ``APPROVERS`` (``requester``, ``channel`` or ``"U1,S2,..."``, as validated by
        :mod:`bot.config`) stands for: every call whose tool requires approval, one approval from them."""
        approvers = (spec,) if spec in (REQUESTER, RUN_CHANNEL) else tuple(spec.split(","))
        return cls([Rule(name="APPROVERS", approvers=approvers)], source="APPROVERS")

    def longest_wait(self, ask_ttl: float) -> float:
        """Seconds the longest request under these rules may wait for its decision: a rule's ``deadline`` (else
        ``ask_ttl``), twice that when ``on_deadline`` escalates (the escalation waits the deadline again); at least
        ``ask_ttl`` (seconds: what a question waits)."""
        waits = [(r.deadline or ask_ttl) * (2 if r.on_deadline is not None else 1) for r in self.rules]
        return max([ask_ttl, *waits])

    def decide(
        self,
        tool_name: str,
        args: Mapping[str, Any],
        *,
        requester: str,
        channel: str,
        tool_requires: bool,
        requester_groups: Collection[str] = (),
        members: Mapping[str, Collection[str]] | None = None,
        named_rule: str | None = None,
    ) -> Decision:
        """The decision for a call of ``tool_name`` with ``args`` asked by ``requester`` (a user id; ``""``: nobody
        in particular) in ``channel`` (a channel id); ``tool_requires``: the tool's own ``require_approval``;
        ``requester_groups``: the user groups (ids and handles) the requester is in, for rules' ``requester.groups``;
        ``members``: resolved members of approver groups and channels (absent ones count as enough people).
        ``named_rule``: the name of the rule that decides, matched or not (an MCP caller's ``policy_rule``); a name
        no rule has: the rules match as usual."""
        named = self.named(named_rule) if named_rule is not None else None
        if named is not None:
            number, found = named
            needs = found.require == "always" or (found.require == "tool" and tool_requires)
            return Decision(
                rule=found,
                number=number,
                name=rule_name(found, number),
                needs_approval=needs,
                unsatisfiable=unsatisfiable(found, requester, members=members) if needs else None,
                why=(),
            )
        tried: list[Tried] = []
        for number, rule in enumerate(self.rules, start=1):
            checks = tuple(_checks(rule, tool_name, args, requester, channel, requester_groups))
            attempt = Tried(number=number, name=rule_name(rule, number), checks=checks)
            tried.append(attempt)
            if attempt.matched:
                needs = rule.require == "always" or (rule.require == "tool" and tool_requires)
                return Decision(
                    rule=rule,
                    number=number,
                    name=attempt.name,
                    needs_approval=needs,
                    unsatisfiable=unsatisfiable(rule, requester, members=members) if needs else None,
                    why=tuple(tried),
                )
        raise AssertionError("the last rule matches every call (checked at load)")  # pragma: no cover

    def named(self, name: str) -> tuple[int, Rule] | None:
        """The rule called ``name`` (its ``name:``, or ``rule N`` for an unnamed one: :func:`rule_name`) and its
        number (from 1), or None."""
        return next(((n, r) for n, r in enumerate(self.rules, start=1) if rule_name(r, n) == name), None)

    def warnings(self) -> list[str]:
        """A line per rule that can't be satisfied for some requesters, and per rule whose standing ``grants`` are
        never offered (it needs several approvals: a grant is one person's, so it would stand in for the others;
        :meth:`bot.slack.approvals.grants.StandingGrants.scopes`). ``policy check`` prints them, and the bot logs
        them as it starts."""
        out = []
        for number, rule in enumerate(self.rules, start=1):
            if given := ", ".join(g for g in rule.grants if g != "once" and g not in rule.standing_grants):
                out.append(
                    f"rule {number} ({rule_name(rule, number)!r}): grants {given} are never offered: it needs "
                    f"{rule.required} approvals (a standing grant is one person's)"
                )
            candidates = set(rule.named_users()) | set(rule.requester.users)
            if rule.requester.users and not (rule.requester.groups or rule.requester.channels):
                candidates = set(rule.requester.users)  # only they can hit it
            stuck = sorted(u for u in candidates if unsatisfiable(rule, u) is not None)
            if stuck:
                out.append(
                    f"rule {number} ({rule_name(rule, number)!r}): can't be satisfied when "
                    + " or ".join(stuck)
                    + f" asks: {unsatisfiable(rule, stuck[0])} (their calls are declined at once)"
                )
        return out


def unsatisfiable(rule: Rule, requester: str, *, members: Mapping[str, Collection[str]] | None = None) -> str | None:
    """Why ``rule`` can't get ``required`` distinct approvals for a call of ``requester`` (``""``: nobody in
    particular), or None when it can (a user group or channel not in ``members`` counts as enough people)."""
    can = rule.capacity(requester or None, members=members)
    if can >= rule.required:
        return None
    if rule.counts_requester:
        return f"{rule.required} distinct approvers are required but only {can} can approve"
    return (
        f"{rule.required} distinct approvers are required but only {can} can approve besides the requester"
        " (whose own approval doesn't count)"
    )


def _checks(
    rule: Rule,
    tool_name: str,
    args: Mapping[str, Any],
    requester: str,
    channel: str,
    requester_groups: Collection[str],
) -> list[Check]:
    globs = ", ".join(rule.tool)
    held = any(fnmatch.fnmatchcase(tool_name, g) for g in rule.tool)
    out = [Check("tool", f"{tool_name!r} {'matches' if held else 'does not match'} {globs}", held)]
    who = rule.requester
    if not who.is_open():
        reasons = []
        if requester and requester in who.users:
            reasons.append(f"{requester} is one of the users")
        in_groups = [g for g in who.groups if g in requester_groups]
        if in_groups:
            reasons.append(f"{requester or 'the requester'} is in {', '.join(in_groups)}")
        if channel and channel in who.channels:
            reasons.append(f"the channel {channel} is one of the channels")
        listed = "; ".join(
            f"{k} {', '.join(v)}"
            for k, v in (("users", who.users), ("groups", who.groups), ("channels", who.channels))
            if v
        )
        detail = (
            "; ".join(reasons) if reasons else f"{requester or 'nobody'} in {channel or 'no channel'} is not: {listed}"
        )
        out.append(Check("requester", detail, bool(reasons)))
    for path, condition in rule.when.items():
        found, value = lookup(args, path)
        for detail, ok in condition.check(found, value):
            out.append(Check(f"when {path}", detail, ok))
    return out
