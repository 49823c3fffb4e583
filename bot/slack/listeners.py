"""Bolt listener registration: the one router. Each listener pairs an ack function (answers Slack within its 3 s)
with lazy functions (the work after the ack), run by the app's lazy-listener runner (:mod:`bot.slack.runner`).
The app runs with ``process_before_response``: an ack function finishes before the response goes out and before
its lazy functions start, so what it decides (e.g. a modal's errors) reaches them in the request's context.

| request | ack side | lazy (work side) |
|---|---|---|
| ``app_mention`` event | auto-ack | :meth:`Threads.on_mention` |
| ``message`` a person wrote in a DM, or as a thread reply without a mention | auto-ack | :meth:`Threads.on_message` |
| option button, single-choice menu, Submit | ack | :meth:`Answering.on_click` |
| checkbox tick / multi-select change | ack (nothing until Submit) | - |
| "Answer" button | ack, open a loading modal | :meth:`AnswerModal.on_open_modal`: the form or a notice |
| answer modal ``view_submission`` | checks, errors under the input or close | :meth:`AnswerModal.on_modal_answer` |
| Retry | ack | :meth:`Threads.on_retry` |

Every ack function acks whatever happens: a listener that fails after its ack is logged, never a 404/500 to Slack.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any

from slack_bolt.async_app import AsyncApp

from bot.slack import blocks as bk
from bot.slack import modals
from bot.slack.answer_modal import AnswerModal
from bot.slack.answering import Answering
from bot.slack.runner import LazyJobs, no_lazy_only_from_outside
from bot.slack.threads import Threads, is_person_speaking


async def _ack(ack: Callable[..., Awaitable[Any]]) -> None:
    await ack()


async def _acked() -> None:
    """Events are acked by Bolt itself before their ack function runs."""


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


def register(app: AsyncApp, *, threads: Threads, answering: Answering, modal: AnswerModal) -> LazyJobs:
    """Attach every listener to ``app``; returns the lazy functions a worker may run."""
    jobs = LazyJobs()
    on_mention, on_message = jobs.add(threads.on_mention), jobs.add(threads.on_message)
    on_click, on_retry = jobs.add(answering.on_click), jobs.add(threads.on_retry)
    on_open_modal, on_modal_answer = jobs.add(modal.on_open_modal), jobs.add(modal.on_modal_answer)

    app.middleware(no_lazy_only_from_outside)
    app.event("app_mention")(ack=_acked, lazy=[on_mention])
    app.event("message", matchers=[_person_in_dm_or_thread])(ack=_acked, lazy=[on_message])
    app.event("message")(_acked)  # every other message event (channel chatter, edits, bots): acked, nothing else
    app.action(re.compile(rf"^{bk.ACT_OPTION}_\d+$"))(ack=_ack, lazy=[on_click])
    app.action(bk.ACT_SELECT)(ack=_ack, lazy=[on_click])
    app.action(bk.ACT_SUBMIT)(ack=_ack, lazy=[on_click])
    app.action(bk.ACT_CHECKS)(_ack)
    app.action(bk.ACT_MULTI)(_ack)
    app.action(bk.ACT_OPEN)(ack=modal.open_modal, lazy=[on_open_modal])
    app.action(bk.ACT_RETRY)(ack=_ack, lazy=[on_retry])
    app.view(modals.MODAL_CALLBACK)(ack=modal.ack_modal, lazy=[on_modal_answer])
    return jobs
