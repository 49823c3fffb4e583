"""Finding a message's or modal's elements by what a person sees (labels), and filling them as Slack's client does.

- ``text_of(obj)``: a text object's text (None when it has none); ``options_of(element)``: its options, groups
  flattened; ``labels_of(message)``: every button and option label (for error messages).
- ``element_of(block, action_id)``; ``entry_for(element, raw)``: the ``state.values`` entry a test value (text,
  label or labels) makes (docs.slack.dev reference/interaction-payloads/view-interactions-payload#view_submission).
- ``tick(blocks, label, values)``, ``choose(blocks, labels, values)``: the ``block_actions`` action of a person
  ticking a checkbox or choosing in a menu, its entry in ``values`` (the surface's state) changed, wherever the
  blocks are (a message, a Home view).
- ``carried_state(previous, blocks)``: the state a view republished with ``blocks`` (App Home's ``views.publish``)
  keeps of the previous one's: what was ticked or chosen in an element that keeps its ids.
- ``check_submittable(blocks, state)``: refuse (``PlaygroundError``) what Slack's client refuses to submit: an empty
  required input, text outside ``min_length`` / ``max_length``.
"""

from __future__ import annotations

import copy
from typing import Any

from bot.fakeslack import blockkit
from bot.fakeslack.elements import JSON, initial_state, iter_elements
from bot.fakeslack.state import PlaygroundError


def text_of(obj: Any) -> str | None:
    return str(obj.get("text")) if isinstance(obj, dict) and "text" in obj else None


def options_of(element: JSON) -> list[JSON]:
    options = list(element.get("options", []))
    for group in element.get("option_groups", []):
        options.extend(group.get("options", []))
    return [o for o in options if isinstance(o, dict)]


def labels_of(message: JSON) -> list[str]:
    found: list[str] = []
    for _block, element in iter_elements(message.get("blocks", [])):
        if element.get("type") == "button":
            found.append(str(text_of(element.get("text"))))
        found.extend(str(text_of(o.get("text"))) for o in options_of(element))
    return found


def element_of(block: JSON, action_id: str) -> JSON:
    for _block, element in iter_elements([block]):
        if element.get("action_id") == action_id:
            return element
    raise PlaygroundError(f"no element {action_id!r} in block {block.get('block_id')!r}")


def entry_for(element: JSON, raw: Any) -> JSON:
    """A ``state.values`` entry for ``element`` from a test value (text, label or labels)."""
    kind = element.get("type")
    entry: JSON = {"type": kind}
    if kind in ("checkboxes", "multi_static_select", "static_select", "radio_buttons"):
        labels = [raw] if isinstance(raw, str) else list(raw or [])
        options = options_of(element)
        picked = []
        for label in labels:
            option = next((o for o in options if text_of(o.get("text")) == label), None)
            if option is None:
                raise PlaygroundError(f"no option {label!r}; offered: {[text_of(o.get('text')) for o in options]}")
            picked.append(copy.deepcopy(option))
        if kind in ("checkboxes", "multi_static_select"):
            entry["selected_options"] = picked
        else:
            entry["selected_option"] = picked[0] if picked else None
    elif kind == "users_select":
        entry["selected_user"] = raw
    elif kind == "multi_users_select":
        entry["selected_users"] = list(raw)
    elif kind == "datepicker":
        entry["selected_date"] = raw
    else:
        entry["value"] = raw
    return entry


def check_submittable(blocks: list[JSON], state: dict[str, dict[str, JSON]]) -> None:
    """Refuse what Slack's client refuses: an empty required input, text outside min/max length."""
    for block in blocks:
        if block.get("type") != "input":
            continue
        element = block.get("element", {})
        entry = state.get(str(block.get("block_id")), {}).get(str(element.get("action_id")), {})
        label = text_of(block.get("label"))
        filled = [v for k, v in entry.items() if k != "type" and v not in (None, "", [])]
        if not filled and not block.get("optional"):
            raise PlaygroundError(f"Slack would not submit: required input {label!r} is empty")
        value = entry.get("value")
        if isinstance(value, str) and element.get("type") == "plain_text_input":
            if len(value) > int(element.get("max_length", 3000)):
                raise PlaygroundError(f"Slack would not submit: {label!r} is longer than max_length")
            if value and len(value) < int(element.get("min_length", 0)):
                raise PlaygroundError(f"Slack would not submit: {label!r} is shorter than min_length")


