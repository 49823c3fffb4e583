"""The tools of MCP servers as the agent sees them (:class:`McpTool`), their errors, and how a result's content
reads as text (:func:`content_text`). :mod:`bot.agent.mcp.connection` makes them and calls them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import mcp_types as types
from pydantic import BaseModel, RootModel

from bot.agent.ask_user import AskUserPayload
from bot.agent.tools import Tool, ToolInputError


class McpToolError(ToolInputError):
    """An MCP tool call that went wrong (an ``isError`` result, a protocol error, a timeout, the server unavailable);
    its message goes back to the model as the tool's error."""


class McpStateRefused(McpToolError):
    """The server refused a call sent again with a question's answers: it no longer accepts the request state it
    gave (it restarted without a shared key, another instance answered, or the state expired)."""


class McpUnavailable(McpToolError):
    """The server can't be reached: it failed to start, died, or is being closed."""

    def __init__(self, server: str, reason: str) -> None:
        super().__init__(f"MCP server {server} is unavailable: {reason}")
        self.server, self.reason = server, reason


class McpArguments(RootModel[dict[str, Any]]):
    """A call's arguments, validated against the MCP tool's own JSON schema."""


@dataclass(frozen=True, kw_only=True)
class McpTool(Tool):
    """A tool of an MCP server: ``id`` is the name the model sees, ``server`` / ``mcp_name`` where it comes from,
    ``json_schema`` the tool's input schema as the server gave it."""

    server: str
    mcp_name: str
    json_schema: dict[str, Any] = field(hash=False)
    validator: Any = field(default=None, repr=False, compare=False)  # jsonschema validator of json_schema

    def spec(self) -> dict[str, Any]:
        """The Chat Completions ``tools[]`` entry, with the MCP tool's schema as its parameters."""
        return {
            "type": "function",
            "function": {"name": self.id, "description": self.description, "parameters": self.json_schema},
        }

    def load_suspend_payload(self, payload: dict[str, Any]) -> BaseModel | dict[str, Any]:
        """A server's question (see :mod:`bot.agent.mcp.elicitation`) as the ``AskUserPayload`` frontends show."""
        return AskUserPayload.model_validate(payload)

    def parse_args(self, args: dict[str, Any]) -> BaseModel:
        """Validate ``args`` against the MCP tool's schema. Raises :class:`ToolInputError` naming each problem."""
        if self.validator is not None:
            try:
                errors = sorted(self.validator.iter_errors(args), key=lambda e: [str(p) for p in e.absolute_path])
            except Exception:  # e.g. a $ref it can't resolve: the server validates its arguments anyway
                errors = []
            if errors:
                problems = "; ".join(
                    f"{'.'.join(str(p) for p in e.absolute_path) or 'arguments'}: {e.message}" for e in errors[:5]
                )
                raise ToolInputError(f"invalid arguments for {self.id}: {problems}")
        return McpArguments(args)


def content_text(blocks: Sequence[types.ContentBlock]) -> str:
    """Text blocks as they are, other content described in brackets, one block per line."""
    parts: list[str] = []
    for block in blocks:
        if isinstance(block, types.TextContent):
            parts.append(block.text)
        elif isinstance(block, types.ImageContent | types.AudioContent):
            parts.append(f"[{block.type}: {block.mime_type}]")
        elif isinstance(block, types.ResourceLink):
            parts.append(f"[resource: {block.uri}]")
        elif isinstance(block, types.EmbeddedResource):
            resource = block.resource
            if isinstance(resource, types.TextResourceContents):
                parts.append(resource.text)
            else:
                parts.append(f"[resource: {resource.uri} ({resource.mime_type or 'binary'})]")
    return "\n".join(parts)
