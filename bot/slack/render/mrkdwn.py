"""Slack mrkdwn text: escaping, clipping and splitting within Slack's limits (docs.slack.dev formatting).

- :func:`escape` / :func:`unescape`: text made safe for mrkdwn (:func:`bot.slack.render.safe_text.safe_mrkdwn`: Slack's
  three control characters escaped, controls removed, bare broadcasts broken) and Slack's entities read back.
- :func:`clip`: shorten with an ellipsis; :func:`clip_mrkdwn`: the same for escaped mrkdwn (never inside an
  entity); :func:`distinct_clips`: labels shortened so that no two look alike; :func:`split_mrkdwn`: pieces for
  section blocks (never inside an entity); :func:`split_reply`: a long reply cut into messages;
  :func:`text_length`: what Slack's undocumented ~12,000-character cap on a message's blocks counts.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from typing import Any

from bot.agent.text import INVISIBLE
from bot.slack.render.safe_text import safe_mrkdwn

SECTION_TEXT = 3000  # Slack: section text <= 3000 (docs.slack.dev reference/block-kit/blocks/section-block)
MARKDOWN_BLOCK = 12000  # Slack: markdown block text <= 12000


def clip(text: str, limit: int) -> str:
    """``text`` shortened to ``limit`` characters with a trailing ellipsis when it was longer, never inside a
    character people see as one (:func:`whole_cut`: an emoji sequence, a letter and its accents, a flag)."""
    return text if len(text) <= limit else text[: whole_cut(text, limit - 1)].rstrip() + "…"


_EXTEND = ((0xFE00, 0xFE0F), (0xE0100, 0xE01EF), (0x1F3FB, 0x1F3FF), (0xE0020, 0xE007F))  # VS, skin tones, tags


def _regional(c: str) -> bool:
    return 0x1F1E6 <= ord(c) <= 0x1F1FF  # a regional indicator: a flag is two


def joined(text: str, at: int) -> bool:
    """Whether ``text[at - 1]`` and ``text[at]`` (``0 < at < len(text)``) belong to one character as people see it
    (Unicode UAX #29's extended grapheme clusters, as far as Slack text needs them: a combining mark, a variation
    selector, an emoji modifier or tag, a Thai/Lao SARA AM or a Hangul vowel/final jamo after its base; either side
    of a zero width joiner; a flag's two regional indicators (counted from the run's start: two flags in a row are
    two characters); CR LF; a Hangul leading jamo before the rest). The one rule for every cut of text
    (:func:`whole_cut`, :mod:`bot.slack.render.stream_text`)."""
    before, after = text[at - 1], text[at]
    if before == "\u200d" or after == "\u200d" or (before, after) == ("\r", "\n"):
        return True
    code, prev = ord(after), ord(before)
    if unicodedata.category(after) in ("Mn", "Mc", "Me") or after in "\u0e33\u0eb3":
        return True
    if any(low <= code <= high for low, high in _EXTEND):
        return True
    if _regional(before) and _regional(after):
        run = 1
        while at - run - 1 >= 0 and _regional(text[at - run - 1]):
            run += 1
        return run % 2 == 1  # an odd run before: text[at] is the second half of a flag
    if 0x1160 <= code <= 0x11FF or 0xD7B0 <= code <= 0xD7FF:  # Hangul vowel and final jamo
        return True
    return 0x1100 <= prev <= 0x115F or 0xA960 <= prev <= 0xA97F  # a Hangul leading jamo starts a syllable


def whole_cut(text: str, cut: int) -> int:
    """``cut`` (an index into ``text``, clamped to 0..len) moved back so that ``text[:cut]`` ends on a whole
    character as people see it (:func:`joined`): never an emoji sequence, a flag or a letter's accents cut."""
    cut = max(0, min(cut, len(text)))
    while 0 < cut < len(text) and joined(text, cut):
        cut -= 1
    return cut


