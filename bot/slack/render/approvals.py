"""Block Kit for tool approvals: the request (what the agent wants to run, its arguments readable) with Approve /
Decline / Details, and its outcome (who decided, then how the call went). Rendered from the stored call.

Arguments are shown as ``key: value`` lines, each value shortened to :data:`ARG_VALUE` characters (the full JSON is
one click away: Details); every text from the model is neutralised (:mod:`bot.slack.render.safe_text`). Slack limits as
in :mod:`bot.slack.render.blocks` (section text <= 3000, button text <= 75).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
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
from bot.slack.render.blocks import ACT_CANCEL
from bot.slack.render.mrkdwn import SECTION_TEXT, clip
from bot.slack.render.safe_text import one_line, safe_mrkdwn

ACT_APPROVE = "approval_approve"
ACT_DECLINE = "approval_decline"
ACT_DETAILS = "approval_details"
ACT_TAKE_BACK = "approval_take_back"  # a quorum's approver takes their approval back
ACT_EDIT = "approval_edit"  # change the arguments before approving (the policy rule's ``edit``)
ACT_APPROVE_ALL = "approval_approve_all"  # a batch's header: approve every call the clicker may approve alone
BATCH_WAITS = "runs once the other calls of this turn are decided"
"""What an approved call of a batch says while other calls of its turn still wait (:mod:`bot.agent.decisions`)."""
ARG_VALUE = 200
ARGS_TEXT = 2500


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


def args_lines(args: dict[str, Any]) -> str:
    """``key: value`` lines (mrkdwn, neutralised), each value at most :data:`ARG_VALUE` characters, one line per
    argument whatever its text holds (:func:`one_line`)."""
    lines = []
    for key, value in args.items():
        shown = _written(value, indented=False)
        lines.append(f"*{safe_mrkdwn(one_line(str(key)))}*: {safe_mrkdwn(clip(one_line(shown), ARG_VALUE))}")
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
    if details_only(payload):
        blocks.append(SectionBlock(block_id=ref.block_id(f"{part}args"), text=MarkdownTextObject(text=DETAILS_ONLY)))
    elif shown or payload.tool_name != APPROVAL_TOOL:  # an outside agent's action alone says it all
        prose = payload.args.get("details") if payload.tool_name == APPROVAL_TOOL else None
        if isinstance(prose, str) and prose:  # an outside agent's Markdown details: its text, no "details:" label
            text = clip(safe_mrkdwn(prose), SECTION_TEXT)
        else:
            text = clip(args_lines(shown), SECTION_TEXT)
        blocks.append(SectionBlock(block_id=ref.block_id(f"{part}args"), text=MarkdownTextObject(text=text)))
    if payload.edited is not None:
        blocks.append(edited_block(payload, ref=ref, part=part))
    return blocks


def edited_block(payload: ApprovalPayload, *, ref: QuestionRef, part: str) -> Block:
    """The line under an edited request's arguments: who changed them, and what the model had asked for."""
    assert payload.edited is not None
    who = f"<@{payload.edited.by}>" if payload.edited.by else "someone"
    before = clip(args_lines(payload.edited.before).replace("\n", " · "), 2000)
    text = f":pencil2: Arguments changed by {who}; the model asked for: {before}"
    if details_only(payload):
        text = f":pencil2: Arguments changed by {who} (before and after: Details)"
    return ContextBlock(block_id=ref.block_id(f"{part}edited"), elements=[MarkdownTextObject(text=clip(text, 3000))])


@dataclass(frozen=True)
class QuorumProgress:
    """A request needing ``required`` distinct approvals, ``approvers`` (user ids, in order) given so far."""

    required: int
    approvers: tuple[str, ...] = ()


DETAILS_ONLY = ":lock: _The arguments are shown only in Details (the approval policy keeps them out of the channel)._"


def details_only(payload: ApprovalPayload) -> bool:
    """Whether the request's arguments are shown only in the Details modal (its policy rule's ``arguments:
    details-only``: sensitive calls keep them out of the channel, its notifications and App Home)."""
    return payload.policy.get("arguments") == "details-only"


