"""Opaque references from Slack payloads back to a question: ``(run_id, tool_call_id)``.

They travel in ``block_id`` (``ask|{run_id}|{call}|{part}``, <= 255 chars) and in button ``value``
(``{run_id}|{call}|{option index}``, <= 2000 chars); select and checkbox option values carry only the
option index (<= 150 chars). ``call`` is the ``tool_call_id`` itself when it is short (<= 64 chars,
``[A-Za-z0-9_-.:]``), otherwise ``#`` + 32 hex chars of its SHA-256, matched against the pending call.
Slack: block_id/action_id <= 255, button value <= 2000, option value <= 150 (docs.slack.dev reference/block-kit).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

from bot.errors import BotError

_SAFE = re.compile(r"^[A-Za-z0-9_.:\-]{1,64}$")


class BadReference(BotError, ValueError):
    """A block_id or value that this bot did not make (or that was tampered with)."""


def call_key(tool_call_id: str) -> str:
    """The form of ``tool_call_id`` used in references (itself, or ``#`` + a digest when long/odd)."""
    if _SAFE.match(tool_call_id):
        return tool_call_id
    return "#" + hashlib.sha256(tool_call_id.encode()).hexdigest()[:32]


@dataclass(frozen=True)
class QuestionRef:
    """Which question a payload is about: ``run_id`` and ``call`` (see :func:`call_key`)."""

    run_id: str
    call: str

    @classmethod
    def of(cls, run_id: str, tool_call_id: str) -> QuestionRef:
        return cls(run_id=run_id, call=call_key(tool_call_id))

    def matches(self, tool_call_id: str | None) -> bool:
        """Whether this reference names ``tool_call_id``."""
        return tool_call_id is not None and call_key(tool_call_id) == self.call

    def block_id(self, part: str) -> str:
        """``ask|run|call|part``; unique per question and part."""
        return f"ask|{self.run_id}|{self.call}|{part}"

    def value(self, index: int) -> str:
        """A button value: ``run|call|index``."""
        return f"{self.run_id}|{self.call}|{index}"

    @classmethod
    def from_block_id(cls, block_id: str) -> tuple[QuestionRef, str]:
        """Parse a block_id made by :meth:`block_id`; returns ``(ref, part)``. Raises :class:`BadReference`."""
        parts = block_id.split("|")
        if len(parts) != 4 or parts[0] != "ask" or not parts[1] or not parts[2]:
            raise BadReference("not a question block")
        return cls(run_id=parts[1], call=parts[2]), parts[3]

    def shown_in(self, message: dict[str, Any], *, part: str | None = None) -> bool:
        """Whether ``message`` (as Slack returns it) shows this question: one of its blocks carries this reference
        (:meth:`block_id`: the question, its outcome, an approval request or its decision), with ``part`` when
        given (e.g. a batch's header: ``"batch-head"``)."""
        for block in message.get("blocks") or []:
            try:
                ref, shown = QuestionRef.from_block_id(
                    str(block.get("block_id", "")) if isinstance(block, dict) else ""
                )
            except BadReference:
                continue
            if ref == self and part in (None, shown):
                return True
        return False

    @classmethod
    def from_value(cls, value: str) -> tuple[QuestionRef, int]:
        """Parse a button value made by :meth:`value`; returns ``(ref, index)``. Raises :class:`BadReference`."""
        parts = value.split("|")
        if len(parts) != 3 or not parts[0] or not parts[1] or not _is_index(parts[2]):
            raise BadReference("not a question button")
        return cls(run_id=parts[0], call=parts[1]), int(parts[2])


def _is_index(text: str) -> bool:
    """ASCII digits only (``"²".isdigit()`` is true, yet ``int("²")`` fails)."""
    return text.isascii() and text.isdigit()


def parse_index(text: str) -> int | None:
    """An option index from a payload value, or None when it is not one (tampered, odd unicode)."""
    return int(text) if _is_index(text) and len(text) <= 6 else None
