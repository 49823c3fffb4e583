"""``python -m bot policy check FILE`` and ``python -m bot policy explain TOOL 'ARGS_JSON' --user U...``: the
approval policy (:mod:`bot.approval_policy`) from the command line, without Slack or Redis.

- ``check``: validate the file; exit 0 printing its rules as a table and a ``warning:`` line per rule that can't
  be satisfied for some requesters; exit 2 with one ``error:`` line per problem.
- ``explain``: which rule decides a call and why, each condition checked, rule by rule up to the match; the
  file is ``--file``, else ``APPROVAL_POLICY``, else the one-rule policy ``APPROVERS`` stands for. ``--group``
  names the user groups the requester is in (ids or handles; nothing is looked up in Slack); ``--tool-requires``
  says whether the tool itself requires approval (default: say what happens either way).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Sequence
from typing import Any

from bot.approval_policy.decisions import Decision, Policy, rule_name
from bot.approval_policy.loading import PolicyError, load_policy
from bot.approval_policy.rules import CHANNEL_ID, USER_ID, Rule
from bot.errors import ConfigError


def rows(policy: Policy) -> list[list[str]]:
    """The rules as table rows (header first): number, name, tool, when, requester, require, approvers, required,
    where, deadline, arguments, edit, grants."""
    out = [
        [
            "#",
            "name",
            "tool",
            "when",
            "requester",
            "require",
            "approvers",
            "required",
            "where",
            "deadline",
            "arguments",
            "edit",
            "grants",
        ],
    ]
    for number, rule in enumerate(policy.rules, start=1):
        out.append(
            [
                str(number),
                rule_name(rule, number),
                ", ".join(rule.tool),
                "; ".join(c.summary(path) for path, c in rule.when.items()) or "-",
                _requester(rule),
                rule.require,
                ", ".join(rule.approvers),
                _required(rule),
                rule.where,
                f"{rule.deadline}s" if rule.deadline else "ASK_TTL_SECONDS",
                rule.arguments,
                ", ".join(rule.edit) or "-",
                ", ".join(rule.grants),
            ]
        )
    return out


def _requester(rule: Rule) -> str:
    who = rule.requester
    if who.is_open():
        return "anyone"
    parts = [*who.users, *who.groups, *(f"in {c}" for c in who.channels)]
    return ", ".join(parts)


def _required(rule: Rule) -> str:
    if rule.counts_requester:
        return "1" if rule.required == 1 else f"{rule.required} (requester counts)"
    return f"{rule.required} (not the requester)"


def table(data: list[list[str]]) -> str:
    """Rows as aligned columns, two spaces apart."""
    widths = [max(len(row[i]) for row in data) for i in range(len(data[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in data)


def explain(decision: Decision, *, tool_requires: bool | None) -> str:
    """The lines ``policy explain`` prints for ``decision`` (``tool_requires`` None: the tool's say unknown)."""
    lines = []
    for tried in decision.why:
        lines.append(f"rule {tried.number} ({tried.name!r}): {'matches' if tried.matched else 'no match'}")
        for check in tried.checks:
            lines.append(f"  {'yes' if check.held else 'no '}  {check.what}: {check.detail}")
    rule = decision.rule
    lines.append(f"decided by rule {decision.number} ({decision.name!r})")
    if rule.require == "tool" and tool_requires is None:
        needs = "if the tool requires it (require: tool; --tool-requires yes|no to say)"
    else:
        because = {"always": "require: always", "never": "require: never"}.get(
            rule.require, "the tool " + ("requires it" if tool_requires else "does not require it")
        )
        needs = ("yes" if decision.needs_approval else "no") + f" ({because})"
    lines.append(f"  needs approval: {needs}")
    lines.append(f"  approvers: {', '.join(rule.approvers)}")
    lines.append(f"  required: {_required(rule)}")
    lines.append(f"  where: {rule.where}")
    lines.append(f"  deadline: {f'{rule.deadline}s' if rule.deadline else 'ASK_TTL_SECONDS'}, then {_then(decision)}")
    lines.append(f"  arguments: {rule.arguments}")
    lines.append(f"  edit: {', '.join(rule.edit) or 'none'}")
    lines.append(f"  grants: {', '.join(rule.grants)}")
    if decision.unsatisfiable:
        lines.append(f"  can't be satisfied: {decision.unsatisfiable}")
    return "\n".join(lines)


def _then(decision: Decision) -> str:
    then = decision.on_deadline
    return "decline" if then == "decline" else "escalate to " + ", ".join(then.escalate)


def main(argv: Sequence[str], *, deployed: Callable[[], Policy]) -> int:
    """``python -m bot policy ...``; returns the exit status (2: a bad file or arguments, ``error:`` lines).
    ``deployed``: the deployment's policy (``APPROVAL_POLICY``'s file, else the one rule ``APPROVERS`` stands for),
    read only when ``explain`` is given no ``--file``; it raises ``ConfigError`` for a bad setting."""
    parser = argparse.ArgumentParser(prog="python -m bot policy", description="Check and explain an approval policy.")
    sub = parser.add_subparsers(dest="action", required=True)
    check = sub.add_parser("check", help="validate a policy file and print its rules")
    check.add_argument("file")
    exp = sub.add_parser("explain", help="which rule applies to a call, and why")
    exp.add_argument("tool", help="the tool's name (the MCP server's request_approval: its action)")
    exp.add_argument("args", metavar="ARGS_JSON", help="the call's arguments, a JSON object")
    exp.add_argument("--user", required=True, help="who asked (a user id)")
    exp.add_argument("--channel", default="", help="the run's channel id")
    exp.add_argument("--group", action="append", default=[], help="a user group the requester is in (repeatable)")
    exp.add_argument("--file", help="the policy file (default: APPROVAL_POLICY, else APPROVERS' one rule)")
    exp.add_argument("--tool-requires", choices=["yes", "no"], help="whether the tool itself requires approval")
    ns = parser.parse_args(list(argv))
    try:
        if ns.action == "check":
            return _check(ns.file)
        return _explain(ns, deployed)
    except ConfigError as exc:
        lines = exc.problems if isinstance(exc, PolicyError) else str(exc).splitlines()
        for line in lines:
            print(f"error: {line}", file=sys.stderr)
        return 2


DM_ID = re.compile(r"D[A-Z0-9_]{1,63}")  # a DM's channel id (CHANNEL_ID: channels and private ones)


def _check(file: str) -> int:
    policy = load_policy(file)
    print(f"{file}: {len(policy.rules)} rule{'s' if len(policy.rules) != 1 else ''}, valid")
    print(table(rows(policy)))
    for warning in policy.warnings():
        print(f"warning: {warning}")
    return 0


def _explain(ns: argparse.Namespace, deployed: Callable[[], Policy]) -> int:
    try:
        args: Any = json.loads(ns.args)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"ARGS_JSON is not JSON ({exc})") from None
    if not isinstance(args, dict):
        raise ConfigError("ARGS_JSON must be a JSON object, e.g. '{\"amount\": 150}'")
    problems = []
    if not USER_ID.fullmatch(ns.user):
        problems.append(f"--user: {ns.user!r} is not a Slack user id (U… or W…)")
    if ns.channel and not (CHANNEL_ID.fullmatch(ns.channel) or DM_ID.fullmatch(ns.channel)):
        problems.append(f"--channel: {ns.channel!r} is not a Slack channel id (C…, G… or D…)")
    if problems:
        raise ConfigError("\n".join(problems))
    policy = load_policy(ns.file) if ns.file else deployed()
    tool_requires = None if ns.tool_requires is None else ns.tool_requires == "yes"
    decision = policy.decide(
        ns.tool,
        args,
        requester=ns.user,
        channel=ns.channel,
        tool_requires=True if tool_requires is None else tool_requires,
        requester_groups=ns.group,
    )
    print(f"policy: {policy.source}")
    print(explain(decision, tool_requires=tool_requires))
    return 0
