"""Parsers of setting values (durations, Slack ids, choices, URLs), each raising ``ValueError`` with the reason
:mod:`bot.config` shows on the setting's error line."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from typing import Annotated, Any
from urllib.parse import parse_qs, urlsplit

from pydantic import BeforeValidator, SecretStr, ValidationError
from pydantic_core import ErrorDetails
from pydantic_settings import NoDecode

MAX_DURATION = 10 * 365 * 86400  # ten years: beyond that a TTL is a typo, and Redis expiry times overflow
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_DURATION_PART = re.compile(r"([0-9]+)([smhd])")  # ASCII digits only ("1٣" is not 13)
_DURATION_FORMS = "whole seconds or a duration like 30s, 30m, 1h, 2d"


def parse_duration(value: object) -> int:
    """Seconds from ``90``, ``"90"``, ``"30s"``, ``"30m"``, ``"1h"``, ``"2d"`` or ``"1h30m"`` (units s/m/h/d,
    any case, surrounding spaces ignored). Negative values come back negative (callers set the bounds).

    Raises ``ValueError`` (whose message never repeats the value) for anything else.
    """
    if isinstance(value, bool):
        raise ValueError(f"must be {_DURATION_FORMS}")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if not isinstance(value, str):
        raise ValueError(f"must be {_DURATION_FORMS}")
    text = value.strip().lower().replace(" ", "")
    sign = -1 if text.startswith("-") else 1
    text = text.removeprefix("-").removeprefix("+")
    if text.isascii() and text.isdigit():
        return sign * int(text)
    if not text or _DURATION_PART.sub("", text):
        raise ValueError(f"must be {_DURATION_FORMS}")
    return sign * sum(int(n) * _UNITS[unit] for n, unit in _DURATION_PART.findall(text))


def positive_duration(value: object) -> int:
    seconds = parse_duration(value)
    if seconds <= 0:
        raise ValueError("must be more than 0 seconds")
    if seconds > MAX_DURATION:
        raise ValueError("must be at most 3650d (ten years)")
    return seconds


PositiveDuration = Annotated[int, BeforeValidator(positive_duration)]
"""An ``int`` of seconds, given as seconds or ``30s`` / ``30m`` / ``1h`` / ``2d``; more than 0."""


def people_ids(text: str, problem: str) -> str:
    """Comma-separated Slack user ids (``U…``, ``W…``) and user-group ids (``S…``), normalized; else ValueError."""
    ids = [part.strip() for part in text.split(",") if part.strip()]
    if not ids or any(not re.fullmatch(r"[UWS][A-Z0-9_]{1,63}", i) for i in ids):
        raise ValueError(problem)
    return ",".join(ids)


def one_of(value: object, choices: tuple[str, ...], *, upper: bool = False) -> str:
    if isinstance(value, str):
        text = value.strip().upper() if upper else value.strip().lower()
        if text in choices:
            return text
    listed = " or ".join(choices) if len(choices) == 2 else "one of " + ", ".join(choices)
    raise ValueError(f"must be {listed}")


_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOSTNAME = re.compile(rf"(?=.{{1,253}}$){_LABEL}(?:\.{_LABEL})*")


def listen_host(value: object) -> str:
    """The address a server listens on: an IPv4 or IPv6 address (``127.0.0.1``, ``0.0.0.0``, ``::1``, ``::``; IPv6
    without brackets) or a host name (``localhost``); stripped. Raises ``ValueError``."""
    import ipaddress

    text = str(value).strip()
    try:
        return str(ipaddress.ip_address(text.removeprefix("[").removesuffix("]")))
    except ValueError:
        pass
    if _HOSTNAME.fullmatch(text) and not text.replace(".", "").isdigit():
        return text.lower()
    raise ValueError("must be an IP address to listen on (e.g. 127.0.0.1, 0.0.0.0, ::1) or a host name")


def url_schemes(value: object) -> tuple[str, ...]:
    """Comma-separated URL schemes (``https``, ``https,http``), lowercased, without ``:``; at least one. Raises
    ``ValueError``."""
    parts = [p.strip().lower().removesuffix(":").removesuffix("://") for p in str(value).split(",")]
    schemes = tuple(dict.fromkeys(p for p in parts if p))
    if not schemes or not all(re.fullmatch(r"[a-z][a-z0-9+.-]*", p) for p in schemes):
        raise ValueError("must be comma-separated URL schemes, e.g. https or https,http")
    if unsafe := [p for p in schemes if p in NEVER_SCHEMES]:
        raise ValueError(f"must not include {', '.join(unsafe)}: such a link runs code or reads files, not a page")
    return schemes


NEVER_SCHEMES = frozenset({"javascript", "vbscript", "data", "file"})
"""URL schemes no link shown to a person may have (:func:`url_schemes`): they run code in the browser or read local
files, which URL-mode elicitation (open this page) never means."""


def http_url(value: object, example: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"must be an http:// or https:// URL, e.g. {example}")
    text = value.strip()
    parts = urlsplit(text)
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise ValueError(f"must be an http:// or https:// URL with a host, e.g. {example}")
    try:
        parts.port  # noqa: B018 - raises ValueError on a malformed port
    except ValueError:
        raise ValueError("has a port that is not a number from 0 to 65535") from None
    return text


def redis_url_value(value: object) -> str:
    example = "e.g. redis://127.0.0.1:6379/0"
    if not isinstance(value, str):
        raise ValueError(f"must be a redis://, rediss:// or unix:// URL, {example}")
    text = value.strip()
    parts = urlsplit(text)
    scheme = parts.scheme.lower()
    if scheme == "unix":
        if not parts.path:
            raise ValueError("must name the socket's path, e.g. unix:///run/redis/redis.sock")
        return text
    if scheme not in ("redis", "rediss") or "://" not in text:
        raise ValueError(f"must be a redis://, rediss:// or unix:// URL, {example}")
    if not parts.hostname:
        raise ValueError(f"must name a host, {example}")
    try:
        parts.port  # noqa: B018 - raises ValueError on a malformed port
    except ValueError:
        raise ValueError(f"has a port that is not a number from 0 to 65535, {example}") from None
    db = parts.path.strip("/")
    if db and not db.isdigit():
        raise ValueError(f"has a database (the path after the host) that is not a number, {example}")
    if not url_db(text).isdigit():  # redis-py reads ?db= too (over the path), and raises on a bad one at connect
        raise ValueError(f"has a database (?db=) that is not a number, {example}")
    return text


def url_db(url: str) -> str:
    """The database a ``redis://`` URL names, as redis-py reads it: ``?db=`` (its first value) over the path;
    ``"0"`` when neither says. Text as written (may not be a number)."""
    parts = urlsplit(url)
    query = parse_qs(parts.query).get("db")
    return (query[0].strip() if query else parts.path.strip("/")) or "0"


def redis_address(url: str) -> str:
    """Where a Redis URL points, without credentials: ``redis://:pw@db.example:6380/2`` -> ``db.example:6380``,
    ``unix:///run/redis.sock`` -> ``unix:/run/redis.sock``. Never raises (a malformed port shows as 6379)."""
    parts = urlsplit(url)
    if parts.scheme.lower() == "unix":
        return f"unix:{parts.path}"
    try:
        port = parts.port
    except ValueError:
        port = None
    host = parts.hostname or "localhost"
    return f"[{host}]:{port or 6379}" if ":" in host else f"{host}:{port or 6379}"


