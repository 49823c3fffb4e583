"""Typed answers: what a person's reply in the thread means for the open question.

For free-form and single-choice questions the reply is the answer as typed. For a multi-choice question the
reply names the options (:func:`labels_in_text`).
"""

from __future__ import annotations

import re


def labels_in_text(text: str, labels: list[str]) -> list[str] | None:
    """The options a typed multi-select answer names, in the order typed, or None when it names anything else.

    Pieces are separated by commas, semicolons or new lines; each is an option's label (exactly, else
    ignoring case when that is unambiguous; a trailing full stop is forgiven) or its number in the list
    (1-based, as the plain-text question shows them). Labels that themselves contain a separator are
    recognised where they appear verbatim.
    """
    folded: dict[str, list[str]] = {}
    for label in labels:
        folded.setdefault(label.casefold(), []).append(label)

    def match(piece: str) -> str | None:
        if piece in labels:
            return piece
        same = folded.get(piece.casefold(), [])
        if len(same) == 1:
            return same[0]
        if piece.isascii() and piece.isdigit() and 1 <= int(piece) <= len(labels):
            return labels[int(piece) - 1]
        return None

    whole = match(text.strip())
    if whole is not None:
        return [whole]
    picked: list[tuple[int, str]] = []
    rest = text
    for label in sorted((x for x in labels if re.search(r"[,;\n]", x)), key=len, reverse=True):
        while (at := rest.find(label)) != -1:
            picked.append((at, label))
            rest = rest[:at] + "\n" * len(label) + rest[at + len(label) :]  # keeps positions
    for found in re.finditer(r"[^,;\n]+", rest):
        piece = found.group().strip()
        if not piece:
            continue
        named = match(piece) or (match(piece[:-1].strip()) if piece.endswith(".") else None)
        if named is None:
            return None
        picked.append((found.start(), named))
    return list(dict.fromkeys(label for _at, label in sorted(picked))) or None
