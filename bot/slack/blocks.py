"""Block Kit messages for questions, their outcomes, replies and failures (``slack_sdk.models.blocks``).

Modals live in :mod:`bot.slack.modals`, text helpers in :mod:`bot.slack.mrkdwn`. Everything a message shows
about a question is rendered from the stored run (its suspend payload), never echoed from a payload.

Every Slack limit holds by construction (docs.slack.dev reference/block-kit): section text <= 3000,
button text <= 75, option text/description <= 75, option value <= 150, actions <= 25 elements,
checkboxes <= 10 options, static selects <= 100 options, 50 blocks a message, modal title/submit/close
<= 24, private_metadata <= 3000, input label <= 2000, markdown block <= 12000, and a message's blocks
stay under Slack's undocumented ~12,000-character total (``msg_blocks_too_long``). Shortened labels are
display only: clicks carry the option index, and the full label goes to the model.

Surfaces by selection mode (DESIGN.md): single select -> one button per option up to 25, a static
select beyond; multi select -> checkboxes + Submit up to 10, a multi-static select + Submit beyond;
free-form -> an "Answer" button that opens a modal.
"""

from __future__ import annotations

from typing import Any

from slack_sdk.models.blocks import (
    ActionsBlock,
    Block,
    ButtonElement,
    CheckboxesElement,
    ContextBlock,
    MarkdownBlock,
    MarkdownTextObject,
    Option,
    PlainTextObject,
    SectionBlock,
    StaticMultiSelectElement,
    StaticSelectElement,
)

from bot.agent.ask_user import AskUserPayload
from bot.slack.mrkdwn import MARKDOWN_BLOCK, SECTION_TEXT, clip, escape, split_mrkdwn, text_length
from bot.slack.refs import QuestionRef

# Slack limits (docs.slack.dev reference/block-kit/...); see the module docstring.
BUTTON_TEXT = 75
OPTION_TEXT = 75
OPTION_DESCRIPTION = 75
MAX_BUTTONS = 25
MAX_CHECKBOXES = 10
MAX_SELECT_OPTIONS = 100
MESSAGE_TEXT_BUDGET = 11_000  # Slack refuses a message whose blocks' texts add up to ~12,000 (msg_blocks_too_long)
BUDGETS = ((6000, 3000), (3000, 1500), (2000, 0), (600, 0))  # (question, option list) tried in turn

# action_ids (<= 255)
ACT_OPTION = "ask_option"
ACT_SELECT = "ask_select"
ACT_CHECKS = "ask_checks"
ACT_MULTI = "ask_multi"
ACT_SUBMIT = "ask_submit"
ACT_OPEN = "ask_open_modal"
ACT_RETRY = "ask_retry"


def _question_sections(question: str, ref: QuestionRef, prefix: str, budget: int = 6000) -> list[Block]:
    body = escape(question)
    if len(body) > budget:
        body = split_mrkdwn(body, budget - 40)[0] + "… _(question shortened)_"
    chunks = split_mrkdwn(body)
    chunks[0] = f"{prefix}{chunks[0]}" if len(prefix) + len(chunks[0]) <= SECTION_TEXT else chunks[0]
    return [
        SectionBlock(block_id=ref.block_id(f"q{i}"), text=MarkdownTextObject(text=chunk))
        for i, chunk in enumerate(chunks)
    ]


def _option_list(payload: AskUserPayload, ref: QuestionRef, budget: int) -> list[Block]:
    """A bullet list of options whose label was shortened or that have a description."""
    options = payload.options or []
    lines = [
        f"• *{escape(o.label)}*" + (f" - {escape(o.description)}" if o.description else "")
        for o in options
        if o.description or len(o.label) > BUTTON_TEXT
    ]
    if not lines or budget < 100:
        return []
    text = clip("\n".join(clip(line, 600) for line in lines), budget)
    return [SectionBlock(block_id=ref.block_id("list"), text=MarkdownTextObject(text=text))]


def _who(requester: str | None, answerers: str) -> str:
    if answerers == "requester" and requester:
        return f"Question for <@{requester}>"
    return "Anyone in this channel can answer"


def question_blocks(
    payload: AskUserPayload, *, ref: QuestionRef, requester: str | None, answerers: str = "requester"
) -> list[dict[str, Any]]:
    """The message asking ``payload``; returns Block Kit dicts.

    Raises ``ValueError`` for more than 100 options (the agent caps ``ask_user`` at 100 first).
    """
    if len(payload.options or []) > MAX_SELECT_OPTIONS:
        raise ValueError(f"at most {MAX_SELECT_OPTIONS} options can be shown in Slack")
    for question_budget, list_budget in BUDGETS:
        rendered = _question_message(payload, ref, requester, answerers, question_budget, list_budget)
        if text_length(rendered) <= MESSAGE_TEXT_BUDGET:
            break
    return rendered


