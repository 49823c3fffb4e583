"""The Slack Web API calls the bot makes, each in one place, failures logged with Slack's error code.

Nothing here raises on a Slack error: posting returns ``None``, updating returns ``False``, and the caller
decides what the person is told. Tokens never reach a log line (only Slack's error codes do). Retries of
429s, 5xx answers and connection errors happen inside the client (see :func:`bot.slack.app.web_client`).

Every call goes through the bot's one client, :class:`SharedWebClient` (one aiohttp session, counted and traced
per method); :func:`use_client` hands it to every listener.

Telling a person something privately (:meth:`SlackWeb.tell`) goes to the surface they used: an ephemeral in the
channel (and thread) of a message surface; a DM (``chat.postMessage`` to their user id, which Slack posts in the
app's Messages tab) from App Home or a modal, which have no channel, and when the ephemeral is refused.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Literal

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.errors import SlackRefused
from bot.ops.observe import slack_call

log = logging.getLogger(__name__)

WORKING_REACTION = "hourglass_flowing_sand"
TRANSIENT = frozenset({"internal_error", "fatal_error", "service_unavailable", "request_timeout"})


def _answer(exc: Exception) -> dict[str, Any] | None:
    """The JSON object Slack answered a refused call with (``exc`` a ``SlackApiError``), or None: another error,
    or an answer that is not Slack's JSON object (a proxy's list, HTML, bytes)."""
    if not isinstance(exc, SlackApiError):
        return None
    data: Any = getattr(exc.response, "data", exc.response)
    return data if isinstance(data, dict) else None


def error_code(exc: Exception) -> str | None:
    """Slack's error code of a refused call (``exc`` a ``SlackApiError``), else None."""
    code = (_answer(exc) or {}).get("error")
    return str(code) if code is not None else None


def slack_error(exc: SlackApiError) -> str:
    """Slack's error code of a refused call, with its `errors` details when there are any (never a token); an
    answer that is not Slack's JSON object (a proxy's list, HTML, bytes) says so instead of raising."""
    data = _answer(exc)
    if data is None:
        return "an answer that is not Slack's JSON"
    code, details = data.get("error"), data.get("errors")
    return f"{code}{' ' + str(details) if details else ''}"


