"""Bolt listener registration: the one router. Each listener pairs an ack function (answers Slack within its 3 s)
with lazy functions (the work after the ack), run by the app's lazy-listener runner (:mod:`bot.slack.transport.runner`).
The app runs with ``process_before_response``: an ack function finishes before the response goes out and before
its lazy functions start, so what it decides (e.g. a modal's errors) reaches them in the request's context.

| request | ack side | lazy (work side) |
|---|---|---|
| ``app_mention`` event a person wrote (a bot's: acked, nothing else) | auto-ack | :meth:`Threads.on_mention` |
| ``message`` a person wrote in a DM, or as a thread reply without a mention | auto-ack | :meth:`Threads.on_message` |
| ``app_home_opened`` (Home tab) | auto-ack | :meth:`Home.on_home_opened`: the person's inbox |
| ``app_home_opened`` (Messages tab, agent_view) | auto-ack | :meth:`AssistantPane.on_messages_tab`: greeting, prompts |
| ``app_context_changed`` (agent_view) | the channel in view saved | - |
| ``agent_session_stopped`` (Slack's Stop) | auto-ack | :meth:`Withdrawing.on_session_stopped` |
| a standing grant's Revoke (Home) | ack | :meth:`Home.on_revoke_grant` |
| assistant pane: thread started / context changed / a message there | see :mod:`bot.slack.assistant_pane` | |
| option button, single-choice menu, Submit, a form question's Decline | ack | :meth:`Answering.on_click` |
| checkbox tick / multi-select change | ack (nothing until Submit) | - |
| "Answer" button | ack, open a loading modal | :meth:`AnswerModal.on_open_modal`: the form or a notice |
| answer modal ``view_submission`` | checks, errors under the input or close | :meth:`AnswerModal.on_modal_answer` |
| form modal ``view_submission`` (MCP) | errors under each field, or close | :meth:`AnswerModal.on_form_answer` |
| a question's Cancel | ack | :meth:`Withdrawing.on_cancel` |
| Retry | ack | :meth:`Threads.on_retry` |
| Approve | ack | :meth:`Approving.on_approve` |
| a batch's Approve all | ack | :meth:`ApprovingAll.on_approve_all` (bot.slack.approvals.batch) |
| Decline / Details | ack, open a loading modal | the reason form / the call's arguments |
| decline form ``view_submission`` | checks, errors in the modal or close | :meth:`Approving.on_decline` |

Every ack function acks whatever happens: a listener that fails after its ack is logged, never a 404/500 to Slack.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any

from slack_bolt.async_app import AsyncApp
from slack_bolt.response import BoltResponse

from bot.slack.approvals.deciding import Approving
from bot.slack.approvals.editing import Editing
from bot.slack.assistant_pane import AssistantPane, assistant_middleware
from bot.slack.context import slack_id
from bot.slack.conversations import Threads, is_person_speaking
from bot.slack.home import ACT_REVOKE_GRANT, Home
from bot.slack.questions.answer_modal import AnswerModal
from bot.slack.questions.answering import Answering
from bot.slack.render import blocks as bk
from bot.slack.render import modals
from bot.slack.render.approvals import ACT_APPROVE, ACT_APPROVE_ALL, ACT_DECLINE, ACT_DETAILS, ACT_EDIT, ACT_TAKE_BACK
from bot.slack.render.edit_modal import EDIT_CALLBACK
from bot.slack.transport.runner import LazyJobs, acked, no_lazy_only_from_outside

log = logging.getLogger(__name__)


async def _ack(ack: Callable[..., Awaitable[Any]]) -> None:
    await ack()


async def drop_forged_ids(body: dict[str, Any], next: Callable[[], Awaitable[Any]]) -> Any:
    """Global middleware: a request whose person is not shaped like a Slack user id (an interaction's
    ``user.id``, an event's ``event.user`` when present) is acked and dropped before any listener sees it."""
    event = body.get("event")
    if isinstance(event, dict):
        user = event.get("user")
        forged = user is not None and slack_id(user) is None
    elif body.get("type") in ("block_actions", "view_submission", "view_closed", "shortcut", "message_action"):
        forged = slack_id((body.get("user") or {}).get("id")) is None
    else:
        forged = False
    if forged:
        log.warning("dropped a %s whose user id is not a Slack id", body.get("type") or "request")
        return BoltResponse(status=200, body="")
    return await next()


async def _person_mentioning(body: dict[str, Any]) -> bool:
    """Matcher of ``app_mention`` events the bot handles: a person's (another app's bot, a webhook's or a
    workflow's post mentioning the bot neither starts a run nor answers a question: only people do, as for
    ``message`` events, :func:`~bot.slack.conversations.is_person_speaking`)."""
    return is_person_speaking(body.get("event") or {})


async def _person_in_dm_or_thread(body: dict[str, Any], context: dict[str, Any]) -> bool:
    """Matcher of ``message`` events the bot handles: a person speaking, in a DM, or replying in a thread
    without mentioning the bot (a mention comes as ``app_mention`` too, which takes it)."""
    event = body.get("event") or {}
    if not is_person_speaking(event):
        return False
    if event.get("channel_type") == "im":
        return True
    bot_user = context.get("bot_user_id")
    mentioned = bool(bot_user) and f"<@{bot_user}>" in str(event.get("text") or "")
    return bool(event.get("thread_ts")) and not mentioned


def register(
    app: AsyncApp,
    *,
    threads: Threads,
    answering: Answering,
    modal: AnswerModal,
    approving: Approving,
    editing: Editing,
    home: Home,
    pane: AssistantPane,
) -> LazyJobs:
    """Attach every listener to ``app``; returns the lazy functions a worker may run."""
    jobs = LazyJobs()
    on_mention, on_message = jobs.add(threads.on_mention), jobs.add(threads.on_message)
    on_click, on_retry = jobs.add(answering.on_click), jobs.add(threads.on_retry)
    on_open_modal, on_modal_answer = jobs.add(modal.on_open_modal), jobs.add(modal.on_modal_answer)

    app.middleware(no_lazy_only_from_outside)
    app.middleware(drop_forged_ids)
    app.assistant(assistant_middleware(pane, contexts=pane.contexts, jobs=jobs))  # before the app's own listeners
    # Bolt tries the listeners in this order, each non-matching one costing ~30 µs (its matchers build all of Bolt's
    # listener arguments): the most frequent requests come first. An event never matches an action's listener nor
    # an action an event's, and no two action listeners match the same action_id, so the order picks no listener.
    app.event("app_mention", matchers=[_person_mentioning])(ack=acked, lazy=[on_mention])
    app.action(re.compile(rf"^{bk.ACT_OPTION}_\d+$"))(ack=_ack, lazy=[on_click])
    app.event("message", matchers=[_person_in_dm_or_thread])(ack=acked, lazy=[on_message])
    on_approve = jobs.add(approving.on_approve)
    app.action(ACT_APPROVE)(ack=_ack, lazy=[on_approve])
    app.event("app_home_opened")(ack=acked, lazy=[jobs.add(home.on_home_opened), jobs.add(pane.on_messages_tab)])
    app.event("agent_session_stopped")(ack=acked, lazy=[jobs.add(threads.withdrawing.on_session_stopped)])
    app.event("app_context_changed")(pane.save_app_context)
    app.action(ACT_REVOKE_GRANT)(ack=_ack, lazy=[jobs.add(home.on_revoke_grant)])
    app.event("message")(acked)  # every other message event (channel chatter, edits, bots): acked, nothing else
    app.event("app_mention")(acked)  # a bot's (or nobody's) mention: acked, nothing else
    app.action(bk.ACT_SELECT)(ack=_ack, lazy=[on_click])
    app.action(bk.ACT_SUBMIT)(ack=_ack, lazy=[on_click])
    app.action(bk.ACT_FORM_DECLINE)(ack=_ack, lazy=[on_click])
    app.action(bk.ACT_CANCEL)(ack=_ack, lazy=[jobs.add(threads.withdrawing.on_cancel)])
    app.action(bk.ACT_CHECKS)(_ack)
    app.action(bk.ACT_MULTI)(_ack)
    app.action(bk.ACT_OPEN)(ack=modal.open_modal, lazy=[on_open_modal])
    app.action(bk.ACT_RETRY)(ack=_ack, lazy=[on_retry])
    app.view(modals.MODAL_CALLBACK)(ack=modal.ack_modal, lazy=[on_modal_answer])
    app.view(modals.FORM_CALLBACK)(ack=modal.ack_form, lazy=[jobs.add(modal.on_form_answer)])
    on_decline = jobs.add(approving.on_decline)
    on_open_decline, on_open_details = jobs.add(approving.on_open_decline), jobs.add(approving.on_open_details)
    app.action(re.compile(rf"^{ACT_APPROVE}_(thread|channel|always)$"))(ack=_ack, lazy=[on_approve])  # + a grant
    app.action(ACT_APPROVE_ALL)(ack=_ack, lazy=[jobs.add(approving.all.on_approve_all)])
    app.action(ACT_DECLINE)(ack=approving.open_modal, lazy=[on_open_decline])
    app.action(ACT_DETAILS)(ack=approving.open_modal, lazy=[on_open_details])
    app.view(modals.DECLINE_CALLBACK)(ack=approving.ack_decline, lazy=[on_decline])
    app.action(ACT_TAKE_BACK)(ack=_ack, lazy=[jobs.add(approving.on_take_back)])
    app.action(ACT_EDIT)(ack=approving.open_modal, lazy=[jobs.add(editing.on_open_edit)])
    app.view(EDIT_CALLBACK)(ack=editing.ack_edit, lazy=[jobs.add(editing.on_edit)])
    return jobs