def escape(text: str) -> str:
    """``text`` (from the model or a person) as mrkdwn that shows what was written and pings nobody: Slack's
    control characters ``&``, ``<``, ``>`` escaped, bidi and control characters removed, bare ``@here`` /
    ``@channel`` / ``@everyone`` broken (:func:`bot.slack.render.safe_text.safe_mrkdwn`, user mentions not allowed)."""
    return safe_mrkdwn(text)


def clip_mrkdwn(text: str, limit: int) -> str:
    """Escaped mrkdwn ``text`` shortened to ``limit`` characters with a trailing ellipsis when longer, never cut
    inside an ``&...;`` entity or a ``<...>`` mention (which would show half of it, or break what follows)."""
    if len(text) <= limit:
        return text
    cut = limit - 1
    amp = text.rfind("&", max(0, cut - 6), cut)
    if amp != -1 and ";" not in text[amp:cut]:
        cut = amp
    angle = text.rfind("<", 0, cut)
    if angle != -1 and ">" not in text[angle:cut]:
        cut = angle
    return text[:cut].rstrip() + "…"


def unescape(text: str) -> str:
    """Slack's escaped message text back to what the person typed (``&lt;`` ``&gt;`` ``&amp;``)."""
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def split_mrkdwn(text: str, limit: int = SECTION_TEXT) -> list[str]:
    """Split escaped mrkdwn into pieces of <= ``limit`` chars, never inside an ``&...;`` entity."""
    pieces: list[str] = []
    while len(text) > limit:
        cut = limit
        amp = text.rfind("&", cut - 5, cut)
        if amp != -1 and ";" not in text[amp:cut]:
            cut = amp
        newline = text.rfind("\n", cut - 200, cut)
        cut = newline + 1 if newline > 0 else cut
        pieces.append(text[:cut])
        text = text[cut:]
    return [*pieces, text] if text else pieces


def text_length(blocks: Any) -> int:
    """The characters of every ``text`` string in ``blocks`` (what Slack's ~12,000 limit counts)."""
    if isinstance(blocks, dict):
        return sum(len(v) if k == "text" and isinstance(v, str) else text_length(v) for k, v in blocks.items())
    if isinstance(blocks, list):
        return sum(text_length(item) for item in blocks)
    return 0


def split_reply(text: str, limit: int = MARKDOWN_BLOCK) -> list[str]:
    """A long reply cut into messages of <= ``limit`` chars, at a paragraph, line or word break when there
    is one in the last quarter (Slack truncates a message's text beyond 40,000 chars; a markdown block holds
    12,000), else near the limit but never inside a character as people see it (:func:`whole_cut`) nor right
    after a backslash (the message would end in a stray ``\\`` and the next begin with the bracket it escaped,
    bare). Nothing is dropped but whitespace-only pieces; the parts joined give ``text`` back."""
    parts: list[str] = []
    while len(text) > limit:
        window, cut = text[:limit], whole_cut(text, limit)
        while cut > 1 and text[cut - 1] == "\\":
            cut -= 1
        cut = max(cut, 1)
        for sep in ("\n\n", "\n", " "):  # the coarsest break in the last quarter: a paragraph, a line, a word
            at = window.rfind(sep)
            if at > limit * 3 // 4:
                cut = at + len(sep)
                break
        parts.append(text[:cut])
        text = text[cut:]
    parts.append(text)
    kept = [part for part in parts if part.strip()]
    return kept or [text]


