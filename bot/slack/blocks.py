"""Block Kit for questions, their outcomes, replies and failures (``slack_sdk.models.blocks``).

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

import json
import re
from typing import Any

from slack_sdk.models.blocks import (
    ActionsBlock,
    Block,
    ButtonElement,
    CheckboxesElement,
    ContextBlock,
    InputBlock,
    MarkdownBlock,
    MarkdownTextObject,
    Option,
    PlainTextInputElement,
    PlainTextObject,
    SectionBlock,
    StaticMultiSelectElement,
    StaticSelectElement,
)
from slack_sdk.models.views import View

from bot.agent.ask_user import AskUserPayload
from bot.slack.refs import QuestionRef

# Slack limits (docs.slack.dev reference/block-kit/...); see the module docstring.
SECTION_TEXT = 3000
BUTTON_TEXT = 75
OPTION_TEXT = 75
OPTION_DESCRIPTION = 75
MAX_BUTTONS = 25
MAX_CHECKBOXES = 10
MAX_SELECT_OPTIONS = 100
MODAL_TITLE = 24
PRIVATE_METADATA = 3000
INPUT_LABEL = 2000
ANSWER_MAX = 3000  # plain_text_input max_length
MARKDOWN_BLOCK = 12000
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
ACT_TEXT = "answer_text"
MODAL_CALLBACK = "ask_answer_modal"
MODAL_INPUT_BLOCK = "answer_input"


def clip(text: str, limit: int) -> str:
    """``text`` shortened to ``limit`` characters with a trailing ellipsis when it was longer."""
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def escape(text: str) -> str:
    """Escape mrkdwn control characters (Slack: ``&``, ``<``, ``>``; docs.slack.dev formatting)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def unescape(text: str) -> str:
    """Slack's escaped message text back to what the person typed (``&lt;`` ``&gt;`` ``&amp;``)."""
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def split_mrkdwn(text: str, limit: int = SECTION_TEXT) -> list[str]:
    """Split escaped mrkdwn into pieces of <= ``limit`` chars, never inside an ``&...;`` entity."""
    pieces: list[str] = []
    while len(text) > limit:
        cut = limit
        amp = text.rfind("&", cut - 5, cut)
        if amp != -1 and ";" not in text[amp:cut]:
            cut = amp
        newline = text.rfind("\n", cut - 200, cut)
        cut = newline + 1 if newline > 0 else cut
        pieces.append(text[:cut])
        text = text[cut:]
    return [*pieces, text] if text else pieces


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


def text_length(blocks: Any) -> int:
    """The characters of every ``text`` string in ``blocks`` (what Slack's ~12,000 limit counts)."""
    if isinstance(blocks, dict):
        return sum(len(v) if k == "text" and isinstance(v, str) else text_length(v) for k, v in blocks.items())
    if isinstance(blocks, list):
        return sum(text_length(item) for item in blocks)
    return 0


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


def labels_in_text(text: str, labels: list[str]) -> list[str] | None:
    """The options a typed multi-select answer names, in the order typed, or None when it names anything else.

    Pieces are separated by commas, semicolons or new lines; each is an option's label (exactly, else
    ignoring case when that is unambiguous; a trailing full stop is forgiven) or its number in the list
    (1-based, as the plain-text question shows them). Labels that themselves contain a separator are
    recognised where they appear verbatim.
    """
    folded: dict[str, list[str]] = {}
    for label in labels:
        folded.setdefault(label.casefold(), []).append(label)

    def match(piece: str) -> str | None:
        if piece in labels:
            return piece
        same = folded.get(piece.casefold(), [])
        if len(same) == 1:
            return same[0]
        if piece.isascii() and piece.isdigit() and 1 <= int(piece) <= len(labels):
            return labels[int(piece) - 1]
        return None

    whole = match(text.strip())
    if whole is not None:
        return [whole]
    picked: list[tuple[int, str]] = []
    rest = text
    for label in sorted((x for x in labels if re.search(r"[,;\n]", x)), key=len, reverse=True):
        while (at := rest.find(label)) != -1:
            picked.append((at, label))
            rest = rest[:at] + "\n" * len(label) + rest[at + len(label) :]  # keeps positions
    for found in re.finditer(r"[^,;\n]+", rest):
        piece = found.group().strip()
        if not piece:
            continue
        named = match(piece) or (match(piece[:-1].strip()) if piece.endswith(".") else None)
        if named is None:
            return None
        picked.append((found.start(), named))
    return list(dict.fromkeys(label for _at, label in sorted(picked))) or None


