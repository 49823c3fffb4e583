"""Streamed messages in the fake Slack: ``chat.startStream``, ``chat.appendStream`` and ``chat.stopStream``, with
Slack's arguments, limits and errors (docs.slack.dev reference/methods/chat.startStream, chat.appendStream,
chat.stopStream):

- ``chat.startStream``: ``channel`` and ``thread_ts`` (a reply to a person's message) required; outside a DM also
  ``recipient_user_id`` and ``recipient_team_id``; optional ``markdown_text``. Answers ``{"ok", "channel", "ts"}``.
- ``chat.appendStream``: ``channel``, ``ts`` and ``markdown_text`` required; the message must be this app's and
  still streaming (``message_not_in_streaming_state`` after ``chat.stopStream``).
- ``chat.stopStream``: ``channel`` and ``ts``; optional ``markdown_text`` and ``blocks`` (at most 50, checked as
  Block Kit), rendered below the text.
- ``markdown_text`` at most 12,000 characters per call (``msg_too_long``); or ``chunks`` (what slack_sdk's chat
  stream helper sends): ``markdown_text`` chunks add text, ``task_update`` / ``plan_update`` chunks show a task's
  progress (one line per task id: its latest status, and its ``details`` / ``output`` when sent), ``blocks``
  chunks add blocks; any other type is ``invalid_arguments``. ``task_display_mode`` of ``chat.startStream``:
  ``timeline`` (default) or ``plan`` (the tasks shown together under the plan's title, set by ``plan_update``
  chunks: a header block above them).

A streamed message shows its text so far as one ``markdown`` block (``streaming: true`` until it is stopped), so the
playground renders it growing; every change is a ``message_changed`` event. Starting a stream in a thread clears
the thread's assistant status, as posting a reply does.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, ClassVar

from bot.fakeslack import blockkit
from bot.fakeslack.state import BOT_USER_ID, JSON
from bot.fakeslack.webapi.args import ApiError, invalid, json_arg, require
from bot.fakeslack.webapi.core import Family

MARKDOWN_TEXT = 12_000
STOP_BLOCKS = 50
DISPLAY_MODES = ("timeline", "plan")  # chat.startStream task_display_mode: tasks one by one, or together as a plan


class Streams(Family):
    """The stream methods of ``api`` (registered on it by :meth:`register`)."""

    METHODS: ClassVar[Mapping[str, str]] = {
        "chat.startStream": "start",
        "chat.appendStream": "append",
        "chat.stopStream": "stop",
    }

    async def start(self, params: JSON) -> JSON:
        channel = self.api.channel(params)
        require(params, "thread_ts")
        is_dm = self.state.directory.channel_type(channel) == "im"
        if not is_dm and not (params.get("recipient_user_id") and params.get("recipient_team_id")):
            raise invalid(
                "invalid_arguments",
                ["recipient_user_id and recipient_team_id are required when streaming to a channel"],
                with_errors=False,
            )
        parent = self.state.message(channel, str(params["thread_ts"]))
        if parent is None:
            raise ApiError("message_not_found")
        thread_ts = str(parent.get("thread_ts", parent["ts"]))
        message = self.api.bot_message(text="", blocks=None, thread_ts=thread_ts)
        mode = str(params.get("task_display_mode") or "timeline")
        if mode not in DISPLAY_MODES:
            problem = f"must be one of {', '.join(DISPLAY_MODES)} [json-pointer:/task_display_mode]"
            raise invalid("invalid_arguments", [problem], with_errors=False)
        message.update(streaming=True, blocks=[], tasks={}, extra_blocks=[], task_display_mode=mode)
        _take(message, params, required=False)
        self.state.conversations[channel].add(message)
        self.state.changed({"type": "message", "channel": channel, "message": copy.deepcopy(message)})
        self.state.clear_status(channel, thread_ts)  # as a posted reply does
        return {"ok": True, "channel": channel, "ts": message["ts"]}

    async def append(self, params: JSON) -> JSON:
        channel, message = self._streaming(params)
        _take(message, params, required=True)
        self.state.changed({"type": "message_changed", "channel": channel, "message": copy.deepcopy(message)})
        return {"ok": True, "channel": channel, "ts": message["ts"]}

    async def stop(self, params: JSON) -> JSON:
        channel, message = self._streaming(params)
        _take(message, params, required=False)
        extra = json_arg(params, "blocks", error="invalid_blocks_format")
        blocks = list(message["blocks"])
        if extra is not None:
            if not isinstance(extra, list) or len(extra) > STOP_BLOCKS:
                problem = f"no more than {STOP_BLOCKS} items allowed [json-pointer:/blocks]"
                raise invalid("invalid_blocks", [problem], with_errors=True)
            errors = blockkit.validate_message_blocks(extra)
            if errors:
                raise invalid("invalid_blocks", errors, with_errors=True)
            blocks += extra
        message.update(streaming=False, blocks=blocks)
        self.state.changed({"type": "message_changed", "channel": channel, "message": copy.deepcopy(message)})
        return {"ok": True, "channel": channel, "ts": message["ts"], "message": copy.deepcopy(message)}

    def _streaming(self, params: JSON) -> tuple[str, JSON]:
        channel = self.api.channel(params)
        require(params, "ts")
        message = self.api.message(channel, params["ts"])
        if message.get("user") != BOT_USER_ID:
            raise ApiError("cant_update_message")
        if not message.get("streaming"):
            raise ApiError("message_not_in_streaming_state")
        return channel, message


def _take(message: JSON, params: JSON, *, required: bool) -> None:
    """Add a call's ``markdown_text`` and ``chunks`` to a streamed message (its text, tasks and blocks)."""
    chunks = json_arg(params, "chunks", error="invalid_arguments")
    text = _markdown(params, required=required and chunks is None)
    added = text or ""
    if chunks is not None:
        if not isinstance(chunks, list):
            raise invalid("invalid_arguments", ["chunks must be an array [json-pointer:/chunks]"], with_errors=False)
        for i, chunk in enumerate(chunks):
            kind = chunk.get("type") if isinstance(chunk, dict) else None
            if kind == "markdown_text":
                added += _checked(str(chunk.get("text") or ""))
            elif kind == "plan_update":  # the plan's title (slack_sdk's PlanUpdateChunk: title only)
                message["plan_title"] = str(chunk.get("title") or "")
            elif kind == "task_update":
                key = str(chunk.get("id") or chunk.get("title") or i)
                task = {"title": str(chunk.get("title") or ""), "status": str(chunk.get("status") or "")}
                for field in ("details", "output"):  # shown with the task; the latest update's, as its status
                    if chunk.get(field):
                        task[field] = str(chunk[field])
                message["tasks"][key] = task
            elif kind == "blocks" and isinstance(chunk.get("blocks"), list):
                message["extra_blocks"] += chunk["blocks"]
            else:
                raise invalid(
                    "invalid_arguments", [f"unknown chunk type [json-pointer:/chunks/{i}/type]"], with_errors=False
                )
    message["text"] = str(message.get("text") or "") + added
    message["blocks"] = _blocks(message)


