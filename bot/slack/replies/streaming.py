"""A reply that reaches its thread while the model writes it: :class:`ReplyStream`.

Text (:meth:`ReplyStream.text`) and tool progress (:meth:`ReplyStream.task`) are queued without waiting on Slack;
a background pump sends what is queued at most once per ``interval`` seconds, so a fast model costs a bounded number
of Web API calls and a slow Slack never slows the run. The first send waits :data:`FIRST_SEND_AFTER` for more of the
reply (the thread's status shows meanwhile), so a reply the model finishes within it is posted whole.

Two ways to show it, chosen per reply:

- streaming (slack_sdk's chat stream helper, ``client.chat_stream``: ``chat.startStream``, ``chat.appendStream``,
  ``chat.stopStream``; Slack: docs.slack.dev reference/methods/chat.startStream, appendStream Tier 4,
  start/stopStream Tier 2). Text goes in pieces made safe by :class:`bot.slack.render.stream_text.StreamText`; tool
  calls as ``task_update`` chunks (``in_progress``, then ``complete`` / ``error``). A model turn that calls several
  tools at once shows them as a plan (:meth:`ReplyStream.plan`): a new streamed message started with
  ``task_display_mode: "plan"`` (Slack: "plan displays all tasks together"), titled by a ``plan_update`` chunk, every
  call listed ``pending`` at once, then each updated as it runs; a lone tool call stays a ``task_update`` in the
  timeline. A message holds at most
  :data:`MESSAGE_BUDGET` characters; the rest goes on in a new streamed message. Streaming needs the requester and
  team outside DMs (``recipient_user_id`` / ``recipient_team_id``);
- posted and updated (``chat.postMessage`` once, then ``chat.update`` with the whole reply so far, rendered as a
  finished reply is: :func:`bot.slack.render.blocks.reply_messages`, tool progress as one context line above it) when
  streaming is off, refused (an older workspace, a channel type, a method error, a rate limit past the client's
  retries) or breaks midway; the message streamed so far is then stopped (``chat.stopStream`` with nothing more,
  unless Slack ended it itself) and updated in place.

A reply whose whole text is there before any of it was streamed (a short one, or one the model wrote within
:data:`FIRST_SEND_AFTER` of its first word) is posted whole: one ``chat.postMessage`` shows what
``chat.startStream`` + ``chat.stopStream`` would have shown in the end.

A refusal is remembered per channel for a while (:class:`bot.slack.replies.unsupported.FeatureRefusals`), so the replies
after it go straight to posting. Nothing here raises on a Slack error: failures are logged with Slack's code.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.models.messages.chunk import Chunk, MarkdownTextChunk, PlanUpdateChunk, TaskUpdateChunk
from slack_sdk.web.async_chat_stream import AsyncChatStream

from bot.agent.text import is_blank
from bot.slack.context import SlackContext
from bot.slack.render import blocks as bk
from bot.slack.render.mrkdwn import split_reply, text_length
from bot.slack.render.stream_text import StreamText
from bot.slack.replies.unsupported import FeatureRefusals
from bot.slack.transport.web_api import TRANSIENT, SlackWeb, error_code, slack_error

log = logging.getLogger(__name__)

PASSING = TRANSIENT | {"ratelimited"}  # errors that say nothing of whether Slack streams here
ENDED_BY_SLACK = "message_not_in_streaming_state"
"""Slack ended the streamed message itself (its Stop of an agent session: Slack stops the thread's streaming
messages before ``agent_session_stopped`` reaches the app), so ``chat.appendStream`` / ``chat.stopStream`` on it
answer this: expected, and the message is finished with ``chat.update``."""


class EndedStreams:
    """Streamed messages Slack ended itself (``agent_session_stopped``'s ``streaming_message_ts``), so a reply
    still writing into one finishes it with ``chat.update`` instead of calling ``chat.stopStream`` on it (Slack
    would answer :data:`ENDED_BY_SLACK`). One process's memory of at most ``size`` ``(channel_id, ts)`` pairs (the
    oldest forgotten first): where the event reached another process (a web/worker split), the reply learns it from
    Slack's answer instead, as quietly."""

    def __init__(self, *, size: int = 10_000) -> None:
        self.size = size
        self._ended: OrderedDict[tuple[str, str], None] = OrderedDict()

    def mark(self, channel_id: str, ts: str) -> None:
        """Slack ended the streamed message ``ts`` of ``channel_id`` just now."""
        self._ended[(channel_id, ts)] = None
        while len(self._ended) > self.size:
            self._ended.popitem(last=False)

    def __contains__(self, key: object) -> bool:
        return key in self._ended


