"""The App Home tab in the fake Slack: a person opens it (``app_home_opened``), reads what the app published there
(``views.publish``), and acts on its elements as Slack's clients do: clicks its buttons, ticks its checkboxes and
chooses in its menus, each a ``block_actions`` from a ``view`` container carrying the view's state
(``view.state.values``). docs.slack.dev reference/events/app_home_opened,
reference/interaction-payloads/block_actions-payload.

- ``open_home(ws, user)``, ``home_view(ws, user)``: open the tab; the view published for ``user``.
- ``home_values(ws, user)``: the state of ``user``'s Home view (``{block_id: {action_id: entry}}``), kept by the
  fake per person in ``ws.state.home_values`` as a message's is per person (``SlackState.interactions``): what
  they ticked and chose there so far.
- ``tick_home(ws, user, label, *, within="")``: tick (or untick) the checkbox ``label``;
  ``choose_home(ws, user, labels, *, within="")``: choose in a static / multi-static select, radio group or
  overflow menu; ``click_home(ws, user, label, *, within="", view_of=None, values=None)``: click a button. Each
  sends one ``block_actions`` with the view's state after the action, as Slack does.
- A new ``views.publish`` of a person's Home keeps what they ticked and chose only in the elements that keep their
  ids: :func:`bot.fakeslack.inputs.carried_state` says the rule.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING

from bot.fakeslack.elements import initial_state, iter_elements
from bot.fakeslack.inputs import choose, text_of, tick
from bot.fakeslack.sender import VERIFICATION_TOKEN, Ack, user_ref
from bot.fakeslack.state import APP_ID, JSON, TEAM_DOMAIN, TEAM_ID, PlaygroundError

if TYPE_CHECKING:
    from bot.fakeslack.workspace import Workspace

Values = dict[str, dict[str, JSON]]


async def open_home(ws: Workspace, user: str) -> Ack:
    """``user`` opens the app's Home tab: the app gets ``app_home_opened`` (tab ``home``, the view last published
    for them, if any, with its state)."""
    event: JSON = {"type": "app_home_opened", "user": user, "channel": f"D_{user.removeprefix('U_')}", "tab": "home"}
    published = ws.state.home_views.get(user)
    if published is not None:
        event["view"] = {**copy.deepcopy(published), "state": {"values": copy.deepcopy(_values(ws, user))}}
    return await ws.sender.send_event(event)


def home_view(ws: Workspace, user: str) -> JSON | None:
    """The Home view the app published for ``user`` (None before any)."""
    view = ws.state.home_views.get(user)
    return copy.deepcopy(view) if view is not None else None


def home_values(ws: Workspace, user: str) -> Values:
    """What ``user`` has ticked and chosen on their Home so far (a copy; ``{}`` before anything is published)."""
    return copy.deepcopy(_values(ws, user)) if user in ws.state.home_views else {}


async def tick_home(ws: Workspace, user: str, label: str, *, within: str = "") -> Ack:
    """``user`` ticks (or unticks) the checkbox ``label`` on their Home tab (in the first checkboxes offering it, or
    the first in a block whose id contains ``within``): one ``block_actions`` with the group's new selection, the
    view's state holding it."""
    view = _view(ws, user)
    action = tick(view.get("blocks", []), label, _values(ws, user), within=within)
    if action is None:
        raise PlaygroundError(f"no checkbox {label!r} on {user}'s Home tab")
    return await _send(ws, user, view, action, _values(ws, user))


async def choose_home(ws: Workspace, user: str, labels: str | list[str], *, within: str = "") -> Ack:
    """``user`` chooses ``labels`` on their Home tab in the static_select / multi_static_select / radio group /
    overflow menu that offers them (a single-choice element takes exactly one label; the first such element, or the
    first in a block whose id contains ``within``): one ``block_actions`` with ``selected_option`` (or
    ``selected_options``), the view's state holding the choice (an overflow menu keeps no state)."""
    view = _view(ws, user)
    action = choose(view.get("blocks", []), labels, _values(ws, user), within=within)
    if action is None:
        wanted = [labels] if isinstance(labels, str) else list(labels)
        raise PlaygroundError(f"no menu offering {wanted} on {user}'s Home tab")
    return await _send(ws, user, view, action, _values(ws, user))


async def click_home(
    ws: Workspace,
    user: str,
    label: str,
    *,
    within: str = "",
    view_of: str | None = None,
    values: Values | None = None,
) -> Ack:
    """``user`` clicks the button ``label`` on their Home tab (the first one, or the first in a block whose id
    contains ``within``). ``view_of``: on a copy of that person's Home instead (a forged request, which Slack's
    clients never send: for tests that the app decides from its own records, not from what a view showed).
    ``values``: the state of the view's stateful elements to send (``{block_id: {action_id: element state}}``), in
    ``view.state`` as Slack sends a view's; by default the view's state as kept (what was ticked and chosen there
    with :func:`tick_home` / :func:`choose_home`)."""
    owner = view_of or user
    view = _view(ws, owner)
    for block, element in iter_elements(view.get("blocks", [])):
        if element.get("type") == "button" and text_of(element.get("text")) == label:
            if within not in str(block.get("block_id", "")):
                continue
            action: JSON = {
                "type": "button",
                "action_id": element.get("action_id"),
                "block_id": block.get("block_id"),
                "text": element.get("text"),
            }
            if "value" in element:
                action["value"] = element["value"]
            return await _send(ws, user, view, action, values if values is not None else _values(ws, owner))
    raise PlaygroundError(f"no button {label!r} on {owner}'s Home tab")


def _view(ws: Workspace, user: str) -> JSON:
    view = ws.state.home_views.get(user)
    if view is None:
        raise PlaygroundError(f"nothing published on {user}'s Home tab")
    return view


def _values(ws: Workspace, user: str) -> Values:
    """The kept state of ``user``'s Home view (made from the view's initial values when none is kept yet: a view
    restored from a saved workspace)."""
    if user not in ws.state.home_values:
        ws.state.home_values[user] = initial_state(_view(ws, user).get("blocks", []))
    return ws.state.home_values[user]


async def _send(ws: Workspace, user: str, view: JSON, action: JSON, values: Values) -> Ack:
    action["action_ts"] = f"{ws.clock():.6f}"
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
        "view": {**copy.deepcopy(view), "state": {"values": copy.deepcopy(values)}},
        "state": {"values": {}},
        "actions": [action],
    }
    return await ws.sender.send_interaction(payload)
