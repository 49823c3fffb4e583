"""Slack's AI app methods in the fake Web API: ``assistant.threads.setStatus``, ``setSuggestedPrompts`` and
``setTitle``, with Slack's arguments, limits and errors (docs.slack.dev reference/methods/assistant.threads.setStatus,
assistant.threads.setSuggestedPrompts, assistant.threads.setTitle). Each answers ``{"ok": true}``.

- ``assistant.threads.setStatus``: ``channel_id``, ``thread_ts`` and ``status`` required (``status: ""`` is allowed
  and clears the status); optional ``loading_messages``, an array of at most 10 strings. Recorded in
  ``state.statuses``; the thread's current status (``state.status_of``) is also cleared when the bot posts in it
  and after two minutes. Change event ``assistant_status`` ``{channel_id, thread_ts, status, loading_messages}``.
- ``assistant.threads.setSuggestedPrompts``: ``channel_id`` and ``prompts`` required: 1 to 4 ``{"title",
  "message"}`` objects, both non-empty strings (Slack: "up to four suggested prompts"; each "should have a title
  and message"); optional ``title`` (of the list) and ``thread_ts`` (the docs: when absent, the prompts go to the
  latest message in the channel). Recorded in ``state.suggested_prompts``; the latest call per thread is what the
  thread shows (``state.prompts_of``). Change event ``assistant_prompts`` with the record.
- ``assistant.threads.setTitle``: ``channel_id``, ``thread_ts`` and ``title`` required. Recorded in ``state.titles``;
  an assistant pane thread's root message (subtype ``assistant_app_thread``) takes the title as its text and
  ``assistant_app_thread.title`` (docs.slack.dev reference/events/message/assistant_app_thread), with a
  ``message_changed``. Change event ``assistant_title`` with the record.

Errors, as the docs list them: ``channel_not_found`` (unknown ``channel_id``), ``invalid_thread_ts`` (``thread_ts``
is no message of that channel), ``message_not_found`` (setSuggestedPrompts without ``thread_ts`` in a channel with no
message). A missing or malformed argument is ``invalid_arguments`` with ``response_metadata.messages`` such as
``[ERROR] no more than 4 items allowed [json-pointer:/prompts]`` (the shape of Slack's other schema errors; the docs
name no dedicated codes for these).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, ClassVar

from bot.fakeslack.state import JSON
from bot.fakeslack.webapi.args import ApiError, invalid, json_arg, require
from bot.fakeslack.webapi.core import Family

LOADING_MESSAGES = 10  # setStatus: "Maximum of 10 messages"
PROMPTS = 4  # setSuggestedPrompts: "up to four suggested prompts"
PANE_SUBTYPE = "assistant_app_thread"


class Assistant(Family):
    """The ``assistant.threads.*`` methods of ``api`` (registered on it by :meth:`register`)."""

    METHODS: ClassVar[Mapping[str, str]] = {
        "assistant.threads.setStatus": "set_status",
        "assistant.threads.setSuggestedPrompts": "set_suggested_prompts",
        "assistant.threads.setTitle": "set_title",
    }

    async def set_status(self, params: JSON) -> JSON:
        require(params, "channel_id", "thread_ts")
        if params.get("status") is None:
            raise invalid("invalid_arguments", ["missing required field: status"], with_errors=False)
        loading = _strings(params, "loading_messages", limit=LOADING_MESSAGES)
        channel, thread_ts = self._thread(params)
        self.state.set_status(channel, thread_ts, str(params["status"]), loading_messages=loading)
        return {"ok": True}

    async def set_suggested_prompts(self, params: JSON) -> JSON:
        require(params, "channel_id", "prompts")
        prompts = _prompts(params)
        channel = self.api.channel(params, "channel_id")
        if params.get("thread_ts"):
            channel, thread_ts = self._thread(params)
        else:
            thread_ts = self._latest_thread(channel)
        title = params.get("title")
        record = {
            "channel_id": channel,
            "thread_ts": thread_ts,
            "title": None if title is None else str(title),
            "prompts": prompts,
        }
        self.state.suggested_prompts.append(record)
        self.state.changed({"type": "assistant_prompts", **copy.deepcopy(record)})
        return {"ok": True}

    async def set_title(self, params: JSON) -> JSON:
        require(params, "channel_id", "thread_ts", "title")
        channel, thread_ts = self._thread(params)
        record = {"channel_id": channel, "thread_ts": thread_ts, "title": str(params["title"])}
        self.state.titles.append(record)
        root = self.state.message(channel, thread_ts)
        if root is not None and root.get("subtype") == PANE_SUBTYPE:
            root["text"] = record["title"]
            root.setdefault(PANE_SUBTYPE, {"title_blocks": [], "artifacts": []})["title"] = record["title"]
            self.state.changed({"type": "message_changed", "channel": channel, "message": copy.deepcopy(root)})
        self.state.changed({"type": "assistant_title", **record})
        return {"ok": True}

    def _thread(self, params: JSON) -> tuple[str, str]:
        """``(channel, thread root ts)`` of ``channel_id`` / ``thread_ts`` (a reply's ts names its thread)."""
        channel = self.api.channel(params, "channel_id")
        message = self.state.message(channel, str(params["thread_ts"]))
        if message is None:
            raise ApiError("invalid_thread_ts")
        return channel, str(message.get("thread_ts", message["ts"]))

    def _latest_thread(self, channel: str) -> str:
        """The thread of the channel's latest message (setSuggestedPrompts without ``thread_ts``)."""
        messages = list(self.state.conversations[channel].messages.values())
        if not messages:
            raise ApiError("message_not_found")
        return str(messages[-1].get("thread_ts", messages[-1]["ts"]))


def _strings(params: JSON, key: str, *, limit: int) -> list[str]:
    """An optional array of at most ``limit`` strings (a JSON string in form bodies)."""
    value = json_arg(params, key, error="invalid_arguments")
    if value is None:
        return []
    if not isinstance(value, list):
        raise invalid("invalid_arguments", [f"must be an array [json-pointer:/{key}]"], with_errors=False)
    if len(value) > limit:
        problem = f"no more than {limit} items allowed [json-pointer:/{key}]"
        raise invalid("invalid_arguments", [problem], with_errors=False)
    wrong = [f"must be a string [json-pointer:/{key}/{i}]" for i, v in enumerate(value) if not isinstance(v, str)]
    if wrong:
        raise invalid("invalid_arguments", wrong, with_errors=False)
    return list(value)


def _prompts(params: JSON) -> list[JSON]:
    """``prompts``: 1 to 4 ``{"title", "message"}`` objects with both non-empty strings."""
    value: Any = json_arg(params, "prompts", error="invalid_arguments")
    if not isinstance(value, list):
        raise invalid("invalid_arguments", ["must be an array [json-pointer:/prompts]"], with_errors=False)
    if not value:
        raise invalid("invalid_arguments", ["must provide at least 1 item [json-pointer:/prompts]"], with_errors=False)
    if len(value) > PROMPTS:
        problem = f"no more than {PROMPTS} items allowed [json-pointer:/prompts]"
        raise invalid("invalid_arguments", [problem], with_errors=False)
    problems = []
    for i, prompt in enumerate(value):
        if not isinstance(prompt, dict):
            problems.append(f"must be an object [json-pointer:/prompts/{i}]")
            continue
        for field in ("title", "message"):
            if not isinstance(prompt.get(field), str) or not prompt[field]:
                problems.append(f"missing required field: {field} [json-pointer:/prompts/{i}]")
    if problems:
        raise invalid("invalid_arguments", problems, with_errors=False)
    return [{"title": p["title"], "message": p["message"]} for p in value]