PROMPTS_MAX = 4  # Slack: up to four (docs.slack.dev reference/methods/assistant.threads.setSuggestedPrompts)
PROMPT_TITLE = 75  # a prompt's title is a chip's label: kept as short as a button's text


def suggested_prompts(value: object) -> list[dict[str, str]]:
    """The assistant pane's prompts, ``[{"title", "message"}, ...]`` (1 to :data:`PROMPTS_MAX`), from a JSON list of
    such objects or of strings, or from ``|``-separated texts (a text is its own title, clipped to
    :data:`PROMPT_TITLE` characters). Raises ``ValueError`` saying what is wrong (never repeating the value)."""
    items: Any = value
    if isinstance(value, str):
        text = value.strip()
        if text.startswith(("[", "{")):  # JSON (an object alone is refused below: not a list)
            try:
                items = json.loads(text)
            except json.JSONDecodeError:
                raise ValueError("is not valid JSON (a list of {title, message} objects)") from None
            if isinstance(items, dict):  # read as one prompt of raw JSON before
                raise ValueError("is one JSON object: give a list of them ([{title, message}, ...])")
        else:
            items = [part.strip() for part in text.split("|") if part.strip()]
    if not isinstance(items, list) or not 1 <= len(items) <= PROMPTS_MAX:
        raise ValueError(f"must be 1 to {PROMPTS_MAX} prompts")
    prompts = []
    for i, item in enumerate(items, 1):
        if isinstance(item, str):
            item = {"title": item, "message": item}
        title, message = (item.get("title"), item.get("message")) if isinstance(item, dict) else (None, None)
        if not isinstance(message, str) or not message.strip():
            raise ValueError(f"prompt {i} has no message")
        title = title if isinstance(title, str) and title.strip() else message
        short = title.strip() if len(title.strip()) <= PROMPT_TITLE else title.strip()[: PROMPT_TITLE - 1] + "…"
        prompts.append({"title": short, "message": message.strip()})
    return prompts


SuggestedPrompts = Annotated[list[dict[str, str]], NoDecode, BeforeValidator(suggested_prompts)]
"""NoDecode: pydantic-settings would read a list from the environment as JSON only (pydantic-settings >= 2.7)."""


