"""Block Kit elements as the fake Slack keeps them: which elements a person fills in, their ``state.values`` before
anyone touches them, and the ids Slack fills in when a message or view has none (docs.slack.dev
reference/block-kit/block-elements, reference/interaction-payloads/block_actions-payload#state).

- ``iter_elements(blocks) -> [(block, element)]``: every interactive element (actions, section accessories, inputs).
- ``initial_state(blocks) -> {block_id: {action_id: entry}}``: each input-ish element's initial value.
- ``fill_ids(blocks) -> blocks``: a copy with ``block_id`` / ``action_id`` generated where absent.
- ``text_blocks(text) -> [rich_text block]``: the blocks Slack gives a message that has only text (what people type,
  and a bot's text-only chat.postMessage): one ``rich_text_section``, ``<@U123>`` as a ``user`` element.
"""

from __future__ import annotations

import copy
import re
import secrets
import string
from typing import Any

JSON = dict[str, Any]


def random_id(prefix: str, length: int = 10) -> str:
    """An id shaped like Slack's: ``prefix`` + upper-case letters and digits."""
    alphabet = string.ascii_uppercase + string.digits
    return prefix + "".join(secrets.choice(alphabet) for _ in range(length))


INPUT_ELEMENT_TYPES = frozenset(
    {
        "checkboxes",
        "radio_buttons",
        "static_select",
        "multi_static_select",
        "plain_text_input",
        "users_select",
        "multi_users_select",
        "conversations_select",
        "channels_select",
        "datepicker",
        "timepicker",
        "email_text_input",
        "url_text_input",
        "number_input",
    }
)


def iter_elements(blocks: list[JSON]) -> list[tuple[JSON, JSON]]:
    """Every interactive element of ``blocks`` as ``(block, element)`` pairs, in order."""
    found: list[tuple[JSON, JSON]] = []
    for block in blocks:
        if block.get("type") == "actions":
            found.extend((block, e) for e in block.get("elements", []) if isinstance(e, dict))
        elif block.get("type") == "section" and isinstance(block.get("accessory"), dict):
            found.append((block, block["accessory"]))
        elif block.get("type") == "input" and isinstance(block.get("element"), dict):
            found.append((block, block["element"]))
    return found


def initial_state(blocks: list[JSON]) -> dict[str, dict[str, JSON]]:
    """``state.values`` before anyone touches the elements: each input-ish element's initial value."""
    values: dict[str, dict[str, JSON]] = {}
    for block, element in iter_elements(blocks):
        kind = element.get("type")
        if kind not in INPUT_ELEMENT_TYPES:
            continue
        entry: JSON = {"type": kind}
        if kind in ("checkboxes", "multi_static_select"):
            entry["selected_options"] = copy.deepcopy(element.get("initial_options", []))
        elif kind in ("radio_buttons", "static_select"):
            entry["selected_option"] = copy.deepcopy(element.get("initial_option"))
        elif kind == "multi_users_select":
            entry["selected_users"] = list(element.get("initial_users", []))
        elif kind == "users_select":
            entry["selected_user"] = element.get("initial_user")
        elif kind in ("conversations_select", "channels_select"):
            entry["selected_conversation" if kind == "conversations_select" else "selected_channel"] = None
        elif kind == "datepicker":
            entry["selected_date"] = element.get("initial_date")
        elif kind == "timepicker":
            entry["selected_time"] = element.get("initial_time")
        else:
            entry["value"] = element.get("initial_value")
        values.setdefault(str(block.get("block_id")), {})[str(element.get("action_id"))] = entry
    return values


def fill_ids(blocks: list[JSON]) -> list[JSON]:
    """A copy of ``blocks`` with the ids Slack generates when absent: block_id and action_id."""
    filled = copy.deepcopy(blocks)
    for block in filled:
        if isinstance(block, dict) and "block_id" not in block:
            block["block_id"] = random_id("", 5)
    for _block, element in iter_elements(filled):
        if "action_id" not in element:
            element["action_id"] = random_id("", 5)
    return filled


def text_blocks(text: str) -> list[JSON]:
    """The ``rich_text`` block Slack stores for a message that has only ``text`` (see the module docstring)."""
    elements: list[JSON] = []
    for index, part in enumerate(re.split(r"<@([A-Z0-9_]+)>", text)):
        if index % 2:
            elements.append({"type": "user", "user_id": part})
        elif part:
            elements.append({"type": "text", "text": part})
    section = {"type": "rich_text_section", "elements": elements}
    return [{"type": "rich_text", "block_id": random_id("", 5), "elements": [section]}]
