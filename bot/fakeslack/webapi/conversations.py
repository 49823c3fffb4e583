"""Slack's ``conversations.*`` methods the bot reads with: conversations.replies, conversations.history
(thread_not_found; ``oldest`` / ``latest`` / ``inclusive``; ``metadata`` only with ``include_all_metadata``),
conversations.info (channel_not_found; a user id is not a channel here), conversations.members (channel_not_found;
``limit`` 1..1000 else invalid_limit; ``cursor`` from ``response_metadata.next_cursor``, anything else
invalid_cursor; a DM answers its two people).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import ClassVar

from bot.fakeslack.state import BOT_USER_ID, JSON, dm_channel_id
from bot.fakeslack.webapi.args import ApiError, require
from bot.fakeslack.webapi.core import Family


def _in_range(ts: str, params: JSON) -> bool:
    """Slack's ``oldest`` / ``latest`` / ``inclusive`` of conversations.history and .replies: messages after
    ``oldest`` and before ``latest`` (each end included with ``inclusive``); no bound when absent. Raises
    ``ApiError`` ``invalid_ts_oldest`` / ``invalid_ts_latest`` for a bound that is not a timestamp."""
    inclusive = str(params.get("inclusive", "")).lower() in ("true", "1")
    when = float(ts)
    for bound, after in (("oldest", True), ("latest", False)):
        if params.get(bound) in (None, ""):
            continue
        try:
            edge = float(str(params[bound]))
        except ValueError:
            raise ApiError(f"invalid_ts_{bound}") from None
        if when == edge and not inclusive:
            return False
        if (when < edge) if after else (when > edge):
            return False
    return True


def _listed(messages: list[JSON], params: JSON) -> list[JSON]:
    """Messages as history / replies list them: ``metadata`` only with ``include_all_metadata``."""
    listed = copy.deepcopy(messages)
    if str(params.get("include_all_metadata", "")).lower() not in ("true", "1"):
        for message in listed:
            message.pop("metadata", None)
    return listed


class Conversations(Family):
    """Slack's ``conversations.*`` methods."""

    METHODS: ClassVar[Mapping[str, str]] = {
        "conversations.replies": "replies",
        "conversations.history": "history",
        "conversations.info": "info",
        "conversations.members": "members",
    }

    async def replies(self, params: JSON) -> JSON:
        channel = self.api.channel(params)
        require(params, "ts")
        conversation = self.state.conversations[channel]
        ts = str(params["ts"])
        if ts not in conversation.messages:
            raise ApiError("thread_not_found")
        target = conversation.messages[ts]
        root = str(target.get("thread_ts", ts))
        messages = [m for m in conversation.replies(root) or [target] if _in_range(str(m["ts"]), params)]
        return {
            "ok": True,
            "messages": _listed(messages, params),
            "has_more": False,
            "response_metadata": {"next_cursor": ""},
        }

    async def history(self, params: JSON) -> JSON:
        channel = self.api.channel(params)
        conversation = self.state.conversations[channel]
        top = [
            m
            for m in conversation.messages.values()
            if m.get("thread_ts", m["ts"]) == m["ts"] and _in_range(str(m["ts"]), params)
        ]
        limit = int(params.get("limit") or 100)
        return {
            "ok": True,
            "messages": _listed(list(reversed(top))[:limit], params),
            "has_more": False,
            "pin_count": 0,
            "response_metadata": {"next_cursor": ""},
        }

    async def info(self, params: JSON) -> JSON:
        """Slack: ``channel`` (required; a conversation id: unlike posting, a user id is ``channel_not_found``),
        ``include_locale`` / ``include_num_members`` accepted; answers ``{"ok", "channel": {id, name?, is_channel,
        is_im, is_private, ...}}`` (docs.slack.dev reference/methods/conversations.info)."""
        require(params, "channel")
        channel = self.state.directory.channels.get(str(params["channel"]))
        if channel is None:
            raise ApiError("channel_not_found")
        found = copy.deepcopy(channel)
        if params.get("include_num_members") in (True, "true", "1", 1):
            found["num_members"] = len([u for u in self.state.directory.users.values() if not u.get("is_bot")])
        return {"ok": True, "channel": found}

    async def members(self, params: JSON) -> JSON:
        require(params, "channel")
        channel = str(params["channel"])
        if channel not in self.state.conversations:
            raise ApiError("channel_not_found")
        try:
            limit = int(params.get("limit") or 100)
        except (TypeError, ValueError):
            raise ApiError("invalid_limit") from None
        if not 1 <= limit <= 1000:
            raise ApiError("invalid_limit")
        members = self.state.directory.channel_members.get(channel)
        if members is None:
            dm_of = [u for u in self.state.directory.users if dm_channel_id(u) == channel]
            members = [BOT_USER_ID, *dm_of]
        cursor = str(params.get("cursor") or "")
        start = 0
        if cursor:
            if not cursor.startswith("members:") or not cursor[8:].isdigit() or int(cursor[8:]) > len(members):
                raise ApiError("invalid_cursor")
            start = int(cursor[8:])
        page = members[start : start + limit]
        following = f"members:{start + limit}" if start + limit < len(members) else ""
        return {"ok": True, "members": page, "response_metadata": {"next_cursor": following}}