def distinct_clips(texts: Sequence[str], limit: int) -> list[str]:
    """``texts`` (plain, distinct) shortened to ``limit`` characters each so that no two look alike.

    Each is :func:`clip`-ped; texts whose clips look alike (:func:`_look`) show instead their head, an ellipsis
    and the part that tells them from their nearest look-alike (``"Deploy the…option two: …"``); any still alike
    are numbered (``"3. Deploy…"``), which always tells them apart. Display only: clicks carry the option index.
    ``limit`` is Slack's text limit, e.g. 75 (Slack: option text <= 75 chars, docs.slack.dev
    reference/block-kit/composition-objects/option-object; button text <= 75, .../block-elements/button-element).
    """
    shown = [clip(text, limit) for text in texts]
    for group in _alike(shown):
        ordered = sorted(group, key=lambda i: texts[i])
        for rank, i in enumerate(ordered):
            neighbours = [texts[j] for j in ordered[max(0, rank - 1) : rank + 2] if j != i]
            at = max(_common_prefix(texts[i], other) for other in neighbours)
            shown[i] = _head_and_difference(texts[i], at, limit)
    numbered: set[int] = set()
    while groups := [left for group in _alike(shown) if (left := [i for i in group if i not in numbered])]:
        for i in (i for group in groups for i in group):
            number = f"{i + 1}. "
            shown[i] = number + clip(shown[i], limit - len(number))
            numbered.add(i)
    return shown


# Letters of other scripts that look like Latin ones (the common part of Unicode's confusables list).
_HOMOGLYPHS = str.maketrans(
    "аеорсухіјѕԁԛԝАВЕКМНОРСТХІЈЅΑΒΕΖΗΙΚΜΝΟΡΤΥΧοϲνᴠ",  # noqa: RUF001 - look-alikes on purpose
    "aeopcyxijsdqwABEKMHOPCTXIJSABEZHIKMNOPTYXocvv",
)


def _look(text: str) -> str:
    """What a person sees of ``text``: composed and decomposed forms alike (NFKC), look-alike letters of other
    scripts as their Latin twins, whitespace runs as one space, invisible format characters (``Cf``) and the
    characters drawn as nothing that Unicode files otherwise (:data:`bot.agent.text.INVISIBLE`: variation selectors,
    the combining grapheme joiner; ``"ok"`` and ``"ok\ufe0f"`` were two buttons reading alike) gone."""
    visible = "".join(
        ch
        for ch in unicodedata.normalize("NFKC", text)
        if unicodedata.category(ch) != "Cf" and ord(ch) not in INVISIBLE
    )
    return " ".join(visible.translate(_HOMOGLYPHS).split())


def _alike(shown: Sequence[str]) -> list[list[int]]:
    """Groups (two or more indexes) of ``shown`` texts that look the same."""
    groups: dict[str, list[int]] = {}
    for i, text in enumerate(shown):
        groups.setdefault(_look(text), []).append(i)
    return [group for group in groups.values() if len(group) > 1]


def _common_prefix(a: str, b: str) -> int:
    """How many leading characters ``a`` and ``b`` share."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _head_and_difference(text: str, at: int, limit: int) -> str:
    """``text`` in ``limit`` characters: its first third, an ellipsis, then from the start of the word before the
    one holding character ``at`` (where it differs from its look-alike; its end when ``at`` is past it), clipped:
    ``"AAAA…A option 7 of many"`` -> ``"AAAA…option 7 of many"``."""
    if len(text) <= limit:
        return text
    head = text[: limit // 3].rstrip()
    room = limit - len(head) - 1
    if at >= len(text):
        start = len(text) - room
    else:
        word = text.rfind(" ", max(0, at - 16), at)  # the space before the word holding ``at``
        space = text.rfind(" ", max(0, at - 16), word) if word != -1 else -1
        start = space + 1 if space != -1 else word + 1 if word != -1 else at
    tail = text[max(start, len(head)) :]
    return head + "…" + (tail if len(tail) <= room else tail[: room - 1].rstrip() + "…")


def how_long(seconds: float) -> str:
    """A duration as people read it: ``"40 s"``, ``"3 min"``, ``"2 h"``, ``"1 d"`` (rounded down, at least 1 s)."""
    whole = max(0, int(seconds))
    if whole < 60:
        return f"{max(1, whole)} s"
    if whole < 3600:
        return f"{whole // 60} min"
    if whole < 86400:
        return f"{whole // 3600} h"
    return f"{whole // 86400} d"
