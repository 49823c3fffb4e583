"""Text rules shared by every place that takes text from a model or a person: what counts as blank
(:func:`is_blank`), lone UTF-16 surrogates made printable (:func:`without_surrogates`), and the longest text an
outside caller may send in each free-text field, one place for every bound.

An outside caller is an agent asking through ``python -m bot mcp`` (``ask_user`` / ``request_approval``). What it
sends is stored with the question's run in Redis (kept ``RUN_RETENTION_SECONDS`` after it ends) and shown in Slack,
so every field has a bound, checked before anything is posted or stored; a call over it is refused with the
field's name and its bound (the SDK's argument validation, also advertised as ``maxLength`` in the tools' input
schemas). The bounds follow what Slack can show (docs.slack.dev reference/block-kit):

- ``question``: :data:`MAX_QUESTION` (the longest question :mod:`bot.slack.render.blocks` shows whole, its first
  budget);
- an option's ``label`` :data:`MAX_OPTION_LABEL`, ``description`` :data:`MAX_OPTION_DESCRIPTION` (shown shortened on
  buttons and menus, whole in the list under the question);
- ``action`` :data:`MAX_ACTION` (one line), ``details`` :data:`MAX_DETAILS` (as text, or its keys and values
  together as key/values) of an approval request;
- ``context`` :data:`MAX_CONTEXT` (quoted above the question); ``request_key`` :data:`MAX_REQUEST_KEY`;
  ``channel`` / ``user`` :data:`MAX_SLACK_ID` (Slack ids, or ``<#C…|name>`` / ``<@U…>`` mentions).
"""

from __future__ import annotations

import re
import unicodedata
from typing import Annotated, Any

from pydantic import AfterValidator, Field

INVISIBLE = frozenset(
    [
        *(0x034F, 0x115F, 0x1160, 0x17B4, 0x17B5, 0x2800, 0x3164, 0xFFA0),
        *range(0x180B, 0x1810),
        *range(0xFE00, 0xFE10),
        *range(0xE0100, 0xE01F0),
    ]
)
"""Code points drawn as nothing though Unicode files them as letters, symbols or marks: the combining grapheme
joiner, the Hangul fillers, Khmer's inherent vowels, the Braille blank, the variation selectors (Mongolian, standard,
supplement)."""


def is_blank(text: str) -> bool:
    """True when ``text`` has no visible character: only Unicode separators (``Z*``: spaces, line and paragraph
    separators), control and format characters (``Cc``, ``Cf``: e.g. a zero-width space or joiner, a bidi mark),
    unassigned/private/surrogate code points (``Cn``, ``Co``, ``Cs``), or the characters of :data:`INVISIBLE`."""
    return all(unicodedata.category(ch)[0] in "ZC" or ord(ch) in INVISIBLE for ch in text)


_SURROGATE = re.compile("[\ud800-\udfff]")


def without_surrogates(text: str) -> str:
    """``text`` with every lone UTF-16 surrogate (``U+D800..U+DFFF``: half an emoji, which a server's JSON can carry
    as ``"\\ud83d"`` alone) replaced by ``U+FFFD``. Python cannot encode a lone surrogate as UTF-8, so such a
    string fails every later step: the next model request, the run's save in Redis, the post to Slack."""
    return _SURROGATE.sub("\ufffd", text) if _SURROGATE.search(text) else text


def json_without_surrogates(value: Any) -> Any:
    """:func:`without_surrogates` on every string (keys included) of a JSON value; other values as they are."""
    if isinstance(value, str):
        return without_surrogates(value)
    if isinstance(value, list):
        return [json_without_surrogates(v) for v in value]
    if isinstance(value, dict):
        return {without_surrogates(str(k)): json_without_surrogates(v) for k, v in value.items()}
    return value


def nested_deeper_than(value: Any, limit: int) -> bool:
    """Whether a parsed JSON value has containers more than ``limit`` deep (the value itself is depth 1);
    iterative, so any depth json.loads accepted is measured without recursion."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False


MAX_QUESTION = 6000
MAX_OPTION_LABEL = 300
MAX_OPTION_DESCRIPTION = 1000
MAX_ACTION = 300
MAX_DETAILS = 3000
MAX_CONTEXT = 2000
MAX_REQUEST_KEY = 200
MAX_SLACK_ID = 200


def _details_size(value: str | dict[str, str] | None) -> str | dict[str, str] | None:
    """Key/value ``details`` count their keys and values together against :data:`MAX_DETAILS`."""
    if isinstance(value, dict):
        size = sum(len(k) + len(v) for k, v in value.items())
        if size > MAX_DETAILS:
            raise ValueError(f"details must have at most {MAX_DETAILS} characters in its keys and values (got {size})")
    return value


Question = Annotated[str, Field(max_length=MAX_QUESTION)]
OptionLabel = Annotated[str, Field(min_length=1, max_length=MAX_OPTION_LABEL)]
OptionDescription = Annotated[str, Field(max_length=MAX_OPTION_DESCRIPTION)]
Action = Annotated[str, Field(min_length=1, max_length=MAX_ACTION, pattern=r"^[^\n]*$")]
Details = Annotated[Annotated[str, Field(max_length=MAX_DETAILS)] | dict[str, str], AfterValidator(_details_size)]
AskContext = Annotated[str, Field(max_length=MAX_CONTEXT)]
RequestKey = Annotated[str, Field(max_length=MAX_REQUEST_KEY)]
SlackTarget = Annotated[str, Field(max_length=MAX_SLACK_ID)]
