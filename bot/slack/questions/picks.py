"""What a person picked on a question's controls, turned into the answer the run takes.

A :data:`Pick` reads the stored question (never the payload's copy) and returns what was picked: a typed text, an
option's full label, labels, or for a form question (an MCP server's, :mod:`bot.agent.forms`) a
:class:`~bot.agent.forms.FormReply` (a filled form, Decline). :func:`resume_data` turns that into the resume data
the runtime checks; :func:`shown` says it back in the answered message.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from bot.agent.ask_user import AskUserPayload
from bot.agent.forms import FormReply
from bot.agent.state import ResumeData, RunState
from bot.errors import AnswerError
from bot.slack.questions.notices import UNKNOWN_BUTTON
from bot.slack.refs import BadReference, QuestionRef
from bot.slack.render.blocks import answer_display

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
    """The option values ticked in this question's checkboxes / multi-select: ``state.values`` of its block, or, for
    a click in a view (App Home), ``view.state.values`` (Slack sends a view's state there, and may leave the
    top-level ``state`` out: a Submit on Home read nothing ticked)."""
    block = ref.block_id("picks")
    values = ((body.get("state") or {}).get("values") or {}).get(block)
    if not values:
        view = body.get("view")
        state = view.get("state") if isinstance(view, dict) else None
        values = ((state or {}).get("values") or {}).get(block) or {}
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


def asked_question(state: RunState, call: str) -> AskUserPayload | None:
    """The question ``call`` of ``state`` asked, read from the run: its pending question, else the call's
    arguments in the conversation (an answered question's, e.g. for a late click); None when it is not an
    ``ask_user``-shaped question (an approval, a tool's own question) or can't be read."""
    pending = state.pending
    try:
        if pending is not None and pending.tool_call_id == call:
            return AskUserPayload.model_validate(pending.suspend_payload) if pending.kind == "question" else None
        for message in reversed(state.messages):
            for tool_call in message.get("tool_calls") or ():
                if isinstance(tool_call, dict) and tool_call.get("id") == call:
                    arguments = (tool_call.get("function") or {}).get("arguments") or "{}"
                    return AskUserPayload.model_validate(json.loads(arguments))
    except (ValueError, TypeError, AttributeError):  # pydantic's ValidationError is a ValueError
        return None
    return None


def said(payload: AskUserPayload | None, data: ResumeData | FormReply, *, allow_user_mentions: bool = False) -> str:
    """An answer as the notices quote it (mrkdwn, made safe, in bold): ``*web*``, ``*api, web*``; a form's reply
    summarised (``payload`` None: as given)."""
    if isinstance(data, FormReply):
        try:
            data = resume_data(payload, data) if payload is not None else ""
        except AnswerError:
            data = ""
        if not data:
            return "*your reply*"
    text = shown(payload, data) if payload is not None else _reply_fields(data)
    return f"*{answer_display(text, allow_user_mentions=allow_user_mentions)}*"


def _reply_fields(data: ResumeData) -> ResumeData:
    """A form's reply (JSON text) with no question to name its fields: ``"confirm: true"``; anything else as it is."""
    if not isinstance(data, str) or not data.startswith("{"):
        return data
    try:
        reply = json.loads(data)
    except ValueError:
        return data
    content = reply.get("content") if isinstance(reply, dict) else None
    if isinstance(reply, dict) and reply.get("action") in ("decline", "cancel"):
        return "Declined"
    fields = content if isinstance(content, dict) else reply if isinstance(reply, dict) else {}
    return ", ".join(f"{k}: {json.dumps(v) if not isinstance(v, str) else v}" for k, v in fields.items()) or data