GRANT_BUTTONS = {
    "thread": "Approve for this thread",
    "channel": "Approve in this channel",
    "always": "Approve always (these arguments)",
}
"""The standing grants' buttons (Slack: button text <= 75 chars); their action ids are :func:`grant_action`."""
GRANT_BUTTONS_AWAY = {**GRANT_BUTTONS, "thread": "Approve for that thread", "channel": "Approve in that channel"}
"""The same buttons on a drawing away from the request's thread (a DM or channel copy, App Home), which names the
run's channel and links to its thread: "this thread" there would be the DM or the Home tab."""


def grant_action(scope: str) -> str:
    """The action id of the Approve button that also gives a standing grant of ``scope``."""
    return f"{ACT_APPROVE}_{scope}"


def scope_of_action(action_id: str) -> str:
    """The scope an Approve button's ``action_id`` gives: ``once`` (plain Approve) or a standing grant's."""
    scope = action_id.removeprefix(f"{ACT_APPROVE}_") if action_id.startswith(f"{ACT_APPROVE}_") else "once"
    return scope if scope in GRANT_BUTTONS else "once"


def approval_blocks(
    payload: ApprovalPayload,
    *,
    ref: QuestionRef,
    approvers: str,
    quorum: QuorumProgress | None = None,
    editable: bool = False,
    grants: tuple[str, ...] = (),
    decides: bool = True,
    viewer: str | None = None,
    withdrawable: bool = False,
    away: bool = False,
) -> list[dict[str, Any]]:
    """The approval request; ``approvers`` (mrkdwn, the bot's own text) says who may decide; ``quorum``: the
    approvals a request needing several has gathered (:func:`quorum_blocks`: its progress line, and "Take back"
    once someone approved); ``editable``: an "Edit" button (the rule lets approvers change some arguments);
    ``grants``: the standing grants its rule lets an approver give (``thread``, ``channel``, ``always``), each a
    button beside Approve (once) that approves and gives it; ``decides`` False: for one viewer who may not decide
    (their App Home): only *Details*, the approvers line saying who decides; ``viewer``: the one person it is drawn
    for (their App Home; None: a message everyone sees), offered "Take back" only once they approved;
    ``withdrawable``: a "Cancel" button, with which the person who asked the agent withdraws the request (the
    question's Cancel, :data:`~bot.slack.render.blocks.ACT_CANCEL`); ``away``: drawn away from its thread (App
    Home; a copy is made so by :func:`away_from_thread`), its grant buttons saying "that thread" / "that channel".
    Slack: at most 25 elements in an actions block."""
    blocks = _request_sections(payload, ref, "")
    labels = GRANT_BUTTONS_AWAY if away else GRANT_BUTTONS
    details = ButtonElement(text="Details", action_id=ACT_DETAILS, value=ref.value(0))
    buttons = [details]
    if decides:
        shown = ref.value(shown_edit(payload))  # what an approval approves: these arguments, not later ones
        buttons = [ButtonElement(text="Approve", action_id=ACT_APPROVE, value=shown, style="primary")]
        buttons += [
            ButtonElement(text=labels[g], action_id=grant_action(g), value=shown) for g in grants if g in labels
        ]
        buttons += [ButtonElement(text="Decline", action_id=ACT_DECLINE, value=ref.value(0), style="danger"), details]
        if editable:
            buttons.append(ButtonElement(text="Edit", action_id=ACT_EDIT, value=ref.value(0)))
        if quorum is not None and quorum.approvers and (viewer is None or viewer in quorum.approvers):
            buttons.append(ButtonElement(text="Take back my approval", action_id=ACT_TAKE_BACK, value=ref.value(0)))
    if withdrawable:
        buttons.append(ButtonElement(text="Cancel", action_id=ACT_CANCEL, value=ref.value(0)))
    blocks.append(ActionsBlock(block_id=ref.block_id("decide"), elements=buttons))
    blocks.append(ContextBlock(block_id=ref.block_id("who"), elements=[MarkdownTextObject(text=approvers)]))
    if quorum is not None:
        blocks.extend(quorum_blocks(quorum, ref=ref))
    return [b.to_dict() for b in blocks]


