"""Where a framework's own OpenAI client should point: :class:`OpenAIEndpoint`, :func:`openai_endpoint`.

An ``AGENT=`` factory gets the bot's model (``build(model=..., store=...)``); a framework agent makes its own model
calls, so the factory reads the endpoint the bot's model talks to and points the framework's client at it (the same
``OPENAI_BASE_URL``, ``OPENAI_API_KEY`` and ``OPENAI_MODEL``; in the playground, its demo model served as a loopback
Chat Completions endpoint: :mod:`bot.playground.demo_endpoint`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bot.agent.model import ChatModel
from bot.agent.model.openai_chat import OpenAIChatModel
from bot.errors import ConfigError


@dataclass(frozen=True)
class OpenAIEndpoint:
    """An OpenAI-compatible Chat Completions endpoint: ``base_url`` (ending in ``/v1``), ``api_key``, ``model``.
    Its ``repr`` hides the key (secrets never reach logs)."""

    base_url: str
    api_key: str
    model: str

    def __repr__(self) -> str:
        return f"OpenAIEndpoint(base_url={self.base_url!r}, model={self.model!r}, api_key=<hidden>)"


def openai_endpoint(model: ChatModel) -> OpenAIEndpoint:
    """The endpoint ``model`` talks to: a model's own ``openai_endpoint`` attribute when it has one (the playground's
    served demo model), else an :class:`~bot.agent.OpenAIChatModel`'s client's base URL, key and model name. Raises
    ``ConfigError`` for a model that has no OpenAI-compatible endpoint."""
    served: Any = getattr(model, "openai_endpoint", None)
    if isinstance(served, OpenAIEndpoint):
        return served
    if isinstance(model, OpenAIChatModel):
        client = model._client
        return OpenAIEndpoint(base_url=str(client.base_url).rstrip("/"), api_key=client.api_key, model=model.model)
    raise ConfigError(
        f"the bot's model ({type(model).__name__}) has no OpenAI-compatible endpoint for a framework agent's client;"
        " set OPENAI_API_KEY (and OPENAI_BASE_URL)"
    )
