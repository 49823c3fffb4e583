"""How a model turn ended, when not as a finished answer (:func:`ending_of`): the one place that reads a turn's
``finish_reason``.

Chat Completions ends a turn with ``finish_reason`` ``stop`` (a finished answer) or ``tool_calls`` (older servers:
``function_call``). Anything else means the text is not a whole answer:

- ``length``: the model reached its output token limit (``max_tokens``, or the context window) mid-reply;
- ``content_filter``: the provider's content filter withheld (the rest of) the reply (OpenAI, Azure OpenAI);
- anything else (``insufficient_system_resource``, ``abort``, ``error``, ...): the server stopped the turn for a
  reason of its own;
- none at all, in a whole ``chat.completion`` body (a stream without one is a broken stream and already fails,
  :mod:`bot.agent.model.openai_chat`): a reply with text is taken as finished (many small servers omit the field); one
  without says nothing about why it is empty.

A turn with tool calls goes on to its calls whatever its ``finish_reason`` (a call whose arguments were cut is
refused as invalid JSON and told to the model). What the run does with the others (:mod:`bot.agent._loop.turns`): no
text at all -> :class:`bot.errors.NoReply` (the run fails, retryable); text -> the text is kept as the answer and the
``finish`` chunk says why it is incomplete (:attr:`bot.agent.stream.FinishPayload.ending`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from bot.agent.model import TurnDone

FINISHED = frozenset({"stop", "tool_calls", "function_call"})
"""The ``finish_reason`` values of a turn that ended as it should."""

EndingKind = Literal["length", "content_filter", "missing", "other"]
"""The metric label of an unusual ending (a bounded set: ``other`` for every reason not named here)."""

_SHOWN = re.compile(r"[\w.:-]{1,64}")


@dataclass(frozen=True)
class Ending:
    """An unusual end of a model turn: ``kind`` (see :data:`EndingKind`), ``finish_reason`` as the server gave it
    (None when missing), ``has_text`` (the turn wrote some text)."""

    kind: EndingKind
    finish_reason: str | None
    has_text: bool

    @property
    def why(self) -> str:
        """Why the turn ended, as a clause for a person (``"the model reached its output length limit"``); the
        server's own reason is quoted only when it looks like one (word characters, at most 64)."""
        if self.kind == "length":
            return "the model reached its output length limit"
        if self.kind == "content_filter":
            return "the model provider's content filter stopped it"
        if self.kind == "missing":
            return "the model server did not say why it ended"
        reason = self.finish_reason or ""
        shown = f'"{reason}"' if _SHOWN.fullmatch(reason) else "an unknown reason"
        return f"the model server ended it with finish_reason {shown}"


def ending_of(turn: TurnDone) -> Ending | None:
    """The unusual ending of ``turn``, or None when it ended as it should: it has tool calls (whatever its
    ``finish_reason``), its ``finish_reason`` is one of :data:`FINISHED`, or it has none but has text."""
    if turn.tool_calls:
        return None
    reason = turn.finish_reason
    has_text = bool(turn.content.strip())
    if reason in FINISHED or (reason is None and has_text):
        return None
    kind: EndingKind
    if reason is None:
        kind = "missing"
    elif reason == "length":
        kind = "length"
    elif reason == "content_filter":
        kind = "content_filter"
    else:
        kind = "other"
    return Ending(kind=kind, finish_reason=reason, has_text=has_text)
