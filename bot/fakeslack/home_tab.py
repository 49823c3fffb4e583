"""The App Home tab in the fake Slack: a person opens it (``app_home_opened``), reads what the app published there
(``views.publish``), and clicks its buttons (``block_actions`` from a ``view`` container), as Slack's clients do.
docs.slack.dev reference/events/app_home_opened, reference/interaction-payloads/block_actions-payload."""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

from bot.fakeslack.elements import iter_elements
from bot.fakeslack.sender import VERIFICATION_TOKEN, Ack, user_ref
from bot.fakeslack.state import APP_ID, JSON, TEAM_DOMAIN, TEAM_ID, PlaygroundError

if TYPE_CHECKING:
    from bot.fakeslack.workspace import Workspace


async def open_home(ws: Workspace, user: str) -> Ack:
    """``user`` opens the app's Home tab: the app gets ``app_home_opened`` (tab ``home``, the view last published
    for them, if any)."""
    event: JSON = {"type": "app_home_opened", "user": user, "channel": f"D_{user.removeprefix('U_')}", "tab": "home"}
    published = ws.state.home_views.get(user)
    if published is not None:
        event["view"] = copy.deepcopy(published)
    return await ws.sender.send_event(event)


def home_view(ws: Workspace, user: str) -> JSON | None:
    """The Home view the app published for ``user`` (None before any)."""
    view = ws.state.home_views.get(user)
    return copy.deepcopy(view) if view is not None else None


async def click_home(
    ws: Workspace,
    user: str,
    label: str,
    *,
    within: str = "",
    view_of: str | None = None,
    values: dict[str, dict[str, JSON]] | None = None,
) -> Ack:
    """``user`` clicks the button ``label`` on their Home tab (the first one, or the first in a block whose id
    contains ``within``). ``view_of``: on a copy of that person's Home instead (a forged request, which Slack's
    clients never send: for tests that the app decides from its own records, not from what a view showed).
    ``values``: the state of the view's stateful elements as the person left them (``{block_id: {action_id:
    element state}}``, e.g. checkboxes ticked before Submit), sent as Slack sends a view's: in ``view.state``."""
    owner = view_of or user
    view = ws.state.home_views.get(owner)
    if view is None:
        raise PlaygroundError(f"nothing published on {owner}'s Home tab")
    for block, element in iter_elements(view.get("blocks", [])):
        text = (element.get("text") or {}).get("text") if isinstance(element.get("text"), dict) else None
        if element.get("type") == "button" and text == label and within in str(block.get("block_id", "")):
            action: dict[str, Any] = {
                "type": "button",
                "action_id": element.get("action_id"),
                "block_id": block.get("block_id"),
                "text": element.get("text"),
                "action_ts": f"{ws.clock():.6f}",
            }
            if "value" in element:
                action["value"] = element["value"]
            payload: JSON = {
                "type": "block_actions",
                "user": user_ref(ws.state.directory, user),
                "api_app_id": APP_ID,
                "token": VERIFICATION_TOKEN,
                "container": {"type": "view", "view_id": view["id"]},
                "trigger_id": ws.state.mint_trigger(user),
                "team": {"id": TEAM_ID, "domain": TEAM_DOMAIN},
                "enterprise": None,
                "is_enterprise_install": False,
                "view": {**copy.deepcopy(view), "state": {"values": copy.deepcopy(values or {})}},
                "state": {"values": {}},
                "actions": [action],
            }
            return await ws.sender.send_interaction(payload)
    raise PlaygroundError(f"no button {label!r} on {owner}'s Home tab")
