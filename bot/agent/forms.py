"""Forms a person fills in: the fields of an MCP elicitation (a flat JSON Schema object), how answers to them are
checked, and the one reply format a run stores.

A :class:`Form` is built from the ``requestedSchema`` of an MCP ``elicitation/create`` request (MCP spec,
client/elicitation: "restricted to flat objects with primitive properties"): each property becomes a
:class:`FormField` of one ``kind``:

- ``text``: ``{"type": "string"}`` (``minLength``, ``maxLength``, ``format`` email / uri / date / date-time);
- ``number`` / ``integer``: ``{"type": "number" | "integer"}`` (``minimum``, ``maximum``), typed as text and
  checked as a number;
- ``boolean``: ``{"type": "boolean"}``, answered Yes / No;
- ``choice``: a string with ``enum`` (labels from ``enumNames``) or ``oneOf: [{const, title}]``;
- ``choices``: ``{"type": "array", "items": {"enum": [...]} | {"anyOf": [{const, title}]}}`` (``minItems``,
  ``maxItems``).

A form with a ``url`` (URL-mode elicitation) has no fields: the person opens the link and says Done.

Replies: whatever the person gave (a typed text, a picked label, picked labels, a filled form, Decline) becomes
one JSON text, ``{"action": "accept", "content": {name: value}}`` or ``{"action": "decline"}``, made by
:meth:`Form.reply` and checked by :meth:`Form.validate_reply` (content typed: numbers as numbers, booleans as
booleans, choices as their ``const`` values). This JSON text is the run's stored resume data for the question.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict

from bot.agent.text import is_blank
from bot.errors import AnswerError, BotError

FieldKind = Literal["text", "number", "integer", "boolean", "choice", "choices"]
YES, NO = "Yes", "No"
MAX_FIELDS = 20  # a modal holds 100 blocks; a form longer than this is not a question for a person in a thread
_INTEGER = re.compile(r"^[+-]?\d{1,4000}$")
MAX_CHOICES = 100  # Slack's static select holds 100 options
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")


class FormUnsupported(BotError, ValueError):
    """A requested schema this bot can't ask as a form (nested objects, unknown types, too many fields)."""


URL_SCHEMES = ("https",)  # MCP_ELICIT_URL_SCHEMES' default
_UNSAFE_IN_URL = re.compile(r"[\x00-\x20\x7f-\x9f<>|\u200b-\u200f\u2028-\u202e\u2060-\u2064\ufeff]")


def url_to_show(url: str, *, schemes: Collection[str] = URL_SCHEMES) -> str:
    """``url`` once it may be shown to a person to open (a URL-mode elicitation's link): its scheme one of
    ``schemes`` (``MCP_ELICIT_URL_SCHEMES``, default https only: no ``javascript:``, ``data:``, ``slack://`` or plain
    ``http://``), a host, and no spaces, controls or characters that would break out of a Slack link. The one check
    every URL shown to a person goes through. Raises :class:`FormUnsupported` saying which rule it broke."""
    allowed = ", ".join(f"{s}://" for s in schemes)
    if _UNSAFE_IN_URL.search(url):
        raise FormUnsupported("its link has spaces, controls or <, >, | in it")
    parts = urlsplit(url)
    if parts.scheme.lower() not in schemes:
        shown = f"{parts.scheme}:" if parts.scheme else "no scheme"
        raise FormUnsupported(
            f"its link's scheme is {shown[:40]}; only {allowed} links are shown (MCP_ELICIT_URL_SCHEMES)"
        )
    if not parts.hostname:
        raise FormUnsupported("its link has no host")
    return url


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class FieldOption(_Model):
    """One choice of a ``choice`` / ``choices`` field: ``value`` goes back to the server, ``label`` is shown."""

    value: str
    label: str


class FormField(_Model):
    """One property of the requested schema, as the person sees and answers it."""

    name: str
    title: str
    description: str | None = None
    kind: FieldKind
    required: bool = False
    options: list[FieldOption] | None = None
    minimum: float | None = None
    maximum: float | None = None
    min_length: int | None = None
    max_length: int | None = None
    min_items: int | None = None
    max_items: int | None = None
    format: str | None = None

    @property
    def labels(self) -> list[str]:
        """What the person picks from: the options' labels, or Yes / No for a boolean."""
        if self.kind == "boolean":
            return [YES, NO]
        return [o.label for o in self.options or []]


