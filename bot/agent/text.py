"""Text rules shared by every place that takes text from a model or a person."""

from __future__ import annotations

import unicodedata


def is_blank(text: str) -> bool:
    """True when ``text`` has no visible character: only Unicode separators (``Z*``: spaces, line and paragraph
    separators), control and format characters (``Cc``, ``Cf``: e.g. a zero-width space or joiner, a bidi mark),
    or unassigned/private/surrogate code points (``Cn``, ``Co``, ``Cs``)."""
    return all(unicodedata.category(ch)[0] in "ZC" for ch in text)
