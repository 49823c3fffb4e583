"""Block Kit validation as Slack's Web API does it, for the fake Slack.

Public API
----------
``validate_message_blocks(blocks) -> list[str]``
    The ``blocks`` of a message (chat.postMessage, chat.update, chat.postEphemeral, a response_url post).
    Returns Slack-style messages, empty when valid, e.g.
    ``"must be less than 76 characters [json-pointer:/blocks/0/elements/1/text/text]"``.
    The fake answers ``{"ok": false, "error": "invalid_blocks", "errors": [...],
    "response_metadata": {"messages": ["[ERROR] ...", ...]}}`` when the list is non-empty.
``validate_view(view) -> list[str]``
    A modal view object (views.open / views.update / views.push); pointers start at ``/view``.
    Slack answers an invalid view with ``invalid_arguments`` and the messages in
    ``response_metadata.messages`` (observed: ``[ERROR] must be less than 25 characters
    [json-pointer:/view/title/text]``).
``blocks_text_length(blocks) -> int``
    The characters a message's blocks carry (every ``text`` string, recursively): the fake's measure of
    Slack's undocumented cumulative limit; above ``MESSAGE_BLOCKS_TEXT_LIMIT`` the API answers
    ``msg_blocks_too_long`` (a separate error, after invalid_blocks).
``MESSAGE_TEXT_LIMIT``
    Slack truncates a message's top-level ``text`` beyond 40,000 characters (not an error;
    docs.slack.dev reference/methods/chat.postMessage).

Wording follows messages Slack is observed to return: ``must be less than N+1 characters``,
``must be more than 0 characters``, ``no more than N items allowed``, ``must provide at least 1 items``,
``unsupported type: X``, ``must be a valid enum value``, `` `action_id` "x" already exists``.

Limits (docs.slack.dev reference/block-kit/...; numbers are maxima unless stated):
blocks: 50 per message, 100 per modal; block_id 255, unique per message/view; action_id 255, unique per block.
section: text 1..3000, fields 1..10 each 2000, text or fields required. header: plain_text 150.
context: elements 1..10. actions: elements 1..25. input: label plain_text 2000, hint plain_text 2000,
element required. image block: image_url 3000, alt_text 2000 (required), title plain_text 2000.
markdown: text 12000. button: text plain_text 75, value 2000, url 3000, style primary|danger,
accessibility_label 75. option: text 75 (plain_text in selects and overflow), value 150, description 75,
url 3000. option group: label plain_text 75, options 100. static/multi_static select: options or
option_groups (1..100), placeholder plain_text 150, initial option(s) among the options,
max_selected_items >= 1. checkboxes / radio_buttons: options 1..10. overflow: options 1..5.
plain_text_input: max_length 1..3000, min_length 0..3000, placeholder 150.
confirm dialog: title plain_text 100, text 300, confirm/deny plain_text 30.
modal: type modal, title plain_text 24 (required), close/submit plain_text 24, submit required with an
input block, private_metadata 3000, callback_id 255, external_id 255.
"""

from __future__ import annotations

from typing import Any

MESSAGE_MAX_BLOCKS = 50
MODAL_MAX_BLOCKS = 100
MESSAGE_BLOCKS_TEXT_LIMIT = 12_000
MESSAGE_TEXT_LIMIT = 40_000

BLOCK_TYPES = frozenset(
    {"section", "header", "context", "divider", "actions", "input", "image", "markdown", "rich_text"}
)
SELECT_TYPES = frozenset({"static_select", "multi_static_select"})
_OTHER_SELECTS = frozenset(
    {
        "external_select",
        "users_select",
        "conversations_select",
        "channels_select",
        "multi_external_select",
        "multi_users_select",
        "multi_conversations_select",
        "multi_channels_select",
    }
)
_PICKERS = frozenset({"datepicker", "timepicker", "datetimepicker"})
_TEXT_INPUTS = frozenset({"plain_text_input", "email_text_input", "url_text_input", "number_input", "rich_text_input"})
ACTIONS_ELEMENTS = (
    frozenset({"button", "checkboxes", "radio_buttons", "overflow", "workflow_button"})
    | SELECT_TYPES
    | _OTHER_SELECTS
    | _PICKERS
)
SECTION_ACCESSORIES = ACTIONS_ELEMENTS | {"image"}
INPUT_ELEMENTS = (
    frozenset({"checkboxes", "radio_buttons", "file_input"}) | SELECT_TYPES | _OTHER_SELECTS | _PICKERS | _TEXT_INPUTS
)


