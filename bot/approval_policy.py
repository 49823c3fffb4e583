"""The approval policy as data (``APPROVAL_POLICY``, docs/approvals.md): which tool calls need a person's OK, who
may give it, how many, where, until when, and how the call is shown. Slack-aware only through ids: nothing here
imports Bolt or talks to Slack, so the runtime, the Slack layer, the MCP server and the CLI
(:mod:`bot.approval_policy_cli`) all read the same file the same way.

A file (YAML ``.yaml``/``.yml`` or TOML ``.toml``) is ``version`` (optional, ``1``) and ``rules``, a list of
:class:`Rule`. Rules match in order on the tool's name (``tool``, globs), on its arguments (``when``, a declarative
:class:`Condition` per argument path: equals, ``in``, ``gt`` / ``gte`` / ``lt`` / ``lte``, ``glob``, ``regex``,
``present``; no ``eval``), and on who asked (``requester``: users, user groups, channels). The first match decides;
the last rule must match every call (``tool: "*"``, no ``when``, no ``requester``).

:func:`load_policy` reads and validates a file, raising :class:`PolicyError` whose ``problems`` are one line per
problem naming the rule and the field (``rule 2 ('big refunds'): when.amount.gt: must be a number``).
:meth:`Policy.decide` gives the :class:`Decision` for one call, with the conditions it checked (``why``).
:meth:`Policy.from_approvers` is the one-rule policy ``APPROVERS`` stands for when no file is set.

Carried out in Slack (:mod:`bot.slack.questions.approvers`, :mod:`bot.slack.approvals`): ``require``,
``approvers`` (user groups and channels' members looked up), ``requester.groups``, the decline at once of a call
nobody may approve, quorum (``required``, ``requester_counts``), ``edit``, ``where``, ``arguments`` and
``deadline``; ``on_deadline: escalate`` and ``grants`` beyond ``once`` are parsed and validated, not carried out
yet (docs/approvals.md says which are in effect).
"""

from __future__ import annotations

import fnmatch
import logging
import math
import re
import tomllib
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator

from bot.errors import ConfigError
from bot.settings_values import MAX_DURATION, parse_duration

log = logging.getLogger(__name__)

MAX_REGEX = 500  # characters of a `regex` pattern (the operator's, but a policy file is no place for a novel)
MAX_REQUIRED = 20  # distinct approvers one call may need
MAX_RULES = 1000
MAX_FILE_BYTES = 1_000_000

USER_ID = re.compile(r"[UW][A-Z0-9_]{1,63}")
GROUP_ID = re.compile(r"S[A-Z0-9_]{1,63}")
GROUP_HANDLE = re.compile(r"@[a-z0-9][a-z0-9._-]{0,79}")
CHANNEL_ID = re.compile(r"[CG][A-Z0-9_]{1,63}")

REQUESTER = "requester"  # the person who started the run
RUN_CHANNEL = "channel"  # anyone in the run's channel (APPROVERS=channel)
CHANNEL_PREFIX = "channel:"  # channel:C123: the members of channel C123

Scalar = str | int | float | bool | None
Require = Literal["tool", "always", "never"]
Arguments = Literal["shown", "details-only"]
Grant = Literal["once", "thread", "channel", "always"]
GRANTS: tuple[Grant, ...] = ("once", "thread", "channel", "always")
DEFAULT_GRANT_FOR = 7 * 24 * 3600  # seconds a standing grant lasts unless the rule says (grant_for)
MAX_GRANT_FOR = 90 * 24 * 3600

_OPS = ("equals", "in", "gt", "gte", "lt", "lte", "glob", "regex", "present")


