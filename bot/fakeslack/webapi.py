"""The Slack Web API methods the fake serves, as pure state transitions on a ``SlackState``.

``WebApi(state).call(method, params) -> dict`` returns Slack's JSON body (``{"ok": true, ...}``) or raises
``ApiError`` carrying Slack's ``error`` code (and extra fields such as ``errors`` /
``response_metadata``). Transport (HTTP, tokens, records) lives in ``fake_slack``.

Methods (docs.slack.dev reference/methods/<name>; error codes are Slack's):
auth.test; chat.postMessage, chat.update, chat.postEphemeral, chat.delete (channel_not_found,
message_not_found, cant_update_message, cant_delete_message, no_text, invalid_blocks, invalid_blocks_format,
msg_blocks_too_long); views.open, views.push, views.update (invalid_trigger_id, exchanged_trigger_id,
expired_trigger_id, not_found, hash_conflict, push_limit_reached, invalid_arguments for a bad view);
reactions.add / reactions.remove (already_reacted, no_reaction, invalid_name); conversations.replies,
conversations.history (thread_not_found); conversations.info (channel_not_found; a user id is not a channel
here); users.info (user_not_found); usergroups.users.list (no_such_subteam:
Slack's code for an unknown user group; ``include_disabled`` is accepted, there are no disabled groups);
usergroups.list (``include_users`` / ``include_count`` / ``include_disabled`` as Slack's booleans: true/false/1/0,
anything else invalid_arguments); conversations.members (channel_not_found; ``limit`` 1..1000 else invalid_limit;
``cursor`` from ``response_metadata.next_cursor``, anything else invalid_cursor; a DM answers its two people).
chat.postMessage / chat.update keep ``metadata`` (``{event_type, event_payload}``; anything else is ignored),
returned by conversations.replies / history only with ``include_all_metadata``; a bot post in a thread clears its
assistant status; a text-only chat.postMessage is stored with the ``rich_text`` block Slack derives from its text.
In sibling modules, which build on this one and register on its method table (``fake_slack`` has them do it):
chat.startStream / appendStream / stopStream (``streams``); assistant.threads.setStatus / setSuggestedPrompts /
setTitle (``assistant``); agents.sessions.setStatus / rename (``agent_sessions``).
``apps.connections.open`` (Socket Mode, app-level token only: ``APP_TOKEN_METHODS``) needs the server's
address, so ``fake_slack`` serves it (see ``socket_mode``).
A missing required argument answers ``invalid_arguments`` with ``[ERROR] missing required field: X``.
"""

from __future__ import annotations

import copy
from collections.abc import Awaitable, Callable
from typing import Any

from bot.fakeslack import blockkit
from bot.fakeslack.api_args import ApiError, invalid, json_arg, require
from bot.fakeslack.elements import fill_ids, text_blocks
from bot.fakeslack.state import (
    APP_ID,
    BOT_ID,
    BOT_NAME,
    BOT_USER_ID,
    JSON,
    TEAM_DOMAIN,
    TEAM_ID,
    VIEW_STACK_LIMIT,
    Ephemeral,
    SlackState,
    dm_channel_id,
    make_view,
)


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


Handler = Callable[[JSON], Awaitable[JSON]]
APP_TOKEN_METHODS = frozenset({"apps.connections.open"})  # called with the app-level token (xapp-...)