class SlackWeb:
    """Web API calls on ``client`` (an ``AsyncWebClient`` with the bot token)."""

    def __init__(self, client: AsyncWebClient) -> None:
        self.client = client

    @staticmethod
    async def _done(call: Awaitable[Any], *, what: str, level: int = logging.WARNING) -> bool:
        """Await the Web API ``call``: True when Slack took it, False (logged as ``what: <Slack's code>``) when
        Slack refused it."""
        try:
            await call
            return True
        except SlackApiError as exc:
            log.log(level, "%s: %s", what, slack_error(exc))
            return False

    async def post(
        self, channel: str, *, thread_ts: str | None, text: str, blocks: list[dict[str, Any]] | None = None
    ) -> str | None:
        """``chat.postMessage``; the new message's ``ts``, or None when Slack refused it. Slack's transient errors
        answered with HTTP 200 (``internal_error``, ``fatal_error``, ``service_unavailable``, ``request_timeout``,
        which slack_sdk's retry handlers don't see) are retried twice."""
        posted = await self._post_message(channel=channel, thread_ts=thread_ts, text=text, blocks=blocks)
        return posted[1] if posted is not None else None

    async def post_to(
        self, channel: str, *, text: str, blocks: list[dict[str, Any]] | None = None
    ) -> tuple[str, str] | None:
        """``chat.postMessage`` to a channel or, given a user id, to the person's DM with the app; returns
        ``(channel_id, ts)`` as Slack answers them (a DM's ``D…`` id), or None when Slack refused (transient
        errors retried as in :meth:`post`)."""
        return await self._post_message(channel=channel, thread_ts=None, text=text, blocks=blocks)

    async def _post_message(
        self, *, channel: str, thread_ts: str | None, text: str, blocks: list[dict[str, Any]] | None
    ) -> tuple[str, str] | None:
        try:
            resp = await self._retrying(
                lambda: self.client.chat_postMessage(channel=channel, thread_ts=thread_ts, text=text, blocks=blocks)
            )
        except SlackApiError as exc:
            log.error("chat.postMessage failed: %s", slack_error(exc))
            return None
        posted_in, ts = resp.get("channel") or channel, resp.get("ts")
        return (str(posted_in), str(ts)) if ts else None

    @staticmethod
    async def _retrying(call: Callable[[], Awaitable[Any]]) -> Any:
        """``call()``, again up to twice (after 0.5 s, then 1 s) on Slack's transient errors answered with HTTP 200
        (:data:`TRANSIENT`, which slack_sdk's retry handlers don't see). Raises the last ``SlackApiError``."""
        retries = 0
        while True:
            try:
                return await call()
            except SlackApiError as exc:
                if error_code(exc) not in TRANSIENT or retries == 2:
                    raise
            retries += 1
            await asyncio.sleep(0.5 * retries)

    async def publish_home(self, user: str, view: dict[str, Any]) -> bool:
        """``views.publish`` of ``user``'s App Home tab (transient errors retried, as in :meth:`post`); False when
        Slack refused it (logged). Raises :class:`~bot.errors.SlackRefused` when its transient errors outlast the
        retries: the caller's work is tried again later (a scheduled Home refresh)."""
        try:
            await self._retrying(lambda: self.client.views_publish(user_id=user, view=view))
            return True
        except SlackApiError as exc:
            if error_code(exc) in TRANSIENT:
                raise SlackRefused(f"views.publish failed: {slack_error(exc)}") from None
            log.warning("views.publish failed: %s", slack_error(exc))
            return False

    async def user_info(self, user: str) -> dict[str, Any] | None:
        """``users.info`` of ``user`` (scope ``users:read``): Slack's user object, or None when Slack refused
        (``user_not_found``, ``missing_scope``...; logged at INFO: the caller falls back to the id)."""
        return await self.find_user(user) or None

    async def find_user(self, user: str) -> dict[str, Any] | Literal[False] | None:
        """``users.info`` of ``user`` (scope ``users:read``): Slack's user object; False when Slack says there is no
        such user (``user_not_found``); None when it can't say (``missing_scope``, an outage, the network; logged
        at INFO). Never raises."""
        try:
            resp = await self._retrying(lambda: self.client.users_info(user=user))
        except SlackApiError as exc:
            if error_code(exc) == "user_not_found":
                return False
            log.info("users.info failed: %s", slack_error(exc))
            return None
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            log.info("users.info failed: %s", type(exc).__name__)
            return None
        found = resp.get("user")
        return found if isinstance(found, dict) else None

    async def conversation_info(self, channel: str) -> dict[str, Any] | None:
        """``conversations.info`` of ``channel`` (scope ``channels:read`` / ``groups:read`` by its type): Slack's
        conversation object, or None when Slack refused (logged at INFO: the caller falls back to the id)."""
        call = lambda: self.client.conversations_info(channel=channel)  # noqa: E731
        return await self._object(call, key="channel", method="conversations.info")

    async def _object(self, call: Callable[[], Awaitable[Any]], *, key: str, method: str) -> dict[str, Any] | None:
        """The object under ``key`` of a look-up ``call`` (transient errors retried), or None when Slack refused."""
        try:
            resp = await self._retrying(call)
        except SlackApiError as exc:
            log.info("%s failed: %s", method, slack_error(exc))
            return None
        found = resp.get(key)
        return found if isinstance(found, dict) else None

    async def permalink(self, channel: str, ts: str) -> str | None:
        """``chat.getPermalink`` of a message, or None when Slack refused."""
        try:
            resp = await self.client.chat_getPermalink(channel=channel, message_ts=ts)
        except SlackApiError as exc:
            log.warning("chat.getPermalink failed: %s", slack_error(exc))
            return None
        link = resp.get("permalink")
        return str(link) if link else None

    async def message(self, channel: str, ts: str) -> dict[str, Any] | None:
        """Message ``ts`` of ``channel`` (a thread's first message or a reply in it) as Slack has it, read with
        ``conversations.replies`` (``oldest`` = ``latest`` = ``ts``, inclusive; the ``*:history`` scopes); None
        when it is not there or Slack refused (logged). Transient errors are retried twice, as in :meth:`post`."""
        try:
            resp = await self._retrying(
                lambda: self.client.conversations_replies(channel=channel, ts=ts, oldest=ts, latest=ts, inclusive=True)
            )
        except SlackApiError as exc:
            log.warning("conversations.replies failed: %s", slack_error(exc))
            return None
        found = [m for m in resp.get("messages") or [] if isinstance(m, dict) and m.get("ts") == ts]
        return found[0] if found else None

    async def update(self, channel: str, ts: str, *, text: str, blocks: list[dict[str, Any]]) -> bool:
        """``chat.update`` of a message the bot posted; False when Slack refused it."""
        call = self.client.chat_update(channel=channel, ts=ts, text=text, blocks=blocks)
        return await self._done(call, what="chat.update failed", level=logging.ERROR)

    async def tell(self, user: str, text: str, *, channel: str | None = None, thread_ts: str | None = None) -> None:
        """Tell ``user`` privately: an ephemeral in ``channel`` (and thread) when given, else (or when Slack
        refuses the ephemeral, e.g. ``user_not_in_channel``) a DM from the app."""
        if not user:
            return
        if channel:
            try:
                await self.client.chat_postEphemeral(channel=channel, user=user, text=text, thread_ts=thread_ts)
                return
            except SlackApiError as exc:
                log.warning("chat.postEphemeral failed: %s; telling the person by DM", slack_error(exc))
        await self.post(user, thread_ts=None, text=text)

    async def react(self, channel: str, ts: str, *, add: bool, name: str = WORKING_REACTION) -> None:
        """Add or remove the bot's reaction ``name`` on a message (already there / already gone is fine)."""
        try:
            call = self.client.reactions_add if add else self.client.reactions_remove
            await call(channel=channel, timestamp=ts, name=name)
        except SlackApiError as exc:
            if error_code(exc) not in ("already_reacted", "no_reaction"):
                log.warning("reactions.%s failed: %s", "add" if add else "remove", slack_error(exc))

    async def delete(self, channel: str, ts: str) -> bool:
        """``chat.delete`` of a message the bot posted; False when Slack refused it."""
        return await self._done(self.client.chat_delete(channel=channel, ts=ts), what="chat.delete failed")

    async def set_status(self, channel_id: str, thread_ts: str, status: str) -> bool:
        """``assistant.threads.setStatus``: the line under a thread saying what the app does (``""`` clears it;
        Slack also clears it when the app posts in the thread, and after two minutes without a message). False
        when Slack refused (Slack: docs.slack.dev reference/methods/assistant.threads.setStatus; in channels since
        the chat:write scope update of 2026-03)."""
        call = self.client.assistant_threads_setStatus(channel_id=channel_id, thread_ts=thread_ts, status=status)
        return await self._done(call, what="assistant.threads.setStatus refused", level=logging.INFO)

    async def session_status(
        self, channel_id: str, thread_ts: str, status: str, *, title: str | None = None, initiator: str | None = None
    ) -> str | None:
        """``agents.sessions.setStatus`` of a thread's agent session (creating it, with ``title`` and ``initiator``,
        when it has none; Slack: docs.slack.dev reference/methods/agents.sessions.setStatus). Returns None when
        Slack took it without a word, else Slack's error code or warning (e.g.
        ``missing_agent_session_stopped_event_subscription``, answered with ``ok: true``), for the caller to judge;
        transient errors are retried twice, as in :meth:`post`."""
        try:
            resp = await self._retrying(
                lambda: self.client.agents_sessions_setStatus(
                    channel_id=channel_id, thread_ts=thread_ts, status=status, title=title, initiator_user_id=initiator
                )
            )
        except SlackApiError as exc:
            return error_code(exc) or "unknown_error"
        warning = resp.get("warning")
        return str(warning) if warning else None

    async def rename_session(self, channel_id: str, thread_ts: str, title: str) -> bool:
        """``agents.sessions.rename`` of a thread's agent session (``title``: 1 to 200 characters); False when
        Slack refused."""
        call = self.client.agents_sessions_rename(channel_id=channel_id, thread_ts=thread_ts, title=title)
        return await self._done(call, what="agents.sessions.rename failed", level=logging.INFO)

    async def set_suggested_prompts(
        self, channel_id: str, thread_ts: str, *, prompts: list[dict[str, str]], title: str | None = None
    ) -> bool:
        """``assistant.threads.setSuggestedPrompts`` of an assistant thread (``prompts``: 1 to 4 ``{title,
        message}``; Slack: docs.slack.dev reference/methods/assistant.threads.setSuggestedPrompts); False when
        Slack refused."""
        call = self.client.assistant_threads_setSuggestedPrompts(
            channel_id=channel_id, thread_ts=thread_ts, prompts=prompts, title=title
        )
        return await self._done(call, what="assistant.threads.setSuggestedPrompts failed")

    async def set_title(self, channel_id: str, thread_ts: str, title: str) -> bool:
        """``assistant.threads.setTitle`` of an assistant thread (its name in the pane's history); False when
        Slack refused."""
        call = self.client.assistant_threads_setTitle(channel_id=channel_id, thread_ts=thread_ts, title=title)
        return await self._done(call, what="assistant.threads.setTitle failed")

    async def open_view(self, trigger_id: str, view: dict[str, Any]) -> str | None:
        """``views.open``; the view id, or None when Slack refused (e.g. the 3-second trigger expired)."""
        try:
            resp = await self.client.views_open(trigger_id=trigger_id, view=view)
            return str((resp.get("view") or {}).get("id") or "") or None
        except SlackApiError as exc:
            log.warning("views.open failed: %s", slack_error(exc))
            return None

    async def update_view(self, view_id: str, view: dict[str, Any]) -> bool:
        """``views.update`` of an open view; False when Slack refused (e.g. the person closed it)."""
        return await self._done(self.client.views_update(view_id=view_id, view=view), what="views.update failed")


class SharedWebClient(AsyncWebClient):
    """The bot's one Web API client (one aiohttp session), shared by every request: Bolt deep-copies a request's
    context for its lazy functions, and a live HTTP session can't be copied, so a copy is this same client."""

    def __deepcopy__(self, memo: dict[int, Any]) -> SharedWebClient:
        return self

    async def api_call(self, api_method: str, **kwargs: Any) -> Any:
        """Every Web API method goes through here: counted and traced by method (:func:`bot.ops.observe.slack_call`:
        Slack's ``error`` string on failure, never the token or the payload)."""
        with slack_call(api_method):
            return await super().api_call(api_method, **kwargs)


def use_client(client: SharedWebClient) -> Callable[..., Awaitable[Any]]:
    """Global middleware (register it first): every listener gets ``client``. Bolt makes a client per request
    around the same session, and helpers bound to it (``say``...), which its lazy-listener copy can't copy."""

    async def middleware(context: dict[str, Any], next: Callable[[], Awaitable[Any]]) -> Any:
        context["client"] = client
        for key, value in list(context.items()):  # say/complete/fail... made around the per-request client
            if key != "client" and getattr(value, "client", client) is not client:
                del context[key]  # made again on demand around this client
        return await next()

    return middleware