class PolicyError(ConfigError, ValueError):
    """An approval policy file that can't be used: ``problems`` holds one line per problem, each naming the file,
    the rule (its number and name) and the field; ``str()`` is those lines joined by newlines. Also a
    ``ValueError``, so a pydantic validator (``APPROVAL_POLICY`` in :mod:`bot.config`) passes it on whole."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("\n".join(problems))


def _scalar(value: object, what: str) -> Scalar:
    if value is None or isinstance(value, (str, bool, int, float)):
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"{what} must be a finite number")
        return value
    raise ValueError(f"{what} must be a string, number, true/false or null (got a {type(value).__name__})")


def _same(a: object, b: object) -> bool:
    """JSON equality: true is not 1, "1" is not 1, 1 is 1.0."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    return type(a) is type(b) and a == b


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class Condition(BaseModel):
    """What one argument must be; every operator given must hold. In a file: a plain value means ``equals``, a
    list means ``in`` (one of), a mapping names operators: ``{gt: 100}``, ``{glob: "prod-*"}``, ``{present: false}``.

    ``gt`` / ``gte`` / ``lt`` / ``lte`` hold for numbers only (never for true/false or a numeric string); ``glob``
    (:func:`fnmatch.fnmatchcase`, case-sensitive, the whole string) and ``regex`` (Python :mod:`re`, searched
    anywhere: anchor with ``^`` / ``$``; at most :data:`MAX_REGEX` characters, compiled at load) for strings only;
    ``present``: whether the argument is there at all (``null`` counts as there). A missing argument fails every
    operator but ``present: false``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    equals: Scalar = None
    equals_set: bool = Field(default=False, exclude=True)
    in_: tuple[Scalar, ...] | None = Field(default=None, alias="in")
    gt: int | float | None = None
    gte: int | float | None = None
    lt: int | float | None = None
    lte: int | float | None = None
    glob: str | None = None
    regex: str | None = None
    present: bool | None = None
    _pattern: re.Pattern[str] | None = PrivateAttr(default=None)

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, value: object) -> object:
        if isinstance(value, (list, tuple)):
            return {"in": value}
        if not isinstance(value, dict):
            return {"equals": _scalar(value, "the value"), "equals_set": True}
        if not value:
            raise ValueError("an empty condition: give a value, a list (one of) or operators (" + ", ".join(_OPS) + ")")
        unknown = [str(k) for k in value if k not in _OPS]
        if unknown:
            raise ValueError(f"unknown operator {unknown[0]!r}: use " + ", ".join(_OPS))
        out = dict(value)
        if "equals" in out:
            out["equals"] = _scalar(out["equals"], "equals")
            out["equals_set"] = True
        return out

    @field_validator("in_", mode="before")
    @classmethod
    def _in(cls, value: object) -> object:
        if not isinstance(value, (list, tuple)) or not value:
            raise ValueError("in must be a non-empty list of values")
        return tuple(_scalar(v, "each value of in") for v in value)

    @field_validator("gt", "gte", "lt", "lte", mode="before")
    @classmethod
    def _bound(cls, value: object) -> object:
        if not _number(value) or not math.isfinite(float(value)):  # type: ignore[arg-type]
            raise ValueError("must be a number")
        return value

    @field_validator("glob", "regex", mode="before")
    @classmethod
    def _text(cls, value: object) -> object:
        if not isinstance(value, str) or not value:
            raise ValueError("must be a non-empty string")
        return value

    @field_validator("regex")
    @classmethod
    def _regex(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if len(value) > MAX_REGEX:
            raise ValueError(f"must be at most {MAX_REGEX} characters")
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"is not a valid regular expression ({exc})") from None
        return value

    @field_validator("present", mode="before")
    @classmethod
    def _present(cls, value: object) -> object:
        if not isinstance(value, bool):
            raise ValueError("must be true or false")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> Condition:
        if self.present is False and len(self.operators()) > 1:
            raise ValueError("present: false can't be combined with other operators (a missing argument has no value)")
        if self.regex is not None:
            self._pattern = re.compile(self.regex)
        return self

    def operators(self) -> list[str]:
        """The operators this condition gives, in :data:`_OPS` order."""
        given = {
            "equals": self.equals_set,
            "in": self.in_ is not None,
            "gt": self.gt is not None,
            "gte": self.gte is not None,
            "lt": self.lt is not None,
            "lte": self.lte is not None,
            "glob": self.glob is not None,
            "regex": self.regex is not None,
            "present": self.present is not None,
        }
        return [op for op in _OPS if given[op]]

    def check(self, found: bool, value: object) -> list[tuple[str, bool]]:
        """Each operator's verdict on an argument (``found``: it is there; ``value``: its value), as
        ``(description, held)``."""
        out: list[tuple[str, bool]] = []
        for op in self.operators():
            if op == "present":
                out.append((f"present: {str(self.present).lower()}", found is self.present))
                continue
            shown = repr(value) if found else "missing"
            if not found:
                out.append((f"{shown}, so not {self._describe(op)}", False))
                continue
            held = self._holds(op, value)
            out.append((f"{shown} {'is' if held else 'is not'} {self._describe(op)}", held))
        return out

    def summary(self, path: str) -> str:
        """The condition on ``path`` in a few words (``amount > 100``, ``environment = 'prod'``)."""
        parts = []
        for op in self.operators():
            if op == "present":
                parts.append(f"{path} {'present' if self.present else 'absent'}")
            else:
                parts.append(f"{path} {self._describe(op, short=True)}")
        return " and ".join(parts)

    def _describe(self, op: str, *, short: bool = False) -> str:
        operand = {
            "equals": self.equals,
            "in": list(self.in_ or ()),
            "gt": self.gt,
            "gte": self.gte,
            "lt": self.lt,
            "lte": self.lte,
            "glob": self.glob,
            "regex": self.regex,
        }[op]
        if short:
            symbols = {"equals": "=", "gt": ">", "gte": ">=", "lt": "<", "lte": "<="}
            return f"{symbols.get(op, op)} {operand!r}"
        words = {
            "equals": "equal to",
            "in": "one of",
            "gt": ">",
            "gte": ">=",
            "lt": "<",
            "lte": "<=",
            "glob": "matching glob",
            "regex": "matching regex",
        }[op]
        return f"{words} {operand!r}"

    def _holds(self, op: str, value: object) -> bool:
        if op == "equals":
            return _same(value, self.equals)
        if op == "in":
            return any(_same(value, v) for v in self.in_ or ())
        if op in ("gt", "gte", "lt", "lte"):
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                return False
            number = value
            bound: int | float = getattr(self, op)
            return {"gt": number > bound, "gte": number >= bound, "lt": number < bound, "lte": number <= bound}[op]
        if not isinstance(value, str):
            return False
        if op == "glob":
            return fnmatch.fnmatchcase(value, self.glob or "")
        assert self._pattern is not None
        return self._pattern.search(value) is not None


def lookup(args: Mapping[str, Any], path: str) -> tuple[bool, object]:
    """``(found, value)`` of argument ``path`` in ``args``: the key itself if ``args`` has it, else dots descend
    into objects (``target.env``: ``args["target"]["env"]``)."""
    if path in args:
        return True, args[path]
    current: object = args
    for part in path.split("."):
        if not isinstance(current, Mapping) or part not in current:
            return False, None
        current = current[part]
    return True, current


class RequesterMatch(BaseModel):
    """Who asked: the rule applies when the requester is one of ``users``, or in one of ``groups`` (``S...`` ids or
    ``@handle``), or the run is in one of ``channels``; empty lists are ignored (nothing given: anyone)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    users: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()
    channels: tuple[str, ...] = ()

    @field_validator("users", mode="before")
    @classmethod
    def _users(cls, value: object) -> object:
        return _ids(value, USER_ID, "a user id (U... or W...)")

    @field_validator("groups", mode="before")
    @classmethod
    def _groups(cls, value: object) -> object:
        return _ids(value, None, "a user-group id (S...) or handle (@name)")

    @field_validator("channels", mode="before")
    @classmethod
    def _channels(cls, value: object) -> object:
        return _ids(value, CHANNEL_ID, "a channel id (C... or G...)")

    def is_open(self) -> bool:
        """Whether it names nobody (any requester matches)."""
        return not (self.users or self.groups or self.channels)


