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

With ``features.agent_view`` instead (``SLACK_VIEW=agent``; Slack: docs.slack.dev ai/migrating-to-agent-messaging),
conversations live in the app's Messages tab and in channel threads, and the pane's events give way to:

| event | ack side | lazy (work side) |
|---|---|---|
| ``app_home_opened`` with ``tab: "messages"`` | auto-ack | :meth:`AssistantPane.on_messages_tab`: greeting, prompts |
| ``app_context_changed`` | the channel in view saved for the person | - |

The greeting is posted once per person per retention window (opening the tab again does not repeat it), its
suggested prompts set on its thread. A person's message in the Messages tab is told the channel they last looked
at (:meth:`AssistantPane.viewing_note`), as a pane thread is told its context.

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
from collections.abc import Awaitable, Callable
from typing import Any, cast

from slack_bolt.context.assistant.thread_context import AssistantThreadContext
from slack_bolt.context.assistant.thread_context_store.async_store import AsyncAssistantThreadContextStore
from slack_bolt.middleware.assistant.async_assistant import AsyncAssistant
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_bolt.request.payload_utils import is_assistant_event, is_other_message_sub_event_in_assistant_thread
from slack_bolt.response import BoltResponse

from bot.errors import StoreUnavailable
from bot.slack.context import Origin, slack_id
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
        messages_tab: bool = False,
    ) -> None:
        self.threads, self.web, self.contexts = threads, web, contexts
        self.names = threads.writer.names  # a thread's title as Slack shows its request (mentions as names)
        self.greeting, self.prompts = greeting, prompts
        self.messages_tab = messages_tab  # agent_view: greet in the Messages tab, keep app_context_changed

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

    async def save_app_context(self, body: dict[str, Any]) -> None:
        """Ack function of ``app_context_changed`` (agent_view): keep the channel the person looks at (its first
        ``slack#/types/channel_id`` entity; none: nothing in view). A store outage is logged."""
        event = body.get("event") or {}
        user = slack_id(event.get("user")) or _authorized_user(body)
        team = slack_id(body.get("team_id")) or ""
        if user is None:
            return
        entities = (event.get("context") or {}).get("entities") if isinstance(event.get("context"), dict) else None
        channel = next(
            (
                slack_id(e.get("value"))
                for e in entities or []
                if isinstance(e, dict) and e.get("type") == "slack#/types/channel_id" and slack_id(e.get("value"))
            ),
            None,
        )
        context = {"channel_id": channel, "team_id": team} if channel else {}
        try:
            await self.contexts.save_viewing(team_id=team, user=user, context=context)
        except StoreUnavailable as exc:
            log.warning("app context: %s", exc)

    async def viewing_note(self, where: Origin) -> str | None:
        """What the model is told of the channel ``where.user`` last looked at with the app open (agent_view's
        ``app_context_changed``), or None."""
        if not self.messages_tab or not where.user:
            return None
        try:
            viewing = await self.contexts.viewing(team_id=where.team_id or "", user=where.user)
        except StoreUnavailable:
            return None
        return _context_note(viewing) if viewing else None

    # --- lazy ----------------------------------------------------------------------------------------

    async def on_messages_tab(self, body: dict[str, Any]) -> None:
        """Lazy listener of ``app_home_opened`` with ``tab: "messages"`` (agent_view; it replaces
        ``assistant_thread_started``): greet the person there, once per retention window, with the suggested
        prompts on the greeting's thread."""
        event = body.get("event") or {}
        user, channel = slack_id(event.get("user")), slack_id(event.get("channel"))
        if not self.messages_tab or event.get("tab") != "messages" or user is None or channel is None:
            return
        try:
            if not await self.contexts.first_greeting(team_id=slack_id(body.get("team_id")) or "", user=user):
                return
        except StoreUnavailable as exc:
            log.warning("messages tab: %s; no greeting", exc)
            return
        first: str | None = None
        for text, blocks in bk.reply_messages(self.greeting):
            ts = await self.web.post(channel, thread_ts=None, text=text, blocks=blocks)
            first = first or ts
        if first is not None:
            await self.web.set_suggested_prompts(channel, first, prompts=self.prompts, title="Try one of these")

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
        if not is_person_speaking(event) or not await self.threads.is_new_event(body, context):
            return
        where = Origin.of_event(body)
        channel, thread_ts = where.channel_id or "", where.thread_ts or ""
        try:
            pane = await self.contexts.find(channel_id=channel, thread_ts=thread_ts)
        except StoreUnavailable:
            pane = None  # converse tells the person the store is down
        if pane is None:  # a DM thread that is not the pane's (agent_view: the Messages tab's)
            note = await self.viewing_note(where)
            await self.threads.converse(body, bot_user=context.get("bot_user_id"), note=note)
            return

        async def name_thread(text: str) -> None:  # the thread's first request names it
            await self.web.set_title(channel, thread_ts, _title(await self.names.readable(text)))

        note = _context_note(pane)
        await self.threads.converse(body, bot_user=context.get("bot_user_id"), note=note, first_request=name_thread)


class PaneAssistant(AsyncAssistant):
    """Bolt's ``AsyncAssistant``, handed only the requests it acts on.

    Bolt's middleware tries each of its listeners' matchers on every request the app gets; each try builds all of
    Bolt's listener arguments from the payload (~30 µs on a 2-core machine), so a click or a mention paid three for
    nothing. It acts only on an assistant event (``is_assistant_event``: a thread started, its context changed, a
    message in the thread) or on another message sub-event in an assistant thread (which it acks): Bolt's own
    predicates decide that here, and every other request goes straight on."""

    async def async_process(
        self, *, req: AsyncBoltRequest, resp: BoltResponse, next: Callable[[], Awaitable[BoltResponse]]
    ) -> BoltResponse | None:
        """Bolt's middleware hook: the assistant's listeners for its events, ``next()`` for any other request."""
        if is_assistant_event(req.body) or is_other_message_sub_event_in_assistant_thread(req.body):
            return await super().async_process(req=req, resp=resp, next=next)
        return await next()


def assistant_middleware(pane: AssistantPane, *, contexts: PaneContexts, jobs: LazyJobs) -> AsyncAssistant:
    """Bolt's ``AsyncAssistant`` (:class:`PaneAssistant`) with the pane's listeners (their lazy functions added to
    ``jobs``, so ``worker`` processes run them too); register it with ``app.assistant(...)``."""
    assistant = PaneAssistant(thread_context_store=RedisThreadContexts(contexts))
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


def _authorized_user(body: dict[str, Any]) -> str | None:
    """The person of an event without ``user`` (Slack's ``app_context_changed`` example has none): the envelope's
    first non-bot authorization."""
    for auth in body.get("authorizations") or []:
        if isinstance(auth, dict) and not auth.get("is_bot"):
            return slack_id(auth.get("user_id"))
    return None


def _title(text: str) -> str:
    """A pane thread's title from its first request as Slack shows it (:meth:`bot.slack.names.Names.readable`):
    plain, on one line, at most :data:`TITLE` characters."""
    line = " ".join(safe_plain(text).split()) or "New conversation"
    return clip(line, TITLE)


def _context_note(context: dict[str, str]) -> str | None:
    """What the model is told of the pane's context: the channel beside it, as a Slack channel reference."""
    channel = slack_id(context.get("channel_id"))
    return f"(I have the channel <#{channel}> open beside this conversation.)" if channel else None
