"""Block Kit for tool approvals: the request (what the agent wants to run, its arguments readable) with Approve /
Decline / Details, and its outcome (who decided, then how the call went). Rendered from the stored call.

Arguments are shown as ``key: value`` lines, each value shortened to :data:`ARG_VALUE` characters (the full JSON is
one click away: Details); every text from the model is neutralised (:mod:`bot.slack.render.safe_text`). Slack limits as
in :mod:`bot.slack.render.blocks` (section text <= 3000, button text <= 75).
"""

from __future__ import annotations

import json
from typing import Any

from slack_sdk.models.blocks import (
    ActionsBlock,
    Block,
    ButtonElement,
    ContextBlock,
    MarkdownTextObject,
    SectionBlock,
)

from bot.agent.asking import APPROVAL_TOOL
from bot.agent.stream import ApprovalPayload
from bot.slack.refs import QuestionRef
from bot.slack.render.mrkdwn import SECTION_TEXT, clip
from bot.slack.render.safe_text import safe_mrkdwn

ACT_APPROVE = "approval_approve"
ACT_DECLINE = "approval_decline"
ACT_DETAILS = "approval_details"
ARG_VALUE = 200
ARGS_TEXT = 2500


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


def args_lines(args: dict[str, Any]) -> str:
    """``key: value`` lines (mrkdwn, neutralised), each value at most :data:`ARG_VALUE` characters."""
    lines = []
    for key, value in args.items():
        shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        lines.append(f"*{safe_mrkdwn(str(key))}*: {safe_mrkdwn(clip(shown, ARG_VALUE))}")
    return clip("\n".join(lines), ARGS_TEXT) if lines else "_(no arguments)_"


def shown_args(payload: ApprovalPayload) -> dict[str, Any]:
    """The arguments a request shows: the call's own; for an outside agent's request (its action is the title
    already) its key/value ``details`` (a command, a file's path and content: Claude Code's permission prompts),
    or its Markdown ``details`` as one ``details`` line, never the fields the MCP server adds (``policy_rule``)."""
    if payload.tool_name != APPROVAL_TOOL:
        return payload.args
    details = payload.args.get("details")
    if isinstance(details, dict):
        return details
    return {"details": details} if isinstance(details, str) and details else {}


def _action(payload: ApprovalPayload) -> str | None:
    """An outside agent's request's ``action`` (the MCP server's ``request_approval``), neutralised; else None."""
    action = payload.args.get("action") if payload.tool_name == APPROVAL_TOOL else None
    if isinstance(action, str) and action.strip():
        return safe_mrkdwn(clip(_first_line(action), 300))
    return None


def requested(payload: ApprovalPayload) -> str:
    """What an approval request asks for, as mrkdwn (neutralised): an outside agent's request (the MCP server's
    ``request_approval``, :data:`bot.agent.asking.APPROVAL_TOOL`) its ``action`` ("Restart the api service"), any
    other call "run `restart_service`". The one wording of the request's title, notification, decline form and
    Home line (an MCP request was titled "Approval needed to run request_approval")."""
    return _action(payload) or f"run `{safe_mrkdwn(clip(payload.tool_name, 100))}`"


def approval_title(payload: ApprovalPayload) -> str:
    """The request's one-line title (mrkdwn): ``"Approval needed to run `restart_service`"``, or for an outside
    agent's request ``"Approval needed: Restart the api service"``."""
    action = _action(payload)
    return f"Approval needed: {action}" if action else f"Approval needed to {requested(payload)}"


def decline_question(payload: ApprovalPayload) -> str:
    """The decline form's question (mrkdwn): ``"Decline running `restart_service`?"``, or for an outside agent's
    request ``"Decline: Restart the api service?"``."""
    action = _action(payload)
    return f"Decline: {action}?" if action else f"Decline running `{safe_mrkdwn(clip(payload.tool_name, 100))}`?"


def closed_what(payload: ApprovalPayload) -> str:
    """How a decided request is named on its Home line and notification (mrkdwn): ``"Run `restart_service`"`` or
    the outside agent's action."""
    what = requested(payload)
    return what[:1].upper() + what[1:]