def _ids(value: object, pattern: re.Pattern[str] | None, what: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"must be a list, each {what}")
    out = []
    for item in value:
        ok = isinstance(item, str) and (
            pattern.fullmatch(item) if pattern else GROUP_ID.fullmatch(item) or GROUP_HANDLE.fullmatch(item)
        )
        if not ok:
            raise ValueError(f"{item!r} is not {what}")
        out.append(str(item))
    return tuple(dict.fromkeys(out))


class Escalation(BaseModel):
    """``on_deadline: {escalate: [U..., S..., @handle]}``: at the deadline, ask these people (they may decide)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    escalate: tuple[str, ...]

    @field_validator("escalate", mode="before")
    @classmethod
    def _escalate(cls, value: object) -> object:
        ids = _people(value, "user ids (U...), user-group ids (S...) or handles (@name)")
        if not ids:
            raise ValueError("must name at least one person or user group")
        return ids


def _people(value: object, what: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"must be a list of {what}")
    out = []
    for item in value:
        if not isinstance(item, str) or not (
            USER_ID.fullmatch(item) or GROUP_ID.fullmatch(item) or GROUP_HANDLE.fullmatch(item)
        ):
            raise ValueError(f"{item!r} is not one of {what}")
        out.append(item)
    return tuple(dict.fromkeys(out))


class Rule(BaseModel):
    """One rule of a policy file; every field but the matchers has a default (docs/approvals.md, "The schema").

    - ``tool``: a glob or a list of globs on the tool's name (``"*"``, the default: any tool).
    - ``when``: argument path -> :class:`Condition`; all must hold.
    - ``requester``: :class:`RequesterMatch`.
    - ``require``: ``tool`` (default: the tool's own ``require_approval`` decides), ``always`` or ``never``.
    - ``approvers``: ``requester``, ``channel`` (anyone in the run's channel), ``channel:C...`` (the members of
      channel C...), user ids, user-group ids or ``@handles``. Default ``[requester]``.
    - ``required``: distinct approvers needed (1 to :data:`MAX_REQUIRED`, default 1); ``requester_counts``: whether
      the requester's own approval counts (default: yes when one is required, no once more are).
    - ``where``: ``thread`` (default), ``dm`` (a DM to each approver) or ``channel:C...`` (with a link back).
    - ``deadline``: a duration (default ``ASK_TTL_SECONDS``); ``on_deadline``: ``decline`` (default) or
      ``{escalate: [...]}``.
    - ``arguments``: ``shown`` (default) or ``details-only`` (only in the Details modal).
    - ``edit``: argument names an approver may change; ``grants``: ``once`` (always offered), ``thread`` (this tool
      for the rest of the thread), ``channel`` (this tool in this channel), ``always`` (this tool with these very
      arguments, anywhere in the workspace); ``grant_for``: how long a standing grant lasts (a duration, default 7
      days, at most 90).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str | None = Field(default=None, min_length=1, max_length=200)
    tool: tuple[str, ...] = ("*",)
    when: dict[str, Condition] = Field(default_factory=dict)
    requester: RequesterMatch = Field(default_factory=RequesterMatch)
    require: Require = "tool"
    approvers: tuple[str, ...] = (REQUESTER,)
    required: int = Field(default=1, ge=1, le=MAX_REQUIRED, strict=True)
    requester_counts: bool | None = Field(default=None, strict=True)
    where: str = "thread"
    deadline: int | None = None
    on_deadline: Escalation | None = None  # None: decline
    arguments: Arguments = "shown"
    edit: tuple[str, ...] = ()
    grants: tuple[Grant, ...] = ("once",)
    grant_for: int = DEFAULT_GRANT_FOR

    @field_validator("tool", mode="before")
    @classmethod
    def _tool(cls, value: object) -> object:
        globs = [value] if isinstance(value, str) else value
        if (
            not isinstance(globs, (list, tuple))
            or not globs
            or not all(isinstance(g, str) and g.strip() for g in globs)
        ):
            raise ValueError('must be a tool name or glob ("deploy", "db_*", "*"), or a non-empty list of them')
        return tuple(g.strip() for g in globs)

    @field_validator("when", mode="before")
    @classmethod
    def _when(cls, value: object) -> object:
        if not isinstance(value, dict):
            raise ValueError("must be a mapping of argument name -> condition, e.g. {amount: {gt: 100}}")
        return value

    @field_validator("approvers", mode="before")
    @classmethod
    def _approvers(cls, value: object) -> object:
        items = [value] if isinstance(value, str) else value
        if not isinstance(items, (list, tuple)) or not items:
            raise ValueError("must be a non-empty list")
        for item in items:
            if not (isinstance(item, str) and _approver_kind(item)):
                raise ValueError(
                    f"{item!r} is not an approver: use requester, channel, channel:C..., a user id (U...),"
                    " a user-group id (S...) or @handle"
                )
        return tuple(dict.fromkeys(items))

    @field_validator("where", mode="before")
    @classmethod
    def _where(cls, value: object) -> object:
        if value in ("thread", "dm"):
            return value
        if isinstance(value, str) and value.startswith(CHANNEL_PREFIX) and CHANNEL_ID.fullmatch(value[8:]):
            return value
        raise ValueError("must be thread, dm or channel:C... (a channel id)")

    @field_validator("deadline", mode="before")
    @classmethod
    def _deadline(cls, value: object) -> object:
        seconds = parse_duration(value)
        if not 0 < seconds <= MAX_DURATION:
            raise ValueError("must be more than 0 seconds and at most ten years")
        return seconds

    @field_validator("on_deadline", mode="before")
    @classmethod
    def _on_deadline(cls, value: object) -> object:
        if value == "decline" or value is None:
            return None
        if isinstance(value, dict):
            return value
        raise ValueError("must be decline or {escalate: [people]}")

    @field_validator("edit", mode="before")
    @classmethod
    def _edit(cls, value: object) -> object:
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) and v.strip() for v in value):
            raise ValueError("must be a list of argument names")
        return tuple(dict.fromkeys(v.strip() for v in value))

    @field_validator("grants", mode="before")
    @classmethod
    def _grants(cls, value: object) -> object:
        if not isinstance(value, (list, tuple)):
            raise ValueError("must be a list of " + ", ".join(GRANTS))
        bad = [g for g in value if g not in GRANTS]
        if bad:
            raise ValueError(f"{bad[0]!r} is not a grant: use " + ", ".join(GRANTS))
        return tuple(dict.fromkeys(["once", *value]))

    @field_validator("grant_for", mode="before")
    @classmethod
    def _grant_for(cls, value: object) -> object:
        seconds = parse_duration(value)
        if not 0 < seconds <= MAX_GRANT_FOR:
            raise ValueError("must be more than 0 seconds and at most 90 days")
        return seconds

    @model_validator(mode="after")
    def _satisfiable_by_someone(self) -> Rule:
        if not self.open_ended() and self.capacity(None) < self.required:
            if self.approvers == (REQUESTER,):
                raise ValueError(
                    f"required: {self.required} distinct approvers, but only the requester may approve"
                    + (" (and the requester doesn't count)" if not self.counts_requester else "")
                )
            raise ValueError(
                f"required: {self.required} distinct approvers, but only {self.capacity(None)} can ever approve"
                " (the named users; add approvers or lower required)"
            )
        return self

    @property
    def counts_requester(self) -> bool:
        """Whether the requester's approval counts toward ``required`` (``requester_counts``, default: only when
        one approval is required)."""
        return self.requester_counts if self.requester_counts is not None else self.required == 1

    def is_default(self) -> bool:
        """Whether it matches every call (``tool: "*"``, no ``when``, no ``requester``)."""
        return "*" in self.tool and not self.when and self.requester.is_open()

    def open_ended(self) -> bool:
        """Whether its approvers include a set known only at run time (a user group, a channel's members)."""
        return any(_approver_kind(a) in ("group", "channel", "run-channel") for a in self.approvers)

    def named_users(self) -> list[str]:
        """The user ids among the approvers."""
        return [a for a in self.approvers if _approver_kind(a) == "user"]

    def capacity(self, requester: str | None, *, members: Mapping[str, Collection[str]] | None = None) -> int:
        """How many distinct people could approve a call of ``requester`` (None: someone named nowhere); a user
        group or channel is counted from ``members`` (its resolved member ids) and is unbounded when absent
        (returns a large number)."""
        people: set[str] = set(self.named_users())
        for approver in self.approvers:
            kind = _approver_kind(approver)
            if kind in ("group", "channel", "run-channel"):
                if members is None or approver not in members:
                    return 1_000_000
                people |= set(members[approver])
            elif kind == "requester":
                people.add(requester or "<requester>")
        if not self.counts_requester:
            people.discard(requester or "<requester>")
        return len(people)


