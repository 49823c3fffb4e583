"""A reply made safe piece by piece while it streams: :class:`StreamText`.

Streamed text can't be rewritten once appended (``chat.appendStream`` only adds), and Slack renders a streamed
message's whole text as one Markdown document, so every piece must stay safe next to the pieces before and after
it. :func:`bot.slack.render.safe_text.safe_markdown` works on a whole text; cut at the right places it works on pieces:

- a cut falls only after a space or a newline, so no word, mention (``<@U1>``), entity (``&lt;``), emoji code or
  ``@here`` is split;
- never while a ``<`` (or its entity form ``&lt;``) is open: Slack's ``<url|text>`` link may run over words, lines
  and paragraphs (its text is anything but ``<`` and ``>``), so an open one is held back until it closes, for at
  most :data:`HOLD_LIMIT` characters; past that, and at the end of a model turn, its ``<`` is sealed with a word
  joiner (``<\\u2060``, invisible: Slack makes no link or mention of it);
- a piece that starts inside a fenced code block is made safe as code (a fence line is put before it while it is
  made safe, then taken off), so code stays code and gets no link-host notes.

The rest of what safe_markdown does is local to a piece: controls go per character, every ``<!`` / ``<@`` is broken
whether closed or not, every ``[`` and ``]`` is escaped (no Markdown link can form across pieces), and a bare
``@here`` needs no context. :meth:`StreamText.raw` keeps what was written, for renderings of the whole text.
"""

from __future__ import annotations

import re

from bot.slack.render.safe_text import WORD_JOINER, safe_markdown

HOLD_LIMIT = 2000  # characters an open ``<`` may hold a piece back (a Slack link's URL and text fit easily)
_OPEN = re.compile(r"<|&(?:lt|#0*60|#x0*3c);", re.IGNORECASE)
_CLOSE = re.compile(r">|&(?:gt|#0*62|#x0*3e);", re.IGNORECASE)
_LINK_END_OPEN, _LINK_END_CLOSE = re.compile(r"\]\("), re.compile(r"\)")  # a Markdown link's "](url ...)"
_FENCE = re.compile(r"[ ]{0,3}(`{3,}|~{3,})([^\n]*)")


class StreamText:
    """The text of one streamed reply: :meth:`add` what the model wrote, :meth:`take` what can be sent now.

    ``allow_user_mentions``: whether ``<@U…>`` may ping (the operator's setting, as for whole replies).
    """

    def __init__(self, *, allow_user_mentions: bool = False) -> None:
        self.allow_user_mentions = allow_user_mentions
        self._pending = ""  # written, not yet taken
        self._taken: list[str] = []  # raw pieces taken, in order
        self.taken = 0  # how many characters of :attr:`raw` were taken
        self._fence: str | None = None  # the fence (e.g. "```") the taken text ends inside, if any
        self._line = ""  # the taken text's last, unfinished line

    @property
    def raw(self) -> str:
        """Everything written so far (taken or not), as the model wrote it."""
        return "".join(self._taken) + self._pending

    @property
    def pending(self) -> str:
        """What was written and not taken yet."""
        return self._pending

    def add(self, text: str) -> None:
        """Append the model's ``text``."""
        self._pending += text

    def take(self, *, final: bool = False) -> str:
        """The safe Markdown of what can be sent now: the longest prefix of the pending text that ends at a safe
        cut (``""`` when there is none yet); ``final``: all of it, an open ``<`` sealed (the end of a model turn:
        the next turn's text must not close it)."""
        cut, seal = (len(self._pending), True) if final else self._cut()
        if cut <= 0:
            return ""
        piece, self._pending = self._pending[:cut], self._pending[cut:]
        safe = self._safe(piece)
        self._advance(piece)
        self._taken.append(piece)
        self.taken += len(piece)
        return _seal(safe) if seal else safe

    def _cut(self) -> tuple[int, bool]:
        """``(where the pending text may be cut, whether the piece's open ``<`` must be sealed)``."""
        text = self._pending
        cut = max(text.rfind(" "), text.rfind("\n")) + 1
        opened = _held_at(text[:cut])
        if opened is not None and cut - opened > HOLD_LIMIT:  # no Slack link is that long: text, sealed
            return cut, True
        while opened is not None and cut > 0:  # back to a cut with nothing open before it (constructs nest)
            cut = max(text.rfind(" ", 0, opened), text.rfind("\n", 0, opened)) + 1
            opened = _held_at(text[:cut])
        return cut, False

    def _safe(self, piece: str) -> str:
        if self._fence is None:
            return safe_markdown(piece, allow_user_mentions=self.allow_user_mentions)
        context = self._fence + "\n"
        safe = safe_markdown(context + piece, allow_user_mentions=self.allow_user_mentions)
        return safe[len(context) :] if safe.startswith(context) else safe

    def _advance(self, piece: str) -> None:
        """Follow fenced code blocks over ``piece`` (CommonMark: a fence of 3+ backticks or tildes opens; one of
        the same character, at least as long, with nothing after it, closes)."""
        for part in piece.splitlines(keepends=True):
            line, self._line = self._line + part, ""
            if not line.endswith("\n"):
                self._line = line
                continue
            fence = _FENCE.fullmatch(line.rstrip("\n"))
            if fence is None:
                continue
            mark, rest = fence.group(1), fence.group(2)
            if self._fence is None and not (mark[0] == "`" and "`" in rest):
                self._fence = mark
            elif self._fence is not None and mark[0] == self._fence[0] and len(mark) >= len(self._fence):
                self._fence = None if not rest.strip() else self._fence


def _held_at(text: str) -> int | None:
    """Where the first construct still open at the end of ``text`` starts (a Slack ``<…>``, or a Markdown link's
    ``](url "title")``, which gets its host note once closed), or None."""
    opened = [at for at in (_open_at(text), _open_at(text, _LINK_END_OPEN, _LINK_END_CLOSE)) if at is not None]
    return min(opened) if opened else None


def _open_at(text: str, opener: re.Pattern[str] = _OPEN, closer: re.Pattern[str] = _CLOSE) -> int | None:
    """Where the last ``opener`` (by default ``<`` or ``&lt;``) of ``text`` starts when no ``closer`` (``>`` or
    ``&gt;``) follows it, else None."""
    last = None
    for last in opener.finditer(text):  # noqa: B007 - the last match is the one wanted
        pass
    if last is None or closer.search(text, last.end()) is not None:
        return None
    return last.start()


def _seal(safe: str) -> str:
    """``safe`` with a word joiner after its open ``<`` (or ``&lt;``), so no later text can close it."""
    opened = _open_at(safe)
    if opened is None:
        return safe
    end = _OPEN.match(safe, opened)
    assert end is not None
    if safe.startswith(WORD_JOINER, end.end()):  # safe_markdown broke it already
        return safe
    return safe[: end.end()] + WORD_JOINER + safe[end.end() :]