class WebApi:
    """Slack Web API methods over a ``SlackState``: ``methods`` maps a method name to its handler. The sibling
    method modules (``streams``, ``assistant``) add theirs to it, as ``fake_slack`` does for
    ``apps.connections.open``; ``fake_slack.FakeSlack`` registers them all."""

    def __init__(self, state: SlackState) -> None:
        self.state = state
        self.methods: dict[str, Handler] = {
            "auth.test": self.auth_test,
            "chat.postMessage": self.chat_post_message,
            "chat.update": self.chat_update,
            "chat.postEphemeral": self.chat_post_ephemeral,
            "chat.delete": self.chat_delete,
            "views.open": self.views_open,
            "views.push": self.views_push,
            "views.update": self.views_update,
            "views.publish": self.views_publish,
            "chat.getPermalink": self.chat_get_permalink,
            "reactions.add": self.reactions_add,
            "reactions.remove": self.reactions_remove,
            "conversations.replies": self.conversations_replies,
            "conversations.history": self.conversations_history,
            "conversations.info": self.conversations_info,
            "users.info": self.users_info,
            "usergroups.users.list": self.usergroups_users_list,
            "usergroups.list": self.usergroups_list,
            "conversations.members": self.conversations_members,
        }

    # -- helpers ----------------------------------------------------------------------------------

    def _channel(self, params: JSON, key: str = "channel") -> str:
        require(params, key)
        channel = self.state.resolve_channel(str(params[key]))
        if channel is None:
            raise ApiError("channel_not_found")
        return channel

    def _message(self, channel: str, ts: Any) -> JSON:
        message = self.state.message(channel, str(ts))
        if message is None:
            raise ApiError("message_not_found")
        return message

    def message_content(self, params: JSON, *, required: bool = True) -> tuple[str | None, list[JSON] | None]:
        """Validate ``text``/``blocks`` as Slack does; returns ``(text, blocks)`` (text truncated to 40k)."""
        blocks = json_arg(params, "blocks", error="invalid_blocks_format")
        if blocks is not None and not isinstance(blocks, list):
            raise ApiError("invalid_blocks_format")
        text = params.get("text")
        if required and not text and not blocks and not params.get("attachments"):
            raise ApiError("no_text")
        if blocks is not None:
            errors = blockkit.validate_message_blocks(blocks)
            if errors:
                raise invalid("invalid_blocks", errors, with_errors=True)
            if blockkit.blocks_text_length(blocks) > blockkit.MESSAGE_BLOCKS_TEXT_LIMIT:
                raise ApiError("msg_blocks_too_long")
        if text is not None:
            text = str(text)[: blockkit.MESSAGE_TEXT_LIMIT]
        return text, blocks

    def bot_message(self, *, text: str | None, blocks: list[JSON] | None, thread_ts: str | None) -> JSON:
        """A message posted by the bot, shaped as Slack returns and delivers it."""
        message: JSON = {
            "user": BOT_USER_ID,
            "type": "message",
            "ts": self.state.mint_ts(),
            "bot_id": BOT_ID,
            "app_id": APP_ID,
            "text": text or "",
            "team": TEAM_ID,
            "bot_profile": {
                "id": BOT_ID,
                "app_id": APP_ID,
                "name": BOT_NAME,
                "deleted": False,
                "team_id": TEAM_ID,
                "icons": {},
            },
        }
        if blocks is not None:
            message["blocks"] = fill_ids(blocks)
        if thread_ts:
            message["thread_ts"] = thread_ts
        return message

    def _view(self, params: JSON) -> JSON:
        require(params, "view")
        view = json_arg(params, "view", error="invalid_arguments")
        errors = blockkit.validate_view(view)
        if errors:
            raise invalid("invalid_arguments", errors, with_errors=False)
        assert isinstance(view, dict)
        return view

    def _trigger_user(self, params: JSON) -> str:
        require(params, "trigger_id")
        trigger, error = self.state.redeem_trigger(str(params["trigger_id"]))
        if trigger is None:
            raise ApiError(error or "invalid_trigger_id")
        return trigger.user

    # -- methods ----------------------------------------------------------------------------------

    async def auth_test(self, params: JSON) -> JSON:
        return {
            "ok": True,
            "url": f"https://{TEAM_DOMAIN}.slack.com/",
            "team": "Playground",
            "user": BOT_NAME,
            "team_id": TEAM_ID,
            "user_id": BOT_USER_ID,
            "bot_id": BOT_ID,
            "is_enterprise_install": False,
        }

    async def chat_post_message(self, params: JSON) -> JSON:
        channel = self._channel(params)
        text, blocks = self.message_content(params)
        thread_ts = params.get("thread_ts") or None
        if thread_ts is not None:
            parent = self.state.message(channel, str(thread_ts))
            # A reply to a reply joins the parent's thread, as in Slack.
            thread_ts = str(parent.get("thread_ts", thread_ts)) if parent else str(thread_ts)
        metadata = _metadata(params)
        if blocks is None and text and not params.get("attachments"):
            blocks = text_blocks(text)  # Slack stores a text-only post with its rich_text rendition
        message = self.bot_message(text=text, blocks=blocks, thread_ts=thread_ts)
        if metadata is not None:
            message["metadata"] = metadata
        self.state.conversations[channel].add(message)
        self.state.changed({"type": "message", "channel": channel, "message": copy.deepcopy(message)})
        self.state.clear_status(channel, thread_ts)
        return {"ok": True, "channel": channel, "ts": message["ts"], "message": copy.deepcopy(message)}

    async def chat_update(self, params: JSON) -> JSON:
        channel = self._channel(params)
        require(params, "ts")
        message = self._message(channel, params["ts"])
        if message.get("user") != BOT_USER_ID:
            raise ApiError("cant_update_message")
        text, blocks = self.message_content(params, required=False)
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

    async def chat_post_ephemeral(self, params: JSON) -> JSON:
        channel = self._channel(params)
        require(params, "user")
        user = str(params["user"])
        if user not in self.state.directory.users:
            raise ApiError("user_not_in_channel")
        text, blocks = self.message_content(params)
        message = self.bot_message(text=text, blocks=blocks, thread_ts=params.get("thread_ts") or None)
        self.state.conversations[channel].ephemerals.append(Ephemeral(channel, user, message))
        self.state.changed({"type": "ephemeral", "channel": channel, "user": user, "message": copy.deepcopy(message)})
        return {"ok": True, "message_ts": message["ts"]}

    async def chat_delete(self, params: JSON) -> JSON:
        channel = self._channel(params)
        require(params, "ts")
        message = self._message(channel, params["ts"])
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

    async def views_open(self, params: JSON) -> JSON:
        view = self._view(params)
        user = self._trigger_user(params)
        stored = make_view(view, user=user)
        self.state.views[stored.id] = stored
        self.state.view_stacks[user] = [stored.id]
        self.state.changed({"type": "view_opened", "user": user, "view": copy.deepcopy(stored.data)})
        return {"ok": True, "view": copy.deepcopy(stored.data)}

    async def views_push(self, params: JSON) -> JSON:
        view = self._view(params)
        user = self._trigger_user(params)
        stack = self.state.user_stack(user)
        if len(stack) >= VIEW_STACK_LIMIT:
            raise ApiError("push_limit_reached")
        root = self.state.views[stack[0]].id if stack else None
        stored = make_view(view, user=user, root_view_id=root, previous_view_id=stack[-1] if stack else None)
        self.state.views[stored.id] = stored
        stack.append(stored.id)
        self.state.changed({"type": "view_pushed", "user": user, "view": copy.deepcopy(stored.data)})
        return {"ok": True, "view": copy.deepcopy(stored.data)}

    async def views_update(self, params: JSON) -> JSON:
        view = self._view(params)
        current = None
        if params.get("view_id"):
            current = self.state.views.get(str(params["view_id"]))
        elif params.get("external_id"):
            current = next(
                (v for v in self.state.views.values() if v.data.get("external_id") == params["external_id"]), None
            )
        else:
            raise invalid("invalid_arguments", ["missing required field: view_id"], with_errors=False)
        if current is None:
            raise ApiError("not_found")
        if params.get("hash") and params["hash"] != current.data["hash"]:
            raise ApiError("hash_conflict")
        stored = self.replace_view(current.id, view)
        return {"ok": True, "view": copy.deepcopy(stored.data)}

    async def views_publish(self, params: JSON) -> JSON:
        """``views.publish``: the App Home tab of ``user_id`` (a ``home`` view, <= 100 blocks, validated as Slack
        does); errors ``invalid_arguments``, ``user_not_found``."""
        require(params, "user_id")
        user = str(params["user_id"])
        if user not in self.state.directory.users:
            raise ApiError("user_not_found")
        view = self._view(params)
        if view.get("type") != "home":
            raise invalid("invalid_arguments", ["must be a home view [json-pointer:/view/type]"], with_errors=False)
        published = {**copy.deepcopy(view), "id": f"V_HOME_{user}", "type": "home"}
        self.state.home_views[user] = published
        self.state.changed({"type": "home_published", "user": user, "view": copy.deepcopy(published)})
        return {"ok": True, "view": copy.deepcopy(published)}

    async def chat_get_permalink(self, params: JSON) -> JSON:
        """``chat.getPermalink``: a message's link (errors ``channel_not_found``, ``message_not_found``)."""
        channel = self._channel(params)
        require(params, "message_ts")
        message = self._message(channel, params["message_ts"])
        link = f"https://{TEAM_DOMAIN}.slack.com/archives/{channel}/p{str(message['ts']).replace('.', '')}"
        if message.get("thread_ts") and message["thread_ts"] != message["ts"]:
            link += f"?thread_ts={message['thread_ts']}&cid={channel}"
        return {"ok": True, "channel": channel, "permalink": link}

    def replace_view(self, view_id: str, view: JSON) -> Any:
        """Swap the content of open view ``view_id`` (same id/root/previous, new hash and state)."""
        current = self.state.views[view_id]
        stored = make_view(
            view,
            user=current.user,
            view_id=current.id,
            root_view_id=current.data["root_view_id"],
            previous_view_id=current.data["previous_view_id"],
        )
        self.state.views[view_id] = stored
        self.state.changed({"type": "view_updated", "user": stored.user, "view": copy.deepcopy(stored.data)})
        return stored

    async def reactions_add(self, params: JSON) -> JSON:
        return self._react(params, add=True)

    async def reactions_remove(self, params: JSON) -> JSON:
        return self._react(params, add=False)

    def _react(self, params: JSON, *, add: bool) -> JSON:
        channel = self._channel(params)
        require(params, "timestamp")
        if not params.get("name"):
            raise ApiError("invalid_name")
        message = self._message(channel, params["timestamp"])
        name = str(params["name"]).strip(":")
        reactions: list[JSON] = message.setdefault("reactions", [])
        entry = next((r for r in reactions if r["name"] == name), None)
        if add:
            if entry and BOT_USER_ID in entry["users"]:
                raise ApiError("already_reacted")
            if entry is None:
                entry = {"name": name, "users": [], "count": 0}
                reactions.append(entry)
            entry["users"].append(BOT_USER_ID)
        else:
            if entry is None or BOT_USER_ID not in entry["users"]:
                raise ApiError("no_reaction")
            entry["users"].remove(BOT_USER_ID)
            if not entry["users"]:
                reactions.remove(entry)
        if entry is not None:
            entry["count"] = len(entry["users"])
        if not reactions:
            del message["reactions"]
        kind = "reaction_added" if add else "reaction_removed"
        self.state.changed({"type": kind, "channel": channel, "ts": message["ts"], "name": name})
        return {"ok": True}

    async def conversations_replies(self, params: JSON) -> JSON:
        channel = self._channel(params)
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

    async def conversations_history(self, params: JSON) -> JSON:
        channel = self._channel(params)
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

    async def conversations_info(self, params: JSON) -> JSON:
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

    async def users_info(self, params: JSON) -> JSON:
        require(params, "user")
        user = self.state.directory.users.get(str(params["user"]))
        if user is None:
            raise ApiError("user_not_found")
        return {"ok": True, "user": copy.deepcopy(user)}

    async def usergroups_list(self, params: JSON) -> JSON:
        flags = {name: _flag(params, name) for name in ("include_users", "include_count", "include_disabled")}
        groups = []
        for group_id, members in self.state.directory.usergroups.items():
            handle = self.state.directory.usergroup_handles.get(group_id, group_id.lower())
            group: JSON = {
                "id": group_id,
                "team_id": TEAM_ID,
                "is_usergroup": True,
                "name": handle.title(),
                "handle": handle,
                "date_delete": 0,
                "auto_type": None,
            }
            if flags["include_users"]:
                group["users"] = list(members)
            if flags["include_count"]:
                group["user_count"] = len(members)
            groups.append(group)
        return {"ok": True, "usergroups": groups}

    async def conversations_members(self, params: JSON) -> JSON:
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

    async def usergroups_users_list(self, params: JSON) -> JSON:
        require(params, "usergroup")
        members = self.state.directory.usergroups.get(str(params["usergroup"]))
        if members is None:
            raise ApiError("no_such_subteam")
        return {"ok": True, "users": list(members)}


def _flag(params: JSON, name: str) -> bool:
    """A boolean argument as Slack reads it (``true`` / ``false`` / ``1`` / ``0``; absent: false)."""
    value = params.get(name)
    if value in (None, "", False, 0, "0", "false"):
        return False
    if value in (True, 1, "1", "true"):
        return True
    raise invalid("invalid_arguments", [f"invalid value for {name}: expected a boolean"], with_errors=False)