class Form(_Model):
    """A form: its fields (in the schema's order), or a ``url`` to open (URL mode, no fields)."""

    fields: list[FormField] = []
    url: str | None = None

    @classmethod
    def from_schema(cls, schema: dict[str, Any]) -> Form:
        """The form of a flat JSON Schema object. Raises :class:`FormUnsupported` naming what can't be asked."""
        if schema.get("type", "object") != "object":
            raise FormUnsupported("the requested schema is not an object")
        properties = schema.get("properties") or {}
        if not isinstance(properties, dict):
            raise FormUnsupported("the requested schema's properties are not an object")
        if len(properties) > MAX_FIELDS:
            raise FormUnsupported(f"the form has {len(properties)} fields; at most {MAX_FIELDS} can be asked")
        listed = schema.get("required")
        required = {str(r) for r in listed} if isinstance(listed, list) else set()
        return cls(fields=[_field(str(name), prop, name in required) for name, prop in properties.items()])

    def reply(self, picked: str | list[str] | FormReply) -> str:
        """The resume data (JSON text) for what the person gave: a :class:`FormReply` (a filled form, Decline), or
        for a form of one field (or none) the typed text / picked label(s) as they come from a question's
        controls. Not checked yet: :meth:`validate_reply` does that."""
        if isinstance(picked, FormReply):
            return picked.to_json()
        if len(self.fields) > 1:
            raise AnswerError("this question has several fields; press Answer to fill them in")
        content: dict[str, Any] = {self.fields[0].name: picked} if self.fields else {}
        return FormReply(action="accept", content=content).to_json()

    def validate_reply(self, data: Any) -> str:
        """Check resume data against the form; returns it normalized (values typed). ``data`` is a reply made by
        :meth:`reply`, or (for a form of one field or none) the plain answer, a text or a list of labels.
        Raises :class:`AnswerError` naming the first problem of each field."""
        raw = _reply_object(data)
        if raw is None:
            if isinstance(data, str) or (isinstance(data, list) and all(isinstance(x, str) for x in data)):
                raw = json.loads(self.reply(data))
            else:
                raise AnswerError("the answer to a form must be its reply, a text or a list of labels")
        if raw["action"] == "decline":
            return FormReply(action="decline").to_json()
        content = raw.get("content") or {}
        if not isinstance(content, dict):
            raise AnswerError("the reply's content must be an object")
        problems = self.problems(content)
        if problems:
            raise AnswerError("; ".join(f"{self._title(name)}: {problem}" for name, problem in problems.items()))
        typed = {f.name: _typed(f, content[f.name]) for f in self.fields if not _empty(content.get(f.name))}
        return FormReply(action="accept", content=typed).to_json()

    def problems(self, content: dict[str, Any]) -> dict[str, str]:
        """``{field name: problem}`` for ``content`` (raw values as a person gave them); empty when it is fine."""
        out: dict[str, str] = {}
        for f in self.fields:
            value = content.get(f.name)
            if _empty(value):
                if f.required:
                    out[f.name] = "please fill this in"
                continue
            try:
                _typed(f, value)
            except AnswerError as exc:
                out[f.name] = str(exc)
        return out

    def display(self, data: str) -> str:
        """A short plain-text summary of a reply made by :meth:`validate_reply` (e.g. ``"Declined"``,
        ``"Name: Ada, Count: 3"``, or the one field's value)."""
        reply = FormReply.from_json(data)
        if reply.action != "accept":
            return "Declined" if reply.action == "decline" else "Cancelled"
        if not self.fields:
            return "Done"
        shown = [(f, reply.content[f.name]) for f in self.fields if f.name in reply.content]
        if len(self.fields) == 1:
            return _shown(shown[0][0], shown[0][1]) if shown else "(nothing)"
        return ", ".join(f"{f.title}: {_shown(f, v)}" for f, v in shown) or "(nothing)"

    def _title(self, name: str) -> str:
        return next((f.title for f in self.fields if f.name == name), name)


