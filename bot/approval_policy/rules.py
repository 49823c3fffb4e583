"""A policy file's rules as data: :class:`Rule` (which calls it matches: the tool's name, its arguments, who asked; and
what it asks: who approves, how many, where, until when, how the call is shown, what may be edited or granted) and
:class:`PolicyFile` (``version`` and ``rules``), validated field by field with pydantic. The ids a rule names
(users, user groups, channels) are checked by their shape only: nothing here talks to Slack."""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from bot.approval_policy.conditions import Condition
from bot.settings_values import MAX_DURATION, parse_duration

MAX_REQUIRED = 20  # distinct approvers one call may need
MAX_RULES = 1000

USER_ID = re.compile(r"[UW][A-Z0-9_]{1,63}")
GROUP_ID = re.compile(r"S[A-Z0-9_]{1,63}")
GROUP_HANDLE = re.compile(r"@[a-z0-9][a-z0-9._-]{0,79}")
CHANNEL_ID = re.compile(r"[CG][A-Z0-9_]{1,63}")

REQUESTER = "requester"  # the person who started the run
RUN_CHANNEL = "channel"  # anyone in the run's channel (APPROVERS=channel)
CHANNEL_PREFIX = "channel:"  # channel:C123: the members of channel C123
Require = Literal["tool", "always", "never"]
Arguments = Literal["shown", "details-only"]
Grant = Literal["once", "thread", "channel", "always"]
GRANTS: tuple[Grant, ...] = ("once", "thread", "channel", "always")
DEFAULT_GRANT_FOR = 7 * 24 * 3600  # seconds a standing grant lasts unless the rule says (grant_for)
MAX_GRANT_FOR = 90 * 24 * 3600


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

    @property
    def standing_grants(self) -> tuple[Grant, ...]:
        """The standing grants (``thread``, ``channel``, ``always``) its approvers are offered: those of ``grants``,
        none when it needs several approvals (a grant is one person's: it would stand in for the others)."""
        return tuple(g for g in self.grants if g != "once") if self.required == 1 else ()

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
