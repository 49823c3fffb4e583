"""The model of a process that only asks (the MCP server): runs that only ask never call it
(:mod:`bot.agent.asking`); anything else that would is refused with a clear error instead of a hidden call."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from bot.agent.model import ModelEvent
from bot.errors import ModelCallFailed


class NoModel:
    """A :class:`bot.agent.model.ChatModel` that refuses every turn (``ModelCallFailed``)."""

    async def stream_turn(
        self, messages: list[dict[str, Any]], *, tools: list[dict[str, Any]]
    ) -> AsyncIterator[ModelEvent]:
        """Refuse: this process runs no model turns. Raises ``ModelCallFailed``."""
        raise ModelCallFailed("this process only asks questions (python -m bot mcp); it runs no model")
        yield  # an async generator, as the port wants