def carried_state(previous: dict[str, dict[str, JSON]], blocks: list[JSON]) -> dict[str, dict[str, JSON]]:
    """The state of a newly published view of ``blocks`` (App Home's ``views.publish``), given the previous view's
    state ``previous``.

    Slack's clients keep what a person ticked or chose in an element across an update only when the element keeps
    its ids; the fake's rule, kept simple: an element's entry is carried over when its block has the same explicit
    ``block_id``, it has the same ``action_id`` and the same ``type``, and every option the entry holds is still one
    of its options; any other element starts from its initial value (``initial_option(s)``), as a new one does.
    Blocks without a ``block_id`` never carry anything (Slack gives them a new id each time)."""
    state = initial_state(blocks)
    for block, element in iter_elements(blocks):
        block_id, action_id = block.get("block_id"), element.get("action_id")
        if not block_id or not action_id:
            continue
        before = (previous.get(str(block_id)) or {}).get(str(action_id))
        if before is None or before.get("type") != element.get("type"):
            continue
        offered = {blockkit.option_key(o) for o in options_of(element)}
        held = list(before.get("selected_options") or [])
        if before.get("selected_option"):
            held.append(before["selected_option"])
        if all(blockkit.option_key(o) in offered for o in held):
            state[str(block_id)][str(action_id)] = copy.deepcopy(before)
    return state


CHOICE_TYPES = ("static_select", "multi_static_select", "radio_buttons", "overflow")


def tick(blocks: list[JSON], label: str, values: dict[str, dict[str, JSON]], *, within: str = "") -> JSON | None:
    """A person ticks (or unticks) the checkbox ``label`` in the first checkboxes of ``blocks`` offering it (in a
    block whose id contains ``within``): the ``block_actions`` action with the group's new selection, that
    selection written in ``values`` (the surface's ``state.values``); None when no checkboxes offer it."""
    for block, element in iter_elements(blocks):
        if element.get("type") != "checkboxes" or within not in str(block.get("block_id", "")):
            continue
        option = next((o for o in options_of(element) if text_of(o.get("text")) == label), None)
        if option is None:
            continue
        entry = values[str(block.get("block_id"))][str(element.get("action_id"))]
        chosen = {blockkit.option_key(o) for o in entry.get("selected_options") or []}
        chosen ^= {blockkit.option_key(option)}
        entry["selected_options"] = [copy.deepcopy(o) for o in options_of(element) if blockkit.option_key(o) in chosen]
        return {
            "type": "checkboxes",
            "action_id": element.get("action_id"),
            "block_id": block.get("block_id"),
            "selected_options": copy.deepcopy(entry["selected_options"]),
        }
    return None


def choose(
    blocks: list[JSON], labels: str | list[str], values: dict[str, dict[str, JSON]], *, within: str = ""
) -> JSON | None:
    """A person chooses ``labels`` in the first static_select / multi_static_select / radio group / overflow menu
    of ``blocks`` offering them (a single-choice element takes exactly one label; in a block whose id contains
    ``within``): the ``block_actions`` action with ``selected_option`` (or ``selected_options``), the choice written
    in ``values`` (an overflow menu keeps none); None when no element offers them."""
    wanted = [labels] if isinstance(labels, str) else list(labels)
    for block, element in iter_elements(blocks):
        kind = element.get("type")
        if kind not in CHOICE_TYPES or within not in str(block.get("block_id", "")):
            continue
        options = options_of(element)
        picked = [next((o for o in options if text_of(o.get("text")) == w), None) for w in wanted]
        if not wanted or any(p is None for p in picked) or (kind != "multi_static_select" and len(picked) != 1):
            continue
        key = "selected_options" if kind == "multi_static_select" else "selected_option"
        action: JSON = {"type": kind, "action_id": element.get("action_id"), "block_id": block.get("block_id")}
        action[key] = copy.deepcopy(picked) if kind == "multi_static_select" else copy.deepcopy(picked[0])
        if "placeholder" in element:
            action["placeholder"] = element["placeholder"]
        if kind != "overflow":
            values[str(block.get("block_id"))][str(element.get("action_id"))][key] = copy.deepcopy(action[key])
        return action
    return None
