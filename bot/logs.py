"""Logging for the bot: every line about a run names it, and no secret ever reaches a log line.

Context (``contextvars``, so it follows the code that runs, not the logger that logs)::

    with log_context(run_id=state.run_id, team_id=team, channel_id=channel, user_id=user):
        log.info("resumed")          # ... resumed [run=r-1 team=T1 channel=C1 user=U1]

    bind_log_context(run_id=...)     # for the rest of the current task (or context); returns a reset token

The fields are ``run_id``, ``team_id``, ``channel_id`` and ``user_id`` (:data:`LOG_FIELDS`); ``None`` leaves a
field as it was. asyncio copies the current context into every task it creates (``create_task``,
``ensure_future``, ``gather``), so background work started inside a ``log_context`` carries its fields; an
awaited coroutine simply shares its caller's context. A record's own ``extra={"run_id": ...}`` wins over
the context.

:func:`configure_logging` installs one handler on the root logger with two filters:

- :class:`LogContextFilter` sets ``record.run_id`` / ``team_id`` / ``channel_id`` / ``user_id`` (``None`` when
  unknown) and ``record.log_context`` (``" [run=... team=... channel=... user=...]"``, the known ones only,
  or ``""``);
- :class:`RedactingFilter` rewrites the message, its arguments, the traceback and the stack with
  :func:`redact`; the formatters redact their output once more (belt and braces).

:func:`redact` hides Slack tokens (``xoxb-``, ``xoxp-``, ``xapp-``, ...), OpenAI-style keys (``sk-...``),
``Bearer`` credentials, passwords in URLs (``redis://:pw@host``) and in ``password=`` / ``token=`` pairs,
and every exact value given to :func:`register_secrets` (e.g. the signing secret, which has no pattern).
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import re
import sys
import threading
from collections.abc import Iterable, Iterator, Mapping
from datetime import UTC, datetime
from types import MappingProxyType
from typing import IO, Literal

LogFormat = Literal["text", "json"]
LOG_FIELDS = ("run_id", "team_id", "channel_id", "user_id")
_SHORT = {"run_id": "run", "team_id": "team", "channel_id": "channel", "user_id": "user"}
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s%(log_context)s"
REDACTED = "[redacted]"
# slack_sdk's Web API client and Bolt build their debug lines (whole request and response bodies, every middleware)
# whenever the logger's *own* level is unset (``logger.level <= DEBUG``, not ``isEnabledFor``), only for logging to
# drop them: configure_logging gives these loggers the configured level (~80 µs of CPU per Web API call with a
# question's blocks, more for bigger bodies).
PINNED_LIBRARY_LOGGERS = (
    "slack_sdk.web.async_base_client",
    "slack_bolt.AsyncApp",
    "slack_bolt.AsyncIgnoringSelfEvents",
)
QUIET_LIBRARY_LOGGERS = ("mcp.server.streamable_http_manager",)  # their INFO lines ("StreamableHTTP session manager
# started") say nothing to whoever runs the bot: shown from WARNING, or all at DEBUG
MIN_SECRET_LENGTH = 6  # shorter registered values would blank out ordinary words

_NO_FIELDS: Mapping[str, str] = MappingProxyType({})
_context: contextvars.ContextVar[Mapping[str, str]] = contextvars.ContextVar("bot_log_context", default=_NO_FIELDS)

_PATTERNS: list[tuple[re.Pattern[str], str]] = [
    # Slack: xoxb- / xoxp- / xoxa- / xoxe.xoxb- (rotating) bot and user tokens, xapp- app-level tokens.
    (re.compile(r"\b(xox[a-z](?:\.xox[a-z])?|xapp)-[A-Za-z0-9-]+"), rf"\1-{REDACTED}"),
    # OpenAI-style keys: sk-..., sk-proj-...
    (re.compile(r"\bsk-[A-Za-z0-9_-]+"), f"sk-{REDACTED}"),
    (re.compile(r"(?i)\b(bearer)\s+[A-Za-z0-9._~+/=-]+"), rf"\1 {REDACTED}"),
    # user:password@ in any URL (redis://:pw@host, rediss://user:pw@host, https://u:p@proxy)
    (re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://[^\s:/@]*):[^\s/@]+@"), rf"\1:{REDACTED}@"),
    (
        re.compile(r"(?i)\b(password|passwd|pwd|token|secret|api_key|apikey|access_token|ticket)=(['\"]?)[^\s&'\"]+"),
        rf"\1=\2{REDACTED}",
    ),
]
_secrets: set[str] = set()
_secrets_lock = threading.Lock()
_secrets_pattern: re.Pattern[str] | None = None


def register_secrets(*values: str | None) -> None:
    """Redact these exact values from every log line from now on (``None``, blank and values shorter than
    :data:`MIN_SECRET_LENGTH` are ignored; the patterns of :func:`redact` still apply to those)."""
    global _secrets_pattern
    with _secrets_lock:
        _secrets.update(v for v in values if v and len(v.strip()) >= MIN_SECRET_LENGTH)
        if _secrets:  # longest first, so a secret containing another is hidden whole
            alternatives = sorted(_secrets, key=len, reverse=True)
            _secrets_pattern = re.compile("|".join(re.escape(v) for v in alternatives))


def redact(text: str) -> str:
    """``text`` with every token, key, ``Bearer`` value, URL password and registered secret replaced by
    ``[redacted]`` (keeping a token's kind, e.g. ``xoxb-[redacted]``). Never raises."""
    pattern = _secrets_pattern
    if pattern is not None:
        text = pattern.sub(REDACTED, text)
    for regex, replacement in _PATTERNS:
        text = regex.sub(replacement, text)
    return text


def current_log_context() -> dict[str, str]:
    """The fields bound in the current context, e.g. ``{"run_id": "r-1", "channel_id": "C1"}`` (a copy)."""
    return dict(_context.get())


def bind_log_context(
    *,
    run_id: str | None = None,
    team_id: str | None = None,
    channel_id: str | None = None,
    user_id: str | None = None,
) -> contextvars.Token[Mapping[str, str]]:
    """Add these fields to the current context (``None`` keeps a field as it was) until the context ends
    (for an asyncio task: the task's end) or :func:`reset_log_context` is called with the returned token."""
    given = {"run_id": run_id, "team_id": team_id, "channel_id": channel_id, "user_id": user_id}
    merged = {**_context.get(), **{k: str(v) for k, v in given.items() if v is not None}}
    return _context.set(MappingProxyType(merged))


def reset_log_context(token: contextvars.Token[Mapping[str, str]]) -> None:
    """Undo the :func:`bind_log_context` that returned ``token`` (in the same context; else ``ValueError``)."""
    _context.reset(token)


@contextlib.contextmanager
def log_context(
    *,
    run_id: str | None = None,
    team_id: str | None = None,
    channel_id: str | None = None,
    user_id: str | None = None,
) -> Iterator[dict[str, str]]:
    """Bind these fields (see :func:`bind_log_context`) for the ``with`` block; yields the resulting fields.
    Tasks created inside the block keep the fields after it ends."""
    token = bind_log_context(run_id=run_id, team_id=team_id, channel_id=channel_id, user_id=user_id)
    try:
        yield current_log_context()
    finally:
        _context.reset(token)


def context_suffix(fields: Mapping[str, object]) -> str:
    """``" [run=r-1 team=T1 channel=C1 user=U1]"`` from the known (non-empty) fields, or ``""``."""
    parts = [f"{_SHORT[name]}={fields[name]}" for name in LOG_FIELDS if fields.get(name) not in (None, "")]
    return f" [{' '.join(parts)}]" if parts else ""


class LogContextFilter(logging.Filter):
    """Adds ``run_id`` / ``team_id`` / ``channel_id`` / ``user_id`` (from the context unless the record has
    them from ``extra=``; ``None`` when unknown) and ``log_context`` (their text suffix) to each record."""

    def filter(self, record: logging.LogRecord) -> bool:
        bound = _context.get()
        for name in LOG_FIELDS:
            if getattr(record, name, None) is None:
                setattr(record, name, bound.get(name))
        record.log_context = context_suffix({name: getattr(record, name) for name in LOG_FIELDS})
        return True


class RedactingFilter(logging.Filter):
    """Redacts (:func:`redact`) each record's message with its arguments, its traceback and its stack in place,
    so no formatter can print a secret from them."""

    _exceptions = logging.Formatter()

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a malformed call: leave it for the handler's own error reporting
            return True
        record.msg = redact(message)
        record.args = None
        if record.exc_info and not record.exc_text:
            record.exc_text = self._exceptions.formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        return True


class TextFormatter(logging.Formatter):
    """``2024-05-01 12:00:00,000 INFO bot.agent: message [run=... channel=...]``, redacted once more."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        if not hasattr(record, "log_context"):
            record.log_context = context_suffix({name: getattr(record, name, None) for name in LOG_FIELDS})
        return redact(super().format(record))


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``time`` (ISO 8601, UTC), ``level``, ``logger``, ``message``, the known
    context fields, an audit record's fields (``extra={"audit": {...}}``, :mod:`bot.ops.audit`) as top-level keys,
    and ``exception`` / ``stack`` when present; redacted once more."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        bound = _context.get()
        for name in LOG_FIELDS:
            value = getattr(record, name, None) or bound.get(name)
            if value:
                line[name] = value
        audit = getattr(record, "audit", None)  # bot.ops.audit's fields: top-level keys of the line
        if isinstance(audit, dict):
            line.update((k, v) for k, v in audit.items() if k not in line or k in LOG_FIELDS)
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            line["exception"] = record.exc_text
        if record.stack_info:
            line["stack"] = record.stack_info
        # Redacted before encoding: a pattern run over the JSON text could eat an escape's backslash (token=ab\")
        return json.dumps(_redacted(line), ensure_ascii=False, default=lambda value: redact(str(value)))


def _redacted(value: object) -> object:
    """``value`` (a line's fields: strings, numbers, lists, dicts) with every string :func:`redact`-ed."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {str(k): _redacted(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_redacted(v) for v in value]
    return value


class _DropBoltUnusedTokenWarning(logging.Filter):
    """Bolt warns that its token is unused when given a ready client; that is this bot's design, not a mistake."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not ("token" in message and "will be unused" in message)


class _BadRequestsInOneLine(logging.Filter):
    """aiohttp's server logs a malformed request (a header over 8190 bytes, a bad request line: the client's fault,
    answered 400) as an ERROR with a traceback: anyone who reaches a port could fill the log. Such a record becomes
    one INFO line naming the error."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        code = getattr(exc, "code", None)
        client_error = isinstance(code, int) and 400 <= code < 500
        if exc is not None and client_error and type(exc).__module__.startswith("aiohttp.http_exceptions"):
            record.msg, record.args = "bad HTTP request (%s), answered %d", (type(exc).__name__, code)
            record.exc_info, record.exc_text = None, None
            record.levelno, record.levelname = logging.INFO, "INFO"
        return True


def configure_logging(
    level: str | int = "INFO",
    fmt: LogFormat = "text",
    *,
    secrets: Iterable[str | None] = (),
    stream: IO[str] | None = None,
) -> logging.Handler:
    """Log to ``stream`` (default: stderr) at ``level`` (a name such as ``"INFO"``, any case, or a number) in
    ``fmt`` (``text`` or ``json``), with the run context and redaction (see the module docstring); ``secrets``
    are registered with :func:`register_secrets`. Replaces the handler of an earlier call; returns the new one.

    Raises ``ValueError`` for an unknown level or format.
    """
    if fmt not in ("text", "json"):
        raise ValueError(f"unknown log format {fmt!r}: use 'text' or 'json'")
    numeric = level if isinstance(level, int) else logging.getLevelName(level.strip().upper())
    if not isinstance(numeric, int):
        raise ValueError(f"unknown log level {level!r}")
    register_secrets(*secrets)
    root = logging.getLogger()
    for old in [h for h in root.handlers if getattr(h, "_bot_logs", False)]:
        root.removeHandler(old)
        old.close()
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler._bot_logs = True  # type: ignore[attr-defined]
    handler.addFilter(LogContextFilter())
    handler.addFilter(RedactingFilter())
    handler.setFormatter(TextFormatter() if fmt == "text" else JsonFormatter())
    root.addHandler(handler)
    root.setLevel(numeric)
    for name in PINNED_LIBRARY_LOGGERS:
        logging.getLogger(name).setLevel(numeric)
    for name in QUIET_LIBRARY_LOGGERS:
        logging.getLogger(name).setLevel(numeric if numeric <= logging.DEBUG else max(numeric, logging.WARNING))
    bolt = logging.getLogger("slack_bolt.AsyncApp")
    if not any(isinstance(f, _DropBoltUnusedTokenWarning) for f in bolt.filters):
        bolt.addFilter(_DropBoltUnusedTokenWarning())
    server = logging.getLogger("aiohttp.server")
    if not any(isinstance(f, _BadRequestsInOneLine) for f in server.filters):
        server.addFilter(_BadRequestsInOneLine())
    return handler
