"""The ``ask_user`` tool: ask a person a free-form, single-choice or multiple-choice question.

Modelled on the askUserTool reference (Mastra's TypeScript ``askUserTool``):

- input: ``question`` (non-empty; text with no visible character counts as empty, see
  :func:`bot.agent.text.is_blank`), ``options`` (list of
  ``{label, description?}``; omitted or empty -> free-form), ``selection_mode`` (``single_select`` |
  ``multi_select``; defaults to ``single_select`` when options are given; requires options). The
  reference's camelCase ``selectionMode`` is accepted too. Labels must be non-empty and unique.
- suspend payload: the input's shape; ``selection_mode`` (and ``options``) omitted for free-form.
- resume data: a string for free-form and single select (a single-select string that is not an offered
  label is taken as typed text), a list of offered labels for multi select.
- outside a run (no ``ctx``): a readable text with the question, every option and the selection mode.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from bot.agent.forms import Form
from bot.agent.state import ResumeData
from bot.agent.text import is_blank
from bot.agent.tools import Tool, ToolContext, ToolInputError
from bot.errors import AnswerError

SelectionMode = Literal["single_select", "multi_select"]

DESCRIPTION = (
    "Ask the human user a question and wait for the answer. Use it when the request is ambiguous or a "
    "decision needs a person. Give `options` for a choice (selection_mode single_select for one, "
    "multi_select for several); omit options for a free-form answer. Ask one question per call."
)


class AskUserOption(BaseModel):
    """One choice: ``label`` is shown and returned to the model when picked; ``description`` explains it."""

    model_config = ConfigDict(extra="ignore")

    label: str = Field(description="Short text shown for this option; returned to you when selected.")
    description: str | None = Field(default=None, description="What this option means.")

    @field_validator("label")
    @classmethod
    def _label_not_blank(cls, value: str) -> str:
        if is_blank(value):
            raise ValueError("option label must not be empty")
        return value.strip()


class AskUserInput(BaseModel):
    """Arguments the model passes to ``ask_user`` (also the suspend payload's shape)."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    question: str = Field(description="The question to ask the user. Must not be empty.")
    options: list[AskUserOption] | None = Field(
        default=None, description="Structured choices. Omit for a free-form question."
    )
    selection_mode: SelectionMode | None = Field(
        default=None,
        alias="selectionMode",
        description="single_select (default when options are given) or multi_select. Requires options.",
    )

    @field_validator("question")
    @classmethod
    def _question_not_blank(cls, value: str) -> str:
        if is_blank(value):
            raise ValueError("question must not be empty")
        return value.strip()

    @model_validator(mode="after")
    def _modes(self) -> AskUserInput:
        if self.options == []:
            self.options = None
        if self.options is None:
            if self.selection_mode is not None:
                raise ValueError(f"selection_mode {self.selection_mode} requires options")
            return self
        labels = [o.label for o in self.options]
        dupes = sorted({label for label in labels if labels.count(label) > 1})
        if dupes:
            raise ValueError(f"option labels must be unique; repeated: {', '.join(dupes)}")
        if self.selection_mode is None:
            self.selection_mode = "single_select"
        return self

    @property
    def labels(self) -> list[str]:
        """The offered labels, in order (empty for free-form)."""
        return [o.label for o in self.options or []]


class AskUserPayload(AskUserInput):
    """The suspend payload of ``ask_user``: ``question``, ``options``, ``selection_mode`` (None = free-form).

    ``form``: set when the question is a form to fill in (an MCP server's elicitation, :mod:`bot.agent.forms`):
    its answers are then :class:`~bot.agent.forms.Form` replies (JSON text), it may be declined, and a form of
    several fields is answered in one modal. ``ask_user`` itself never sets it.
    """

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    form: Form | None = None


def fallback_text(question: AskUserInput) -> str:
    """Readable text of a question for places where the run cannot suspend.

    Example: ``"Question: Which repo?\\nOptions (choose one; selection mode single_select):\\n1. api - ..."``
    """
    lines = [f"Question: {question.question}"]
    if not question.options:
        lines.append("Answer: free-form text (no options).")
        return "\n".join(lines)
    how = "choose one" if question.selection_mode == "single_select" else "choose one or more"
    lines.append(f"Options ({how}; selection mode {question.selection_mode}):")
    for i, option in enumerate(question.options, 1):
        desc = f" - {option.description}" if option.description else ""
        lines.append(f"{i}. {option.label}{desc}")
    return "\n".join(lines)


def validate_answer(resume_data: Any, suspend_payload: dict[str, Any]) -> ResumeData:
    """Check an answer against the question it answers; returns it normalized (stripped, de-duplicated).

    Raises :class:`bot.errors.AnswerError` for a wrong shape (list for a single answer, string for multi
    select), a blank answer, an empty selection, or a multi-select label that was not offered.
    """
    question = AskUserPayload.model_validate(suspend_payload)
    if question.selection_mode == "multi_select":
        if not isinstance(resume_data, list) or not all(isinstance(x, str) for x in resume_data):
            raise AnswerError("a multi_select answer must be a list of option labels")
        chosen = list(dict.fromkeys(x.strip() for x in resume_data if not is_blank(x)))
        if not chosen:
            raise AnswerError("select at least one option")
        offered = set(question.labels)
        unknown = [x for x in chosen if x not in offered]
        if unknown:
            raise AnswerError(f"not among the offered options: {', '.join(repr(x) for x in unknown)}")
        return chosen
    if not isinstance(resume_data, str):
        raise AnswerError("a free-form or single_select answer must be a string")
    if is_blank(resume_data):
        raise AnswerError("the answer must not be blank")
    return resume_data.strip()


def too_many_options(payload: Any, max_options: int | None) -> str | None:
    """Why a question can't be shown as asked, when it offers more than ``max_options`` options (``payload``: an
    :class:`AskUserInput` or a suspend payload dict with ``options``; None: no bound), as the model is told:
    ``"too many options (101); offer at most 100, or ask a free-form question"``; None when it can be. The one
    rule for every way a question is asked (the ``ask_user`` tool, any tool suspending with a question, a
    framework's question); the bound is the frontend's (Slack: 100, a select menu's limit), a deployment's
    :class:`~bot.agent.run_limits.RunLimits` ``max_options``."""
    options = (
        payload.options
        if isinstance(payload, AskUserInput)
        else (payload.get("options") if isinstance(payload, dict) else None)
    )
    count = len(options) if isinstance(options, list) else 0
    if max_options is None or count <= max_options:
        return None
    return f"too many options ({count}); offer at most {max_options}, or ask a free-form question"


def make_ask_user_tool(*, max_options: int | None = None, tool_id: str = "ask_user") -> Tool:
    """Build an ``ask_user`` tool; ``max_options`` caps the options a frontend can show (e.g. Slack: 100,
    the static_select limit), beyond which the model gets a tool error asking for fewer (:func:`too_many_options`;
    a deployment's ``RunLimits.max_options`` bounds every question the same way, whatever tool asks it)."""

    async def execute(args: Any, ctx: ToolContext | None) -> Any:
        question: AskUserInput = args
        too_many = too_many_options(question, max_options)
        if too_many is not None:
            raise ToolInputError(too_many)
        if ctx is None:
            return fallback_text(question)
        if ctx.resume_data is None:
            ctx.suspend(AskUserPayload.model_validate(question.model_dump()))
        return answer_result(question, ctx.resume_data, answered_by=ctx.answered_by)

    return Tool(
        id=tool_id,
        description=DESCRIPTION,
        input_schema=AskUserInput,
        execute_fn=execute,
        suspend_schema=AskUserPayload,
        resume_validator=validate_answer,
        asks_person=True,
    )


def answer_result(question: AskUserInput, answer: ResumeData, *, answered_by: str | None) -> dict[str, Any]:
    """The tool result the model sees after an answer.

    Shapes: ``{"answer": str, "answer_type": "text"}`` (free-form), ``{"answer": label, "answer_type":
    "option"}`` or ``{"answer": str, "answer_type": "typed_text"}`` (single select), ``{"answers":
    [labels], "answer_type": "options"}`` (multi select); plus ``answered_by`` when known.
    """
    result: dict[str, Any]
    if isinstance(answer, list):
        result = {"answers": answer, "answer_type": "options"}
    elif question.options is None:
        result = {"answer": answer, "answer_type": "text"}
    elif answer in question.labels:
        result = {"answer": answer, "answer_type": "option"}
    else:
        result = {
            "answer": answer,
            "answer_type": "typed_text",
            "note": "the user typed this instead of picking one of the options",
        }
    if answered_by:
        result["answered_by"] = answered_by
    return result


ask_user_tool = make_ask_user_tool()
"""The default ``ask_user`` tool (no cap on options)."""