@dataclass(frozen=True)
class FormReply:
    """A person's reply to a form: ``accept`` with ``content`` (field name -> value), or ``decline``."""

    action: Literal["accept", "decline", "cancel"]
    content: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        """The stored resume data: ``{"action": ..., "content": {...}}`` (content only when accepted)."""
        body: dict[str, Any] = {"action": self.action}
        if self.action == "accept":
            body["content"] = self.content
        return json.dumps(body, ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def from_json(cls, data: str) -> FormReply:
        """Parse a reply made by :meth:`to_json` (anything else reads as ``cancel``)."""
        try:
            raw = json.loads(data)
        except ValueError:
            return cls(action="cancel")
        if not isinstance(raw, dict) or raw.get("action") not in ("accept", "decline", "cancel"):
            return cls(action="cancel")
        content = raw.get("content") if isinstance(raw.get("content"), dict) else {}
        return cls(action=raw["action"], content=content or {})


def _reply_object(data: Any) -> dict[str, Any] | None:
    """``data`` as a reply object (JSON text of ``{"action": "accept" | "decline", ...}``), or None."""
    if not isinstance(data, str) or not data.startswith("{"):
        return None
    try:
        raw = json.loads(data)
    except ValueError:
        return None
    return raw if isinstance(raw, dict) and raw.get("action") in ("accept", "decline") else None


def _field(name: str, prop: Any, required: bool) -> FormField:
    if not isinstance(prop, dict):
        raise FormUnsupported(f"field {name!r} has no schema")
    base: dict[str, Any] = {
        "name": name,
        "title": str(prop.get("title") or name),
        "description": str(prop["description"]) if prop.get("description") else None,
        "required": required,
    }
    kind = prop.get("type")
    if kind == "array":
        options = _options(prop.get("items") or {})
        if options is None:
            raise FormUnsupported(f"field {name!r} is a list of free values; only lists of choices can be asked")
        return FormField(
            **base, kind="choices", options=options, min_items=prop.get("minItems"), max_items=prop.get("maxItems")
        )
    options = _options(prop)
    if options is not None:
        return FormField(**base, kind="choice", options=options)
    if kind == "string":
        return FormField(
            **base,
            kind="text",
            min_length=prop.get("minLength"),
            max_length=prop.get("maxLength"),
            format=prop.get("format"),
        )
    if kind in ("number", "integer"):
        return FormField(**base, kind=kind, minimum=prop.get("minimum"), maximum=prop.get("maximum"))
    if kind == "boolean":
        return FormField(**base, kind="boolean")
    raise FormUnsupported(f"field {name!r} has type {kind!r}, which can't be asked in a form")


def _options(prop: dict[str, Any]) -> list[FieldOption] | None:
    """The choices of ``oneOf`` / ``anyOf`` ``{const, title}``, or of an ``enum`` (titled by ``enumNames``); a
    blank title shows the value. Raises :class:`FormUnsupported` for choices a person could not tell apart (two
    alike, or one's name another's value) or more than :data:`MAX_CHOICES`."""
    pairs: list[tuple[str, Any]] | None = None
    for key in ("oneOf", "anyOf"):
        if isinstance(prop.get(key), list) and all(isinstance(o, dict) and "const" in o for o in prop[key]):
            pairs = [(str(o["const"]), o.get("title")) for o in prop[key]]
            break
    if pairs is None and isinstance(prop.get("enum"), list):
        raw_names = prop.get("enumNames")
        names: list[Any] = raw_names if isinstance(raw_names, list) else []
        pairs = [(str(v), names[i] if i < len(names) else None) for i, v in enumerate(prop["enum"])]
    if pairs is None:
        return None
    options = [FieldOption(value=v, label=str(t).strip() if t is not None and str(t).strip() else v) for v, t in pairs]
    if len(options) > MAX_CHOICES:
        raise FormUnsupported(f"it offers {len(options)} choices; at most {MAX_CHOICES} can be shown")
    labels = [o.label for o in options]
    if len(set(labels)) < len(labels) or len({o.value for o in options}) < len(options):
        raise FormUnsupported("two of its choices are alike")
    if any(o.label != o.value and o.label in {p.value for p in options} for o in options):
        raise FormUnsupported("a choice is named like another choice's value")
    return options


def _empty(value: Any) -> bool:
    return value is None or (isinstance(value, str) and is_blank(value)) or value == []


def _typed(f: FormField, value: Any) -> Any:
    """``value`` (as a person gave it: text, a label, labels) as the field's JSON value. Raises AnswerError."""
    if f.kind == "text":
        return _text(f, value)
    if f.kind in ("number", "integer"):
        return _number(f, value)
    if f.kind == "boolean":
        if isinstance(value, bool):
            return value
        answer = str(value).strip().lower()
        if answer in ("yes", "y", "true"):
            return True
        if answer in ("no", "n", "false"):
            return False
        raise AnswerError("answer Yes or No")
    if f.kind == "choice":
        return _choice(f, value)
    picked = value if isinstance(value, list) else [value]
    values = list(dict.fromkeys(_choice(f, v) for v in picked))
    if f.min_items is not None and len(values) < f.min_items:
        raise AnswerError(f"pick at least {f.min_items}")
    if f.max_items is not None and len(values) > f.max_items:
        raise AnswerError(f"pick at most {f.max_items}")
    return values


def _text(f: FormField, value: Any) -> str:
    if not isinstance(value, str):
        raise AnswerError("must be text")
    text = value.strip()
    if f.min_length is not None and len(text) < f.min_length:
        raise AnswerError(f"at least {f.min_length} characters")
    if f.max_length is not None and len(text) > f.max_length:
        raise AnswerError(f"at most {f.max_length} characters")
    checks = {"email": _is_email, "uri": _is_uri, "date": _is_date, "date-time": _is_datetime}
    check = checks.get(f.format or "")
    if check is not None and not check(text):
        raise AnswerError(f"must be a valid {f.format}")
    return text


def _number(f: FormField, value: Any) -> int | float:
    wanted = "must be a whole number" if f.kind == "integer" else "must be a number"
    if isinstance(value, bool):
        raise AnswerError(wanted)
    text = value if isinstance(value, int | float) else str(value).strip().replace(",", "")
    if f.kind == "integer" and (isinstance(text, int) or (isinstance(text, str) and _INTEGER.match(text))):
        whole = int(text)  # exact, however large (a float would round it)
        _in_range(f, whole)
        return whole
    try:
        number = float(text)
    except (ValueError, OverflowError):
        raise AnswerError(wanted) from None
    if not math.isfinite(number) or (f.kind == "integer" and not number.is_integer()):
        raise AnswerError(wanted)
    _in_range(f, number)
    return int(number) if f.kind == "integer" else number


def _in_range(f: FormField, number: float) -> None:
    """Raise ``AnswerError`` when ``number`` is outside the field's ``minimum`` / ``maximum``."""
    if f.minimum is not None and number < f.minimum:
        raise AnswerError(f"must be at least {f.minimum:g}")
    if f.maximum is not None and number > f.maximum:
        raise AnswerError(f"must be at most {f.maximum:g}")


def _choice(f: FormField, value: Any) -> str:
    """The value of the option ``value`` names: by its label, else its value; exactly, then ignoring case and
    surrounding space."""
    text = str(value)
    loose = text.strip().casefold()
    options = f.options or []
    for found in (
        [o for o in options if o.label == text],
        [o for o in options if o.value == text],
        [o for o in options if o.label.casefold() == loose],
        [o for o in options if o.value.strip().casefold() == loose],
    ):
        if len(found) == 1:
            return found[0].value
    raise AnswerError(f"{text.strip()!r} is not one of the choices")


def _shown(f: FormField, value: Any) -> str:
    """A typed value as the person would recognise it (labels for choices, Yes / No for booleans)."""
    labels = {o.value: o.label for o in f.options or []}
    if isinstance(value, bool):
        return YES if value else NO
    if isinstance(value, list):
        return ", ".join(labels.get(str(v), str(v)) for v in value)
    return labels.get(str(value), str(value))


def _is_email(text: str) -> bool:
    return bool(_EMAIL.match(text))


def _is_uri(text: str) -> bool:
    return bool(re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:\S+$", text))


def _is_date(text: str) -> bool:
    try:
        date.fromisoformat(text)
    except ValueError:
        return False
    return True


def _is_datetime(text: str) -> bool:
    try:
        datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return False
    return True