def _checked(text: str) -> str:
    if len(text) > MARKDOWN_TEXT:
        raise ApiError("msg_too_long")
    return text


def _markdown(params: JSON, *, required: bool) -> str | None:
    if required:
        require(params, "markdown_text")
    raw: Any = params.get("markdown_text")
    if raw is None:
        return None
    text = str(raw)
    if len(text) > MARKDOWN_TEXT:
        raise ApiError("msg_too_long")
    return text


def _task_notes(task: JSON) -> str:
    """A task's ``details`` and ``output`` after its title (`` - approval asked``), when it has them."""
    return "".join(f" - {task[field]}" for field in ("details", "output") if task.get(field))


def _blocks(message: JSON) -> list[JSON]:
    """What a streamed message shows: its tasks (one line each, latest status), its text, blocks sent in chunks."""
    marks = {"pending": "○", "in_progress": "◐", "complete": "●", "error": "✕"}
    tasks = [
        {"type": "mrkdwn", "text": f"{marks.get(t['status'], '·')} {t['title']}{_task_notes(t)}"[:3000]}
        for t in message.get("tasks", {}).values()
    ]
    blocks: list[JSON] = [{"type": "context", "block_id": "tasks", "elements": tasks[:10]}] if tasks else []
    if message.get("task_display_mode") == "plan" and (tasks or message.get("plan_title")):
        title = str(message.get("plan_title") or "Plan")[:150]
        blocks.insert(0, {"type": "header", "block_id": "plan", "text": {"type": "plain_text", "text": title}})
    if message.get("text"):
        blocks.append({"type": "markdown", "block_id": "stream", "text": message["text"]})
    return blocks + list(message.get("extra_blocks", []))
