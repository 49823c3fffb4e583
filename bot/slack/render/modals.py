"""The answer modal and the modal notices around it (``slack_sdk.models.views``).

Opening: the "Answer" button's ``trigger_id`` lives 3 seconds, so the bot opens :func:`loading_modal` at once,
then checks the stored run and turns the modal (``views.update``) into :func:`answer_modal` or a
:func:`notice_modal` (not allowed, already answered, expired): nobody types an answer that cannot be taken.

Limits (docs.slack.dev reference/views): title, submit and close <= 24 characters, private_metadata <= 3000,
plain_text_input max_length <= 3000, section text <= 3000.
"""

from __future__ import annotations

import json
import re
from typing import Any

from slack_sdk.models.blocks import (
    Block,
    CheckboxesElement,
    InputBlock,
    MarkdownTextObject,
    Option,
    PlainTextInputElement,
    PlainTextObject,
    RadioButtonsElement,
    SectionBlock,
    StaticMultiSelectElement,
    StaticSelectElement,
)
from slack_sdk.models.views import View

from bot.agent.forms import Form, FormField
from bot.slack.render.mrkdwn import SECTION_TEXT, clip, distinct_clips, escape, split_mrkdwn
from bot.slack.render.safe_text import safe_plain

MODAL_TITLE = 24
PRIVATE_METADATA = 3000
ANSWER_MAX = 3000  # plain_text_input max_length
MODAL_CALLBACK = "ask_answer_modal"
FORM_CALLBACK = "ask_form_modal"
ACT_FIELD = "field_value"
INPUT_LABEL = 2000  # input block label
OPTION_TEXT = 75  # option text (plain_text)
MAX_RADIOS = 10  # radio_buttons / checkboxes options
DECLINE_CALLBACK = "approval_decline_modal"
DECLINE_INPUT_BLOCK = "decline_reason"
ACT_REASON = "reason_text"
MODAL_INPUT_BLOCK = "answer_input"
ACT_TEXT = "answer_text"


def _title(text: str) -> PlainTextObject:
    return PlainTextObject(text=clip(text, MODAL_TITLE))


def loading_modal() -> dict[str, Any]:
    """What the person sees for the moment it takes to check the question (no input yet)."""
    view = View(
        type="modal",
        title=_title("Your answer"),
        close=PlainTextObject(text="Close"),
        blocks=[SectionBlock(text=MarkdownTextObject(text=":hourglass_flowing_sand: Opening the question…"))],
    )
    return dict(view.to_dict())


def notice_modal(text_mrkdwn: str, *, title: str = "Your answer") -> dict[str, Any]:
    """A modal that only says something (``text_mrkdwn`` is already escaped), with a Close button."""
    view = View(
        type="modal",
        title=_title(title),
        close=PlainTextObject(text="Close"),
        blocks=[SectionBlock(text=MarkdownTextObject(text=clip(text_mrkdwn, SECTION_TEXT)))],
    )
    return dict(view.to_dict())


def _form(
    *,
    callback_id: str,
    title: str,
    submit: str,
    text_mrkdwn: str,
    input_block: str,
    action_id: str,
    label: str,
    optional: bool,
    private_metadata: dict[str, str],
) -> dict[str, Any]:
    """A modal form: a section (``text_mrkdwn``, already safe), one multi-line text input, Cancel and ``submit``.
    Raises ``ValueError`` when the JSON-encoded ``private_metadata`` is over 3000 characters."""
    meta = json.dumps(private_metadata, separators=(",", ":"))
    if len(meta) > PRIVATE_METADATA:
        raise ValueError("private_metadata too long")
    view = View(
        type="modal",
        callback_id=callback_id,
        title=_title(title),
        submit=PlainTextObject(text=submit),
        close=PlainTextObject(text="Cancel"),
        private_metadata=meta,
        blocks=[
            SectionBlock(block_id="question", text=MarkdownTextObject(text=text_mrkdwn)),
            InputBlock(
                block_id=input_block,
                optional=optional,
                label=PlainTextObject(text=input_label(label, optional=optional)),
                element=PlainTextInputElement(action_id=action_id, multiline=True, max_length=ANSWER_MAX),
            ),
        ],
    )
    return dict(view.to_dict())


def input_label(text: str, *, optional: bool) -> str:
    """An input block's label: Slack itself shows "(optional)" after an optional input's label, so one that says
    so already (a server's field titled "Email (optional)") loses its own ("Reason (optional) (optional)" was
    shown). Slack: docs.slack.dev reference/block-kit/blocks/input-block (``optional``)."""
    if not optional:
        return text
    kept = _OPTIONAL_SUFFIX.sub("", text)
    return kept if kept.strip() else text


_OPTIONAL_SUFFIX = re.compile(r"\s*[(\[]\s*optional\s*[)\]]\s*$", re.IGNORECASE)


def answer_modal(question: str, *, private_metadata: dict[str, str]) -> dict[str, Any]:
    """The free-form answer form. ``question`` is the stored question's plain text (escaped here);
    ``private_metadata`` is JSON-encoded (<= 3000 chars). Raises ``ValueError`` when the metadata is too long."""
    return _form(
        callback_id=MODAL_CALLBACK,
        title="Your answer",
        submit="Send",
        text_mrkdwn=split_mrkdwn(escape(question))[0],
        input_block=MODAL_INPUT_BLOCK,
        action_id=ACT_TEXT,
        label="Answer",
        optional=False,
        private_metadata=private_metadata,
    )


