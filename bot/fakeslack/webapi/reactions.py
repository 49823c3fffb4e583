"""Slack's ``reactions.add`` / ``reactions.remove`` (already_reacted, no_reaction, invalid_name), the bot's own
reactions on a message."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from bot.fakeslack.state import BOT_USER_ID, JSON
from bot.fakeslack.webapi.args import ApiError, require
from bot.fakeslack.webapi.core import Family


class Reactions(Family):
    """Slack's ``reactions.*`` methods."""

    METHODS: ClassVar[Mapping[str, str]] = {
        "reactions.add": "add",
        "reactions.remove": "remove",
    }

    async def add(self, params: JSON) -> JSON:
        return self._react(params, add=True)

    async def remove(self, params: JSON) -> JSON:
        return self._react(params, add=False)

    def _react(self, params: JSON, *, add: bool) -> JSON:
        channel = self.api.channel(params)
        require(params, "timestamp")
        if not params.get("name"):
            raise ApiError("invalid_name")
        message = self.api.message(channel, params["timestamp"])
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
