"""The "Edit" modal of an approval request (issue 23 part 3): the arguments the policy rule lets an approver change
(``edit:``), one input each, built from the tool's JSON schema, and reading a submission back into arguments with
an error under each field that doesn't fit.

Inputs by schema type: a string is a text input; ``integer`` / ``number`` a text input read as a number; an ``enum``
(directly or through a ``$ref``) a select of its values; ``boolean`` radio buttons (true / false); anything else
(objects, arrays, unions) a multi-line text input holding JSON. The submitted arguments are checked against the whole
schema (``jsonschema``), so a value the tool would refuse is refused in the modal, under its field.

Limits (docs.slack.dev reference/block-kit): input label <= 2000, plain_text_input initial_value / max_length <= 3000,
static_select options <= 100 (each text and value <= 75 / 150), block_id <= 255, private_metadata <= 3000; the
modal's title and buttons <= 24. Slack: a view_submission answered ``response_action: errors`` keeps the modal open
with each message under the input block it names.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from jsonschema.validators import validator_for  # type: ignore[import-untyped,unused-ignore]
from slack_sdk.models.blocks import (
    Block,
    InputBlock,
    MarkdownTextObject,
    Option,
    PlainTextInputElement,
    PlainTextObject,
    RadioButtonsElement,
    SectionBlock,
    StaticSelectElement,
)
from slack_sdk.models.views import View

from bot.agent.model import MAX_ARGUMENT_DEPTH
from bot.agent.text import is_blank, nested_deeper_than
from bot.slack.render.mrkdwn import clip
from bot.slack.render.safe_text import safe_mrkdwn, safe_plain

EDIT_CALLBACK = "approval_edit_modal"
ACT_EDIT_VALUE = "edit_value"
BLOCK_PREFIX = "edit:"
TEXT_MAX = 3000  # plain_text_input initial_value / max_length
MAX_OPTIONS = 100  # static_select
OPTION_VALUE = 150

Kind = Literal["string", "integer", "number", "boolean", "enum", "json"]


def _resolve(schema: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with a local ``$ref`` (``#/$defs/Name``) followed, and an ``anyOf`` of one type and ``null`` (an
    optional field, as pydantic writes it) taken as that type."""
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/"):
        node: Any = root
        for part in ref[2:].split("/"):
            node = node.get(part, {}) if isinstance(node, dict) else {}
        return _resolve({**node, **{k: v for k, v in schema.items() if k != "$ref"}}, root)
    any_of = schema.get("anyOf")
    if isinstance(any_of, list):
        kept = [s for s in any_of if isinstance(s, dict) and s.get("type") != "null"]
        if len(kept) == 1:
            return _resolve({**kept[0], **{k: v for k, v in schema.items() if k != "anyOf"}}, root)
    return schema


def field_kind(schema: dict[str, Any]) -> Kind:
    """How one argument is edited (see the module docstring); ``schema``: its resolved JSON schema."""
    enum = schema.get("enum")
    if (
        isinstance(enum, list)
        and 0 < len(enum) <= MAX_OPTIONS
        and all(len(json.dumps(v)) <= OPTION_VALUE for v in enum)
    ):
        return "enum"
    kinds: dict[object, Kind] = {"string": "string", "integer": "integer", "number": "number", "boolean": "boolean"}
    return kinds.get(schema.get("type"), "json")


def editable_fields(schema: dict[str, Any], editable: tuple[str, ...]) -> list[tuple[str, dict[str, Any]]]:
    """The ``(name, resolved schema)`` of each argument in ``editable`` the tool's ``schema`` (its parameters) has,
    in ``editable``'s order."""
    properties = schema.get("properties") or {}
    return [(n, _resolve(properties[n], schema)) for n in editable if isinstance(properties.get(n), dict)]


def _shown(value: object, kind: Kind) -> str:
    if value is None:
        return ""
    if kind == "json":
        return json.dumps(value, ensure_ascii=False, indent=2)
    if kind == "boolean":
        return "true" if value else "false"
    return value if isinstance(value, str) else json.dumps(value)


def _label(name: str, field: dict[str, Any]) -> str:
    title = str(field.get("title") or name)
    about = str(field.get("description") or "")
    return clip(f"{title}: {about}" if about else title, 2000)


def _element(field: dict[str, Any], kind: Kind, value: object) -> Any:
    if kind == "enum":
        options = [
            Option(text=clip(str(v) if isinstance(v, str) else json.dumps(v), 75), value=json.dumps(v))
            for v in field["enum"]
        ]
        initial = next((o for o, v in zip(options, field["enum"], strict=True) if v == value), None)
        return StaticSelectElement(action_id=ACT_EDIT_VALUE, options=options, initial_option=initial)
    if kind == "boolean":
        options = [Option(text="true", value="true"), Option(text="false", value="false")]
        initial = options[0] if value is True else options[1] if value is False else None
        return RadioButtonsElement(action_id=ACT_EDIT_VALUE, options=options, initial_option=initial)
    shown = clip(_shown(value, kind), TEXT_MAX)
    return PlainTextInputElement(
        action_id=ACT_EDIT_VALUE,
        multiline=kind in ("json", "string") and ("\n" in shown or len(shown) > 80 or kind == "json"),
        initial_value=shown or None,
        max_length=TEXT_MAX,
    )


