"""Block Kit messages for questions, their outcomes, replies and failures (``slack_sdk.models.blocks``).

Modals live in :mod:`bot.slack.render.modals`, text helpers in :mod:`bot.slack.render.mrkdwn`. Everything a message
shows about a question is rendered from the stored run (its suspend payload), never echoed from a payload.

Every Slack limit holds by construction (docs.slack.dev reference/block-kit): section text <= 3000,
button text <= 75, option text/description <= 75, option value <= 150, actions <= 25 elements,
checkboxes <= 10 options, static selects <= 100 options, 50 blocks a message, modal title/submit/close
<= 24, private_metadata <= 3000, input label <= 2000, markdown block <= 12000, and a message's blocks
stay under Slack's undocumented ~12,000-character total (``msg_blocks_too_long``). Shortened labels are
display only and never look alike (:func:`bot.slack.render.mrkdwn.distinct_clips`): clicks carry the option index, and
the full label goes to the model.

Text from the model and from people goes through :mod:`bot.slack.render.safe_text` on every surface (controls and bidi
characters removed first; mrkdwn escaped; the reply's markdown with links showing their host): nothing pings a
channel, ``@here``, ``@everyone`` or a user group, and a person only with ``allow_user_mentions``.

Surfaces by selection mode (DESIGN.md): single select -> one button per option up to 25, a static
select beyond; multi select -> checkboxes + Submit up to 10, a multi-static select + Submit beyond;
free-form -> an "Answer" button that opens a modal. A form question (an MCP server's, ``payload.form``) is shown
the same way by its one field (a form of several fields as free-form: its modal has a field each), plus Decline.
Every question has Cancel: its requester withdraws it (:mod:`bot.slack.questions.withdrawing`).
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
from bot.agent.text import is_blank
from bot.slack.refs import QuestionRef
from bot.slack.render.mrkdwn import (
    MARKDOWN_BLOCK,
    SECTION_TEXT,
    clip,
    clip_mrkdwn,
    distinct_clips,
    split_mrkdwn,
    split_reply,
    text_length,
)
from bot.slack.render.safe_text import named_mentions, one_line, safe_markdown, safe_mrkdwn, safe_plain

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
ACT_FORM_DECLINE = "ask_form_decline"
ACT_CANCEL = "ask_cancel"
ACT_RETRY = "ask_retry"


def _question_sections(
    question: str, ref: QuestionRef, prefix: str, budget: int = 6000, *, allow_user_mentions: bool = False
) -> list[Block]:
    body = safe_mrkdwn(question, allow_user_mentions=allow_user_mentions)
    if len(body) > budget:
        body = split_mrkdwn(body, budget - 40)[0] + "… _(question shortened)_"
    chunks = split_mrkdwn(body)
    chunks[0] = f"{prefix}{chunks[0]}" if len(prefix) + len(chunks[0]) <= SECTION_TEXT else chunks[0]
    return [
        SectionBlock(block_id=ref.block_id(f"q{i}"), text=MarkdownTextObject(text=chunk))
        for i, chunk in enumerate(chunks)
    ]


def _option_list(payload: AskUserPayload, ref: QuestionRef, budget: int, *, allow_user_mentions: bool) -> list[Block]:
    """A bullet list (mrkdwn) of every option, each with its description when it has one; only when some option
    has a description or a label shown shortened (else the controls say it all). Listing only those options made a
    list that read as the whole choice with the others missing."""
    options = payload.options or []
    shown = display_labels(payload, OPTION_TEXT)
    if not any(o.description or label != safe_plain(o.label) for o, label in zip(options, shown, strict=True)):
        return []
    lines = [
        f"• *{safe_mrkdwn(o.label, allow_user_mentions=allow_user_mentions)}*"
        + (f" - {safe_mrkdwn(o.description, allow_user_mentions=allow_user_mentions)}" if o.description else "")
        for o in options
    ]
    if budget < 100:
        return []
    text = clip_mrkdwn("\n".join(clip_mrkdwn(line, 600) for line in lines), budget)
    return [SectionBlock(block_id=ref.block_id("list"), text=MarkdownTextObject(text=text))]


def display_labels(payload: AskUserPayload, limit: int) -> list[str]:
    """The options' labels as shown on buttons and in menus: plain text without controls, at most ``limit``
    characters, no two alike (:func:`bot.slack.render.mrkdwn.distinct_clips`); a label with nothing visible left shows
    as ``"Option N"``. Slack: button text and option text <= 75 chars (docs.slack.dev reference/block-kit/
    block-elements/button-element, composition-objects/option-object)."""
    labels = [safe_plain(o.label) for o in payload.options or []]
    visible = [label if not is_blank(label) else f"Option {i + 1}" for i, label in enumerate(labels)]
    return distinct_clips(visible, limit)


def _who(requester: str | None, answerers: str, *, in_thread: bool) -> str:
    if answerers == "requester" and requester:
        return f"Question for <@{requester}>"
    return "Anyone in this channel can answer" if in_thread else "Anyone in its channel can answer"


def question_blocks(
    payload: AskUserPayload,
    *,
    ref: QuestionRef,
    requester: str | None,
    answerers: str = "requester",
    allow_user_mentions: bool = False,
    in_thread: bool = True,
) -> list[dict[str, Any]]:
    """The message asking ``payload``; returns Block Kit dicts. ``in_thread``: shown in the run's own thread; a copy
    shown elsewhere (App Home, an escalation in another channel or a DM) points to the question's thread ("its
    thread", "its channel") instead of "this" one. The question's ``<@U…>`` mentions ping only with
    ``allow_user_mentions`` (nothing else in it ever pings: :mod:`bot.slack.render.safe_text`).

    Raises ``ValueError`` for more than 100 options (the agent caps ``ask_user`` at 100 first).
    """
    if len(payload.options or []) > MAX_SELECT_OPTIONS:
        raise ValueError(f"at most {MAX_SELECT_OPTIONS} options can be shown in Slack")
    for question_budget, list_budget in BUDGETS:
        rendered = _question_message(
            payload,
            ref,
            requester,
            answerers,
            question_budget,
            list_budget,
            allow_user_mentions=allow_user_mentions,
            in_thread=in_thread,
        )
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
    *,
    allow_user_mentions: bool,
    in_thread: bool,
) -> list[dict[str, Any]]:
    allow = allow_user_mentions
    reply = "or reply in this thread" if in_thread else "or reply in its thread"
    options = payload.options or []
    blocks: list[Block] = _question_sections(
        payload.question, ref, ":question: ", question_budget, allow_user_mentions=allow
    )
    hint = ""
    if payload.selection_mode is None:
        blocks.append(
            ActionsBlock(
                block_id=ref.block_id("open"),
                elements=[ButtonElement(text="Answer", action_id=ACT_OPEN, value=ref.value(0), style="primary")],
            )
        )
        hint = reply
    elif payload.selection_mode == "single_select":
        blocks += _option_list(payload, ref, list_budget, allow_user_mentions=allow)
        if len(options) <= MAX_BUTTONS:
            buttons = [
                ButtonElement(text=label, action_id=f"{ACT_OPTION}_{i}", value=ref.value(i))
                for i, label in enumerate(display_labels(payload, BUTTON_TEXT))
            ]
            blocks.append(ActionsBlock(block_id=ref.block_id("choices"), elements=buttons))
        else:
            select = StaticSelectElement(
                placeholder="Choose one", action_id=ACT_SELECT, options=_options(payload, with_descriptions=False)
            )
            blocks.append(ActionsBlock(block_id=ref.block_id("choices"), elements=[select]))
        hint = f"{reply} with your own answer"
    else:
        if len(options) <= MAX_CHECKBOXES:
            element: CheckboxesElement | StaticMultiSelectElement = CheckboxesElement(
                action_id=ACT_CHECKS, options=_options(payload, with_descriptions=True)
            )
        else:
            blocks += _option_list(payload, ref, list_budget, allow_user_mentions=allow)
            element = StaticMultiSelectElement(
                placeholder="Choose one or more",
                action_id=ACT_MULTI,
                options=_options(payload, with_descriptions=False),
            )
        blocks.append(ActionsBlock(block_id=ref.block_id("picks"), elements=[element]))
        hint = f"{reply} with the options' names or numbers"
        blocks.append(
            ActionsBlock(
                block_id=ref.block_id("submit"),
                elements=[ButtonElement(text="Submit", action_id=ACT_SUBMIT, value=ref.value(0), style="primary")],
            )
        )
    # the requester withdraws it: no Cancel where there is none (an outside agent's question for anyone in the
    # channel) or where it is shown to others (an escalated copy): whoever clicked it was told "Only <@> can ..."
    more = [ButtonElement(text="Cancel", action_id=ACT_CANCEL, value=ref.value(0))] if requester else []
    if payload.form is not None:  # a server's question (a form) can be declined
        if len(payload.form.fields) > 1:
            hint = "press Answer to fill in the form"
        more.insert(0, ButtonElement(text="Decline", action_id=ACT_FORM_DECLINE, value=ref.value(0)))
    if more:
        blocks.append(ActionsBlock(block_id=ref.block_id("more"), elements=more))
    who = _who(requester, answerers, in_thread=in_thread) + (f" · {hint}" if hint else "")
    blocks.append(ContextBlock(block_id=ref.block_id("who"), elements=[MarkdownTextObject(text=who)]))
    return [b.to_dict() for b in blocks]


def _options(payload: AskUserPayload, *, with_descriptions: bool) -> list[Option]:
    """Option objects (plain_text) valued by index, labels from :func:`display_labels`; descriptions without
    controls and clipped (Slack: option description <= 75 chars, composition-objects/option-object)."""
    out = []
    for i, (o, label) in enumerate(zip(payload.options or [], display_labels(payload, OPTION_TEXT), strict=True)):
        description = safe_plain(o.description or "") if with_descriptions else ""
        desc = PlainTextObject(text=clip(description, OPTION_DESCRIPTION)) if not is_blank(description) else None
        out.append(Option(value=str(i), text=PlainTextObject(text=label), description=desc))
    return out


def outcome_blocks(
    payload: AskUserPayload,
    *,
    ref: QuestionRef,
    outcome: str,
    revision: str = "done",
    allow_user_mentions: bool = False,
) -> list[dict[str, Any]]:
    """The question without controls plus a context line ``outcome`` (mrkdwn the caller made safe, e.g. with
    :func:`answer_display`: who answered what).

    ``revision`` keeps block_ids new on each update (Slack keeps input state by block_id).
    """
    blocks: list[Block] = _question_sections(
        payload.question,
        QuestionRef(ref.run_id, f"{ref.call}-{revision}"),
        "",
        allow_user_mentions=allow_user_mentions,
    )
    blocks.append(
        ContextBlock(
            block_id=ref.block_id(f"{revision}-ctx"), elements=[MarkdownTextObject(text=clip_mrkdwn(outcome, 3000))]
        )
    )
    return [b.to_dict() for b in blocks]


def answer_display(answer: str | list[str], *, allow_user_mentions: bool = False) -> str:
    """How an answer (a typed text or the picked labels) is quoted in the answered state's mrkdwn outcome line:
    :func:`bot.slack.render.safe_text.safe_mrkdwn`, at most 2000 characters, on one line (its line breaks shown,
    :func:`~bot.slack.render.safe_text.one_line`: a typed ``"no\n:white_check_mark: @alice answered: *yes*"`` drew a
    second "answered" line of its own, a break-it pass)."""
    text = ", ".join(answer) if isinstance(answer, list) else answer
    return clip_mrkdwn(safe_mrkdwn(one_line(text), allow_user_mentions=allow_user_mentions), 2000)


def reply_blocks(text: str, *, allow_user_mentions: bool = False) -> list[dict[str, Any]] | None:
    """The model's final reply as a ``markdown`` block (standard Markdown made safe by
    :func:`bot.slack.render.safe_text.safe_markdown`), or None when blank or too long for one (Slack: markdown block
    text <= 12,000 chars, cumulative per message; docs.slack.dev reference/block-kit/blocks/markdown-block)."""
    safe = safe_markdown(text, allow_user_mentions=allow_user_mentions)
    if not safe.strip() or len(safe) > MARKDOWN_BLOCK:
        return None
    return [MarkdownBlock(text=safe).to_dict()]


def reply_text(text: str, *, allow_user_mentions: bool = False) -> str:
    """A reply's top-level ``text`` (notifications; the message itself when its blocks are refused): mrkdwn from
    :func:`bot.slack.render.safe_text.safe_mrkdwn`, its mentions named as its ``markdown`` block names them
    (:func:`bot.slack.render.safe_text.named_mentions`: ``"Stopped by <@U1|alice>."`` -> ``"Stopped by
    @\\u2060alice."``, not the syntax escaped)."""
    return safe_mrkdwn(
        named_mentions(text, allow_user_mentions=allow_user_mentions), allow_user_mentions=allow_user_mentions
    )


def reply_messages(
    text: str, *, allow_user_mentions: bool = False, room: int = 0
) -> list[tuple[str, list[dict[str, Any]] | None]]:
    """The model's final reply as the messages to post in order, each ``(text, blocks)`` for ``chat.postMessage``
    (``text`` from :func:`reply_text`, ``blocks`` from :func:`reply_blocks`): cut at paragraph, line or word breaks
    (:func:`bot.slack.render.mrkdwn.split_reply`) so that each part, once made safe (links get their host), fits one
    markdown block of 12,000 chars, less ``room`` (characters other blocks of the first message carry: Slack refuses
    a message whose blocks carry more than ~12,000 in all, ``msg_blocks_too_long``). Only parts with nothing visible
    (e.g. only bidi controls) are left out; a reply with nothing visible at all is posted as "(no reply)"."""
    limit = MARKDOWN_BLOCK - (room + ROOM_SLACK if room > 0 else 0)
    messages = _reply_parts(text, limit, allow_user_mentions=allow_user_mentions)
    return messages or _reply_parts(NO_REPLY, MARKDOWN_BLOCK, allow_user_mentions=False)


NO_REPLY = "(no reply)"  # what a reply with nothing visible in it is posted as
ROOM_SLACK = 100  # characters of ``room`` to spare: Slack's cumulative limit is observed, not documented


def _reply_parts(text: str, limit: int, *, allow_user_mentions: bool) -> list[tuple[str, list[dict[str, Any]] | None]]:
    """:func:`reply_messages` of ``text`` cut into parts of at most ``limit`` characters (halved again for a part
    whose safe markdown is still too long)."""
    messages: list[tuple[str, list[dict[str, Any]] | None]] = []
    for part in split_reply(text, limit):
        blocks = reply_blocks(part, allow_user_mentions=allow_user_mentions)
        if blocks is not None:
            messages.append((reply_text(part, allow_user_mentions=allow_user_mentions), blocks))
        elif len(part) > 1 and safe_markdown(part).strip():  # visible, but too long once made safe
            messages += _reply_parts(part, len(part) // 2, allow_user_mentions=allow_user_mentions)
    return messages


def task_lines(lines: list[str]) -> list[dict[str, Any]]:
    """Tool progress above a posted reply (mrkdwn ``lines``, one per tool call): one context block (Slack: context
    block elements <= 10 and text <= 3000, docs.slack.dev reference/block-kit/blocks/context-block)."""
    return [ContextBlock(elements=[MarkdownTextObject(text=clip_mrkdwn("\n".join(lines), 3000))]).to_dict()]


def failure_blocks(message: str, *, run_id: str, retry: bool, note: str | None = None) -> list[dict[str, Any]]:
    """A failure notice in the thread (``message`` is plain text), with a Retry button that continues ``run_id``
    when ``retry``; ``note`` (mrkdwn) is a context line below it (e.g. who retried)."""
    blocks: list[Block] = [
        SectionBlock(text=MarkdownTextObject(text=clip_mrkdwn(f":warning: {safe_mrkdwn(message)}", SECTION_TEXT)))
    ]
    if note:
        blocks.append(ContextBlock(elements=[MarkdownTextObject(text=clip_mrkdwn(note, 3000))]))
    if retry:
        blocks.append(
            ActionsBlock(
                block_id=f"retry|{run_id}",
                elements=[ButtonElement(text="Retry", action_id=ACT_RETRY, value=run_id, style="primary")],
            )
        )
    return [b.to_dict() for b in blocks]
