"""Slack mrkdwn text: escaping, clipping and splitting within Slack's limits (docs.slack.dev formatting).

- :func:`escape` / :func:`unescape`: Slack's three control characters (``&``, ``<``, ``>``).
- :func:`clip`: shorten with an ellipsis; :func:`split_mrkdwn`: pieces for section blocks (never inside an
  entity); :func:`split_reply`: a long reply cut into messages; :func:`text_length`: what Slack's undocumented
  ~12,000-character cap on a message's blocks counts.
"""

from __future__ import annotations

from typing import Any

SECTION_TEXT = 3000  # Slack: section text <= 3000 (docs.slack.dev reference/block-kit/blocks/section-block)
MARKDOWN_BLOCK = 12000  # Slack: markdown block text <= 12000


def clip(text: str, limit: int) -> str:
    """``text`` shortened to ``limit`` characters with a trailing ellipsis when it was longer."""
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def escape(text: str) -> str:
    """Escape mrkdwn control characters (Slack: ``&``, ``<``, ``>``; docs.slack.dev formatting)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


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
    12,000). Nothing is dropped but whitespace-only pieces; the parts joined give ``text`` back."""
    parts: list[str] = []
    while len(text) > limit:
        window, cut = text[:limit], limit
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