def _shown(field: str, value: object, is_secret: Callable[[str], bool]) -> str:
    """``got 'value'``, or ``value hidden`` for a secret (and for a Redis URL that may carry a password)."""
    if isinstance(value, SecretStr):
        return "value hidden"
    text = value if isinstance(value, str) else repr(value)
    if field == "redis_url":  # shown unless it may carry credentials (user:password@ or ?password=)
        if "@" in text or "password" in text.lower():
            return "value hidden"
    elif is_secret(field):
        return "value hidden"
    if len(text) > 80:
        text = text[:77] + "..."
    return f"got {text!r}"


PLAIN_REASONS = {
    "int_parsing": "must be a whole number",
    "int_parsing_size": "must be a whole number",
    "int_from_float": "must be a whole number",
    "int_type": "must be a whole number",
    "float_parsing": "must be a number",
    "float_type": "must be a number",
    "finite_number": "must be a number",
    "bool_parsing": "must be true or false (also yes/no, on/off, 1/0)",
    "bool_type": "must be true or false",  # strict: the words above are refused too
    "string_type": "must be text",
    "list_type": "must be a list",
    "tuple_type": "must be a list",
    "set_type": "must be a list",
    "dict_type": "must be a mapping (name: value)",
    "model_type": "must be a mapping (name: value)",
    "missing": "is required",
    "extra_forbidden": "unknown field",
}
"""pydantic's error types in the words a person editing a setting or a file reads (pydantic says "Input should be
a valid integer, unable to parse string as an integer", or names a class: "a valid dictionary or instance of
RequesterMatch")."""
BOUNDS = {
    "greater_than_equal": ("ge", "must be at least {}"),
    "less_than_equal": ("le", "must be at most {}"),
    "greater_than": ("gt", "must be more than {}"),
    "less_than": ("lt", "must be less than {}"),
    "string_too_long": ("max_length", "must be at most {} characters"),
    "string_too_short": ("min_length", "must be at least {} characters"),
    "too_long": ("max_length", "must have at most {} items"),
    "too_short": ("min_length", "must have at least {} items"),
}


def reason_of(item: ErrorDetails) -> str:
    """Why one value was refused, as ``describe_errors`` and the files' loaders (approval policy, MCP callers) say it
    after its name: a validator's own message as it wrote it, :data:`PLAIN_REASONS`, a bound as ``must be at least
    1000`` (``10``, not ``10.0``; a text of at least 1 character: ``must not be empty``), else pydantic's message
    with "Input should be" as "must be"."""
    ctx = item.get("ctx") or {}
    kind = item["type"]
    if kind == "value_error":
        return str(ctx.get("error", item["msg"]))
    if kind in PLAIN_REASONS:
        return PLAIN_REASONS[kind]
    if kind in BOUNDS and BOUNDS[kind][0] in ctx:
        key, words = BOUNDS[kind]
        bound = ctx[key]
        if kind in ("string_too_short", "too_short") and bound == 1:
            return "must not be empty"
        if isinstance(bound, float) and bound.is_integer():
            bound = int(bound)
        return words.format(bound)
    return item["msg"].replace("Input should be", "must be")


_PLAIN_KEY = re.compile(r"[A-Za-z0-9_*.-]{1,60}")


def key_path(parts: Sequence[object]) -> str:
    """Where in a file a refused value is, from pydantic's ``loc``: ``rules.0.when`` (a key that is not plain, a
    long one, or one with a newline that would start a line of its own, forged, is shown quoted and clipped:
    :func:`clipped`)."""
    return ".".join(str(p) if _PLAIN_KEY.fullmatch(str(p)) else clipped(str(p)) for p in parts)


def clipped(text: str, *, limit: int = 40) -> str:
    """``text`` quoted (``repr``: a newline shows as ``\\n``), its first ``limit`` characters and ``...`` when it is
    longer: a name from a file, in an error line."""
    return repr(text[:limit] + "..." if len(text) > limit else text)


def describe_errors(error: ValidationError, *, order: list[str], is_secret: Callable[[str], bool]) -> list[str]:
    """One ``NAME: reason (got 'value')`` line per setting that failed (the first reason of each), in the fields'
    ``order``; ``is_secret(field)``: its value is never shown (``value hidden``)."""
    problems: dict[str, str] = {}
    for item in error.errors(include_url=False):
        field = str(item["loc"][0]) if item["loc"] else "settings"
        if field in problems:
            continue
        if not item["loc"]:  # a rule across settings: its message names the setting ("NAME: reason")
            problems[field] = str(item.get("ctx", {}).get("error", item["msg"]))
            continue
        problems[field] = f"{field.upper()}: {reason_of(item)} ({_shown(field, item.get('input'), is_secret)})"
    return [problems[f] for f in sorted(problems, key=lambda f: order.index(f) if f in order else len(order))]
