"""The model port and its OpenAI Chat Completions adapter.

A model is anything with ``stream_turn(messages, *, tools) -> AsyncIterator[ModelEvent]``: it yields
:class:`TextDelta` events while text arrives and ends with exactly one :class:`TurnDone` carrying the whole
assistant turn (text and tool calls). Failures raise :class:`bot.errors.ModelCallFailed`.

:class:`OpenAIChatModel` speaks Chat Completions with ``stream=True`` through ``AsyncOpenAI``, which reads
``OPENAI_API_KEY`` and ``OPENAI_BASE_URL`` itself, so any OpenAI-compatible server works.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

import openai
from openai import AsyncOpenAI

from bot.agent.state import ToolCall
from bot.errors import ModelCallFailed


@dataclass(frozen=True)
class TextDelta:
    """A piece of assistant text as it streams in."""

    text: str


@dataclass(frozen=True)
class TurnDone:
    """The finished assistant turn: its text (may be empty), its tool calls, and ``finish_reason``."""

    content: str
    tool_calls: list[ToolCall]
    finish_reason: str | None = None


ModelEvent = TextDelta | TurnDone


class ChatModel(Protocol):
    """The model port: one assistant turn per call, streamed."""

    def stream_turn(self, messages: list[dict[str, Any]], *, tools: list[dict[str, Any]]) -> AsyncIterator[ModelEvent]:
        """Yield :class:`TextDelta` events, then one :class:`TurnDone`. Raises ``ModelCallFailed``."""
        ...


@dataclass
class ToolCallAssembler:
    """Assembles streamed ``delta.tool_calls`` entries by their ``index`` (Chat Completions streaming).

    The first entry of an index carries ``id`` and ``function.name``; later ones append to
    ``function.arguments``. Entries of different indexes may interleave, and one chunk may carry several
    entries of the same index. ``feed`` takes the entries as dicts or the openai SDK's objects.
    """

    _parts: dict[int, dict[str, Any]] = field(default_factory=dict)

    def feed(self, entries: Iterable[Any]) -> None:
        """Add the ``tool_calls`` entries of one streamed delta."""
        for entry in entries:
            e = entry if isinstance(entry, dict) else entry.model_dump(exclude_none=True)
            index = int(e.get("index", 0))
            part = self._parts.setdefault(index, {"id": "", "name": "", "arguments": ""})
            if e.get("id"):
                part["id"] = e["id"]
            fn = e.get("function") or {}
            name = fn.get("name")
            if name and name != part["name"]:
                # Most servers send the whole name once; some repeat it, a few send it in pieces.
                part["name"] += name
            if fn.get("arguments"):
                part["arguments"] += fn["arguments"]

    def calls(self) -> list[ToolCall]:
        """The assembled calls in index order; a call without an id gets ``call_<index>``."""
        return [
            ToolCall(id=p["id"] or f"call_{i}", name=p["name"], arguments=p["arguments"] or "{}")
            for i, p in sorted(self._parts.items())
        ]


def parse_arguments(raw: str) -> dict[str, Any]:
    """Parse a tool call's ``arguments`` JSON text into an object. Raises ``ValueError`` with a reason."""
    try:
        value = json.loads(raw or "{}")
    except json.JSONDecodeError as exc:
        raise ValueError(f"arguments are not valid JSON ({exc.msg} at position {exc.pos})") from None
    if not isinstance(value, dict):
        raise ValueError("arguments must be a JSON object")
    return value


class OpenAIChatModel:
    """Chat Completions over ``AsyncOpenAI`` with ``stream=True``.

    ``client`` defaults to ``AsyncOpenAI()`` (reads ``OPENAI_API_KEY``/``OPENAI_BASE_URL``); ``base_url``
    and ``api_key`` override them. ``timeout`` is seconds per request; ``max_retries`` is the client's own
    retry count for connection errors, 408/409/429 and 5xx.
    """

    def __init__(
        self,
        model: str,
        *,
        client: AsyncOpenAI | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 2,
        temperature: float | None = None,
    ) -> None:
        self.model = model
        self.temperature = temperature
        self._owns_client = client is None
        self._client = client or AsyncOpenAI(
            base_url=base_url, api_key=api_key, timeout=timeout, max_retries=max_retries
        )

    async def aclose(self) -> None:
        """Close the HTTP client this model created (a client passed in is the caller's to close)."""
        if self._owns_client:
            await self._client.close()

    async def stream_turn(
        self, messages: list[dict[str, Any]], *, tools: list[dict[str, Any]]
    ) -> AsyncIterator[ModelEvent]:
        """One streamed assistant turn; see :class:`ChatModel`. Raises ``ModelCallFailed``."""
        kwargs: dict[str, Any] = {"model": self.model, "messages": messages, "stream": True}
        if tools:
            kwargs["tools"] = tools
        if self.temperature is not None:
            kwargs["temperature"] = self.temperature
        text: list[str] = []
        assembler = ToolCallAssembler()
        finish_reason: str | None = None
        try:
            stream = await self._client.chat.completions.create(**kwargs)
            async for chunk in stream:
                for choice in chunk.choices:
                    delta = choice.delta
                    if delta.content:
                        text.append(delta.content)
                        yield TextDelta(delta.content)
                    if delta.tool_calls:
                        assembler.feed(delta.tool_calls)
                    if choice.finish_reason:
                        finish_reason = choice.finish_reason
        except openai.APIStatusError as exc:
            raise ModelCallFailed(f"model request failed: HTTP {exc.status_code} from the model server") from None
        except openai.APITimeoutError:
            raise ModelCallFailed("model request timed out") from None
        except openai.APIConnectionError:
            raise ModelCallFailed("could not connect to the model server") from None
        except openai.OpenAIError as exc:
            raise ModelCallFailed(f"model request failed: {type(exc).__name__}") from None
        yield TurnDone(content="".join(text), tool_calls=assembler.calls(), finish_reason=finish_reason)
