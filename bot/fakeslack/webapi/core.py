"""The fake's Web API: :class:`WebApi` (``methods``: a method name -> its handler, over a ``SlackState``), what the
method families share (the channel and message a call names, a message's text and blocks as Slack validates them, a
bot message as Slack shapes it, a view, a trigger_id redeemed) and ``auth.test``; :class:`Family`, one of Slack's
method families (``chat.*``, ``views.*``, ...), each in a sibling module that registers its methods on it.

A handler returns Slack's JSON body (``{"ok": true, ...}``) or raises ``ApiError`` carrying Slack's ``error`` code
(and extra fields such as ``errors`` / ``response_metadata``); transport (HTTP, tokens, records) lives in
``bot.fakeslack.fake_slack``. A missing required argument answers ``invalid_arguments`` with ``[ERROR] missing
required field: X`` (:mod:`bot.fakeslack.webapi.args`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, ClassVar

from bot.fakeslack import blockkit
from bot.fakeslack.elements import fill_ids
from bot.fakeslack.state import APP_ID, BOT_ID, BOT_NAME, BOT_USER_ID, JSON, TEAM_DOMAIN, TEAM_ID, SlackState
from bot.fakeslack.webapi.args import ApiError, invalid, json_arg, require

Handler = Callable[[JSON], Awaitable[JSON]]
APP_TOKEN_METHODS = frozenset({"apps.connections.open"})  # called with the app-level token (xapp-...)


class WebApi:
    """Slack Web API methods over a ``SlackState``: ``methods`` maps a method name to its handler (``auth.test`` here;
    each :class:`Family` adds its own with ``register``, as ``fake_slack`` does for ``apps.connections.open``;
    ``fake_slack.FakeSlack`` registers them all)."""

    def __init__(self, state: SlackState) -> None:
        self.state = state
        self.methods: dict[str, Handler] = {"auth.test": self.auth_test}

    def channel(self, params: JSON, key: str = "channel") -> str:
        """The conversation ``params[key]`` names (a channel id, or a user id for the DM with them). Raises
        ``ApiError``: ``invalid_arguments`` when missing, ``channel_not_found``."""
        require(params, key)
        channel = self.state.resolve_channel(str(params[key]))
        if channel is None:
            raise ApiError("channel_not_found")
        return channel

    def message(self, channel: str, ts: Any) -> JSON:
        """The stored message ``ts`` of ``channel`` (the object itself: changes to it are the message's). Raises
        ``ApiError`` ``message_not_found``."""
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

    def view(self, params: JSON) -> JSON:
        """The ``view`` argument, validated as Slack does (:func:`bot.fakeslack.blockkit.validate_view`). Raises
        ``ApiError`` ``invalid_arguments``."""
        require(params, "view")
        view = json_arg(params, "view", error="invalid_arguments")
        errors = blockkit.validate_view(view)
        if errors:
            raise invalid("invalid_arguments", errors, with_errors=False)
        assert isinstance(view, dict)
        return view

    def trigger_user(self, params: JSON) -> str:
        """Who acted to mint ``params["trigger_id"]``, redeeming it (once, within ``state.TRIGGER_TTL_SECONDS``).
        Raises ``ApiError``: ``invalid_trigger_id``, ``exchanged_trigger_id``, ``expired_trigger_id``."""
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


class Family:
    """One of Slack's method families (``chat.*``, ``views.*``, ``assistant.threads.*``, ...) over ``api``'s state:
    ``METHODS`` maps each Slack method name to the name of its handler here, and :meth:`register` adds them to
    ``api.methods``."""

    METHODS: ClassVar[Mapping[str, str]] = {}

    def __init__(self, api: WebApi) -> None:
        self.api = api
        self.state = api.state

    def register(self) -> None:
        """Add this family's methods to the fake Web API (``api.methods``)."""
        self.api.methods.update({name: getattr(self, handler) for name, handler in self.METHODS.items()})