def answer_display(answer: str | list[str]) -> str:
    """How an answer is shown in the answered state (escaped mrkdwn, shortened)."""
    text = ", ".join(answer) if isinstance(answer, list) else answer
    return clip(escape(text), 2000)


def strip_controls(blocks: list[dict[str, Any]], *, note: str) -> list[dict[str, Any]]:
    """A message's blocks without interactive parts (actions, inputs), with a context ``note`` appended."""
    kept = [b for b in blocks if b.get("type") not in ("actions", "input")]
    kept = [b for b in kept if not (b.get("type") == "section" and b.get("accessory"))]
    for b in kept:
        b.pop("block_id", None)
    kept.append(ContextBlock(elements=[MarkdownTextObject(text=clip(note, 3000))]).to_dict())
    return kept


def answer_modal(question_mrkdwn: str, *, private_metadata: dict[str, str]) -> dict[str, Any]:
    """The free-form answer modal. ``question_mrkdwn`` is already escaped (taken from the question message);
    ``private_metadata`` is JSON-encoded (<= 3000 chars)."""
    meta = json.dumps(private_metadata, separators=(",", ":"))
    if len(meta) > PRIVATE_METADATA:
        raise ValueError("private_metadata too long")
    view = View(
        type="modal",
        callback_id=MODAL_CALLBACK,
        title=PlainTextObject(text=clip("Your answer", MODAL_TITLE)),
        submit=PlainTextObject(text="Send"),
        close=PlainTextObject(text="Cancel"),
        private_metadata=meta,
        blocks=[
            SectionBlock(block_id="question", text=MarkdownTextObject(text=split_mrkdwn(question_mrkdwn)[0])),
            InputBlock(
                block_id=MODAL_INPUT_BLOCK,
                label=PlainTextObject(text="Answer"),
                element=PlainTextInputElement(action_id=ACT_TEXT, multiline=True, max_length=ANSWER_MAX),
            ),
        ],
    )
    return dict(view.to_dict())


def split_reply(text: str, limit: int = MARKDOWN_BLOCK) -> list[str]:
    """A long reply cut into messages of <= ``limit`` chars, at a paragraph, line or word break when there
    is one in the last quarter (Slack truncates a message's text beyond 40,000 chars; a markdown block holds
    12,000). Nothing is dropped but whitespace-only pieces; the parts joined give ``text`` back."""
    parts: list[str] = []
    while len(text) > limit:
        window, cut = text[:limit], limit
        for sep in ("\n\n", "\n", " "):  # the coarsest break in the last quarter: a paragraph, a line, a word
            at = window.rfind(sep)
            if at > limit * 3 // 4:
                cut = at + len(sep)
                break
        parts.append(text[:cut])
        text = text[cut:]
    parts.append(text)
    kept = [part for part in parts if part.strip()]
    return kept or [text]


def reply_blocks(text: str) -> list[dict[str, Any]] | None:
    """The model's final reply as a ``markdown`` block (standard Markdown), or None when too long for one."""
    if not text.strip() or len(text) > MARKDOWN_BLOCK:
        return None
    return [MarkdownBlock(text=text).to_dict()]


def failure_blocks(message: str, *, run_id: str, retry: bool) -> list[dict[str, Any]]:
    """A failure notice in the thread, with a Retry button that continues ``run_id`` when ``retry``."""
    blocks: list[Block] = [
        SectionBlock(text=MarkdownTextObject(text=clip(f":warning: {escape(message)}", SECTION_TEXT)))
    ]
    if retry:
        blocks.append(
            ActionsBlock(
                block_id=f"retry|{run_id}",
                elements=[ButtonElement(text="Retry", action_id=ACT_RETRY, value=run_id, style="primary")],
            )
        )
    return [b.to_dict() for b in blocks]
