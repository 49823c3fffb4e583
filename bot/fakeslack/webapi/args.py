"""Slack's error answers and the argument checks every fake Web API method shares.

- ``ApiError(error, **extra)``: an answer ``{"ok": false, "error": error, **extra}`` (``body()``).
- ``invalid(error, messages, *, with_errors)``: ``invalid_arguments`` / ``invalid_blocks`` in Slack's shape, the
  messages in ``response_metadata.messages`` prefixed ``[ERROR]`` (and in ``errors`` when ``with_errors``).
- ``json_arg(params, key, *, error)``: a JSON-valued argument (``blocks``, ``view``, ``prompts``) that form bodies
  carry as a string; unparseable -> ``error``.
- ``require(params, *names)``: a missing (or empty) required argument answers ``invalid_arguments`` with
  ``[ERROR] missing required field: X``.
"""

from __future__ import annotations

import json
from typing import Any

from bot.fakeslack.state import JSON


class ApiError(Exception):
    """A Slack error answer: ``{"ok": false, "error": code, **extra}``."""

    def __init__(self, error: str, **extra: Any) -> None:
        super().__init__(error)
        self.error = error
        self.extra = extra

    def body(self) -> JSON:
        return {"ok": False, "error": self.error, **self.extra}


def invalid(error: str, messages: list[str], *, with_errors: bool) -> ApiError:
    """An invalid_blocks/invalid_arguments error in Slack's shape: ``errors`` plus
    ``response_metadata.messages`` prefixed ``[ERROR]``."""
    extra: JSON = {"response_metadata": {"messages": [f"[ERROR] {m}" for m in messages]}}
    if with_errors:
        extra["errors"] = list(messages)
    return ApiError(error, **extra)


def json_arg(params: JSON, key: str, *, error: str) -> Any:
    """A JSON-valued argument (``blocks``, ``view``) that form bodies carry as a string."""
    value = params.get(key)
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError as exc:
            raise ApiError(error) from exc
    return value


def require(params: JSON, *names: str) -> None:
    missing = [n for n in names if params.get(n) in (None, "")]
    if missing:
        raise invalid("invalid_arguments", [f"missing required field: {n}" for n in missing], with_errors=False)
