"""The bot in Slack's assistant pane (the AI split view): :class:`AssistantPane`, routed by Bolt's
``AsyncAssistant`` middleware (:func:`assistant_middleware`).

With ``features.assistant_view`` in the manifest (and the ``assistant:write`` scope, ``assistant_thread_started``,
``assistant_thread_context_changed`` and ``message.im`` events), a person opens the pane beside any channel; each
conversation there is a thread in their DM with the app (Slack: docs.slack.dev ai/developing-ai-apps):

| event | ack side | lazy (work side) |
|---|---|---|
| ``assistant_thread_started`` | the context (the channel beside the pane) saved | greeting, suggested prompts |
| ``assistant_thread_context_changed`` | the new context saved | - |
| a person's message in the thread | auto-ack | the thread's title from its first request, then the agent |

A message in the pane goes the same way as a DM (:meth:`bot.slack.conversations.Threads.converse`): it answers the open
question or starts the thread's next run, so questions, approvals, streaming and status work there as in channels.
The run's input says which channel the person has open (``<#C…>``), so "summarise this channel" can be understood.
The context is kept in Redis (:class:`bot.store.pane_contexts.PaneContexts`), not in message metadata (Bolt's
default), so any process can read it. Bolt's ``say`` / ``set_suggested_prompts`` utilities are not used: a
``worker`` runs the lazy functions on a queued payload, where Bolt attaches none of them; the Web API calls are
:class:`bot.slack.transport.web_api.SlackWeb`'s.
"""

from __future__ import annotations

import logging
from typing import Any, cast

from slack_bolt.context.assistant.thread_context import AssistantThreadContext
from slack_bolt.context.assistant.thread_context_store.async_store import AsyncAssistantThreadContextStore
from slack_bolt.middleware.assistant.async_assistant import AsyncAssistant

from bot.errors import StoreUnavailable
from bot.slack.context import Where, slack_id
from bot.slack.conversations import Threads, is_person_speaking
from bot.slack.render import blocks as bk
from bot.slack.render.mrkdwn import clip
from bot.slack.render.safe_text import safe_plain
from bot.slack.transport.runner import LazyJobs, acked
from bot.slack.transport.web_api import SlackWeb
from bot.store.pane_contexts import PaneContexts

log = logging.getLogger(__name__)

TITLE = 60  # characters of the first request kept as the thread's title in the pane's history


class RedisThreadContexts(AsyncAssistantThreadContextStore):
    """Bolt's assistant thread context store over :class:`PaneContexts` (Bolt's ``get_thread_context`` and
    ``save_thread_context`` utilities use it)."""

    def __init__(self, contexts: PaneContexts) -> None:
        self.contexts = contexts

    def __deepcopy__(self, memo: dict[int, Any]) -> RedisThreadContexts:
        """Bolt deep-copies a request's context (which holds this store) for its lazy functions; a live Redis
        client can't be copied, so a copy is this same store."""
        return self

    async def save(self, *, channel_id: str, thread_ts: str, context: dict[str, str]) -> None:
        await self.contexts.save(channel_id=channel_id, thread_ts=thread_ts, context=context)

    async def find(self, *, channel_id: str, thread_ts: str) -> AssistantThreadContext | None:
        found = await self.contexts.find(channel_id=channel_id, thread_ts=thread_ts)
        return AssistantThreadContext(found) if found and found.get("channel_id") else None