def validate_message_blocks(blocks: Any) -> list[str]:
    """Check a message's ``blocks`` array; returns Slack-style error messages (empty list: valid)."""
    checker = _Checker()
    checker.blocks(blocks, "/blocks", max_blocks=MESSAGE_MAX_BLOCKS)
    return checker.errors


def validate_view(view: Any) -> list[str]:
    """Check a view object (a modal, or an App Home tab: no title / submit / close, at most 100 blocks); returns
    Slack-style error messages with ``/view/...`` pointers."""
    checker = _Checker()
    checker.view(view, "/view")
    return checker.errors


def blocks_text_length(blocks: Any) -> int:
    """Sum of the lengths of every ``text`` string inside ``blocks`` (recursively), in characters."""
    if isinstance(blocks, dict):
        total = 0
        for key, value in blocks.items():
            if key == "text" and isinstance(value, str):
                total += len(value)
            else:
                total += blocks_text_length(value)
        return total
    if isinstance(blocks, list):
        return sum(blocks_text_length(item) for item in blocks)
    return 0


def option_key(option: Any) -> tuple[str, str]:
    """Identity of an option object for "initial option must be one of the options": (value, text)."""
    if not isinstance(option, dict):
        return ("", "")
    text = option.get("text")
    label = text.get("text", "") if isinstance(text, dict) else ""
    return (str(option.get("value", "")), str(label))


