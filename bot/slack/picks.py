"""What a person picked on a question's controls, turned into the answer the run takes.

A :data:`Pick` reads the stored question (never the payload's copy) and returns what was picked: a typed text, an
option's full label, labels, or for a form question (an MCP server's, :mod:`bot.agent.forms`) a
:class:`~bot.agent.forms.FormReply` (a filled form, Decline). :func:`resume_data` turns that into the resume data
the runtime checks; :func:`shown` says it back in the answered message.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from bot.agent.ask_user import AskUserPayload
from bot.agent.forms import FormReply
from bot.agent.state import ResumeData
from bot.errors import AnswerError
from bot.slack.notices import UNKNOWN_BUTTON
from bot.slack.refs import BadReference, QuestionRef

Picked = ResumeData | FormReply
Pick = Callable[[AskUserPayload], Picked]


def resume_data(payload: AskUserPayload, picked: Picked) -> ResumeData:
    """The resume data for ``picked`` on ``payload``'s question: as picked, or a form's reply (JSON text). Raises
    ``AnswerError`` for a form reply to a question without a form, or a plain answer to a form of several
    fields."""
    if payload.form is not None:
        return payload.form.reply(picked)
    if isinstance(picked, FormReply):
        raise AnswerError("this question is not a form")
    return picked


def shown(payload: AskUserPayload, data: ResumeData) -> str | list[str]:
    """The answer as the answered message quotes it (a form's reply summarised)."""
    if payload.form is not None and isinstance(data, str):
        return payload.form.display(data)
    return data


def ticked(body: dict[str, Any], ref: QuestionRef) -> list[str]:
    """The option values ticked in this question's checkboxes / multi-select (``state.values`` of its block)."""
    values = ((body.get("state") or {}).get("values") or {}).get(ref.block_id("picks")) or {}
    return [
        str(o.get("value", ""))
        for element in values.values()
        if isinstance(element, dict)
        for o in element.get("selected_options") or []
        if isinstance(o, dict)
    ]


def label(payload: AskUserPayload, index: int | None) -> str:
    """The full label of option ``index``. Raises ``AnswerError`` for an index the question does not have."""
    labels = payload.labels
    if index is None or not 0 <= index < len(labels):
        raise AnswerError("that option is not part of this question")
    return labels[index]


async def button_ref(body: dict[str, Any], say: Callable[[str], Awaitable[Any]]) -> QuestionRef | None:
    """The question reference in a clicked button's ``value`` (:mod:`bot.slack.refs`), or None after telling the
    person the control isn't one of a known question's."""
    action = (body.get("actions") or [{}])[0]
    try:
        return QuestionRef.from_value(str(action.get("value", "")))[0]
    except BadReference:
        await say(UNKNOWN_BUTTON)
        return None