class AssistantPane:
    """The pane's listeners. ``greeting`` (mrkdwn-safe Markdown) opens each thread, with ``prompts`` (``[{title,
    message}]``, 1 to 4) as its suggested prompts."""

    def __init__(
        self,
        *,
        threads: Threads,
        web: SlackWeb,
        contexts: PaneContexts,
        greeting: str,
        prompts: list[dict[str, str]],
    ) -> None:
        self.threads, self.web, self.contexts = threads, web, contexts
        self.greeting, self.prompts = greeting, prompts

    # --- ack side ----------------------------------------------------------------------------------

    async def save_context(self, body: dict[str, Any]) -> None:
        """Ack function of ``assistant_thread_started`` / ``assistant_thread_context_changed``: keep the context
        (a store outage is logged: the next message runs without knowing the channel)."""
        thread = _thread(body)
        if thread is None:
            return
        channel, thread_ts, context = thread
        try:
            await self.contexts.save(channel_id=channel, thread_ts=thread_ts, context=context)
        except StoreUnavailable as exc:
            log.warning("assistant pane: %s", exc)

    # --- lazy ----------------------------------------------------------------------------------------

    async def on_thread_started(self, body: dict[str, Any]) -> None:
        """Lazy listener of ``assistant_thread_started``: greet, and offer the suggested prompts."""
        thread = _thread(body)
        if thread is None:
            return
        channel, thread_ts, _ = thread
        for text, blocks in bk.reply_messages(self.greeting):
            await self.web.post(channel, thread_ts=thread_ts, text=text, blocks=blocks)
        await self.web.set_suggested_prompts(channel, thread_ts, prompts=self.prompts, title="Try one of these")

    async def on_user_message(self, body: dict[str, Any], context: dict[str, Any]) -> None:
        """Lazy listener of a person's message in a pane thread (Bolt's matcher: any DM message in a thread):
        the first request of a pane thread names it; then the agent, told which channel the person has open."""
        event = body.get("event") or {}
        if not is_person_speaking(event) or not await self.threads.first_sight(body, context):
            return
        where = Where.of_event(body)
        channel, thread_ts = where.channel_id or "", where.thread_ts or ""
        try:
            pane = await self.contexts.find(channel_id=channel, thread_ts=thread_ts)
        except StoreUnavailable:
            pane = None  # converse tells the person the store is down
        if pane is None:  # a DM thread that is not the pane's
            await self.threads.converse(body, bot_user=context.get("bot_user_id"))
            return

        async def name_thread(text: str) -> None:  # the thread's first request names it
            await self.web.set_title(channel, thread_ts, _title(text))

        note = _context_note(pane)
        await self.threads.converse(body, bot_user=context.get("bot_user_id"), note=note, first_request=name_thread)


def assistant_middleware(pane: AssistantPane, *, contexts: PaneContexts, jobs: LazyJobs) -> AsyncAssistant:
    """Bolt's ``AsyncAssistant`` with the pane's listeners (their lazy functions added to ``jobs``, so ``worker``
    processes run them too); register it with ``app.assistant(...)``."""
    assistant = AsyncAssistant(thread_context_store=RedisThreadContexts(contexts))
    started, message = jobs.add(pane.on_thread_started), jobs.add(pane.on_user_message)
    assistant.thread_started(lazy=cast(Any, [started]))(pane.save_context)  # Bolt types lazy functions as sync
    assistant.thread_context_changed(pane.save_context)
    assistant.user_message(lazy=cast(Any, [message]))(acked)
    return assistant


def _thread(body: dict[str, Any]) -> tuple[str, str, dict[str, Any]] | None:
    """``(channel_id, thread_ts, context)`` of an assistant thread event, or None when malformed."""
    thread = (body.get("event") or {}).get("assistant_thread")
    if not isinstance(thread, dict):
        return None
    channel, thread_ts = slack_id(thread.get("channel_id")), thread.get("thread_ts")
    given = thread.get("context")
    context: dict[str, Any] = given if isinstance(given, dict) else {}
    if channel is None or not isinstance(thread_ts, str) or not thread_ts:
        return None
    return channel, thread_ts, context


def _title(text: str) -> str:
    """A pane thread's title from its first request (as the model gets it: Slack's entities read back): plain, on
    one line, at most :data:`TITLE` characters."""
    line = " ".join(safe_plain(text).split()) or "New conversation"
    return clip(line, TITLE)


def _context_note(context: dict[str, str]) -> str | None:
    """What the model is told of the pane's context: the channel beside it, as a Slack channel reference."""
    channel = slack_id(context.get("channel_id"))
    return f"(I have the channel <#{channel}> open beside this conversation.)" if channel else None
