"""The workspace's people and groups: users.info (user_not_found), usergroups.list (``include_users`` /
``include_count`` / ``include_disabled`` as Slack's booleans: true/false/1/0, anything else invalid_arguments),
usergroups.users.list (no_such_subteam: Slack's code for an unknown user group; ``include_disabled`` is accepted,
there are no disabled groups).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import ClassVar

from bot.fakeslack.state import JSON, TEAM_ID
from bot.fakeslack.webapi.args import ApiError, invalid, require
from bot.fakeslack.webapi.core import Family


class People(Family):
    """Slack's ``users.info`` and ``usergroups.*`` methods."""

    METHODS: ClassVar[Mapping[str, str]] = {
        "users.info": "user_info",
        "usergroups.list": "usergroups",
        "usergroups.users.list": "usergroup_users",
    }

    async def user_info(self, params: JSON) -> JSON:
        require(params, "user")
        user = self.state.directory.users.get(str(params["user"]))
        if user is None:
            raise ApiError("user_not_found")
        return {"ok": True, "user": copy.deepcopy(user)}

    async def usergroups(self, params: JSON) -> JSON:
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

    async def usergroup_users(self, params: JSON) -> JSON:
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
