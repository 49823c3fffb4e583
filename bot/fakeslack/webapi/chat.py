"""Slack's ``chat.*`` methods (docs.slack.dev reference/methods/<name>; error codes are Slack's): chat.postMessage,
chat.update, chat.postEphemeral, chat.delete (channel_not_found, message_not_found, cant_update_message,
cant_delete_message, no_text, invalid_blocks, invalid_blocks_format, msg_blocks_too_long), chat.getPermalink.
chat.postMessage / chat.update keep ``metadata`` (``{event_type, event_payload}``; anything else is ignored); a bot
post in a thread clears its assistant status; a text-only chat.postMessage is stored with the ``rich_text`` block
Slack derives from its text. The stream methods (chat.startStream, ...) are :mod:`bot.fakeslack.webapi.streams`.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import ClassVar

from bot.fakeslack.elements import fill_ids, text_blocks
from bot.fakeslack.state import BOT_USER_ID, JSON, TEAM_DOMAIN, Ephemeral
from bot.fakeslack.webapi.args import ApiError, json_arg, require
from bot.fakeslack.webapi.core import Family


def _metadata(params: JSON) -> JSON | None:
    """``metadata`` of chat.postMessage / chat.update: ``{"event_type": str, "event_payload": {...}}``. Anything else
    is ignored, the message still posted (docs.slack.dev messaging/message-metadata: an invalid one "returns an
    invalid_metadata_schema warning and is ignored")."""
    try:
        value = json_arg(params, "metadata", error="invalid_metadata_format")
    except ApiError:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("event_type"), str):
        return None
    payload = value.get("event_payload", {})
    if not isinstance(payload, dict):
        return None
    return {"event_type": value["event_type"], "event_payload": copy.deepcopy(payload)}


class Chat(Family):
    """Slack's ``chat.*`` methods but streams."""

    METHODS: ClassVar[Mapping[str, str]] = {
        "chat.postMessage": "post_message",
        "chat.update": "update",
        "chat.postEphemeral": "post_ephemeral",
        "chat.delete": "delete",
        "chat.getPermalink": "get_permalink",
    }

    async def post_message(self, params: JSON) -> JSON:
        channel = self.api.channel(params)
        text, blocks = self.api.message_content(params)
        thread_ts = params.get("thread_ts") or None
        if thread_ts is not None:
            parent = self.state.message(channel, str(thread_ts))
            # A reply to a reply joins the parent's thread, as in Slack.
            thread_ts = str(parent.get("thread_ts", thread_ts)) if parent else str(thread_ts)
        metadata = _metadata(params)
        if blocks is None and text and not params.get("attachments"):
            blocks = text_blocks(text)  # Slack stores a text-only post with its rich_text rendition
        message = self.api.bot_message(text=text, blocks=blocks, thread_ts=thread_ts)
        if metadata is not None:
            message["metadata"] = metadata
        self.state.conversations[channel].add(message)
        self.state.changed({"type": "message", "channel": channel, "message": copy.deepcopy(message)})
        self.state.clear_status(channel, thread_ts)
        return {"ok": True, "channel": channel, "ts": message["ts"], "message": copy.deepcopy(message)}

    async def update(self, params: JSON) -> JSON:
        channel = self.api.channel(params)
        require(params, "ts")
        message = self.api.message(channel, params["ts"])
        if message.get("user") != BOT_USER_ID:
            raise ApiError("cant_update_message")
        text, blocks = self.api.message_content(params, required=False)
        metadata = _metadata(params)
        if metadata is not None:
            message["metadata"] = metadata
        if text is not None:
            message["text"] = text
        if blocks is not None:
            message["blocks"] = fill_ids(blocks)
        message["edited"] = {"user": BOT_USER_ID, "ts": self.state.mint_ts()}
        self.state.reset_interactions(channel, message["ts"])
        self.state.changed({"type": "message_changed", "channel": channel, "message": copy.deepcopy(message)})
        return {
            "ok": True,
            "channel": channel,
            "ts": message["ts"],
            "text": message["text"],
            "message": copy.deepcopy(message),
        }

    async def post_ephemeral(self, params: JSON) -> JSON:
        channel = self.api.channel(params)
        require(params, "user")
        user = str(params["user"])
        if user not in self.state.directory.users:
            raise ApiError("user_not_in_channel")
        text, blocks = self.api.message_content(params)
        message = self.api.bot_message(text=text, blocks=blocks, thread_ts=params.get("thread_ts") or None)
        self.state.conversations[channel].ephemerals.append(Ephemeral(channel, user, message))
        self.state.changed({"type": "ephemeral", "channel": channel, "user": user, "message": copy.deepcopy(message)})
        return {"ok": True, "message_ts": message["ts"]}

    async def delete(self, params: JSON) -> JSON:
        channel = self.api.channel(params)
        require(params, "ts")
        message = self.api.message(channel, params["ts"])
        if message.get("user") != BOT_USER_ID:
            raise ApiError("cant_delete_message")
        conversation = self.state.conversations[channel]
        del conversation.messages[message["ts"]]
        parent_ts = message.get("thread_ts")
        if parent_ts and parent_ts != message["ts"] and parent_ts in conversation.messages:
            parent = conversation.messages[parent_ts]
            replies = conversation.replies(parent_ts)[1:]
            parent["reply_count"] = len(replies)
            if replies:
                parent["latest_reply"] = replies[-1]["ts"]
        self.state.changed({"type": "message_deleted", "channel": channel, "ts": message["ts"]})
        return {"ok": True, "channel": channel, "ts": message["ts"]}

    async def get_permalink(self, params: JSON) -> JSON:
        """``chat.getPermalink``: a message's link (errors ``channel_not_found``, ``message_not_found``)."""
        channel = self.api.channel(params)
        require(params, "message_ts")
        message = self.api.message(channel, params["message_ts"])
        link = f"https://{TEAM_DOMAIN}.slack.com/archives/{channel}/p{str(message['ts']).replace('.', '')}"
        if message.get("thread_ts") and message["thread_ts"] != message["ts"]:
            link += f"?thread_ts={message['thread_ts']}&cid={channel}"
        return {"ok": True, "channel": channel, "permalink": link}