class _Checker:
    """Walks a payload and collects Slack-style error messages."""

    def __init__(self) -> None:
        self.errors: list[str] = []
        self._block_ids: set[str] = set()

    def err(self, message: str, ptr: str) -> None:
        self.errors.append(f"{message} [json-pointer:{ptr}]")

    # -- primitives -------------------------------------------------------------------------------

    def string(self, obj: dict[str, Any], key: str, ptr: str, *, max_len: int, required: bool = False) -> str | None:
        value = obj.get(key)
        if value is None:
            if required:
                self.err(f"missing required field: {key}", ptr)
            return None
        if not isinstance(value, str):
            self.err("must be a string", f"{ptr}/{key}")
            return None
        if len(value) > max_len:
            self.err(f"must be less than {max_len + 1} characters", f"{ptr}/{key}")
        return value

    def nonempty_string(self, obj: dict[str, Any], key: str, ptr: str, *, max_len: int) -> None:
        value = self.string(obj, key, ptr, max_len=max_len, required=True)
        if value == "":
            self.err("must be more than 0 characters", f"{ptr}/{key}")

    def items(
        self,
        obj: dict[str, Any],
        key: str,
        ptr: str,
        *,
        max_items: int,
        min_items: int = 1,
        required: bool = True,
    ) -> list[Any]:
        value = obj.get(key)
        if value is None:
            if required:
                self.err(f"missing required field: {key}", ptr)
            return []
        if not isinstance(value, list):
            self.err("must be an array", f"{ptr}/{key}")
            return []
        if len(value) < min_items:
            self.err(f"must provide at least {min_items} items", f"{ptr}/{key}")
        if len(value) > max_items:
            self.err(f"no more than {max_items} items allowed", f"{ptr}/{key}")
        return value

    def obj(self, value: Any, ptr: str) -> dict[str, Any] | None:
        if not isinstance(value, dict):
            self.err("must be an object", ptr)
            return None
        return value

    def text(
        self,
        parent: dict[str, Any],
        key: str,
        ptr: str,
        *,
        max_len: int,
        plain_only: bool = False,
        required: bool = True,
    ) -> None:
        """A text object at ``parent[key]``: type plain_text|mrkdwn, text 1..max_len characters."""
        value = parent.get(key)
        if value is None:
            if required:
                self.err(f"missing required field: {key}", ptr)
            return
        self.text_object(value, f"{ptr}/{key}", max_len=max_len, plain_only=plain_only)

    def text_object(self, value: Any, ptr: str, *, max_len: int, plain_only: bool = False) -> None:
        text = self.obj(value, ptr)
        if text is None:
            return
        allowed = ("plain_text",) if plain_only else ("plain_text", "mrkdwn")
        kind = text.get("type")
        if kind is None:
            self.err("missing required field: type", ptr)
        elif kind not in allowed:
            self.err("must be a valid enum value", f"{ptr}/type")
        self.nonempty_string(text, "text", ptr, max_len=max_len)

    # -- surfaces ---------------------------------------------------------------------------------

    def view(self, value: Any, ptr: str) -> None:
        view = self.obj(value, ptr)
        if view is None:
            return
        if view.get("type") not in ("modal", "home"):
            if "type" not in view:
                self.err("missing required field: type", ptr)
            else:
                self.err("must be a valid enum value", f"{ptr}/type")
        if view.get("type") == "home":
            for key in ("title", "close", "submit"):
                if key in view:
                    self.err(f"{key} is not allowed in a home view", f"{ptr}/{key}")
        else:
            self.text(view, "title", ptr, max_len=24, plain_only=True)
            self.text(view, "close", ptr, max_len=24, plain_only=True, required=False)
            self.text(view, "submit", ptr, max_len=24, plain_only=True, required=False)
        self.string(view, "private_metadata", ptr, max_len=3000)
        self.string(view, "callback_id", ptr, max_len=255)
        self.string(view, "external_id", ptr, max_len=255)
        blocks = view.get("blocks")
        if blocks is None:
            self.err("missing required field: blocks", ptr)
            return
        self.blocks(blocks, f"{ptr}/blocks", max_blocks=MODAL_MAX_BLOCKS)
        has_input = isinstance(blocks, list) and any(isinstance(b, dict) and b.get("type") == "input" for b in blocks)
        if has_input and "submit" not in view:
            self.err("must provide submit when the view contains an input block", f"{ptr}/submit")

    def blocks(self, value: Any, ptr: str, *, max_blocks: int) -> None:
        if not isinstance(value, list):
            self.err("must be an array", ptr)
            return
        if len(value) > max_blocks:
            self.err(f"no more than {max_blocks} items allowed", ptr)
        for index, block in enumerate(value):
            self.block(block, f"{ptr}/{index}")

    # -- blocks -----------------------------------------------------------------------------------

    def block(self, value: Any, ptr: str) -> None:
        block = self.obj(value, ptr)
        if block is None:
            return
        kind = block.get("type")
        if kind not in BLOCK_TYPES:
            self.err(f"unsupported type: {kind}", f"{ptr}/type")
            return
        block_id = self.string(block, "block_id", ptr, max_len=255)
        if block_id is not None:
            if block_id in self._block_ids:
                self.err(f'`block_id` "{block_id}" already exists', f"{ptr}/block_id")
            self._block_ids.add(block_id)
        getattr(self, f"block_{kind}")(block, ptr)

    def block_section(self, block: dict[str, Any], ptr: str) -> None:
        if "text" not in block and "fields" not in block:
            self.err("must define either `text` or `fields`", f"{ptr}/type")
        self.text(block, "text", ptr, max_len=3000, required=False)
        fields = self.items(block, "fields", ptr, max_items=10, required=False)
        for index, field in enumerate(fields):
            self.text_object(field, f"{ptr}/fields/{index}", max_len=2000)
        accessory = block.get("accessory")
        if accessory is not None:
            self.element(accessory, f"{ptr}/accessory", allowed=SECTION_ACCESSORIES, action_ids=set())

    def block_header(self, block: dict[str, Any], ptr: str) -> None:
        self.text(block, "text", ptr, max_len=150, plain_only=True)

    def block_context(self, block: dict[str, Any], ptr: str) -> None:
        for index, item in enumerate(self.items(block, "elements", ptr, max_items=10)):
            here = f"{ptr}/elements/{index}"
            if isinstance(item, dict) and item.get("type") == "image":
                self.image_element(item, here)
            else:
                self.text_object(item, here, max_len=3000)

    def block_divider(self, block: dict[str, Any], ptr: str) -> None:
        return None

    def block_actions(self, block: dict[str, Any], ptr: str) -> None:
        action_ids: set[str] = set()
        for index, item in enumerate(self.items(block, "elements", ptr, max_items=25)):
            self.element(item, f"{ptr}/elements/{index}", allowed=ACTIONS_ELEMENTS, action_ids=action_ids)

    def block_input(self, block: dict[str, Any], ptr: str) -> None:
        self.text(block, "label", ptr, max_len=2000, plain_only=True)
        self.text(block, "hint", ptr, max_len=2000, plain_only=True, required=False)
        element = block.get("element")
        if element is None:
            self.err("missing required field: element", ptr)
        else:
            self.element(element, f"{ptr}/element", allowed=INPUT_ELEMENTS, action_ids=set())

    def block_image(self, block: dict[str, Any], ptr: str) -> None:
        self.image_element(block, ptr)
        self.text(block, "title", ptr, max_len=2000, plain_only=True, required=False)

    def block_markdown(self, block: dict[str, Any], ptr: str) -> None:
        self.nonempty_string(block, "text", ptr, max_len=12_000)

    def block_rich_text(self, block: dict[str, Any], ptr: str) -> None:
        self.items(block, "elements", ptr, max_items=10_000, min_items=0)

    # -- elements ---------------------------------------------------------------------------------

    def element(self, value: Any, ptr: str, *, allowed: frozenset[str], action_ids: set[str]) -> None:
        element = self.obj(value, ptr)
        if element is None:
            return
        kind = element.get("type")
        if kind not in allowed:
            self.err(f"unsupported type: {kind}", f"{ptr}/type")
            return
        action_id = self.string(element, "action_id", ptr, max_len=255)
        if action_id is not None:
            if action_id in action_ids:
                self.err(f'`action_id` "{action_id}" already exists', f"{ptr}/action_id")
            action_ids.add(action_id)
        if "confirm" in element:
            self.confirm(element["confirm"], f"{ptr}/confirm")
        if kind == "button":
            self.button(element, ptr)
        elif kind in SELECT_TYPES:
            self.static_select(element, ptr, multi=kind == "multi_static_select")
        elif kind in ("checkboxes", "radio_buttons"):
            self.choice_group(element, ptr, multi=kind == "checkboxes")
        elif kind == "overflow":
            for index, option in enumerate(self.items(element, "options", ptr, max_items=5)):
                self.option(option, f"{ptr}/options/{index}", plain_only=True, allow_url=True)
        elif kind == "plain_text_input":
            self.plain_text_input(element, ptr)
        elif kind == "image":
            self.image_element(element, ptr)
        elif kind in _OTHER_SELECTS or kind in _PICKERS or kind in _TEXT_INPUTS:
            self.text(element, "placeholder", ptr, max_len=150, plain_only=True, required=False)

    def button(self, element: dict[str, Any], ptr: str) -> None:
        self.text(element, "text", ptr, max_len=75, plain_only=True)
        self.string(element, "value", ptr, max_len=2000)
        self.string(element, "url", ptr, max_len=3000)
        self.string(element, "accessibility_label", ptr, max_len=75)
        style = element.get("style")
        if style is not None and style not in ("primary", "danger"):
            self.err("must be a valid enum value", f"{ptr}/style")

    def static_select(self, element: dict[str, Any], ptr: str, *, multi: bool) -> None:
        self.text(element, "placeholder", ptr, max_len=150, plain_only=True, required=False)
        known: set[tuple[str, str]] = set()
        if "options" in element and "option_groups" in element:
            self.err("must provide either options or option_groups, not both", ptr)
        elif "options" not in element and "option_groups" not in element:
            self.err("missing required field: options", ptr)
        for index, option in enumerate(self.items(element, "options", ptr, max_items=100, required=False)):
            self.option(option, f"{ptr}/options/{index}", plain_only=True)
            known.add(option_key(option))
        groups = self.items(element, "option_groups", ptr, max_items=100, required=False)
        for g_index, group_value in enumerate(groups):
            g_ptr = f"{ptr}/option_groups/{g_index}"
            group = self.obj(group_value, g_ptr)
            if group is None:
                continue
            self.text(group, "label", g_ptr, max_len=75, plain_only=True)
            for index, option in enumerate(self.items(group, "options", g_ptr, max_items=100)):
                self.option(option, f"{g_ptr}/options/{index}", plain_only=True)
                known.add(option_key(option))
        self.initial_options(element, ptr, known=known, multi=multi, plain_only=True)
        if multi and "max_selected_items" in element:
            limit = element["max_selected_items"]
            if not isinstance(limit, int) or limit < 1:
                self.err("must be greater than or equal to 1", f"{ptr}/max_selected_items")

    def choice_group(self, element: dict[str, Any], ptr: str, *, multi: bool) -> None:
        known: set[tuple[str, str]] = set()
        for index, option in enumerate(self.items(element, "options", ptr, max_items=10)):
            self.option(option, f"{ptr}/options/{index}", plain_only=False)
            known.add(option_key(option))
        self.initial_options(element, ptr, known=known, multi=multi, plain_only=False)

    def initial_options(
        self, element: dict[str, Any], ptr: str, *, known: set[tuple[str, str]], multi: bool, plain_only: bool
    ) -> None:
        if multi:
            chosen = self.items(element, "initial_options", ptr, max_items=100, min_items=0, required=False)
            entries = [(option, f"{ptr}/initial_options/{i}") for i, option in enumerate(chosen)]
        elif "initial_option" in element:
            entries = [(element["initial_option"], f"{ptr}/initial_option")]
        else:
            entries = []
        for option, here in entries:
            self.option(option, here, plain_only=plain_only)
            if option_key(option) not in known:
                self.err("must match one of the provided options", here)

    def option(self, value: Any, ptr: str, *, plain_only: bool, allow_url: bool = False) -> None:
        option = self.obj(value, ptr)
        if option is None:
            return
        self.text(option, "text", ptr, max_len=75, plain_only=plain_only)
        self.nonempty_string(option, "value", ptr, max_len=150)
        self.text(option, "description", ptr, max_len=75, plain_only=plain_only, required=False)
        if allow_url:
            self.string(option, "url", ptr, max_len=3000)
        elif "url" in option:
            self.err("invalid additional property: url", ptr)

    def plain_text_input(self, element: dict[str, Any], ptr: str) -> None:
        self.text(element, "placeholder", ptr, max_len=150, plain_only=True, required=False)
        bounds = {"max_length": (1, 3000), "min_length": (0, 3000)}
        for key, (low, high) in bounds.items():
            if key not in element:
                continue
            number = element[key]
            if not isinstance(number, int) or isinstance(number, bool):
                self.err("must be an integer", f"{ptr}/{key}")
            elif number < low:
                self.err(f"must be greater than or equal to {low}", f"{ptr}/{key}")
            elif number > high:
                self.err(f"must be less than or equal to {high}", f"{ptr}/{key}")
        low_v, high_v = element.get("min_length"), element.get("max_length")
        if isinstance(low_v, int) and isinstance(high_v, int) and low_v > high_v:
            self.err("min_length must be less than or equal to max_length", f"{ptr}/min_length")

    def image_element(self, element: dict[str, Any], ptr: str) -> None:
        self.nonempty_string(element, "alt_text", ptr, max_len=2000)
        if "image_url" not in element and "slack_file" not in element:
            self.err("missing required field: image_url", ptr)
        self.string(element, "image_url", ptr, max_len=3000)

    def confirm(self, value: Any, ptr: str) -> None:
        dialog = self.obj(value, ptr)
        if dialog is None:
            return
        self.text(dialog, "title", ptr, max_len=100, plain_only=True)
        self.text(dialog, "text", ptr, max_len=300)
        self.text(dialog, "confirm", ptr, max_len=30, plain_only=True)
        self.text(dialog, "deny", ptr, max_len=30, plain_only=True)
        style = dialog.get("style")
        if style is not None and style not in ("primary", "danger"):
            self.err("must be a valid enum value", f"{ptr}/style")