class _EndedBySlack(Exception):
    """The current streamed message is one Slack ended (:class:`EndedStreams`): no more stream calls on it."""


FIRST_SEND_AFTER = 0.3
"""Seconds a reply's first send waits after its first text or task (at most ``interval``): a reply finished by then
costs one ``chat.postMessage`` instead of ``chat.startStream`` + ``chat.stopStream`` (or a post + its update), and
a streamed one starts with more than its first token. Short against a model's first token, which the thread's
status covers (Slack clears it as the reply's message appears)."""
MESSAGE_BUDGET = 11_000  # safe characters per streamed message (Slack: markdown text <= 12,000 per message)
TaskStatus = Literal["pending", "in_progress", "complete", "error"]  # Slack's task_update statuses
_TOOL_NAME = re.compile(r"[A-Za-z0-9_.:/-]{1,200}")
_MARKS = {
    "pending": ":double_vertical_bar:",
    "in_progress": ":hourglass_flowing_sand:",
    "complete": ":white_check_mark:",
    "error": ":x:",
}


@dataclass
class Task:
    """A tool call shown with the reply: ``title`` (a tool name, see :func:`task_title`), its ``status``, and
    ``details`` (plain text, e.g. what a ``pending`` call waits for: :data:`APPROVAL_ASKED`; Slack shows a
    task_update's ``details`` with the task)."""

    id: str
    title: str
    status: TaskStatus
    details: str | None = None

    def chunk(self) -> TaskUpdateChunk:
        """As a ``task_update`` chunk of a streamed message."""
        return TaskUpdateChunk(id=self.id, title=self.title, status=self.status, details=self.details)

    def line(self) -> str:
        """As one mrkdwn line of a posted reply's context block."""
        note = f" {self.details}" if self.details else {"error": " failed", "pending": " waits"}.get(self.status, "")
        return f"{_MARKS[self.status]} `{self.title}`{note}"


APPROVAL_ASKED = "approval asked"
"""The details of a tool call shown ``pending`` when its approval request is posted. The message it shows in ends
then and is never updated again (the call's run, once decided, shows in the reply after the request), so it says
what happened, not a state that goes stale: "waits for approval" stayed in every approval thread after the call
ran or was declined (a new user's trial)."""
WAITS_FOR_A_PERSON = "waits for a person"
"""The details of a running tool call shown ``pending`` while the run waits for a person (:meth:`ReplyStream.pause`)."""


def task_title(tool_name: str) -> str:
    """A tool's name as a task title: the characters tool names are made of (OpenAI: ``[A-Za-z0-9_-]``, MCP adds
    ``.`` ``/`` ``:``), at most 64; a name the model made up with anything else is shown as ``tool``."""
    return tool_name[:64] if _TOOL_NAME.fullmatch(tool_name) else "tool"


@dataclass(frozen=True)
class _Display:
    """In the outgoing queue: the next streamed message shows its tasks as ``mode`` (chat.startStream's
    ``task_display_mode``)."""

    mode: Literal["timeline", "plan"]


@dataclass(frozen=True)
class _NewMessage:
    """In the outgoing queue: the streamed message is full; the text after this starts a new one, from
    ``raw_from`` in the raw text (where a fallback renders it from)."""

    raw_from: int