def _approver_kind(item: str) -> str | None:
    if item == REQUESTER:
        return "requester"
    if item == RUN_CHANNEL:
        return "run-channel"
    if item.startswith(CHANNEL_PREFIX) and CHANNEL_ID.fullmatch(item[len(CHANNEL_PREFIX) :]):
        return "channel"
    if USER_ID.fullmatch(item):
        return "user"
    if GROUP_ID.fullmatch(item) or GROUP_HANDLE.fullmatch(item):
        return "group"
    return None


class PolicyFile(BaseModel):
    """A policy file: ``version`` (1, the default) and its ``rules``, in order, the last one the default."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: Literal[1] = 1
    rules: tuple[Rule, ...]

    @field_validator("rules", mode="before")
    @classmethod
    def _rules(cls, value: object) -> object:
        if not isinstance(value, (list, tuple)) or not value:
            raise ValueError('must be a non-empty list of rules, the last one the default (tool: "*")')
        if len(value) > MAX_RULES:
            raise ValueError(f"must be at most {MAX_RULES} rules")
        return value

    @field_validator("version", mode="before")
    @classmethod
    def _version(cls, value: object) -> object:
        if value != 1 or isinstance(value, bool):
            raise ValueError("must be 1 (the only version so far)")
        return value


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
        """A line per rule that can't be satisfied for some requesters (``policy check`` prints them)."""
        out = []
        for number, rule in enumerate(self.rules, start=1):
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


