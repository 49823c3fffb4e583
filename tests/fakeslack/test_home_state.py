"""The state of a person's App Home view across a new ``views.publish`` (:func:`bot.fakeslack.inputs.carried_state`):
what they ticked stays only in elements that keep their block_id, action_id and type and still offer the options."""

from __future__ import annotations

from typing import Any

from bot.fakeslack.inputs import carried_state


def option(label: str) -> dict[str, Any]:
    return {"text": {"type": "plain_text", "text": label}, "value": label.lower()}


def boxes(block_id: str, labels: list[str], *, action_id: str = "picks", kind: str = "checkboxes") -> dict[str, Any]:
    element = {"type": kind, "action_id": action_id, "options": [option(x) for x in labels]}
    if kind == "static_select":
        element["placeholder"] = {"type": "plain_text", "text": "Choose"}
    return {"type": "actions", "block_id": block_id, "elements": [element]}


def test_a_republished_home_keeps_ticks_only_where_the_ids_stay() -> None:
    previous = {
        "kept": {"picks": {"type": "checkboxes", "selected_options": [option("A")]}},
        "gone": {"picks": {"type": "checkboxes", "selected_options": [option("A")]}},
        "renamed": {"picks": {"type": "checkboxes", "selected_options": [option("A")]}},
        "retyped": {"picks": {"type": "checkboxes", "selected_options": [option("A")]}},
        "shrunk": {"picks": {"type": "checkboxes", "selected_options": [option("A"), option("B")]}},
    }
    blocks = [
        boxes("kept", ["A", "B"]),
        boxes("renamed", ["A", "B"], action_id="picks2"),
        boxes("retyped", ["A", "B"], kind="static_select"),
        boxes("shrunk", ["A"]),
        boxes("new", ["A"]),
        {"type": "actions", "elements": [{"type": "checkboxes", "action_id": "picks", "options": [option("A")]}]},
    ]
    state = carried_state(previous, blocks)
    assert state["kept"] == previous["kept"]
    assert state["renamed"] == {"picks2": {"type": "checkboxes", "selected_options": []}}
    assert state["retyped"] == {"picks": {"type": "static_select", "selected_option": None}}
    assert state["shrunk"] == {"picks": {"type": "checkboxes", "selected_options": []}}  # B is no longer offered
    assert state["new"] == {"picks": {"type": "checkboxes", "selected_options": []}}
    assert "gone" not in state
