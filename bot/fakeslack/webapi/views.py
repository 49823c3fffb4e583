"""Slack's ``views.*`` methods (docs.slack.dev reference/methods/<name>): views.open, views.push, views.update
(invalid_trigger_id, exchanged_trigger_id, expired_trigger_id, not_found, hash_conflict, push_limit_reached,
invalid_arguments for a bad view) and views.publish (the App Home tab); :func:`replace_view`, which a view
submission's ``response_action: update`` uses too (:mod:`bot.fakeslack.interactions`).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, ClassVar

from bot.fakeslack.inputs import carried_state
from bot.fakeslack.state import JSON, VIEW_STACK_LIMIT, SlackState, make_view
from bot.fakeslack.webapi.args import ApiError, invalid, require
from bot.fakeslack.webapi.core import Family


class Views(Family):
    """Slack's ``views.*`` methods."""

    METHODS: ClassVar[Mapping[str, str]] = {
        "views.open": "open",
        "views.push": "push",
        "views.update": "update",
        "views.publish": "publish",
    }

    async def open(self, params: JSON) -> JSON:
        view = self.api.view(params)
        user = self.api.trigger_user(params)
        stored = make_view(view, user=user)
        self.state.views[stored.id] = stored
        self.state.view_stacks[user] = [stored.id]
        self.state.changed({"type": "view_opened", "user": user, "view": copy.deepcopy(stored.data)})
        return {"ok": True, "view": copy.deepcopy(stored.data)}

    async def push(self, params: JSON) -> JSON:
        view = self.api.view(params)
        user = self.api.trigger_user(params)
        stack = self.state.user_stack(user)
        if len(stack) >= VIEW_STACK_LIMIT:
            raise ApiError("push_limit_reached")
        root = self.state.views[stack[0]].id if stack else None
        stored = make_view(view, user=user, root_view_id=root, previous_view_id=stack[-1] if stack else None)
        self.state.views[stored.id] = stored
        stack.append(stored.id)
        self.state.changed({"type": "view_pushed", "user": user, "view": copy.deepcopy(stored.data)})
        return {"ok": True, "view": copy.deepcopy(stored.data)}

    async def update(self, params: JSON) -> JSON:
        view = self.api.view(params)
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
        stored = replace_view(self.state, current.id, view)
        return {"ok": True, "view": copy.deepcopy(stored.data)}

    async def publish(self, params: JSON) -> JSON:
        """``views.publish``: the App Home tab of ``user_id`` (a ``home`` view, <= 100 blocks, validated as Slack
        does); errors ``invalid_arguments``, ``user_not_found``."""
        require(params, "user_id")
        user = str(params["user_id"])
        if user not in self.state.directory.users:
            raise ApiError("user_not_found")
        view = self.api.view(params)
        if view.get("type") != "home":
            raise invalid("invalid_arguments", ["must be a home view [json-pointer:/view/type]"], with_errors=False)
        published = {**copy.deepcopy(view), "id": f"V_HOME_{user}", "type": "home"}
        self.state.home_views[user] = published
        # what the person ticked and chose stays where the new view keeps the element's ids (inputs.carried_state)
        values = carried_state(self.state.home_values.get(user) or {}, published.get("blocks") or [])
        self.state.home_values[user] = values
        event = {
            "type": "home_published",
            "user": user,
            "view": copy.deepcopy(published),
            "values": copy.deepcopy(values),
        }
        self.state.changed(event)
        return {"ok": True, "view": copy.deepcopy(published)}


def replace_view(state: SlackState, view_id: str, view: JSON) -> Any:
    """Swap the content of open view ``view_id`` of ``state`` (same id/root/previous, new hash and state); the
    stored view (``state.views[view_id]``)."""
    current = state.views[view_id]
    stored = make_view(
        view,
        user=current.user,
        view_id=current.id,
        root_view_id=current.data["root_view_id"],
        previous_view_id=current.data["previous_view_id"],
    )
    state.views[view_id] = stored
    state.changed({"type": "view_updated", "user": stored.user, "view": copy.deepcopy(stored.data)})
    return stored