class ReplyStream:
    """One reply in the thread of ``ctx`` (see the module docstring). ``streaming``: try Slack's streaming first;
    ``interval``: seconds between Web API calls; ``on_posted()`` is called as a new message of the reply is posted
    (Slack clears a thread's status then), before the call, so a status set meanwhile counts as still shown;
    ``after_posted()`` is awaited once the call went out (to show the status again)."""

    def __init__(
        self,
        web: SlackWeb,
        ctx: SlackContext,
        *,
        refusals: FeatureRefusals,
        streaming: bool = True,
        interval: float = 1.0,
        allow_user_mentions: bool = False,
        ended: EndedStreams | None = None,
    ) -> None:
        self.web, self.ctx, self.refusals, self.interval = web, ctx, refusals, interval
        self.ended = ended if ended is not None else EndedStreams()  # messages Slack stopped (its Stop)
        self.allow_user_mentions = allow_user_mentions
        stream = streaming and _can_stream(ctx) and refusals.allowed(ctx)
        self.mode: Literal["stream", "post"] = "stream" if stream else "post"
        self.on_posted: Callable[[], None] | None = None
        self.after_posted: Callable[[], Awaitable[None]] | None = None  # ... and once that post went out
        self._text = StreamText(allow_user_mentions=allow_user_mentions)
        self._tasks: dict[str, Task] = {}
        self._outgoing: list[Chunk | _NewMessage | _Display] = []  # stream mode: what to send, in order
        self._stream: AsyncChatStream | None = None
        self._unstopped: list[AsyncChatStream] = []  # streamed messages a fallback left streaming: to stop
        self._queued = 0  # safe characters queued for the current streamed message
        self._message_from = 0  # where in the raw text the current message starts
        self._shown: list[tuple[str, str]] = []  # post mode: (ts, what it shows) of each message, in order
        self._room = 0  # post mode: the most characters the tool progress line took from the first message
        self._wanted: list[str] = []  # post mode: what the last send meant each message to show, in order
        self._wake = asyncio.Event()
        self._lock = asyncio.Lock()
        self._pump: asyncio.Task[None] | None = None
        self._closed = False
        self._turn_ended = False  # a tool call came after the last text: the next text is a new turn's
        self._next_display: Literal["timeline", "plan"] = "timeline"  # the next streamed message's task display
        self._ever_streamed = False  # a streamed message of this reply was started

    @property
    def started(self) -> bool:
        """Whether anything of the reply was queued (text or a task)."""
        return bool(self._text.raw) or bool(self._tasks)

    @property
    def raw(self) -> str:
        """The reply's text so far, as the model wrote it."""
        return self._text.raw

    def text(self, delta: str) -> None:
        """Queue the model's next ``delta`` of text (a new model turn's text starts a new paragraph)."""
        if not delta:
            return
        if self._turn_ended and self._text.raw and not self._text.raw.endswith("\n\n"):
            self._text.add("\n" if self._text.raw.endswith("\n") else "\n\n")
        self._turn_ended = False
        self._text.add(delta)
        self._kick()

    def task(self, task_id: str, *, tool_name: str, status: TaskStatus, details: str | None = None) -> None:
        """Queue a tool call's progress (``status``, with ``details`` to show beside it). The text before it is
        complete (the model turn that called the tool ended)."""
        task = Task(id=task_id, title=task_title(tool_name), status=status, details=details)
        self._tasks[task_id] = task
        self._turn_ended = True
        if self.mode == "stream":
            self._queue_text(final=True)
            self._outgoing.append(task.chunk())
        self._kick()

    def plan(self, title: str, calls: list[tuple[str, str]]) -> None:
        """A model turn calls several tools (``calls``: ``(tool_call_id, tool_name)`` each, in order): show them
        together as a plan titled ``title`` (plain text), each ``pending`` until :meth:`task` moves it on. Streaming:
        the message streamed so far ends, and the plan starts a message of its own (its display mode is set when
        a stream starts); posting: the tasks line up in the context line."""
        self._turn_ended = True
        for task_id, tool_name in calls:
            self._tasks[task_id] = Task(id=task_id, title=task_title(tool_name), status="pending")
        if self.mode == "stream":
            self._queue_text(final=True)
            if self._stream is not None or self._outgoing:
                self._outgoing.append(_NewMessage(raw_from=self._text.taken))
                self._queued = 0
            self._outgoing.append(_Display("plan"))
            self._outgoing.append(PlanUpdateChunk(title=title))
            self._outgoing.extend(self._tasks[task_id].chunk() for task_id, _ in calls)
        self._kick()

    def cut_off(self, marker: str) -> None:
        """The run failed: end the text shown so far with ``marker`` (Markdown), after a space or, when a tool
        call came after the text, as a paragraph of its own. Nothing shown: nothing to mark."""
        if not is_blank(self._text.raw):
            self._turn_ended = self._turn_ended and not self._text.raw.endswith(" ")
            self.text(marker if self._turn_ended else " " + marker)

    async def pause(self) -> None:
        """The run waits for a person: tool calls still running show as waiting (``pending``, with
        :data:`WAITS_FOR_A_PERSON`), then :meth:`close`."""
        for task in list(self._tasks.values()):
            if task.status == "in_progress":
                self.task(task.id, tool_name=task.title, status="pending", details=WAITS_FOR_A_PERSON)
        await self.close()

    async def close(self) -> None:
        """Send everything queued and end the reply (``chat.stopStream``, or the last ``chat.update``); again: no-op."""
        if self._closed:
            return
        self._closed = True
        async with self._lock:  # a send in flight finishes first: cancelling it could lose what it sent
            if self._pump is not None:
                self._pump.cancel()  # it waits for the lock, sleeps or waits for work: nothing is cut short
            await self._send(final=True)
        if self._pump is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._pump

    # --- sending ----------------------------------------------------------------------------------

    def _kick(self) -> None:
        self._wake.set()
        if self._pump is None and not self._closed:
            self._pump = asyncio.ensure_future(self._run_pump())

    async def _run_pump(self) -> None:
        await asyncio.sleep(min(FIRST_SEND_AFTER, self.interval))
        while True:
            await self._wake.wait()
            self._wake.clear()
            async with self._lock:
                await self._send(final=False)
            await asyncio.sleep(self.interval)

    def _queue_text(self, *, final: bool) -> None:
        """Take what can be sent into the outgoing queue; a :class:`_NewMessage` mark goes before a piece that
        would take the streamed message past :data:`MESSAGE_BUDGET` (a piece longer than that is cut, at
        whitespace, into messages of its own)."""
        start = self._text.taken
        piece = self._text.take(final=final)
        for part in split_reply(piece, MESSAGE_BUDGET) if piece else []:
            if self._queued and self._queued + len(part) > MESSAGE_BUDGET:
                self._outgoing.append(_NewMessage(raw_from=start))
                self._queued = 0
            self._outgoing.append(MarkdownTextChunk(text=part))
            self._queued += len(part)

    async def _send(self, *, final: bool) -> None:
        """Send what is queued; ``final``: all of it, and end the streamed message (its last text goes with
        ``chat.stopStream``)."""
        try:
            if self.mode == "stream":
                self._queue_text(final=final)
                if final and self._whole_before_streamed():
                    self._outgoing, self.mode = [], "post"  # one chat.postMessage shows what start + stop would
                elif self._outgoing or (final and self._stream is not None):
                    await self._stream_out(final=final)
            if self.mode == "post":
                await self._stop_unstopped()  # first: a stop after the update might show the streamed text again
                await self._post_out()
        except Exception:  # a bug here must not stop the run's other messages
            log.exception("reply stream: sending failed")

    def _whole_before_streamed(self) -> bool:
        """The whole reply is queued and none of it was streamed yet (a short reply, or one the model wrote faster
        than the first send waited for): text only, within one message."""
        return (
            not self._ever_streamed
            and bool(self._outgoing)
            and all(isinstance(item, MarkdownTextChunk) for item in self._outgoing)
        )

    async def _stream_out(self, *, final: bool) -> None:
        """Send the outgoing queue in order: chunks into the current streamed message, a new message at each
        :class:`_NewMessage` mark. Any failure (Slack's answer, the network) falls back to posting."""
        queue, self._outgoing = self._outgoing, []
        batch: list[Chunk] = []
        try:
            for item in queue:
                if isinstance(item, _NewMessage):
                    await self._to_stream(batch, final=True)  # this message is full
                    batch, self._message_from = [], item.raw_from
                elif isinstance(item, _Display):
                    self._next_display = item.mode
                else:
                    batch.append(item)
            await self._to_stream(batch, final=final)
        except Exception as exc:
            self._fall_back(exc)  # the message it leaves streaming is stopped before it is updated (_send)

    async def _to_stream(self, chunks: list[Chunk], *, final: bool) -> None:
        """``chunks`` into the current streamed message (started first when there is none); ``final``: and stop
        it. Raises what the helper raises."""
        if not chunks and (self._stream is None or not final):
            return
        if self._stream is None:
            display, self._next_display = self._next_display, "timeline"
            self._ever_streamed = True
            self._stream = await self.web.client.chat_stream(
                channel=self.ctx.channel_id,
                thread_ts=self.ctx.thread_ts,
                recipient_team_id=self.ctx.team_id or None,
                recipient_user_id=self.ctx.requester or None,
                task_display_mode=display if display == "plan" else None,
                buffer_size=1,
            )
        stream, new_message = self._stream, self._stream.ts is None
        if not new_message and (self.ctx.channel_id, stream.ts) in self.ended:
            raise _EndedBySlack(stream.ts)  # finished with chat.update (_fall_back), never chat.stopStream
        if new_message or not final:  # a new message starts with its text: never shown empty
            if new_message:
                self._posted()  # before the call: a status set while it is in flight may outlive it
            await stream.append(chunks=chunks)
            chunks = []
            if new_message:
                await self._after_posted()
        if final:
            await self._stop(stream, chunks)
            self._stream = None

    async def _stop(self, stream: AsyncChatStream, chunks: list[Chunk]) -> None:
        """``chat.stopStream`` with the message's last ``chunks``; a passing error (Slack's 200 ``internal_error``
        and the like, which the client's retry handlers don't see) is tried once more, so the message doesn't stay
        "streaming" until Slack's own timeout. Raises what the helper raises."""
        try:
            await stream.stop(chunks=chunks or None)
        except SlackApiError as exc:
            if error_code(exc) not in PASSING:
                raise
            await asyncio.sleep(0.5)
            await stream.stop(chunks=chunks or None)

    def _fall_back(self, exc: Exception) -> None:
        """Streaming failed: post and update from here on, from the start of the message being streamed (updated
        in place when it shows, after :meth:`_stop_unstopped` stopped it, unless Slack ended it itself). Slack's
        refusal to start one (not a passing error) is remembered."""
        stream = self._stream
        shown = stream.ts if stream is not None else None
        ended = isinstance(exc, _EndedBySlack) or error_code(exc) == ENDED_BY_SLACK
        if shown is not None and ended:
            log.info("Slack ended the streamed message %s (its Stop); finishing it with chat.update", shown)
        else:
            log.warning("streaming a reply failed (%s); posting it instead", _describe(exc))
        if shown is None and error_code(exc) not in PASSING:
            self.refusals.refused(self.ctx)
        self.mode = "post"
        if stream is not None and shown is not None:
            self._shown.append((shown, ""))
            if not ended:
                self._unstopped.append(stream)
        self._stream = None

    async def _stop_unstopped(self) -> None:
        """Stop the streamed messages a fallback left streaming (:meth:`_fall_back`): ``chat.stopStream`` with
        nothing more (Slack: only ``channel`` and ``ts`` are required, docs.slack.dev reference/methods/
        chat.stopStream), so a message whose last append or stop was refused doesn't show "streaming" until Slack's
        own timeout; its whole text then comes with ``chat.update`` (:meth:`_post_out`). A stop refused with a
        passing error (after :meth:`_stop`'s retry) or failed by the network is tried again at the next send, and
        the message updated again after it (a stop may show the streamed text); Slack's :data:`ENDED_BY_SLACK`
        means stopped already; any other refusal is logged and given up (nothing else stops a stream)."""
        for stream in list(self._unstopped):
            try:
                await self._stop(stream, [])
            except Exception as exc:
                code = error_code(exc)
                if code in PASSING or not isinstance(exc, SlackClientError):  # the network's failure: passing too
                    log.warning("stopping streamed message %s failed (%s); trying later", stream.ts, _describe(exc))
                    continue
                if code != ENDED_BY_SLACK:
                    log.warning("stopping streamed message %s failed (%s); left to Slack", stream.ts, _describe(exc))
            self._unstopped.remove(stream)
            self._shown = [(ts, "" if ts == stream.ts else look) for ts, look in self._shown]  # update it again

    async def _post_out(self) -> None:
        if not self.started:
            return
        rendered = self._rendered()
        self._wanted = [repr(part) for part in rendered]
        for i, ((text, blocks), look) in enumerate(zip(rendered, self._wanted, strict=True)):
            if i < len(self._shown):
                ts, shown = self._shown[i]
                if shown != look and await self.web.update(self.ctx.channel_id, ts, text=text, blocks=blocks or []):
                    self._shown[i] = (ts, look)
                continue
            self._posted()  # before the call, as for a stream
            posted = await self.web.post(self.ctx.channel_id, thread_ts=self.ctx.thread_ts, text=text, blocks=blocks)
            if posted is None:
                return  # refused (logged); the next send tries again
            self._shown.append((posted, look))
            await self._after_posted()

    @property
    def unshown(self) -> bool:
        """Whether, closed in post mode (streaming off, refused or broken), some of the reply never showed: a post
        or an update of it Slack refused past the client's retries."""
        if self.mode != "post" or not self.started:
            return False
        return [look for _ts, look in self._shown] != self._wanted

    def _rendered(self) -> list[tuple[str, list[dict[str, Any]] | None]]:
        """Post mode: the reply so far as messages, tool progress as a context line above the first (its text
        taken from what the first message's text may carry: Slack's ~12,000 characters a message's blocks carry,
        :func:`~bot.slack.render.blocks.reply_messages`; the most it ever took, so that a line growing shorter, a
        tool done, never leaves a message posted for a part that is no longer rendered)."""
        raw = self._text.raw[self._message_from :]
        tasks = bk.task_lines([t.line() for t in self._tasks.values()]) if self._tasks else []
        self._room = max(self._room, text_length(tasks))  # never less: the parts posted must not shrink in number
        mentions = self.allow_user_mentions
        messages = bk.reply_messages(raw, allow_user_mentions=mentions, room=self._room) if not is_blank(raw) else []
        if not tasks:
            return messages
        if not messages:
            return [("Working on it", tasks)]
        text, blocks = messages[0]
        return [(text, tasks + (blocks or [])), *messages[1:]]

    def _posted(self) -> None:
        if self.on_posted is not None:
            self.on_posted()

    async def _after_posted(self) -> None:
        if self.after_posted is None:
            return
        try:
            await self.after_posted()
        except Exception:  # the status is a sign only: never the reply's failure (nor a fallback to posting)
            log.exception("reply stream: showing the status again failed")


def _can_stream(ctx: SlackContext) -> bool:
    """Slack streams only replies in a thread, to a named person outside DMs (chat.startStream's
    recipient_user_id / recipient_team_id are required in channels)."""
    return bool(ctx.thread_ts) and (ctx.channel_id.startswith("D") or bool(ctx.team_id and ctx.requester))


def _describe(exc: Exception) -> str:
    return slack_error(exc) if isinstance(exc, SlackApiError) else type(exc).__name__
