"""Tool definitions and the suspension primitive.

A :class:`Tool` has an input schema (pydantic), optional suspend and resume schemas, and an ``execute``
coroutine ``execute(args, ctx) -> result``. Inside an agent run, ``ctx.suspend(payload)`` stops the tool
and the run (it raises :class:`ToolSuspended`, which the agent catches); on resume the tool runs again
with ``ctx.resume_data`` set. Outside a run ``ctx`` is ``None`` and a tool must not suspend.

The tool's ``result`` becomes the ``content`` of a Chat Completions ``tool`` message: strings are sent as
they are, anything else as JSON; past the agent's bound (``tool_result_max_chars``, ``TOOL_RESULT_MAX_CHARS``) it
is cut, with a marker saying how much (:func:`bounded_result`).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, NoReturn

from pydantic import BaseModel, ValidationError

from bot.agent.state import ResumeData
from bot.errors import AnswerError


class ToolSuspended(Exception):
    """Raised by :meth:`ToolContext.suspend`; carries the suspend payload as a JSON-able dict."""

    def __init__(self, payload: dict[str, Any]) -> None:
        super().__init__("tool suspended")
        self.payload = payload


class ToolInputError(Exception):
    """The model's arguments for a tool are invalid; the message goes back to the model as a tool error."""


LiveAsk = Callable[[dict[str, Any]], Awaitable[ResumeData | None]]
"""``ask_live(suspend_payload) -> answer | None`` (see :class:`ToolContext`)."""


@dataclass(frozen=True, kw_only=True)
class ToolContext:
    """What a tool sees of the run it is called in.

    ``resume_data`` is ``None`` on the first call and the (validated) answer on the call after a resume;
    ``answered_by`` is the caller-given id of whoever answered (e.g. a Slack user id); ``suspend_payload`` is the
    payload the call suspended with (on the call after a resume).

    ``ask_live(payload)``: ask a question *without* leaving the call (for a tool that can't stop and be called
    again, e.g. an MCP server's question on a live session): the run shows the question like a suspended one,
    the call waits, and gets the validated answer, or ``None`` when nobody answered in time. It raises
    ``StoreUnavailable`` or ``RunConflict`` when the question can't be recorded. ``None`` outside a run.
    """

    run_id: str
    tool_call_id: str
    resume_data: ResumeData | None = None
    answered_by: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    suspend_payload: dict[str, Any] | None = None
    ask_live: LiveAsk | None = None

    def suspend(self, payload: BaseModel | dict[str, Any]) -> NoReturn:
        """Suspend the run with ``payload`` (the question). Never returns."""
        data = payload.model_dump(mode="json", exclude_none=True) if isinstance(payload, BaseModel) else payload
        raise ToolSuspended(data)


Execute = Callable[[Any, ToolContext | None], Awaitable[Any]]
ApprovalCheck = Callable[[ToolContext, dict[str, Any]], bool | Awaitable[bool]]
"""``check(ctx, args) -> bool`` (sync or async): whether this call (``args`` validated, defaults filled in) waits for
a person's approval; see :func:`bot.agent.approvals.tool_requires`."""
ResumeValidator = Callable[[Any, dict[str, Any]], ResumeData]