def shown_edit(payload: ApprovalPayload) -> int:
    """Which arguments a request's card shows: how many times a person edited them (0: the model's), carried by its
    Approve buttons' ``value`` (:meth:`~bot.slack.refs.QuestionRef.value`'s index), so an approval counts only for
    the arguments its approver saw (``Approving.on_approve``): under a quorum, a copy drawn before an edit (a Home
    tab, a client not yet refreshed) approved the edited arguments (a break-it pass)."""
    return payload.edited.n if payload.edited is not None else 0


def away_from_thread(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A request's blocks for a copy away from its thread (a DM, another channel, an escalation's): without the
    requester's Cancel, which their thread's request and App Home carry; its grant buttons saying "that thread" /
    "that channel" (:data:`GRANT_BUTTONS_AWAY`)."""
    out = []
    for block in blocks:
        if block.get("type") == "actions":
            elements = [_away_label(e) for e in block.get("elements", []) if e.get("action_id") != ACT_CANCEL]
            block = {**block, "elements": elements}
        out.append(block)
    return out


def _away_label(element: dict[str, Any]) -> dict[str, Any]:
    """A button of a request's actions, a grant's relabelled for a copy away from the thread."""
    scope = scope_of_action(str(element.get("action_id", "")))
    if scope == "once":  # not a grant's button
        return element
    return {**element, "text": {**element.get("text", {}), "text": GRANT_BUTTONS_AWAY[scope]}}


def link_back_block(text: str) -> dict[str, Any]:
    """The line a copy of a request asked away from its thread (a DM, another channel) ends with: ``text``
    (mrkdwn, the bot's own: who asked and a link to the thread)."""
    return dict(ContextBlock(elements=[MarkdownTextObject(text=clip(text, 3000))]).to_dict())


# --- quorum (issue 23 part 2): the progress a request needing several approvals shows ------------------------------


def quorum_line(quorum: QuorumProgress) -> str:
    """The progress line (mrkdwn): ``"1 of 2: approved by <@U1>"``, or ``"0 of 2 approvals so far"``."""
    given = len(quorum.approvers)
    if not given:
        return f"0 of {quorum.required} approvals so far"
    return f"{given} of {quorum.required}: approved by " + ", ".join(f"<@{u}>" for u in quorum.approvers)


def quorum_blocks(quorum: QuorumProgress, *, ref: QuestionRef) -> list[Block]:
    """The request's quorum progress (:func:`quorum_line`) as a context block."""
    text = ":busts_in_silhouette: " + quorum_line(quorum)
    return [ContextBlock(block_id=ref.block_id("quorum"), elements=[MarkdownTextObject(text=clip(text, 3000))])]


def quorum_outcome(approvers: tuple[str, ...], *, required: int) -> str:
    """The mrkdwn line a request needing ``required`` approvals shows once ``approvers`` (in order) gave them."""
    people = ", ".join(f"<@{u}>" for u in approvers)
    return f":white_check_mark: Approved by {people} ({len(approvers)} of {required})"


def decision_outcome(*, approved: bool, user: str, reason: str | None = None, grant: str | None = None) -> str:
    """The mrkdwn line an approval request shows once ``user`` decided it (``reason``: a decline's, neutralised;
    ``grant``: the standing grant given with the approval, its words and expiry, the bot's own mrkdwn)."""
    if approved:
        return f":white_check_mark: Approved by <@{user}>" + (f", {grant}" if grant else "")
    why = f": {safe_mrkdwn(reason)}" if reason else ""
    return f":no_entry_sign: Declined by <@{user}>{why}"


def approval_outcome_blocks(payload: ApprovalPayload, *, ref: QuestionRef, outcome: str) -> list[dict[str, Any]]:
    """The request without controls and ``outcome`` (mrkdwn) below it; new block ids each time."""
    blocks = _request_sections(payload, ref, "done-")
    blocks.append(ContextBlock(elements=[MarkdownTextObject(text=clip(outcome, 3000))]))
    return [b.to_dict() for b in blocks]


def details_text(payload: ApprovalPayload) -> str:
    """The call's full arguments (mrkdwn, for the Details modal) under the tool's name (an outside agent's request:
    its action), each key in bold over its value in a code block (a string as written: a command, a file's content,
    readable, not JSON-escaped; anything else as JSON); an edited call's also the arguments the model asked for.
    Within Slack's section text (3,000 characters) every key stays in view: the values share the room fairly, each
    one cut saying so (:func:`fair_cut`); the whole JSON cut at 3,000 hid every key after a long value, and under
    ``arguments: details-only`` this is the only place they show (a break-it pass)."""
    action, details = _action(payload), payload.args.get("details")
    if action is not None and isinstance(details, dict):
        return _keyed(clip(f"*{action}*", 300), list(details.items()))
    pairs = list(payload.args.items())
    if payload.edited is not None:
        pairs.append(("The model asked for", payload.edited.before))
    return _keyed(f"`{safe_mrkdwn(payload.tool_name)}`", pairs)


def _keyed(head: str, pairs: Sequence[tuple[object, object]]) -> str:
    """``head``, then each ``(key, value)`` of ``pairs`` as :func:`details_text` shows it."""
    names = [clip(f"*{safe_mrkdwn(str(key))}*", 300) for key, _ in pairs]
    values = [safe_mrkdwn(_written(value, indented=True)).replace("```", "` ` `") for _, value in pairs]
    room = SECTION_TEXT - len(head) - sum(len(n) + 8 for n in names)  # "\n" + name + "\n```" + "```"
    shown = fair_cut(values, room)  # every key stays in view (escaping can make values longer than sent)
    return clip("\n".join([head, *(f"{n}\n```{v}```" for n, v in zip(names, shown, strict=True))]), SECTION_TEXT)


def _written(value: object, *, indented: bool) -> str:
    """An argument's value as shown: a string as written, anything else as JSON (``indented``: a list or an object
    over indented lines, as the Details modal shows it)."""
    if isinstance(value, str):
        return value
    indent = 2 if indented and isinstance(value, (dict, list)) and value else None
    return json.dumps(value, ensure_ascii=False, indent=indent)


VALUE_CUT = " … (cut to fit)"


def fair_cut(values: list[str], room: int) -> list[str]:
    """``values`` together in at most ``room`` characters (when they can be), shared out fairly: the short ones
    whole, the long ones cut to an equal share and ended with :data:`VALUE_CUT`."""
    out = list(values)
    order = sorted(range(len(values)), key=lambda i: len(values[i]))
    for done, i in enumerate(order):
        share = max(room // (len(order) - done), 0)
        if len(values[i]) > share:
            out[i] = values[i][: max(share - len(VALUE_CUT), 0)] + VALUE_CUT
        room -= len(out[i])
    return out


def batch_names(payload: ApprovalPayload) -> list[str]:
    """What each call of a batch (``payload`` and its ``batch``) asks for, as mrkdwn (:func:`requested`)."""
    return [requested(p) for p in (payload, *payload.batch)]


def batch_header_blocks(payload: ApprovalPayload, *, ref: QuestionRef, note: str | None = None) -> list[dict[str, Any]]:
    """The header of a batch (several calls of one turn waiting for approval, each in its own request below it):
    what they are, and **Approve all** (the calls the clicking person may approve alone; a call needing more than
    one approval is left to its own request). ``note``: a line of what Approve all did (mrkdwn, the bot's own);
    Approve all stays while calls remain undecided. Slack: button text <= 75 chars."""
    names = batch_names(payload)
    head = f":raised_hand: *{len(names)} calls need approval* in this turn: " + ", ".join(names)
    head += ". Decide each below, or approve all you may approve alone."
    blocks: list[Block] = [
        SectionBlock(block_id=ref.block_id("batch-head"), text=MarkdownTextObject(text=clip(head, SECTION_TEXT)))
    ]
    if note is not None:
        blocks.append(ContextBlock(block_id=ref.block_id("batch-note"), elements=[MarkdownTextObject(text=note)]))
    blocks.append(
        ActionsBlock(
            block_id=ref.block_id("batch"),
            elements=[
                ButtonElement(text="Approve all", action_id=ACT_APPROVE_ALL, value=ref.value(0), style="primary")
            ],
        )
    )
    return [b.to_dict() for b in blocks]


def batch_title(payload: ApprovalPayload) -> str:
    """The batch header's notification text: ``"3 calls need approval"``."""
    return f"{1 + len(payload.batch)} calls need approval"