def _request_sections(payload: ApprovalPayload, ref: QuestionRef, part: str) -> list[Block]:
    action = _action(payload)
    about = _first_line(payload.description) if action is None else ""
    head = (
        f":raised_hand: *Approval needed*: {action}"
        if action
        else f":raised_hand: *Approval needed* to {requested(payload)}"
    )
    head += f": {safe_mrkdwn(clip(about, 300))}" if about else ""
    blocks: list[Block] = [SectionBlock(block_id=ref.block_id(f"{part}head"), text=MarkdownTextObject(text=head))]
    if payload.interrupted:
        warning = ":warning: An approved run of this call was interrupted; it may or may not have run. Run it again?"
        blocks.append(SectionBlock(block_id=ref.block_id(f"{part}warn"), text=MarkdownTextObject(text=warning)))
    shown = shown_args(payload)
    if shown or payload.tool_name != APPROVAL_TOOL:  # an outside agent's action alone says it all
        text = clip(args_lines(shown), SECTION_TEXT)
        blocks.append(SectionBlock(block_id=ref.block_id(f"{part}args"), text=MarkdownTextObject(text=text)))
    return blocks


def approval_blocks(payload: ApprovalPayload, *, ref: QuestionRef, approvers: str) -> list[dict[str, Any]]:
    """The approval request; ``approvers`` (mrkdwn, the bot's own text) says who may decide."""
    blocks = _request_sections(payload, ref, "")
    blocks.append(
        ActionsBlock(
            block_id=ref.block_id("decide"),
            elements=[
                ButtonElement(text="Approve", action_id=ACT_APPROVE, value=ref.value(0), style="primary"),
                ButtonElement(text="Decline", action_id=ACT_DECLINE, value=ref.value(0), style="danger"),
                ButtonElement(text="Details", action_id=ACT_DETAILS, value=ref.value(0)),
            ],
        )
    )
    blocks.append(ContextBlock(block_id=ref.block_id("who"), elements=[MarkdownTextObject(text=approvers)]))
    return [b.to_dict() for b in blocks]


def decision_outcome(*, approved: bool, user: str, reason: str | None = None) -> str:
    """The mrkdwn line an approval request shows once ``user`` decided it (``reason``: a decline's, neutralised)."""
    if approved:
        return f":white_check_mark: Approved by <@{user}>"
    why = f": {safe_mrkdwn(reason)}" if reason else ""
    return f":no_entry_sign: Declined by <@{user}>{why}"


def approval_outcome_blocks(payload: ApprovalPayload, *, ref: QuestionRef, outcome: str) -> list[dict[str, Any]]:
    """The request without controls and ``outcome`` (mrkdwn) below it; new block ids each time."""
    blocks = _request_sections(payload, ref, "done-")
    blocks.append(ContextBlock(elements=[MarkdownTextObject(text=clip(outcome, 3000))]))
    return [b.to_dict() for b in blocks]


def details_text(payload: ApprovalPayload) -> str:
    """The call's full arguments (mrkdwn, for the Details modal): a JSON code block under the tool's name; for an
    outside agent's request its action, then each key/value detail as its own code block, values as written
    (a command, a file's content: readable, not JSON-escaped)."""
    action, details = _action(payload), payload.args.get("details")
    if action is not None and isinstance(details, dict):
        parts = [f"*{action}*"]
        for key, value in details.items():
            shown = safe_mrkdwn(value if isinstance(value, str) else json.dumps(value, ensure_ascii=False))
            parts.append(f"*{safe_mrkdwn(str(key))}*\n```{shown.replace('```', '` ` `')}```")
        return clip("\n".join(parts), SECTION_TEXT)
    body = safe_mrkdwn(json.dumps(payload.args, ensure_ascii=False, indent=2)).replace("```", "` ` `")
    return clip(f"`{safe_mrkdwn(payload.tool_name)}`\n```{body}```", SECTION_TEXT)
