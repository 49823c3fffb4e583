"""The approval policy as data (``bot.approval_policy``, ``APPROVAL_POLICY``, ``python -m bot policy``; issue 23
part 1): the issue's file parses and decides as written, every matcher operator and its neighbours, one line per
problem naming the rule and the field, TOML as YAML, the CLI's exit codes and output, and the setting's start-up
refusal."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bot.approval_policy import Policy, PolicyError, from_data, load_policy, parse_text

ROOT = Path(__file__).resolve().parents[2]
ISSUE_YAML = ROOT / "tests" / "fixtures" / "policies" / "issue23.yaml"
ISSUE_TOML = ROOT / "tests" / "fixtures" / "policies" / "issue23.toml"
ALICE, BOB, CAROL = "U0ALICE01", "U0BOB0001", "U0CAROL01"
DEFAULT = {"name": "default", "tool": "*"}


def policy_of(*rules: dict[str, Any]) -> Policy:
    return from_data({"rules": [*rules, DEFAULT]}, source="p.yaml")


def problems_of(*rules: dict[str, Any], default: bool = True) -> list[str]:
    with pytest.raises(PolicyError) as info:
        from_data({"rules": [*rules, DEFAULT] if default else list(rules)}, source="p.yaml")
    assert str(info.value).splitlines() == info.value.problems
    return info.value.problems


# --- the issue's file, exactly as written -------------------------------------------------------------------


@pytest.fixture(params=[ISSUE_YAML, ISSUE_TOML], ids=["yaml", "toml"])
def issue(request: pytest.FixtureRequest) -> Policy:
    return load_policy(request.param)


def test_the_issue_file_is_the_issue_text() -> None:
    text = ISSUE_YAML.read_text()
    assert 'approvers: ["@finance"]        # a user group by handle (or its S... id)' in text
    assert [r.name for r in load_policy(ISSUE_YAML).rules] == [
        "restarts need two",
        "big refunds by finance",
        "prod deploys",
        "default",
    ]


@pytest.mark.parametrize(
    ("tool", "args", "requester", "rule"),
    [
        ("restart_service", {"name": "web"}, ALICE, "restarts need two"),
        ("refund", {"amount": 150}, ALICE, "big refunds by finance"),
        ("refund", {"amount": 100.5}, ALICE, "big refunds by finance"),
        ("refund", {"amount": 100}, ALICE, "default"),  # gt, not gte
        ("refund", {"amount": "150"}, ALICE, "default"),  # a string is not a number
        ("refund", {}, ALICE, "default"),
        ("deploy", {"environment": "prod"}, ALICE, "prod deploys"),
        ("deploy", {"environment": "Prod"}, ALICE, "default"),
        ("deploy", {"environment": "staging"}, ALICE, "default"),
        ("lookup", {}, ALICE, "default"),
        ("restart_service_now", {}, ALICE, "default"),  # a glob without * is the whole name
    ],
)
def test_the_issue_file_decides_each_call(
    issue: Policy, tool: str, args: dict[str, Any], requester: str, rule: str
) -> None:
    decision = issue.decide(tool, args, requester=requester, channel="C0GENERAL", tool_requires=True)
    assert decision.name == rule
    assert decision.needs_approval
    assert decision.why[-1].matched and not any(t.matched for t in decision.why[:-1])


def test_the_issue_files_rules_say_what_they_say(issue: Policy) -> None:
    restart = issue.decide("restart_service", {"name": "web"}, requester=ALICE, channel="C1", tool_requires=True)
    assert (restart.approvers, restart.required, restart.requester_counts) == ((BOB, CAROL), 2, False)
    assert (restart.edit, restart.where, restart.unsatisfiable) == (("name",), "thread", None)
    refund = issue.decide("refund", {"amount": 150}, requester=ALICE, channel="C1", tool_requires=True)
    assert (refund.approvers, refund.where, refund.required, refund.requester_counts) == (("@finance",), "dm", 1, True)
    deploy = issue.decide("deploy", {"environment": "prod"}, requester=ALICE, channel="C1", tool_requires=True)
    assert (deploy.approvers, deploy.arguments, deploy.grants) == (("requester",), "details-only", ("once", "thread"))
    default = issue.decide("lookup", {}, requester=ALICE, channel="C1", tool_requires=True)
    assert (default.arguments, default.grants, default.on_deadline, default.deadline) == (
        "shown",
        ("once",),
        "decline",
        None,
    )


@pytest.mark.parametrize("requester", [BOB, CAROL])
def test_two_approvers_one_of_them_the_requester_is_declined_at_once(issue: Policy, requester: str) -> None:
    decision = issue.decide("restart_service", {"name": "web"}, requester=requester, channel="C1", tool_requires=True)
    assert decision.name == "restarts need two"
    assert decision.unsatisfiable is not None
    assert "2 distinct approvers" in decision.unsatisfiable and "only 1" in decision.unsatisfiable


def test_the_tool_decides_whether_approval_is_needed_unless_the_rule_says(issue: Policy) -> None:
    assert not issue.decide("lookup", {}, requester=ALICE, channel="C1", tool_requires=False).needs_approval
    # no approval needed: nothing to satisfy, so nothing declined
    bob = issue.decide("restart_service", {}, requester=BOB, channel="C1", tool_requires=False)
    assert not bob.needs_approval and bob.unsatisfiable is None
    always = policy_of({"tool": "read_*", "require": "always"})
    assert always.decide("read_file", {}, requester=ALICE, channel="C1", tool_requires=False).needs_approval
    never = policy_of({"tool": "read_*", "require": "never"})
    assert not never.decide("read_file", {}, requester=ALICE, channel="C1", tool_requires=True).needs_approval
    assert never.decide("write_file", {}, requester=ALICE, channel="C1", tool_requires=True).needs_approval


def test_check_warns_of_rules_some_requesters_cant_satisfy(issue: Policy) -> None:
    [warning] = issue.warnings()
    assert warning.startswith("rule 1 ('restarts need two'): can't be satisfied when U0BOB0001 or U0CAROL01 asks")
    assert policy_of({"tool": "x", "approvers": [BOB, CAROL, ALICE], "required": 2}).warnings() == []
    counted = policy_of({"tool": "x", "approvers": [BOB, CAROL], "required": 2, "requester_counts": True})
    assert counted.warnings() == []


def test_check_warns_of_grants_a_rule_needing_several_approvals_never_offers() -> None:
    """A rule needing 2 approvals offers no standing grant (one person's grant would stand in for the others): its
    ``grants: [once, thread]`` was dropped without a word (a break-it pass)."""
    rule = {"tool": "x", "approvers": [BOB, CAROL, ALICE], "required": 2, "grants": ["once", "thread", "channel"]}
    [warning] = policy_of(rule).warnings()
    never = "grants thread, channel are never offered: it needs 2 approvals (a standing grant is one person's)"
    assert warning == f"rule 1 ('rule 1'): {never}"
    assert policy_of({**rule, "required": 1}).warnings() == []
    assert policy_of({**rule, "grants": ["once"]}).warnings() == []


@pytest.mark.parametrize("word", ["NO", "no", "yes", "Yes", "on", "OFF", "y", "n"])
def test_a_yaml_word_is_a_string_not_a_yaml_1_1_boolean(word: str) -> None:
    """PyYAML reads YAML 1.1, where ``NO`` / ``yes`` / ``on`` are booleans: ``when: {country: NO}`` matched False,
    never the country "NO" (a break-it pass). Only YAML 1.2's ``true`` / ``false`` are booleans."""
    rule = f"  - name: norway\n    tool: refund\n    when: {{country: {word}}}\n    approvers: [{BOB}]\n"
    text = f"rules:\n{rule}  - name: default\n"
    policy = parse_text(text, kind="yaml")
    assert (
        policy.decide("refund", {"country": word}, requester=ALICE, channel="C1", tool_requires=True).name == "norway"
    )
    assert (
        policy.decide("refund", {"country": False}, requester=ALICE, channel="C1", tool_requires=True).name == "default"
    )
    typed = parse_text(text.replace(f"country: {word}", "urgent: true"), kind="yaml")
    assert typed.decide("refund", {"urgent": True}, requester=ALICE, channel="C1", tool_requires=True).name == "norway"


def test_an_unsatisfiable_rule_for_every_requester_is_an_error() -> None:
    [line] = problems_of({"name": "solo", "tool": "x", "approvers": ["requester"], "required": 2})
    assert line == (
        "p.yaml: rule 1 ('solo'): required: 2 distinct approvers, but only the requester may approve"
        " (and the requester doesn't count)"
    )
    [line] = problems_of({"name": "few", "tool": "x", "approvers": [BOB, CAROL], "required": 3})
    assert line.startswith("p.yaml: rule 1 ('few'): required: 3 distinct approvers, but only 2 can ever approve")
    # a user group may hold enough people: known only at run time, from its members
    group = policy_of({"tool": "x", "approvers": ["S0FIN"], "required": 3})
    call = {"requester": ALICE, "channel": "C1", "tool_requires": True}
    assert group.decide("x", {}, **call).unsatisfiable is None  # type: ignore[arg-type]
    few = group.decide("x", {}, **call, members={"S0FIN": [ALICE, BOB, CAROL]})  # type: ignore[arg-type]
    assert few.unsatisfiable is not None and "only 2" in few.unsatisfiable


# --- the matcher ---------------------------------------------------------------------------------------------


MATCHES: list[tuple[Any, dict[str, Any], bool]] = [
    # equals (a plain value), JSON-typed: true is not 1, "1" is not 1, 1 is 1.0
    ("prod", {"n": "prod"}, True),
    ("prod", {"n": "prod2"}, False),
    ("prod", {}, False),
    (1, {"n": 1.0}, True),
    (1, {"n": "1"}, False),
    (1, {"n": True}, False),
    (True, {"n": 1}, False),
    (True, {"n": True}, True),
    (None, {"n": None}, True),
    (None, {}, False),
    ({"equals": "a"}, {"n": "a"}, True),
    # in / a list
    (["a", "b"], {"n": "b"}, True),
    ({"in": ["a", "b"]}, {"n": "c"}, False),
    ({"in": [1, 2]}, {"n": True}, False),
    # numeric comparisons: numbers only
    ({"gt": 100}, {"n": 101}, True),
    ({"gt": 100}, {"n": 100}, False),
    ({"gte": 100}, {"n": 100}, True),
    ({"gte": 100}, {"n": 99.99}, False),
    ({"lt": 0}, {"n": -1}, True),
    ({"lt": 0}, {"n": 0}, False),
    ({"lte": 0}, {"n": 0}, True),
    ({"lte": 0}, {"n": 0.01}, False),
    ({"gt": 0}, {"n": True}, False),
    ({"gt": 0}, {"n": "5"}, False),
    ({"gt": 0}, {"n": None}, False),
    ({"gt": 0}, {}, False),
    ({"gt": 10, "lt": 20}, {"n": 15}, True),
    ({"gt": 10, "lt": 20}, {"n": 25}, False),
    # glob (the whole string, case-sensitive) and regex (searched; anchors anchor)
    ({"glob": "prod-*"}, {"n": "prod-eu"}, True),
    ({"glob": "prod-*"}, {"n": "staging-prod-eu"}, False),
    ({"glob": "prod-*"}, {"n": "PROD-eu"}, False),
    ({"glob": "prod-*"}, {"n": 5}, False),
    ({"regex": "^db-[0-9]+$"}, {"n": "db-12"}, True),
    ({"regex": "^db-[0-9]+$"}, {"n": "db-12x"}, False),
    ({"regex": "drop"}, {"n": "please drop table"}, True),
    ({"regex": "drop"}, {"n": ["drop"]}, False),
    # present / absent (null is there)
    ({"present": True}, {"n": None}, True),
    ({"present": True}, {}, False),
    ({"present": False}, {}, True),
    ({"present": False}, {"n": 0}, False),
    ({"present": True, "glob": "a*"}, {"n": "ab"}, True),
]


@pytest.mark.parametrize(("condition", "args", "matched"), MATCHES)
def test_each_operator_and_its_neighbours(condition: Any, args: dict[str, Any], matched: bool) -> None:
    policy = policy_of({"name": "r", "tool": "t", "when": {"n": condition}})
    decision = policy.decide("t", args, requester=ALICE, channel="C1", tool_requires=True)
    assert (decision.name == "r") is matched, decision.why


def test_nested_argument_paths_and_every_condition_must_hold() -> None:
    policy = policy_of({"name": "r", "tool": "t", "when": {"target.env": "prod", "count": {"gte": 2}}})
    call = {"requester": ALICE, "channel": "C1", "tool_requires": True}
    assert policy.decide("t", {"target": {"env": "prod"}, "count": 2}, **call).name == "r"  # type: ignore[arg-type]
    assert policy.decide("t", {"target.env": "prod", "count": 3}, **call).name == "r"  # type: ignore[arg-type]
    missed = policy.decide("t", {"target": {"env": "prod"}, "count": 1}, **call)  # type: ignore[arg-type]
    assert missed.name == "default"
    held = {c.what: c.held for c in missed.why[0].checks}
    assert held == {"tool": True, "when target.env": True, "when count": False}
    assert policy.decide("t", {"target": "prod", "count": 3}, **call).name == "default"  # type: ignore[arg-type]


def test_requester_matches_users_groups_and_channels() -> None:
    policy = policy_of(
        {
            "name": "ops",
            "tool": "*",
            "requester": {"users": [BOB], "groups": ["@oncall", "S0OPS"], "channels": ["C0OPS"]},
        }
    )

    def rule(requester: str, channel: str, groups: tuple[str, ...] = ()) -> str:
        decision = policy.decide(
            "x", {}, requester=requester, channel=channel, tool_requires=True, requester_groups=groups
        )
        return decision.name

    assert rule(BOB, "C1") == "ops"
    assert rule(ALICE, "C1") == "default"
    assert rule(ALICE, "C1", ("@oncall",)) == "ops"
    assert rule(ALICE, "C1", ("S0OPS",)) == "ops"
    assert rule(ALICE, "C1", ("S0OTHER",)) == "default"
    assert rule(ALICE, "C0OPS") == "ops"
    assert rule("", "C1") == "default"  # nobody in particular is no listed user


def test_values_are_data_never_code(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    code = f"__import__('pathlib').Path({str(marker)!r}).write_text('x')"
    policy = policy_of({"name": "r", "tool": "t", "when": {"n": code, "m": {"regex": "__import__"}}})
    decision = policy.decide("t", {"n": code, "m": code}, requester=ALICE, channel="C1", tool_requires=True)
    assert decision.name == "r" and not marker.exists()
    modules = sorted((ROOT / "bot" / "approval_policy").glob("*.py"))
    assert len(modules) >= 5, modules  # the package's modules, the CLI among them
    for module in modules:
        source = module.read_text()
        assert "eval(" not in source and "exec(" not in source, module
    # YAML is read with a SafeLoader (no Python objects from tags)
    with pytest.raises(PolicyError, match="not valid YAML"):
        parse_text("rules: !!python/object/apply:os.system ['true']", kind="yaml")


def test_approvers_is_the_one_rule_special_case() -> None:
    for spec, approvers in [("requester", ("requester",)), ("channel", ("channel",)), ("U1,S2", ("U1", "S2"))]:
        policy = Policy.from_approvers(spec)
        decision = policy.decide("anything", {"a": 1}, requester=ALICE, channel="C1", tool_requires=True)
        assert (decision.name, decision.approvers, decision.required) == ("APPROVERS", approvers, 1)
        assert decision.needs_approval and decision.unsatisfiable is None
        assert not policy.decide("x", {}, requester=ALICE, channel="C1", tool_requires=False).needs_approval


# --- validation: one line per problem, naming the rule and the field ------------------------------------------


BAD_RULES: list[tuple[dict[str, Any], str]] = [
    ({"tool": 5}, "tool: must be a tool name or glob"),
    ({"tool": []}, "tool: must be a tool name or glob"),
    ({"when": ["amount"]}, "when: must be a mapping of argument name -> condition"),
    ({"when": {"amount": {"gt": "100"}}}, "when.amount.gt: must be a number"),
    ({"when": {"amount": {"gt": True}}}, "when.amount.gt: must be a number"),
    ({"when": {"amount": {"gt": 10**400}}}, "when.amount.gt: must be a number within +-1.8e308"),  # no traceback
    ({"when": {"amount": {"lte": float("inf")}}}, "when.amount.lte: must be a number"),
    ({"when": {"amount": {"over": 1}}}, "when.amount: unknown operator 'over'"),
    ({"when": {"amount": {}}}, "when.amount: an empty condition"),
    ({"when": {"amount": {"in": []}}}, "when.amount.in: in must be a non-empty list of values"),
    ({"when": {"amount": {"in": [{"a": 1}]}}}, "when.amount.in: each value of in must be a string, number"),
    ({"when": {"amount": {"equals": [1]}}}, "when.amount: equals must be a string, number"),
    ({"when": {"name": {"glob": ""}}}, "when.name.glob: must be a non-empty string"),
    ({"when": {"name": {"regex": "("}}}, "when.name.regex: is not a valid regular expression"),
    ({"when": {"name": {"regex": "a" * 501}}}, "when.name.regex: must be at most 500 characters"),
    ({"when": {"name": {"present": "yes"}}}, "when.name.present: must be true or false"),
    ({"when": {"name": {"present": False, "equals": 1}}}, "when.name: present: false can't be combined"),
    ({"requester": {"users": ["bob"]}}, "requester.users: 'bob' is not a user id"),
    ({"requester": {"groups": ["finance"]}}, "requester.groups: 'finance' is not a user-group id (S...) or handle"),
    ({"requester": {"channels": ["#general"]}}, "requester.channels: '#general' is not a channel id"),
    ({"requester": {"teams": ["T1"]}}, "requester.teams: unknown field"),
    ({"require": "sometimes"}, "require: must be 'tool', 'always' or 'never'"),
    ({"approvers": []}, "approvers: must be a non-empty list"),
    ({"approvers": ["bob"]}, "approvers: 'bob' is not an approver"),
    ({"approvers": ["channel:general"]}, "approvers: 'channel:general' is not an approver"),
    ({"required": 0}, "required: must be at least 1"),
    ({"required": 21, "approvers": ["S0BIG"]}, "required: must be at most 20"),
    ({"required": "2"}, "required: must be a whole number"),
    ({"requester_counts": "no"}, "requester_counts: must be true or false"),
    ({"requester": "U1"}, "requester: must be a mapping (name: value)"),
    ({"where": "email"}, "where: must be thread, dm or channel:C..."),
    ({"where": "channel:general"}, "where: must be thread, dm or channel:C..."),
    ({"deadline": "soon"}, "deadline: must be whole seconds or a duration"),
    ({"deadline": 0}, "deadline: must be more than 0 seconds"),
    ({"on_deadline": "approve"}, "on_deadline: must be decline or {escalate: [people]}"),
    ({"on_deadline": {"escalate": []}}, "on_deadline.escalate: must name at least one person or user group"),
    ({"on_deadline": {"escalate": ["bob"]}}, "on_deadline.escalate: 'bob' is not one of user ids"),
    ({"on_deadline": {"escalate": ["U1"], "page": ["U1"]}}, "on_deadline.page: unknown field"),
    ({"arguments": "hidden"}, "arguments: must be 'shown' or 'details-only'"),
    ({"edit": "name"}, "edit: must be a list of argument names"),
    ({"grants": ["forever"]}, "grants: 'forever' is not a grant: use once, thread, channel"),
    ({"approver": ["U1"]}, "approver: unknown field"),
    ({"name": ""}, "name: must not be empty"),
    ({"bad\nerror: PORT: forged": 1}, "'bad\\nerror: PORT: forged': unknown field"),  # one line, quoted
]


@pytest.mark.parametrize(("rule", "reason"), BAD_RULES, ids=[r for _, r in BAD_RULES])
def test_each_problem_is_one_line_naming_the_rule_and_field(rule: dict[str, Any], reason: str) -> None:
    named = {"name": "big refunds", "tool": "refund", **rule}
    [line] = problems_of(named)
    assert "\n" not in line and "Input should" not in line and "valid dictionary" not in line, line
    where = "rule 1 ('big refunds')" if named["name"] else "rule 1"
    assert line.startswith(f"p.yaml: {where}: {reason}"), line


def test_pydantics_words_never_reach_a_problem_line() -> None:
    """A strict field offers only what it takes ("yes/no" would be refused there too); a name that is not text is
    said so, and the rule is then told by its number."""
    [strict] = problems_of({"name": "a", "tool": "x", "requester_counts": "no"})
    assert strict == "p.yaml: rule 1 ('a'): requester_counts: must be true or false"
    [name] = problems_of({"name": 5, "tool": "x"})
    assert name == "p.yaml: rule 1: name: must be text"
    [long] = problems_of({"name": "n" * 200, "tool": "x", "required": 0})
    assert long == f"p.yaml: rule 1 ('{'n' * 40}...'): required: must be at least 1"


def test_every_problem_is_reported_at_once_with_its_rules_number() -> None:
    lines = problems_of(
        {"name": "a", "tool": "x", "required": 0, "where": "email"},
        {"tool": "y", "approvers": ["bob"]},
    )
    assert lines == [
        "p.yaml: rule 1 ('a'): required: must be at least 1",
        "p.yaml: rule 1 ('a'): where: must be thread, dm or channel:C... (a channel id)",
        "p.yaml: rule 2: approvers: 'bob' is not an approver: use requester, channel, channel:C..., a user id (U...),"
        " a user-group id (S...) or @handle",
    ]


def test_the_file_level_problems() -> None:
    assert problems_of({"name": "only", "tool": "x"}, default=False) == [
        "p.yaml: rule 1 ('only'): the last rule must be the default, matching every call: tool: \"*\" with no when"
        " and no requester (add one at the end)"
    ]
    assert problems_of({"name": "all", "tool": "*"}, {"name": "late", "tool": "x"}) == [
        "p.yaml: rule 2 ('late'): can never match: rule 1 ('all') matches every call before it"
    ]
    assert problems_of({"name": "a", "tool": "x"}, {"name": "a", "tool": "y"}) == [
        "p.yaml: rule 2 ('a'): name: also the name of rule 1"
    ]
    # a request records its rule's name, an unnamed rule's being "rule N": the two would be taken for each other
    # (found by a break-it review: requests of unnamed rule 2 were decided by the approvers of the rule named so)
    assert problems_of({"name": "rule 2", "tool": "x"}, {"tool": "y"}) == [
        "p.yaml: rule 1 ('rule 2'): name: what rule 2 is called, having no name of its own (pick another)"
    ]
    assert problems_of({"tool": "y"}, {"name": "rule 1", "tool": "x"}) == [
        "p.yaml: rule 2 ('rule 1'): name: what rule 1 is called, having no name of its own (pick another)"
    ]
    assert [r.name for r in from_data({"rules": [{"name": "rule 1", "tool": "x"}, {"tool": "*"}]}).rules] == [
        "rule 1",
        None,
    ]
    for data, line in [
        ({"rules": []}, 'p.yaml: rules: must be a non-empty list of rules, the last one the default (tool: "*")'),
        ({}, "p.yaml: rules: is required"),
        ({"rules": [DEFAULT], "version": 2}, "p.yaml: version: must be 1 (the only version so far)"),
        ({"rules": [DEFAULT], "defaults": {}}, "p.yaml: defaults: unknown field"),
        ({"rules": ["deploy"]}, "p.yaml: rule 1: must be a mapping (name: value)"),
    ]:
        with pytest.raises(PolicyError) as info:
            from_data(data, source="p.yaml")
        assert info.value.problems == [line]
    with pytest.raises(PolicyError) as info:
        from_data([DEFAULT], source="p.yaml")
    assert info.value.problems == ["p.yaml: must be a mapping with rules: [...] (got a list)"]
    assert from_data({"version": 1, "rules": [DEFAULT]}).rules[0].name == "default"


def test_reading_the_file(tmp_path: Path) -> None:
    def problems(name: str, text: str | None) -> list[str]:
        path = tmp_path / name
        if text is not None:
            path.write_text(text)
        with pytest.raises(PolicyError) as info:
            load_policy(path)
        return [line.removeprefix(f"{path}: ") for line in info.value.problems]

    assert problems("p.json", "{}") == ["must be a .yaml, .yml or .toml file"]
    assert problems("missing.yaml", None) == ["no such file"]
    [bad] = problems("p.yaml", "rules: [\n")
    assert bad.startswith("not valid YAML (") and "\n" not in bad
    [twice] = problems("twice.yaml", "rules:\n  - tool: '*'\n    tool: x\n")
    assert "key 'tool' is given twice (line 3)" in twice
    [toml] = problems("p.toml", "rules = [\n")
    assert toml.startswith("not valid TOML (")
    (tmp_path / "dir.yaml").mkdir()
    assert problems("dir.yaml", None) == ["is a directory, not a file"]
    # what the file holds instead of a mapping, in words (an empty file was "(got NoneType)")
    assert problems("empty.yaml", "") == ["must be a mapping with rules: [...] (got an empty file)"]
    assert problems("list.yaml", "- tool: '*'\n") == ["must be a mapping with rules: [...] (got a list)"]
    assert problems("word.yaml", "rules\n") == ["must be a mapping with rules: [...] (got a string)"]
    assert parse_text("rules = [{tool = '*'}]", kind="toml").rules[0].tool == ("*",)


def test_a_file_that_cant_be_read_for_another_reason_is_a_problem_line_too(tmp_path: Path) -> None:
    """Any error of the file system is one line naming the file and why (it was a traceback for those not listed
    one by one: a symlink loop, a path through a plain file, a name too long)."""
    loop = tmp_path / "loop.yaml"
    loop.symlink_to(loop)
    plain = tmp_path / "plain.txt"
    plain.write_text("x")
    cases = {
        loop: "can't be read (Too many levels of symbolic links)",
        plain / "policy.yaml": "can't be read (Not a directory)",
        tmp_path / ("a" * 300 + ".yaml"): "can't be read (File name too long)",
    }
    for path, problem in cases.items():
        with pytest.raises(PolicyError) as info:
            load_policy(path)
        assert info.value.problems == [f"{path}: {problem}"]
    out = run_bot("policy", "explain", "send", "{}", "--user", ALICE, env={"APPROVAL_POLICY": str(loop)})
    assert (out.returncode, out.stderr.splitlines()) == (
        2,
        [f"error: APPROVAL_POLICY: {loop}: can't be read (Too many levels of symbolic links)"],
    )


# --- the CLI and the setting --------------------------------------------------------------------------------


def run_bot(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("APPROV", "SLACK_", "ASK_", "PORT"))}
    return subprocess.run(
        [sys.executable, "-m", "bot", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd or ROOT,
        env={**clean, **(env or {})},
    )


def test_policy_check_prints_the_rules_and_warnings() -> None:
    out = run_bot("policy", "check", str(ISSUE_YAML))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == f"{ISSUE_YAML}: 4 rules, valid"
    assert lines[1].split() == [
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
    ]
    assert lines[3].startswith("2  big refunds by finance  refund           amount > 100")
    assert "details-only" in lines[4] and "once, thread" in lines[4]
    assert lines[6].startswith("warning: rule 1 ('restarts need two'): can't be satisfied when U0BOB0001 or U0CAROL01")


def test_policy_check_read_by_a_reader_that_stops_early_ends_without_a_traceback() -> None:
    """``policy check FILE | head -2``: the reader closes the pipe; Python's ignored SIGPIPE made the next print a
    BrokenPipeError traceback (a new user's trial)."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    with subprocess.Popen(
        [sys.executable, "-m", "bot", "policy", "check", str(ISSUE_YAML)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    ) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.close()  # as head does after its lines: before the process writes, so every write finds it closed
        err = proc.stderr.read().decode()
        proc.wait(timeout=30)
    assert "Traceback" not in err and "BrokenPipeError" not in err, err


def test_policy_check_refuses_a_bad_file_with_one_error_line_per_problem(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("rules:\n  - name: a\n    required: 0\n    where: email\n  - tool: '*'\n")
    out = run_bot("policy", "check", str(bad))
    assert out.returncode == 2
    assert out.stderr.splitlines() == [
        f"error: {bad}: rule 1 ('a'): required: must be at least 1",
        f"error: {bad}: rule 1 ('a'): where: must be thread, dm or channel:C... (a channel id)",
    ]
    assert out.stdout == ""


def test_policy_explain_says_which_rule_and_why() -> None:
    out = run_bot(
        "policy",
        "explain",
        "refund",
        '{"amount": 150}',
        "--user",
        ALICE,
        "--file",
        str(ISSUE_YAML),
        "--tool-requires",
        "yes",
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        f"policy: {ISSUE_YAML}",
        "rule 1 ('restarts need two'): no match",
        "  no   tool: 'refund' does not match restart_service",
        "rule 2 ('big refunds by finance'): matches",
        "  yes  tool: 'refund' matches refund",
        "  yes  when amount: 150 is > 100",
        "decided by rule 2 ('big refunds by finance')",
        "  needs approval: yes (the tool requires it)",
        "  approvers: @finance",
        "  required: 1",
        "  where: dm",
        "  deadline: ASK_TTL_SECONDS, then decline",
        "  arguments: shown",
        "  edit: none",
        "  grants: once",
    ]
    bob = run_bot("policy", "explain", "restart_service", "{}", "--user", BOB, "--file", str(ISSUE_YAML))
    assert bob.returncode == 0
    assert "  needs approval: if the tool requires it" in bob.stdout
    assert "  can't be satisfied: 2 distinct approvers are required but only 1 can approve besides" in bob.stdout


def test_policy_explain_takes_the_requesters_groups_and_channel(tmp_path: Path) -> None:
    policy = tmp_path / "p.yaml"
    policy.write_text(
        "rules:\n  - name: oncall\n    requester: {groups: ['@oncall'], channels: [C0OPS]}\n    require: never\n"
        "  - name: default\n    tool: '*'\n"
    )
    base = ["policy", "explain", "restart", "{}", "--user", ALICE, "--file", str(policy)]
    out = run_bot(*base, "--group", "@oncall")
    assert f"  yes  requester: {ALICE} is in @oncall" in out.stdout.splitlines()
    assert "  needs approval: no (require: never)" in out.stdout.splitlines()
    out = run_bot(*base, "--channel", "C0OPS")
    assert "  yes  requester: the channel C0OPS is one of the channels" in out.stdout.splitlines()
    out = run_bot(*base, "--channel", "C0DEV")
    assert f"  no   requester: {ALICE} in C0DEV is not: groups @oncall; channels C0OPS" in out.stdout.splitlines()
    assert "decided by rule 2 ('default')" in out.stdout


def test_policy_explain_reads_approval_policy_else_approvers(tmp_path: Path) -> None:
    out = run_bot(
        "policy",
        "explain",
        "deploy",
        '{"environment": "prod"}',
        "--user",
        ALICE,
        env={"APPROVAL_POLICY": str(ISSUE_TOML)},
    )
    assert out.returncode == 0, out.stderr
    assert "decided by rule 3 ('prod deploys')" in out.stdout
    out = run_bot("policy", "explain", "deploy", "{}", "--user", ALICE, env={"APPROVERS": "U0BOB0001,S0OPS"})
    assert "policy: APPROVERS" in out.stdout and "  approvers: U0BOB0001, S0OPS" in out.stdout
    for args, error in [
        (["[1"], "error: ARGS_JSON is not JSON (Expecting ',' delimiter: line 1 column 3 (char 2))"),
        (["[1]"], "error: ARGS_JSON must be a JSON object, e.g. '{\"amount\": 150}'"),
    ]:
        out = run_bot("policy", "explain", "x", *args, "--user", ALICE, "--file", str(ISSUE_YAML))
        assert (out.returncode, out.stderr.strip()) == (2, error)
    missing = run_bot("policy", "explain", "x", "{}", "--user", ALICE, "--file", str(tmp_path / "none.yaml"))
    assert (missing.returncode, missing.stderr.strip()) == (2, f"error: {tmp_path / 'none.yaml'}: no such file")


def test_a_bad_approval_policy_refuses_the_start_with_one_line_per_problem(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[[rules]]\nname = "a"\nrequired = 0\n[[rules]]\napprovers = ["bob"]\n')
    complete = {
        "SLACK_BOT_TOKEN": "xoxb-x",
        "SLACK_SIGNING_SECRET": "s",
        "REDIS_URL": "redis://127.0.0.1:6379/0",
        "OPENAI_API_KEY": "sk-x",
    }  # so the lines are the policy's and the port's only (what is not set is told beside them)
    out = run_bot("serve", env={**complete, "APPROVAL_POLICY": str(bad), "PORT": "x"})
    assert out.returncode == 2
    assert out.stderr.splitlines() == [
        "error: PORT: must be a whole number from 0 to 65535 (got 'x')",
        f"error: APPROVAL_POLICY: {bad}: rule 1 ('a'): required: must be at least 1",
        f"error: APPROVAL_POLICY: {bad}: rule 2: approvers: 'bob' is not an approver: use requester, channel,"
        " channel:C..., a user id (U...), a user-group id (S...) or @handle",
    ]


def test_approval_policy_and_approvers_are_not_set_together(monkeypatch: pytest.MonkeyPatch) -> None:
    from bot.config import SettingsError, load_settings

    for name in ("APPROVERS", "APPROVAL_POLICY"):
        monkeypatch.delenv(name, raising=False)
    assert load_settings(approval_policy=str(ISSUE_YAML)).approval_policy == str(ISSUE_YAML)
    monkeypatch.setenv("APPROVAL_POLICY", str(ISSUE_YAML))
    monkeypatch.setenv("APPROVERS", "requester")
    with pytest.raises(SettingsError) as info:
        load_settings()
    assert info.value.problems == [
        "APPROVERS: not with APPROVAL_POLICY (the policy's rules say who approves): put these approvers in its"
        " default rule, or unset one of them"
    ]


def test_the_docs_show_the_issue_file_and_real_output(tmp_path: Path) -> None:
    """docs/approvals.md: its first YAML block is the issue's file, and every `$ python -m bot policy ...` block is
    what the command prints (run on that file as policy.yaml and the page's bad.yaml)."""
    import re
    import shlex

    page = (ROOT / "docs" / "approvals.md").read_text()
    yaml_blocks = re.findall(r"^```yaml\n(.*?)^```$", page, re.M | re.S)
    assert yaml_blocks[0] == ISSUE_YAML.read_text()
    (tmp_path / "policy.yaml").write_text(yaml_blocks[0])
    (tmp_path / "bad.yaml").write_text(next(b for b in yaml_blocks if "where: email" in b))  # the page's bad.yaml
    runs = re.findall(r"^```text\n\$ python -m bot (policy .*?)\n(.*?)^```$", page, re.M | re.S)
    assert len(runs) == 4
    for command, shown in runs:
        out = run_bot(*shlex.split(command), cwd=tmp_path)
        assert out.stdout + out.stderr == shown, command


def test_the_docs_policy_with_every_feature_is_the_fixture_and_loads() -> None:
    """docs/approvals.md's last YAML block ("A policy with every feature") is tests/fixtures/policies/
    every_feature.yaml (but its first comment line), and it loads: each feature of issue 23 in one file."""
    import re

    fixture = ROOT / "tests" / "fixtures" / "policies" / "every_feature.yaml"
    page = (ROOT / "docs" / "approvals.md").read_text()
    last = re.findall(r"^```yaml\n(.*?)^```$", page, re.M | re.S)[-1]
    assert last == fixture.read_text().split("\n", 1)[1]
    policy = load_policy(fixture)
    rules = {r.name: r for r in policy.rules}
    assert rules["restarts need two"].required == 2 and rules["restarts need two"].edit == ("name", "force")
    assert rules["big refunds by finance"].where == "dm" and rules["big refunds by finance"].on_deadline is not None
    assert rules["prod deploys"].arguments == "details-only" and rules["prod deploys"].where == "channel:C0RELEASE"
    assert rules["on-call restarts dev freely"].requester.groups == ("@oncall",)
    assert policy.warnings() == []


def test_policy_explain_refuses_a_requester_or_channel_that_is_not_a_slack_id() -> None:
    out = run_bot("policy", "explain", "refund", "{}", "--user", "bob", "--channel", "nope", "--file", str(ISSUE_YAML))
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.splitlines() == [
        "error: --user: 'bob' is not a Slack user id (U… or W…)",
        "error: --channel: 'nope' is not a Slack channel id (C…, G… or D…)",
    ]


def test_the_longest_wait_is_the_longest_deadline_an_escalation_doubling_it() -> None:
    def policy(*rules: str) -> Policy:
        text = "rules:\n" + "".join("  - " + rule.replace("\n", "\n    ").rstrip() + "\n" for rule in rules)
        return parse_text(text + "  - tool: '*'\n", kind="yaml")

    plain = "tool: a\napprovers: [U1]\n"
    assert policy(plain).longest_wait(3600) == 3600  # no deadline: ASK_TTL_SECONDS'
    assert policy(plain + "deadline: 30m\n").longest_wait(3600) == 3600  # shorter: still what a question waits
    assert policy(plain + "deadline: 30d\n", "tool: b\ndeadline: 2h\n").longest_wait(3600) == 30 * 86400
    escalates = plain + "on_deadline: {escalate: [U2]}\n"
    assert policy(escalates + "deadline: 10d\n").longest_wait(3600) == 20 * 86400
    assert policy(escalates).longest_wait(3600) == 7200  # escalated for ASK_TTL_SECONDS again