# --- loading ----------------------------------------------------------------------------------


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key given twice in one mapping (PyYAML keeps the last silently)."""


def _mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    loader.flatten_mapping(node)
    seen: dict[Any, Any] = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if key in seen:
            mark = key_node.start_mark
            raise yaml.constructor.ConstructorError(
                None, None, f"key {key!r} is given twice (line {mark.line + 1})", mark
            )
        seen[key] = loader.construct_object(value_node, deep=True)
    return seen


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


def parse_text(text: str, *, kind: Literal["yaml", "toml"], source: str = "policy") -> Policy:
    """A policy from ``text`` (YAML or TOML); raises :class:`PolicyError` (each line starts ``source: ``)."""
    try:
        if kind == "toml":
            data: object = tomllib.loads(text)
        else:
            data = yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader subclass: no arbitrary objects
    except tomllib.TOMLDecodeError as exc:
        raise PolicyError([f"{source}: not valid TOML ({exc})"]) from None
    except yaml.YAMLError as exc:
        raise PolicyError([f"{source}: not valid YAML ({' '.join(str(exc).split())})"]) from None
    return from_data(data, source=source)


def load_policy(path: str | Path) -> Policy:
    """The policy in the file at ``path`` (``.yaml`` / ``.yml``: YAML; ``.toml``: TOML). Raises
    :class:`PolicyError` with one line per problem."""
    file = Path(path)
    source = str(path)
    suffix = file.suffix.lower()
    if suffix not in (".yaml", ".yml", ".toml"):
        raise PolicyError([f"{source}: must be a .yaml, .yml or .toml file"])
    try:
        if file.stat().st_size > MAX_FILE_BYTES:
            raise PolicyError([f"{source}: larger than {MAX_FILE_BYTES} bytes"])
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PolicyError([f"{source}: no such file"]) from None
    except IsADirectoryError:
        raise PolicyError([f"{source}: is a directory, not a file"]) from None
    except PermissionError:
        raise PolicyError([f"{source}: can't be read (permission denied)"]) from None
    except UnicodeDecodeError:
        raise PolicyError([f"{source}: is not UTF-8 text"]) from None
    return parse_text(text, kind="toml" if suffix == ".toml" else "yaml", source=source)


def from_data(data: object, *, source: str = "policy") -> Policy:
    """A policy from parsed data (a mapping with ``rules``). Raises :class:`PolicyError`: one line per problem,
    ``source: rule N ('name'): field.path: reason``."""
    if not isinstance(data, dict):
        raise PolicyError([f"{source}: must be a mapping with rules: [...] (got {type(data).__name__})"])
    try:
        parsed = PolicyFile.model_validate(data)
    except ValidationError as exc:
        raise PolicyError(_problems(exc, data, source)) from None
    problems = []
    rules = parsed.rules
    names: dict[str, int] = {}
    for number, rule in enumerate(rules, start=1):
        if rule.name is not None:
            if rule.name in names:
                problems.append(
                    f"{source}: rule {number} ({rule.name!r}): name: also the name of rule {names[rule.name]}"
                )
            names.setdefault(rule.name, number)
        if rule.is_default() and number < len(rules):
            problems.append(
                f"{source}: rule {number + 1} ({rule_name(rules[number], number + 1)!r}): can never match:"
                f" rule {number} ({rule_name(rule, number)!r}) matches every call before it"
            )
            break
    last = rules[-1]
    if not last.is_default():
        problems.append(
            f"{source}: rule {len(rules)} ({rule_name(last, len(rules))!r}): the last rule must be the default,"
            ' matching every call: tool: "*" with no when and no requester (add one at the end)'
        )
    if problems:
        raise PolicyError(problems)
    return Policy(rules, source=source)


def _problems(exc: ValidationError, data: Mapping[str, Any], source: str) -> list[str]:
    raw_rules = data.get("rules")
    out: list[str] = []
    for item in exc.errors(include_url=False):
        loc = list(item["loc"])
        prefix = f"{source}: "
        if len(loc) >= 2 and loc[0] == "rules" and isinstance(loc[1], int):
            number = loc[1] + 1
            raw = raw_rules[loc[1]] if isinstance(raw_rules, (list, tuple)) and loc[1] < len(raw_rules) else None
            name = raw.get("name") if isinstance(raw, dict) and isinstance(raw.get("name"), str) else None
            prefix += f"rule {number}" + (f" ({name!r})" if name else "") + ": "
            loc = loc[2:]
        field = ".".join(str(p) for p in loc if not _is_union_tag(p))
        if item["type"] == "value_error":
            reason = str(item.get("ctx", {}).get("error", item["msg"]))
        elif item["type"] == "extra_forbidden":
            reason = "unknown field"
        elif item["type"] == "missing":
            reason = "is required"
        else:
            reason = item["msg"].replace("Input should be", "must be")
        if reason.startswith(tuple(f"{f}: " for f in Rule.model_fields)):  # a rule-wide check naming its field
            field, _, reason = reason.partition(": ")
        line = prefix + (f"{field}: " if field else "") + reason
        if line not in out:
            out.append(line)
    return out


def _is_union_tag(part: object) -> bool:
    """pydantic's loc names the union member it tried (``Escalation``, ``literal['decline']``): not a field."""
    return isinstance(part, str) and part.startswith(("literal[", "function-"))