def form_modal(form: Form, question: str, *, private_metadata: dict[str, str]) -> dict[str, Any]:
    """The form of a server's question: ``question`` (plain text, escaped here), then an input per field (text
    and numbers typed, Yes / No as radio buttons, one choice as a menu, several as checkboxes or a multi-select),
    optional unless the field is required. Slack: input label <= 2000, option text <= 75, radio_buttons and
    checkboxes <= 10 options, static selects <= 100 (docs.slack.dev reference/block-kit/block-elements). Raises
    ``ValueError`` when the metadata is too long."""
    meta = json.dumps(private_metadata, separators=(",", ":"))
    if len(meta) > PRIVATE_METADATA:
        raise ValueError("private_metadata too long")
    blocks: list[Block] = [
        SectionBlock(block_id="question", text=MarkdownTextObject(text=split_mrkdwn(escape(question))[0]))
    ]
    for i, f in enumerate(form.fields):
        hint = PlainTextObject(text=clip(safe_plain(f.description), 2000)) if f.description else None
        blocks.append(
            InputBlock(
                block_id=field_block(i),
                optional=not f.required,
                label=PlainTextObject(
                    text=input_label(clip(safe_plain(f.title) or f.name, INPUT_LABEL), optional=not f.required)
                ),
                hint=hint,
                element=_field_element(f),
            )
        )
    view = View(
        type="modal",
        callback_id=FORM_CALLBACK,
        title=_title("Your answer"),
        submit=PlainTextObject(text="Send"),
        close=PlainTextObject(text="Cancel"),
        private_metadata=meta,
        blocks=blocks,
    )
    return dict(view.to_dict())


def field_block(index: int) -> str:
    """The block_id of the form's field ``index``."""
    return f"field_{index}"


def _field_element(f: FormField) -> Any:
    labels = distinct_clips([safe_plain(x) or f"Option {i + 1}" for i, x in enumerate(f.labels)], OPTION_TEXT)
    options = [Option(value=str(i), text=PlainTextObject(text=label)) for i, label in enumerate(labels)]
    if f.kind == "boolean":
        return RadioButtonsElement(action_id=ACT_FIELD, options=options)
    if f.kind == "choice":
        if len(options) <= MAX_RADIOS:
            return RadioButtonsElement(action_id=ACT_FIELD, options=options)
        return StaticSelectElement(action_id=ACT_FIELD, placeholder="Choose one", options=options)
    if f.kind == "choices":
        if len(options) <= MAX_RADIOS:
            return CheckboxesElement(action_id=ACT_FIELD, options=options)
        return StaticMultiSelectElement(action_id=ACT_FIELD, placeholder="Choose", options=options)
    multiline = f.kind == "text" and (f.max_length is None or f.max_length > 150)
    limit = min(f.max_length or ANSWER_MAX, ANSWER_MAX) if f.kind == "text" else 100
    return PlainTextInputElement(action_id=ACT_FIELD, multiline=multiline, max_length=limit)


def form_values(view: dict[str, Any], form: Form) -> dict[str, Any]:
    """What a submitted form holds, by field name: typed text, or the picked options' full labels (a list for a
    field of several choices); fields left empty are absent. Slack: ``view.state.values[block_id][action_id]``
    with ``value``, ``selected_option`` or ``selected_options``."""
    values = (view.get("state") or {}).get("values") or {}
    out: dict[str, Any] = {}
    for i, f in enumerate(form.fields):
        state = (values.get(field_block(i)) or {}).get(ACT_FIELD) or {}
        if f.kind in ("text", "number", "integer"):
            text = str(state.get("value") or "")
            if text.strip():
                out[f.name] = text
            continue
        picked = state.get("selected_options") or ([state["selected_option"]] if state.get("selected_option") else [])
        labels = [_picked_label(f, o) for o in picked if isinstance(o, dict)]
        chosen = [x for x in labels if x is not None]
        if chosen:
            out[f.name] = chosen if f.kind == "choices" else chosen[0]
    return out


def _picked_label(f: FormField, option: dict[str, Any]) -> str | None:
    value = str(option.get("value") or "")
    if not (value.isascii() and value.isdigit()) or int(value) >= len(f.labels):
        return None
    return f.labels[int(value)]


def modal_text(view: dict[str, Any]) -> str:
    """The text typed into the answer modal (``''`` when absent)."""
    return _typed(view, MODAL_INPUT_BLOCK, ACT_TEXT)


def modal_metadata(view: dict[str, Any]) -> dict[str, str]:
    """The answer modal's ``private_metadata`` as a dict of strings (``{}`` when absent or malformed)."""
    try:
        meta = json.loads(view.get("private_metadata") or "{}")
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in meta.items()} if isinstance(meta, dict) else {}


def decline_modal(question_mrkdwn: str, *, private_metadata: dict[str, str]) -> dict[str, Any]:
    """The decline form: ``question_mrkdwn`` (already safe: :func:`bot.slack.render.approvals.decline_question`),
    then an optional reason for the model and the thread. Raises ``ValueError`` when the metadata is too long."""
    return _form(
        callback_id=DECLINE_CALLBACK,
        title="Decline",
        submit="Decline",
        text_mrkdwn=question_mrkdwn,
        input_block=DECLINE_INPUT_BLOCK,
        action_id=ACT_REASON,
        label="Reason",
        optional=True,
        private_metadata=private_metadata,
    )


def decline_reason(view: dict[str, Any]) -> str:
    """The reason typed into the decline form, stripped (``''`` when none)."""
    return _typed(view, DECLINE_INPUT_BLOCK, ACT_REASON).strip()


def _typed(view: dict[str, Any], block_id: str, action_id: str) -> str:
    """The value of plain-text input ``action_id`` in block ``block_id`` of a submitted view (``''`` when absent);
    Slack: ``view.state.values[block_id][action_id].value``."""
    values = (view.get("state") or {}).get("values") or {}
    return str(((values.get(block_id) or {}).get(action_id) or {}).get("value") or "")
