"""Text rules shared by every place that takes text from a model or a person."""

from __future__ import annotations

import re
import unicodedata
from typing import Any


def is_blank(text: str) -> bool:
    """True when ``text`` has no visible character: only Unicode separators (``Z*``: spaces, line and paragraph
    separators), control and format characters (``Cc``, ``Cf``: e.g. a zero-width space or joiner, a bidi mark),
    or unassigned/private/surrogate code points (``Cn``, ``Co``, ``Cs``)."""
    return all(unicodedata.category(ch)[0] in "ZC" for ch in text)


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
