"""Who calls the MCP server, and what each caller may do: ``MCP_CALLERS``.

Each caller is a named identity (:class:`Caller`): its token (kept as its SHA-256 only), the channels and people it
may ask, whether it may request approvals, and its limits. Over streamable HTTP the bearer token picks the caller
(:meth:`Callers.by_token`, SHA-256 compared in constant time); over stdio there is no token: the process is the
caller ``MCP_CALLER`` names. Without ``MCP_CALLERS`` the server has one implicit caller (:func:`implicit_caller`):
``MCP_TOKEN`` over HTTP, confined to ``MCP_ASK_CHANNEL``.

The file (YAML, JSON being YAML too)::

    callers:
      - name: build-42
        token_sha256: "<sha256 hex of the caller's token>"
        channels: [C0GENERAL1]
        people: [U0ALICE01, U0BOB0001]
        approvals: true
        approvals_anyone_in_channel: false
        policy_rule: deploys
        max_waiting: 5
        per_minute: 10

Only the token's hash is accepted, never the token in clear: the file can then be read, versioned and shared
without giving anyone a token. Every rule a call breaks is refused by :func:`check_target` /
:func:`check_approval` (and the limits by :class:`bot.mcp_server.limits.CallerLimits`) with a :class:`Refused`
naming the rule.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from bot.errors import BotError, ConfigError
from bot.settings_values import key_path, reason_of

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
CHANNEL = re.compile(r"[CGD][A-Z0-9_]{1,63}")
PERSON = re.compile(r"[UW][A-Z0-9_]{1,63}")
IMPLICIT = ""  # the implicit caller's name: no name (its request_keys are the ones stored before MCP_CALLERS)
CALLER_STATE = "mcp_caller"  # the ASGI scope's ``state`` entry where the HTTP transport puts the request's caller
MAX_WAITING_DEFAULT = 5
PER_MINUTE_DEFAULT = 10


class Refused(BotError):
    """A call this caller may not make; ``str`` names the caller and the rule (``rule``: the entry's field)."""

    def __init__(self, caller: Caller, rule: str, reason: str) -> None:
        self.caller, self.rule = caller, rule
        who = f"caller {caller.name}" if caller.name else "this server's caller"
        super().__init__(f"refused ({who}, rule `{rule}`): {reason}")


class Caller(BaseModel):
    """One caller of the MCP server (an entry of ``MCP_CALLERS``).

    ``channels``: the channel ids it may ask in; ``people``: the user ids it may ask (as ``user``, or as a DM's
    ``channel``); None (only the implicit caller): anyone in its channels. ``approvals``: it may call
    ``request_approval``; ``approvals_anyone_in_channel``: an approval anyone in the channel would decide (its
    approvers list ``channel``, or ``requester`` with no ``user``: :func:`check_approval`) is allowed.
    ``policy_rule``: the name of the ``APPROVAL_POLICY`` rule that decides its approvals (who, how; checked at
    start), else the rules match as for any request. ``max_waiting``: its questions waiting at once;
    ``per_minute``: the questions it may ask a minute (both across server processes, in Redis).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    token_sha256: str | None = None
    channels: tuple[str, ...] = ()
    people: tuple[str, ...] | None = ()
    approvals: bool = False
    approvals_anyone_in_channel: bool = False
    policy_rule: str | None = Field(default=None, min_length=1, max_length=200)
    # strict: a count is a number in the file; ``true`` is not 1, nor ``"10"`` 10 (pydantic's lax mode took both)
    max_waiting: int = Field(default=MAX_WAITING_DEFAULT, ge=1, le=10_000, strict=True)
    per_minute: int = Field(default=PER_MINUTE_DEFAULT, ge=1, le=100_000, strict=True)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not NAME.fullmatch(value):
            raise ValueError("must be 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit")
        return value

    @field_validator("token_sha256")
    @classmethod
    def _token_sha256(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[0-9a-fA-F]{64}", value.strip()):
            raise ValueError("must be the SHA-256 of the token, 64 hex digits (printf %s TOKEN | sha256sum)")
        return None if value is None else value.strip().lower()

    @field_validator("channels")
    @classmethod
    def _channels(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        bad = [v for v in value if not CHANNEL.fullmatch(v)]
        if bad:
            raise ValueError(f"must be channel ids (C..., G..., D...), not {', '.join(map(repr, bad))}")
        return value

    @field_validator("people")
    @classmethod
    def _people(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        bad = [v for v in value or () if not PERSON.fullmatch(v)]
        if bad:
            raise ValueError(f"must be user ids (U..., W...), not {', '.join(map(repr, bad))}")
        return value

    def may_ask(self, person: str) -> bool:
        """Whether ``person`` (a user id) is one of the people this caller may ask."""
        return self.people is None or person in self.people


def implicit_caller(*, channel: str | None) -> Caller:
    """The one caller of a server without ``MCP_CALLERS``: its channel ``MCP_ASK_CHANNEL`` only (none: it can ask
    nowhere), anyone there, approvals allowed when they name who decides, the default limits."""
    return Caller.model_construct(name=IMPLICIT, channels=(channel,) if channel else (), people=None, approvals=True)


@dataclass(frozen=True)
class Callers:
    """The callers of ``MCP_CALLERS`` (names unique, token hashes unique)."""

    entries: tuple[Caller, ...]

    def named(self, name: str) -> Caller | None:
        """The caller called ``name``, or None."""
        return next((c for c in self.entries if c.name == name), None)

    def by_token(self, token: bytes) -> Caller | None:
        """The caller whose token is ``token`` (its SHA-256 compared with every entry's in constant time), or None."""
        digest = hashlib.sha256(token).hexdigest().encode()
        found = None
        for caller in self.entries:
            if caller.token_sha256 is not None and hmac.compare_digest(digest, caller.token_sha256.encode()):
                found = caller
        return found


def parse_callers(data: object) -> Callers:
    """The callers of an already parsed file (see the module docstring). Raises ``ConfigError`` naming every
    problem, on one line."""
    if not isinstance(data, dict) or not isinstance(data.get("callers"), list) or not data["callers"]:
        raise ConfigError("must hold a non-empty list `callers:` (see docs/mcp-server.md)")
    problems: list[str] = [f"unknown key {k!r} (only `callers`)" for k in data if k != "callers"]
    entries: list[Caller] = []
    for i, entry in enumerate(data["callers"]):
        name = entry.get("name") if isinstance(entry, dict) else None
        where = f"callers[{i}]" + (f" ({key_path([name])})" if isinstance(name, str) and name else "")
        if not isinstance(entry, dict):
            problems.append(f"{where}: must be a mapping (name: ..., token_sha256: ...)")
            continue
        try:
            caller = Caller.model_validate({**entry, "people": entry.get("people") or ()})
        except ValidationError as exc:
            for item in exc.errors(include_url=False):
                field = key_path(item["loc"][:1]) or "entry"
                problems.append(f"{where}.{field}: {reason_of(item)}")
            continue
        if not caller.channels:
            problems.append(f"{where}.channels: give at least one channel id it may ask in")
        if any(c.name == caller.name for c in entries):
            problems.append(f"{where}.name: {caller.name!r} is given twice")
        if caller.token_sha256 and any(c.token_sha256 == caller.token_sha256 for c in entries):
            problems.append(f"{where}.token_sha256: the same token as another caller's")
        entries.append(caller)
    if problems:
        raise ConfigError("; ".join(problems))
    return Callers(tuple(entries))


def load_callers(path: str | Path) -> Callers:
    """The callers of the file at ``path`` (YAML or JSON). Raises ``ConfigError`` with a one-line reason."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError("no such file") from None
    except IsADirectoryError:
        raise ConfigError("is a directory, not a file") from None
    except UnicodeDecodeError:
        raise ConfigError("is not UTF-8 text") from None
    except OSError as exc:
        raise ConfigError(f"can't be read: {exc.strerror or type(exc).__name__}") from None
    try:
        data: Any = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"is not valid YAML{at}") from None
    return parse_callers(data)


def check_target(caller: Caller, *, channel: str, person: str | None) -> None:
    """Refuse asking ``person`` (None: anyone there) in ``channel`` when ``caller`` may not: a channel outside its
    ``channels``, a DM (a user id given as ``channel``) of someone outside its ``people``, a ``user`` outside its
    ``people``. Raises :class:`Refused`."""
    if PERSON.fullmatch(channel):
        if not caller.may_ask(channel) or caller.people is None:
            raise Refused(caller, "people", f"it may not message {channel} directly (not in its people)")
    elif channel not in caller.channels:
        allowed = ", ".join(caller.channels) or "none"
        raise Refused(caller, "channels", f"it may not ask in {channel} (its channels: {allowed})")
    if person is not None and not caller.may_ask(person):
        raise Refused(caller, "people", f"it may not ask {person} (not in its people)")


def check_approval(caller: Caller, *, channel_wide: bool) -> None:
    """Refuse an approval request ``caller`` may not make: none at all (``approvals: false``), or one anyone in the
    channel would decide unless its ``approvals_anyone_in_channel``. ``channel_wide``: whether anyone in the channel
    would decide this request, as the approvers that will decide it say for the user asked
    (:meth:`bot.slack.questions.approvers.ApproverPolicy.channel_wide` of ``APPROVERS``, or of the
    ``APPROVAL_POLICY`` rule that decides it: the same reading that admits who clicks). Raises :class:`Refused`."""
    if not caller.approvals:
        raise Refused(caller, "approvals", "it may not request approvals")
    if caller.approvals_anyone_in_channel or not channel_wide:
        return
    raise Refused(
        caller,
        "approvals_anyone_in_channel",
        "an approval must name who decides: give `user` (or set APPROVERS, or the approval policy's rule, to people"
        " or user groups); anyone in the channel may not decide it",
    )
