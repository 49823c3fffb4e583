"""What an outside agent is told when its call's arguments don't fit the tool's input schema: :class:`ArgumentErrors`.

The SDK validates a call's arguments against the tool's schema before the tool runs and answers a failure with the
text of pydantic's ``ValidationError``: its model's name (``ask_userArguments``), each error's ``input_value`` (the
agent's own input echoed back, cut at 100 characters) and a link to pydantic's docs per error, for the client's
model to read. This middleware answers one line instead, each error as where and what::

    ask_user: the arguments don't fit the tool's input schema: question: Field required; options.0.label: String
    should have at least 1 character

Only the SDK's validation failure (``Error executing tool NAME: N validation error(s) for NAMEArguments``) is
rewritten; every other result passes as it is.
"""

from __future__ import annotations

import re
from typing import Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp_types import CallToolResult, TextContent

_HEAD = re.compile(r"^Error executing tool (?P<tool>\S+): \d+ validation errors? for \S+\n")
_DETAILS = " [type="  # where pydantic's type, input_value and input_type follow the message


def plain(text: str) -> str | None:
    """``text`` (an SDK tool error) as one plain line when it is the SDK's report of arguments that failed
    validation (the module docstring's shape); None for any other text."""
    head = _HEAD.match(text)
    if head is None:
        return None
    errors: list[str] = []
    where = ""
    for line in text[head.end() :].splitlines():
        if not line.startswith(" "):
            where = line.strip()  # the error's location: "question", "options.0.label"
        elif not line.startswith("    ") and line.strip():
            message = line.strip().split(_DETAILS, 1)[0]  # the input echoed back after it may hold anything
            errors.append(f"{where}: {message}" if where else message)
    if not errors:
        return None
    return f"{head['tool']}: the arguments don't fit the tool's input schema: " + "; ".join(errors)


class ArgumentErrors:
    """Server middleware (``MCPServer(middleware=[...])``): a ``tools/call`` whose arguments failed the SDK's
    validation is answered with :func:`plain`'s line instead of pydantic's report."""

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        result = await call_next(ctx)
        if ctx.method != "tools/call":
            return result
        if isinstance(result, CallToolResult):  # the handler's model, or (as the SDK hands it on) its wire dict
            result = result.model_dump(by_alias=True, exclude_none=True, mode="json")
        if not isinstance(result, dict) or result.get("isError") is not True:
            return result
        content = result.get("content")
        texts = [c.get("text") for c in content if isinstance(c, dict)] if isinstance(content, list) else []
        line = plain(texts[0]) if len(texts) == 1 and isinstance(texts[0], str) else None
        if line is None:
            return result
        return {**result, "content": [TextContent(type="text", text=line).model_dump(mode="json", exclude_none=True)]}