@dataclass(frozen=True, kw_only=True)
class Tool:
    """A tool the model may call.

    - ``id``: the function name the model sees (Chat Completions: ``^[a-zA-Z0-9_-]{1,64}$``).
    - ``input_schema``: pydantic model of the arguments; its JSON schema is sent to the model.
    - ``suspend_schema``: pydantic model of the suspend payload (turns stored dicts back into objects).
    - ``validate_resume(resume_data, suspend_payload) -> normalized``: raises :class:`AnswerError`.
    - ``require_approval``: the call waits for a person's approval before it runs: ``True``, or an
      :data:`ApprovalCheck` that says so per call (conditional approval, e.g. refunds over 100).
    - ``hidden``: not offered to the model (a model's call of it is an unknown tool's); runs that only ask use it.
    - ``asks_person``: the tool's suspension is a question to a person (``ask_user``): the one test of "is this a
      question tool" (:meth:`bot.agent.agent.Agent.question_tool` picks it; its calls never wait for an approval;
      an unanswered one is told to the model rather than run again; Slack shows no progress line for its calls).
      A tool that suspends mid-work for anything else leaves it ``False``.

    Make one from an ``async def`` with :func:`bot.agent.tool`.
    """

    id: str
    description: str
    input_schema: type[BaseModel]
    execute_fn: Execute
    suspend_schema: type[BaseModel] | None = None
    resume_validator: ResumeValidator | None = None
    require_approval: bool | ApprovalCheck = False  # a person approves the call before it runs (bot.agent.approvals)
    hidden: bool = False  # offered to no model: only runs that only ask call it (see bot.agent.asking)
    asks_person: bool = False  # its suspension is a question to a person (ask_user): see the class docstring

    def spec(self) -> dict[str, Any]:
        """The Chat Completions ``tools[]`` entry: ``{"type": "function", "function": {...}}``."""
        return {
            "type": "function",
            "function": {
                "name": self.id,
                "description": self.description,
                "parameters": self.input_schema.model_json_schema(),
            },
        }

    def parse_args(self, args: dict[str, Any]) -> BaseModel:
        """Validate raw arguments. Raises :class:`ToolInputError` with a model-readable message."""
        try:
            return self.input_schema.model_validate(args)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in err['loc']) or 'arguments'}: {err['msg'].removeprefix('Value error, ')}"
                for err in exc.errors()
            )
            raise ToolInputError(f"invalid arguments for {self.id}: {problems}") from None

    async def execute(self, args: BaseModel | dict[str, Any], ctx: ToolContext | None = None) -> Any:
        """Run the tool. ``args`` may be raw (validated here). Raises :class:`ToolInputError` or
        :class:`ToolSuspended` (only when ``ctx`` is given)."""
        parsed = self.parse_args(args) if isinstance(args, dict) else args
        return await self.execute_fn(parsed, ctx)

    def validate_resume(self, resume_data: Any, suspend_payload: dict[str, Any]) -> ResumeData:
        """Check resume data against the stored suspend payload; returns it normalized.

        Raises :class:`AnswerError` for a wrong shape or value.
        """
        if self.resume_validator is not None:
            return self.resume_validator(resume_data, suspend_payload)
        if isinstance(resume_data, str) or (
            isinstance(resume_data, list) and all(isinstance(x, str) for x in resume_data)
        ):
            return resume_data
        raise AnswerError(f"resume data for {self.id} must be a string or a list of strings")

    def load_suspend_payload(self, payload: dict[str, Any]) -> BaseModel | dict[str, Any]:
        """The stored suspend payload as the tool's suspend schema object (or the dict when it has none)."""
        return self.suspend_schema.model_validate(payload) if self.suspend_schema else payload


def tool_result_content(result: Any) -> str:
    """Chat Completions ``tool`` message content for a tool result (strings as-is, pydantic models and anything
    else as JSON)."""
    if isinstance(result, str):
        return result
    if isinstance(result, BaseModel):
        return result.model_dump_json()
    return json.dumps(result, ensure_ascii=False, default=str)


DEFAULT_TOOL_RESULT_MAX_CHARS = 20_000
"""Characters of one tool result the model gets by default (~5,000 tokens of English; a fifth of the default
history budget): a tool that returns megabytes must not fill the next request nor the stored run."""


def bounded_result(content: str, max_chars: int | None) -> tuple[str, int]:
    """``(content, characters cut)``: ``content`` (a tool message's text) as it is when it has at most
    ``max_chars`` characters (None: no bound), else its first ``max_chars`` characters and a marker line saying how
    many were cut (the model sees that it has part of the result, and how big the whole was). Characters are
    Unicode code points."""
    if max_chars is None or len(content) <= max_chars:
        return content, 0
    cut = len(content) - max_chars
    marker = (
        f"\n\n[... {cut:,} more characters cut here: this tool result had {len(content):,} characters, and at most"
        f" {max_chars:,} are kept]"
    )
    return content[:max_chars] + marker, cut
