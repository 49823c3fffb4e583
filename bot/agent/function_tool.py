"""``@tool``: turn an ``async def`` into a :class:`~bot.agent.tools.Tool`.

    @tool
    async def lookup_ticket(ticket_id: str, include_comments: bool = False) -> dict[str, Any]:
        \"\"\"Look up a support ticket.

        Args:
            ticket_id: The ticket's id, e.g. "SUP-123".
            include_comments: Also return its comments.
        \"\"\"

    @tool(require_approval=True)
    async def restart_service(name: Annotated[str, Field(description="The service to restart")]) -> str: ...

- The arguments' JSON schema comes from the type hints (pydantic); defaults make arguments optional.
- The description is the docstring's first paragraph; each argument's description comes from the docstring's
  ``Args:`` section (Google style) or from ``Annotated[..., Field(description=...)]`` (which wins).
- Arguments are validated before the call; invalid ones, and exceptions the function raises, go back to the model
  as tool errors (the run goes on).
- The return value is the result: a string as it is, a pydantic model or anything JSON-serialisable as JSON.
- A parameter annotated :class:`~bot.agent.tools.ToolContext` (or ``ToolContext | None``) receives the run's
  context and is not part of the schema.
- Options: ``name`` (default: the function's name; Chat Completions: ``^[a-zA-Z0-9_-]{1,64}$``),
  ``require_approval`` (a person approves each call before it runs: ``True``, or a ``check(ctx, args) -> bool``,
  sync or async, saying so per call: :data:`~bot.agent.tools.ApprovalCheck`), ``description``.

Raises ``TypeError`` at decoration time for a function that is not ``async``, a name the model API refuses, or a
parameter without a type hint.
"""

from __future__ import annotations

import inspect
import re
import types
import typing
from collections.abc import Awaitable, Callable
from typing import Any, overload

from pydantic import BaseModel, ConfigDict, Field, create_model
from pydantic.fields import FieldInfo

from bot.agent.tools import ApprovalCheck, Tool, ToolContext

TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
ToolFunction = Callable[..., Awaitable[Any]]


@overload
def tool(fn: ToolFunction, /) -> Tool: ...


@overload
def tool(
    *, name: str | None = None, require_approval: bool | ApprovalCheck = False, description: str | None = None
) -> Callable[[ToolFunction], Tool]: ...


def tool(
    fn: ToolFunction | None = None,
    /,
    *,
    name: str | None = None,
    require_approval: bool | ApprovalCheck = False,
    description: str | None = None,
) -> Tool | Callable[[ToolFunction], Tool]:
    """Make a :class:`Tool` of ``fn`` (``@tool`` or ``@tool(name=..., require_approval=True)``); see the module
    docstring."""

    def make(function: ToolFunction) -> Tool:
        return _make_tool(function, name=name, require_approval=require_approval, description=description)

    return make(fn) if fn is not None else make


def _make_tool(
    fn: ToolFunction, *, name: str | None, require_approval: bool | ApprovalCheck, description: str | None
) -> Tool:
    if not inspect.iscoroutinefunction(fn):
        raise TypeError(f"@tool needs an async def; {fn.__qualname__} is not one")
    tool_name = name or fn.__name__
    if not TOOL_NAME.fullmatch(tool_name):
        raise TypeError(f"tool name {tool_name!r} must match [a-zA-Z0-9_-]{{1,64}} (the model API's rule)")
    summary, arg_docs = parse_docstring(inspect.getdoc(fn) or "")
    hints = typing.get_type_hints(fn, include_extras=True)
    fields: dict[str, Any] = {}
    context_param: str | None = None
    for param in inspect.signature(fn).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise TypeError(f"{fn.__qualname__}: *args/**kwargs can't be described to the model")
        if param.name not in hints:
            raise TypeError(f"{fn.__qualname__}: parameter {param.name!r} needs a type hint")
        hint = hints[param.name]
        if _is_context(hint):
            context_param = param.name
            continue
        default = ... if param.default is inspect.Parameter.empty else param.default
        doc = arg_docs.get(param.name)
        fields[param.name] = (hint, _field(hint, default, doc))
    model = create_model(f"{tool_name}_arguments", __config__=ConfigDict(extra="forbid"), **fields)
    names = list(fields)

    async def execute(args: BaseModel, ctx: ToolContext | None) -> Any:
        kwargs = {key: getattr(args, key) for key in names}
        if context_param is not None:
            kwargs[context_param] = ctx
        return await fn(**kwargs)

    return Tool(
        id=tool_name,
        description=description or summary or tool_name,
        input_schema=model,
        execute_fn=execute,
        require_approval=require_approval,
    )


def _field(hint: Any, default: Any, doc: str | None) -> FieldInfo:
    """The field for one argument; a description in ``Annotated[..., Field(description=...)]`` wins over the
    docstring's."""
    has_own = typing.get_origin(hint) is typing.Annotated and any(
        isinstance(m, FieldInfo) and m.description for m in typing.get_args(hint)[1:]
    )
    if has_own or doc is None:
        return Field(default=default)  # type: ignore[no-any-return]
    return Field(default=default, description=doc)  # type: ignore[no-any-return]


def _is_context(hint: Any) -> bool:
    if hint is ToolContext:
        return True
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return ToolContext in typing.get_args(hint)
    return False


_SECTION = re.compile(r"^(Args|Arguments|Parameters|Returns|Raises|Yields|Examples?|Notes?):\s*$")
_ARG = re.compile(r"^(\*{0,2}\w+)\s*(\([^)]*\))?\s*:\s*(.*)$")


def parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """``(first paragraph, {argument: description})`` from a Google-style docstring (``Args:`` section with
    ``name: text`` or ``name (type): text`` lines; indented continuation lines join the text)."""
    lines = doc.strip().splitlines()
    summary: list[str] = []
    for line in lines:
        if not line.strip() or _SECTION.match(line.strip()):
            break
        summary.append(line.strip())
    args: dict[str, str] = {}
    in_args, current, base_indent = False, None, 0
    for line in lines:
        stripped = line.strip()
        header = _SECTION.match(stripped)
        if header:
            in_args, current = header.group(1) in ("Args", "Arguments", "Parameters"), None
            base_indent = -1
            continue
        if not in_args or not stripped:
            continue
        indent = len(line) - len(line.lstrip())
        if base_indent < 0:
            base_indent = indent
        match = _ARG.match(stripped)
        if match and indent <= base_indent:
            current = match.group(1).lstrip("*")
            args[current] = match.group(3).strip()
        elif current is not None:
            args[current] = (args[current] + " " + stripped).strip()
    return " ".join(summary), args