def edit_modal(
    *,
    tool_name: str,
    schema: dict[str, Any],
    args: dict[str, Any],
    editable: tuple[str, ...],
    quorum: bool,
    private_metadata: dict[str, str],
) -> dict[str, Any]:
    """The Edit modal for a call of ``tool_name`` whose arguments are ``args``: an input per argument in
    ``editable`` the tool's parameters ``schema`` has (prefilled with its value now); ``quorum``: approvals given so
    far are reset (said above the inputs). Submitting approves the call with the arguments as edited. Raises
    ``ValueError`` when the JSON-encoded ``private_metadata`` is over 3000 characters or no argument is editable."""
    meta = json.dumps(private_metadata, separators=(",", ":"))
    if len(meta) > 3000:
        raise ValueError("private_metadata too long")
    fields = editable_fields(schema, editable)
    if not fields:
        raise ValueError("no editable argument")
    about = (
        f"Change the arguments of `{safe_mrkdwn(clip(tool_name, 100))}`, then approve: it runs with yours, and the"
        " model is told what you changed."
    )
    if quorum:
        about += " The approvals given so far are reset: everyone approves the same arguments."
    required = set(schema.get("required") or [])
    blocks: list[Block] = [SectionBlock(block_id="about", text=MarkdownTextObject(text=about))]
    for name, field in fields:
        kind = field_kind(field)
        blocks.append(
            InputBlock(
                block_id=BLOCK_PREFIX + name[: 255 - len(BLOCK_PREFIX)],
                label=PlainTextObject(text=safe_plain(_label(name, field))),
                element=_element(field, kind, args.get(name)),
                optional=name not in required,
                hint=PlainTextObject(text="JSON") if kind == "json" else None,
            )
        )
    view = View(
        type="modal",
        callback_id=EDIT_CALLBACK,
        title=PlainTextObject(text="Edit arguments"),
        submit=PlainTextObject(text="Approve"),
        close=PlainTextObject(text="Cancel"),
        private_metadata=meta,
        blocks=blocks,
    )
    return dict(view.to_dict())


BLANK = "Please fill this in: spaces alone don't count."


def _read(entry: dict[str, Any]) -> str | None:
    """The raw submitted value of one input (text, or a selected option's value); None when left empty."""
    option = entry.get("selected_option")
    if isinstance(option, dict):
        return str(option.get("value") or "")
    value = entry.get("value")
    return None if value is None else str(value)


def _coerce(raw: str | None, kind: Kind) -> tuple[bool, object, str | None]:
    """``(given, value, error)`` of one submitted input read as ``kind``: an input with nothing visible in it
    (spaces, zero-width characters) is not given, text too."""
    if raw is None or is_blank(raw):
        return False, None, None
    if kind == "string":
        return True, raw, None
    if kind in ("integer", "number"):
        try:
            number = json.loads(raw.strip())
        except (ValueError, RecursionError):
            number = None
        if isinstance(number, bool) or not isinstance(number, (int, float)):
            return True, None, "must be a whole number" if kind == "integer" else "must be a number"
        if kind == "integer" and isinstance(number, float):
            if not number.is_integer():
                return True, None, "must be a whole number"
            number = int(number)
        return True, number, None
    too_deep = f"must nest at most {MAX_ARGUMENT_DEPTH} levels of objects and arrays"
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        return True, None, f"must be JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
    except RecursionError:  # deeper than Python's recursion follows
        return True, None, too_deep
    if nested_deeper_than(value, MAX_ARGUMENT_DEPTH - 1):  # an argument is one level below the call's object
        return True, None, too_deep
    return True, value, None


def edited_arguments(
    view: dict[str, Any], *, schema: dict[str, Any], args: dict[str, Any], editable: tuple[str, ...]
) -> tuple[dict[str, Any], dict[str, str]]:
    """The arguments a submitted Edit modal (``view``) gives: ``args`` with each editable argument as submitted (an
    empty optional input leaves it out), and the errors by input block id (Slack's ``response_action: errors``;
    empty when the arguments fit the tool's ``schema``)."""
    values = (view.get("state") or {}).get("values") or {}
    out = dict(args)
    errors: dict[str, str] = {}
    blocks: dict[str, str] = {}
    for name, field in editable_fields(schema, editable):
        block = BLOCK_PREFIX + name[: 255 - len(BLOCK_PREFIX)]
        blocks[name] = block
        kind = field_kind(field)
        given, value, error = _coerce(_read((values.get(block) or {}).get(ACT_EDIT_VALUE) or {}), kind)
        if error is not None:
            errors[block] = error
        elif given:
            out[name] = value
        elif name in (schema.get("required") or []):  # Slack refuses it empty, but not blank
            errors[block] = BLANK
        else:
            out.pop(name, None)
    if errors:
        return out, errors
    validator = validator_for(schema)(schema)
    first = next(iter(blocks.values()), "")
    for problem in validator.iter_errors(out):
        path = list(problem.absolute_path)
        name = str(path[0]) if path else ""
        if not path and problem.validator == "required":
            name = next((n for n in blocks if f"'{n}'" in problem.message), "")
        block = blocks.get(name, first)
        errors.setdefault(block, clip(problem.message, 300))
    return out, errors
