"""Block Kit validation: the limits Slack enforces, reported with Slack's json-pointer messages."""

from __future__ import annotations

from typing import Any

from bot.fakeslack.blockkit import blocks_text_length, validate_message_blocks, validate_view


def plain(text: str) -> dict[str, Any]:
    return {"type": "plain_text", "text": text}


def opt(label: str, value: str | None = None, **extra: Any) -> dict[str, Any]:
    return {"text": plain(label), "value": value or label, **extra}


def test_valid_message_has_no_errors() -> None:
    blocks = [
        {"type": "header", "text": plain("Question")},
        {"type": "section", "text": {"type": "mrkdwn", "text": "*hi*"}, "fields": [plain("a")]},
        {"type": "context", "elements": [{"type": "mrkdwn", "text": "ctx"}]},
        {"type": "divider"},
        {"type": "markdown", "text": "**bold**"},
        {
            "type": "actions",
            "elements": [
                {"type": "button", "text": plain("Go"), "action_id": "go", "value": "1", "style": "danger"},
                {
                    "type": "static_select",
                    "action_id": "s",
                    "placeholder": plain("Pick"),
                    "options": [opt("A"), opt("B")],
                    "initial_option": opt("B"),
                },
                {"type": "radio_buttons", "action_id": "r", "options": [opt("A", description=plain("first"))]},
            ],
        },
        {"type": "rich_text", "elements": []},
    ]
    assert validate_message_blocks(blocks) == []


def test_unknown_block_and_text_rules() -> None:
    blocks = [
        {"type": "sections"},
        {"type": "header", "text": {"type": "mrkdwn", "text": "x"}},
        {"type": "section", "text": {"type": "mrkdwn", "text": ""}},
        {"type": "section"},
        {"type": "section", "text": {"type": "mrkdwn", "text": "x" * 3001}},
        {"type": "header", "text": plain("h" * 151)},
        {"type": "section", "fields": [plain("f")] * 11},
        {"type": "markdown", "text": "m" * 12_001},
        {"type": "context", "elements": [plain("c")] * 11},
    ]
    assert validate_message_blocks(blocks) == [
        "unsupported type: sections [json-pointer:/blocks/0/type]",
        "must be a valid enum value [json-pointer:/blocks/1/text/type]",
        "must be more than 0 characters [json-pointer:/blocks/2/text/text]",
        "must define either `text` or `fields` [json-pointer:/blocks/3/type]",
        "must be less than 3001 characters [json-pointer:/blocks/4/text/text]",
        "must be less than 151 characters [json-pointer:/blocks/5/text/text]",
        "no more than 10 items allowed [json-pointer:/blocks/6/fields]",
        "must be less than 12001 characters [json-pointer:/blocks/7/text]",
        "no more than 10 items allowed [json-pointer:/blocks/8/elements]",
    ]


def test_element_rules() -> None:
    blocks = [
        {
            "type": "actions",
            "block_id": "b" * 256,
            "elements": [
                {
                    "type": "button",
                    "text": {"type": "mrkdwn", "text": "x"},
                    "action_id": "a",
                    "style": "green",
                    "value": "v" * 2001,
                },
                {"type": "button", "text": plain("y"), "action_id": "a"},
                {
                    "type": "static_select",
                    "action_id": "s",
                    "placeholder": plain("p" * 151),
                    "options": [opt("o" * 76, description=plain("d" * 76))] + [opt(str(i)) for i in range(100)],
                    "initial_option": opt("nope"),
                },
                {"type": "checkboxes", "action_id": "c", "options": [opt("A")], "initial_options": [opt("B")]},
            ],
        }
    ]
    assert validate_message_blocks(blocks) == [
        "must be less than 256 characters [json-pointer:/blocks/0/block_id]",
        "must be a valid enum value [json-pointer:/blocks/0/elements/0/text/type]",
        "must be less than 2001 characters [json-pointer:/blocks/0/elements/0/value]",
        "must be a valid enum value [json-pointer:/blocks/0/elements/0/style]",
        '`action_id` "a" already exists [json-pointer:/blocks/0/elements/1/action_id]',
        "must be less than 151 characters [json-pointer:/blocks/0/elements/2/placeholder/text]",
        "no more than 100 items allowed [json-pointer:/blocks/0/elements/2/options]",
        "must be less than 76 characters [json-pointer:/blocks/0/elements/2/options/0/text/text]",
        "must be less than 76 characters [json-pointer:/blocks/0/elements/2/options/0/description/text]",
        "must match one of the provided options [json-pointer:/blocks/0/elements/2/initial_option]",
        "must match one of the provided options [json-pointer:/blocks/0/elements/3/initial_options/0]",
    ]


def test_modal_rules() -> None:
    view = {
        "type": "modal",
        "title": plain("t" * 25),
        "close": plain("c" * 25),
        "private_metadata": "m" * 3001,
        "callback_id": "x" * 256,
        "blocks": [
            {
                "type": "input",
                "block_id": "i",
                "label": plain("l" * 2001),
                "element": {"type": "plain_text_input", "action_id": "t", "max_length": 3001, "min_length": -1},
            },
            {"type": "input", "block_id": "j", "label": plain("ok")},
        ],
    }
    assert validate_view(view) == [
        "must be less than 25 characters [json-pointer:/view/title/text]",
        "must be less than 25 characters [json-pointer:/view/close/text]",
        "must be less than 3001 characters [json-pointer:/view/private_metadata]",
        "must be less than 256 characters [json-pointer:/view/callback_id]",
        "must be less than 2001 characters [json-pointer:/view/blocks/0/label/text]",
        "must be less than or equal to 3000 [json-pointer:/view/blocks/0/element/max_length]",
        "must be greater than or equal to 0 [json-pointer:/view/blocks/0/element/min_length]",
        "missing required field: element [json-pointer:/view/blocks/1]",
        "must provide submit when the view contains an input block [json-pointer:/view/submit]",
    ]
    assert validate_view({"type": "modal", "title": plain("ok"), "blocks": [{"type": "divider"}] * 101}) == [
        "no more than 100 items allowed [json-pointer:/view/blocks]"
    ]


def test_blocks_text_length_counts_every_text() -> None:
    blocks = [
        {"type": "section", "text": {"type": "mrkdwn", "text": "abc"}, "fields": [plain("de")]},
        {"type": "markdown", "text": "fgh"},
    ]
    assert blocks_text_length(blocks) == 8