def _question_message(
    payload: AskUserPayload,
    ref: QuestionRef,
    requester: str | None,
    answerers: str,
    question_budget: int,
    list_budget: int,
) -> list[dict[str, Any]]:
    options = payload.options or []
    blocks: list[Block] = _question_sections(payload.question, ref, ":question: ", question_budget)
    hint = ""
    if payload.selection_mode is None:
        blocks.append(
            ActionsBlock(
                block_id=ref.block_id("open"),
                elements=[ButtonElement(text="Answer", action_id=ACT_OPEN, value=ref.value(0), style="primary")],
            )
        )
        hint = "or reply in this thread"
    elif payload.selection_mode == "single_select":
        blocks += _option_list(payload, ref, list_budget)
        if len(options) <= MAX_BUTTONS:
            buttons = [
                ButtonElement(text=clip(o.label, BUTTON_TEXT), action_id=f"{ACT_OPTION}_{i}", value=ref.value(i))
                for i, o in enumerate(options)
            ]
            blocks.append(ActionsBlock(block_id=ref.block_id("choices"), elements=buttons))
        else:
            select = StaticSelectElement(
                placeholder="Choose one", action_id=ACT_SELECT, options=_options(payload, with_descriptions=False)
            )
            blocks.append(ActionsBlock(block_id=ref.block_id("choices"), elements=[select]))
        hint = "or reply in this thread with your own answer"
    else:
        if len(options) <= MAX_CHECKBOXES:
            element: CheckboxesElement | StaticMultiSelectElement = CheckboxesElement(
                action_id=ACT_CHECKS, options=_options(payload, with_descriptions=True)
            )
        else:
            blocks += _option_list(payload, ref, list_budget)
            element = StaticMultiSelectElement(
                placeholder="Choose one or more",
                action_id=ACT_MULTI,
                options=_options(payload, with_descriptions=False),
            )
        blocks.append(ActionsBlock(block_id=ref.block_id("picks"), elements=[element]))
        blocks.append(
            ActionsBlock(
                block_id=ref.block_id("submit"),
                elements=[ButtonElement(text="Submit", action_id=ACT_SUBMIT, value=ref.value(0), style="primary")],
            )
        )
    who = _who(requester, answerers) + (f" · {hint}" if hint else "")
    blocks.append(ContextBlock(block_id=ref.block_id("who"), elements=[MarkdownTextObject(text=who)]))
    return [b.to_dict() for b in blocks]


def _options(payload: AskUserPayload, *, with_descriptions: bool) -> list[Option]:
    out = []
    for i, o in enumerate(payload.options or []):
        desc = (
            PlainTextObject(text=clip(o.description, OPTION_DESCRIPTION))
            if with_descriptions and o.description
            else None
        )
        out.append(Option(value=str(i), text=PlainTextObject(text=clip(o.label, OPTION_TEXT)), description=desc))
    return out


def outcome_blocks(
    payload: AskUserPayload, *, ref: QuestionRef, outcome: str, revision: str = "done"
) -> list[dict[str, Any]]:
    """The question without controls plus a context line ``outcome`` (e.g. who answered what).

    ``revision`` keeps block_ids new on each update (Slack keeps input state by block_id).
    """
    blocks: list[Block] = _question_sections(payload.question, QuestionRef(ref.run_id, f"{ref.call}-{revision}"), "")
    blocks.append(
        ContextBlock(block_id=ref.block_id(f"{revision}-ctx"), elements=[MarkdownTextObject(text=clip(outcome, 3000))])
    )
    return [b.to_dict() for b in blocks]


def answer_display(answer: str | list[str]) -> str:
    """How an answer is shown in the answered state (escaped mrkdwn, shortened)."""
    text = ", ".join(answer) if isinstance(answer, list) else answer
    return clip(escape(text), 2000)


def reply_blocks(text: str) -> list[dict[str, Any]] | None:
    """The model's final reply as a ``markdown`` block (standard Markdown), or None when too long for one."""
    if not text.strip() or len(text) > MARKDOWN_BLOCK:
        return None
    return [MarkdownBlock(text=text).to_dict()]


def failure_blocks(message: str, *, run_id: str, retry: bool, note: str | None = None) -> list[dict[str, Any]]:
    """A failure notice in the thread (``message`` is plain text), with a Retry button that continues ``run_id``
    when ``retry``; ``note`` (mrkdwn) is a context line below it (e.g. who retried)."""
    blocks: list[Block] = [
        SectionBlock(text=MarkdownTextObject(text=clip(f":warning: {escape(message)}", SECTION_TEXT)))
    ]
    if note:
        blocks.append(ContextBlock(elements=[MarkdownTextObject(text=clip(note, 3000))]))
    if retry:
        blocks.append(
            ActionsBlock(
                block_id=f"retry|{run_id}",
                elements=[ButtonElement(text="Retry", action_id=ACT_RETRY, value=run_id, style="primary")],
            )
        )
    return [b.to_dict() for b in blocks]
