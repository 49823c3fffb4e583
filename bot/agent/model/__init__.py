"""The model port: what the agent needs from a chat model, independent of any provider.

A model is anything with ``stream_turn(messages, *, tools) -> AsyncIterator[ModelEvent]``: it yields
:class:`TextDelta` events while text arrives and ends with exactly one :class:`TurnDone` carrying the whole
assistant turn (text, tool calls, and the provider's extra message fields). Failures raise
:class:`bot.errors.ModelCallFailed`.

Adapters: :class:`bot.agent.model.openai_chat.OpenAIChatModel` (any OpenAI-compatible Chat Completions server),
:class:`bot.playground.demo_model.DemoModel` (offline, scripted), :class:`NoModel` (a process or agent that runs no
model turn of its own).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from bot.agent.state import ToolCall
from bot.agent.text import json_without_surrogates, nested_deeper_than
from bot.errors import ModelCallFailed


@dataclass(frozen=True)
class TextDelta:
    """A piece of assistant text as it streams in."""

    text: str


@dataclass(frozen=True)
class TurnDone:
    """The finished assistant turn.

    - ``content``: the whole text (may be empty);
    - ``tool_calls``: in arrival order, each with a non-empty id unique within the turn;
    - ``finish_reason``: as the server gave it (``"stop"``, ``"tool_calls"``, ``"length"``, ``"content_filter"``, ...)
      or ``None``; a turn without tool calls that ended otherwise than ``stop`` is told to the person as what it
      was (:mod:`bot.agent.model.endings`), so an adapter passes it on unchanged;
    - ``extra``: the assistant-message fields the provider returned that Chat Completions does not define
      (e.g. ``{"reasoning_content": "..."}`` from DeepSeek's thinking mode, ``reasoning`` /
      ``reasoning_details`` from OpenRouter or vLLM). Some providers refuse a later request whose assistant
      message omits them, so the caller stores them on the assistant message it keeps in the history.
    - ``prompt_tokens``: the request's size as the server counted it (``usage.prompt_tokens``), None when it did
      not say; calibrates the agent's token estimate (:mod:`bot.agent._loop.budget`).
    """

    content: str
    tool_calls: list[ToolCall]
    finish_reason: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    prompt_tokens: int | None = None


ModelEvent = TextDelta | TurnDone


class ChatModel(Protocol):
    """The model port: one assistant turn per call, streamed."""

    def stream_turn(self, messages: list[dict[str, Any]], *, tools: list[dict[str, Any]]) -> AsyncIterator[ModelEvent]:
        """Yield :class:`TextDelta` events, then one :class:`TurnDone`. Raises ``ModelCallFailed`` (``ContextTooLong``
        when the model refused the request as longer than its context window).

        ``messages`` are Chat Completions messages (system first); ``tools`` are Chat Completions tool specs
        (``{"type": "function", "function": {"name", "description", "parameters"}}``), possibly empty.
        """
        ...


class NoModel:
    """A :class:`ChatModel` that refuses every turn with ``ModelCallFailed(why)``: the model of a process that runs
    none (``python -m bot web``, which only acks and queues; ``python -m bot mcp`` without ``OPENAI_API_KEY``, whose
    runs only ask) or of an agent whose framework calls its own model. A turn that reached it anyway fails the run
    with that reason (Retry stays possible) instead of a hidden call."""

    def __init__(self, why: str, *, model: str = "none") -> None:
        self.why = why
        self.model = model  # the model's name, as the other adapters give it

    async def stream_turn(
        self, messages: list[dict[str, Any]], *, tools: list[dict[str, Any]]
    ) -> AsyncIterator[ModelEvent]:
        """Refuse. Raises ``ModelCallFailed``."""
        raise ModelCallFailed(self.why)
        yield TurnDone(content="", tool_calls=[])  # pragma: no cover - makes this an async generator, as the port wants


MAX_ARGUMENT_DEPTH = 100  # levels of objects and arrays a tool call's arguments may nest (no tool needs more)


def parse_arguments(raw: str) -> dict[str, Any]:
    """Parse a tool call's ``arguments`` JSON text into an object (a lone surrogate its JSON escapes, ``"\\ud83d"``,
    becomes U+FFFD: see :func:`bot.agent.text.without_surrogates`). Raises ``ValueError`` with a reason: not JSON,
    not an object, or nested more than :data:`MAX_ARGUMENT_DEPTH` deep (which Python's recursion could not follow
    through the rest of the run)."""
    too_deep = f"arguments are nested too deeply (more than {MAX_ARGUMENT_DEPTH} levels of objects and arrays)"
    try:
        parsed = json.loads(raw or "{}")
    except json.JSONDecodeError as exc:
        raise ValueError(f"arguments are not valid JSON ({exc.msg} at position {exc.pos})") from None
    except RecursionError:
        raise ValueError(too_deep) from None
    if nested_deeper_than(parsed, MAX_ARGUMENT_DEPTH):
        raise ValueError(too_deep)
    value = json_without_surrogates(parsed)
    if not isinstance(value, dict):
        raise ValueError("arguments must be a JSON object")
    return value
