"""A reply made safe piece by piece while it streams: :class:`StreamText`.

Streamed text can't be rewritten once appended (``chat.appendStream`` only adds), and Slack renders a streamed
message's whole text as one Markdown document, so every piece must stay safe next to the pieces before and after
it. :func:`bot.slack.render.safe_text.safe_markdown` works on a whole text; cut at the right places it works on pieces:

- a cut falls after a space or a newline, so no word, mention (``<@U1>``), entity (``&lt;``), emoji code or
  ``@here`` is split. Text written without spaces (Chinese, Japanese, Thai) is cut inside its runs too
  (:func:`last_cut`): after CJK punctuation (:data:`CJK_PUNCTUATION`) among the last :data:`SOFT_RUN` characters,
  else between two non-ASCII characters; never inside a character as people see it (a base and its combining
  marks, an emoji ZWJ sequence, a flag: :func:`joined`), in a bare URL or in what may be an emoji code
  (``:名前:``). A run with none of those cuts longer than :data:`HOLD_LIMIT` (a 30,000-character blob, a long
  URL) is cut inside a long run of letters or digits not after ``&``, ``#`` or ``:``. So a piece ends after
  whitespace, CJK punctuation, a non-ASCII character or a letter or digit: never after a ``\\`` (which would
  unescape the next piece's ``[``), inside an ``&…;`` entity or an ``@here``;
- never while a ``<`` (or its entity form ``&lt;``) is open: Slack's ``<url|text>`` link may run over words, lines
  and paragraphs (its text is anything but ``<`` and ``>``), so an open one is held back until it closes, for at
  most :data:`HOLD_LIMIT` characters; past that, and at the end of a model turn, its ``<`` is sealed with a word
  joiner (``<\\u2060``, invisible: Slack makes no link or mention of it);
- a piece that starts inside a fenced code block is made safe as code (a fence line is put before it while it is
  made safe, then taken off), so code stays code and gets no link-host notes.

The rest of what safe_markdown does is local to a piece: controls go per character, every ``<!`` / ``<@`` is broken
whether closed or not, every ``[`` and ``]`` is escaped (no Markdown link can form across pieces; a piece never ends
in the middle of a run of ASCII punctuation, so no ``\\`` at its end can unescape the next piece's ``[``), and a bare
``@here`` needs no context. :meth:`StreamText.raw` keeps what was written, for renderings of the whole text.
"""

from __future__ import annotations

import re

from bot.slack.render.mrkdwn import joined
from bot.slack.render.safe_text import WORD_JOINER, safe_markdown

HOLD_LIMIT = 2000  # characters an open ``<`` may hold a piece back (a Slack link's URL and text fit easily)
_OPEN = re.compile(r"<|&(?:lt|#0*60|#x0*3c);", re.IGNORECASE)
_CLOSE = re.compile(r">|&(?:gt|#0*62|#x0*3e);", re.IGNORECASE)
_LINK_END_OPEN, _LINK_END_CLOSE = re.compile(r"\]\("), re.compile(r"\)")  # a Markdown link's "](url ...)"
_FENCE = re.compile(r"[ ]{0,3}(`{3,}|~{3,})([^\n]*)")
SOFT_RUN = 24  # characters after CJK punctuation a cut there may hold back (else: between two letters)
EMOJI_NAME = 100  # characters after a ":" held as a possible emoji code's name (a generous bound)
LONG_WORD = 9  # letters or digits before a cut inside a long run (longer than "everyone", so no @here is split)
# CJK and fullwidth punctuation a sentence or clause ends with (and the closing brackets after it).
CJK_PUNCTUATION = frozenset("。、，．！？；：…‥」』）】〕〉》〗〙〛｝］｣､｡")  # noqa: RUF001 - fullwidth on purpose
_NON_ASCII = re.compile(r"[^\x00-\x7f]")
_LONG_RUN = re.compile(rf"[^\W_]{{{LONG_WORD + 1},}}")  # letters or digits (str.isalnum) long enough for a cut
_RUN_END = re.compile(r"[\W_]")
# A bare link Slack may make. Its scheme bounded (32 characters: RFC 3986 sets none, none in use is near it): an
# unbounded one was tried from every letter of a long run without "://" and backtracked over the rest of it, so a
# 40 KB hash or minified line streamed in 20-character deltas held the event loop for tens of seconds.
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]{0,31}://|mailto:|www\.", re.IGNORECASE)


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
        cut = last_cut(text, len(text))
        opened = _held_at(text[:cut])
        if opened is not None and cut - opened > HOLD_LIMIT:  # no Slack link is that long: text, sealed
            return cut, True
        while opened is not None and cut > 0:  # back to a cut with nothing open before it (constructs nest)
            cut = last_cut(text, opened)
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


def last_cut(text: str, end: int) -> int:
    """The last place at or before ``end`` (an index of ``text``) where ``text`` may be cut between two pieces (0:
    none): after its last space or newline, or, in the run of ``text[:end]`` after it that has neither (text
    written without spaces), a cut the module docstring describes. A cut inside the run needs the character after
    it (it may be a combining mark), so it is never at the end of ``text``."""
    spaced = max(text.rfind(" ", 0, end), text.rfind("\n", 0, end)) + 1
    last = min(end, len(text) - 1)  # the last index a cut inside the run may have
    if last <= spaced:
        return spaced
    between = 0
    # Both cuts inside the run follow a non-ASCII character: an ASCII run (a hash, base64, a minified line) has
    # neither, and the scan starts after the run's last one. Scanned whole at every take, a 40 KB ASCII run
    # streamed in 20-character deltas held the event loop for seconds.
    if not text[spaced:last].isascii():
        url = _URL.search(text, spaced, last)
        letters_until = url.start() if url else last  # no cut between letters inside a bare link
        start = spaced
        for non_ascii in _NON_ASCII.finditer(text, spaced, letters_until):
            start = non_ascii.end()  # the last one's
        colons = text.count(":", spaced, start)  # colons: in text[spaced:at]
        for at in range(start, spaced, -1):
            colons -= at < start and text[at] == ":"
            in_emoji = colons % 2 == 1 and at - text.rfind(":", max(spaced, at - EMOJI_NAME - 1), at) <= EMOJI_NAME + 1
            if text[at - 1] in CJK_PUNCTUATION and not joined(text, at) and not in_emoji:
                return at  # punctuation as near the end as any other cut: preferred
            if not between and _between_letters(text, at) and not in_emoji:
                between = at
            if between and between - at > SOFT_RUN:
                break  # punctuation further back would hold too much back
    if between:
        return between
    if last - spaced > HOLD_LIMIT:  # a run too long for anything people read: cut inside a long word
        return _last_cut_in_long_word(text, spaced, last) or spaced
    return spaced


def _between_letters(text: str, at: int) -> bool:
    """A cut between two non-ASCII characters of one run (no ASCII syntax, entity, emoji code or ``\\`` is
    beside it), not inside a character as people see it."""
    before, after = text[at - 1], text[at]
    return not before.isascii() and not after.isascii() and not after.isspace() and not joined(text, at)


def _last_cut_in_long_word(text: str, start: int, last: int) -> int:
    """The last cut in ``text[start:last + 1]`` inside a run of letters or digits (any script) with at least
    :data:`LONG_WORD` of them before it, the run not after ``&``, ``#`` (an entity such as ``&#00060;``) or
    ``:`` (an emoji code, within :data:`EMOJI_NAME`), nor inside a character as people see it; 0 when none. The runs
    are found by one search (a run too short for a cut is never looked at) over the last 2 x :data:`HOLD_LIMIT`
    characters: read a character at a time over the whole run, a held run with no cut (minified JSON, a line of
    brackets) cost a pass in Python at every take, 10 to 60 s of event loop for 30 KB streamed in small deltas."""
    window = max(start, last + 1 - 2 * HOLD_LIMIT)  # a cut further back would hold that much text: none looked for
    for run in reversed([m.start() for m in _LONG_RUN.finditer(text, window, last + 1)]):
        ended = _RUN_END.search(text, run)
        at = min(ended.start() - 1 if ended else len(text) - 1, last)  # the run's last cut: a letter or digit after
        begun = run
        if run == window > start and text[run - 1].isalnum():  # begun before the window: where it truly begins
            back = _RUN_END.search(text[start:run][::-1])
            begun = run - (back.start() if back else run - start)
        before = text[begun - 1] if begun > 0 else ""  # what it follows ("&#" with any number of zeros after it is
        # an entity: a cut inside it, the pieces' concatenation decodes to "<")
        if before in ("&", "#") or (before == ":" and at - begun <= EMOJI_NAME):
            continue
        for cut in range(at, max(begun + LONG_WORD, start + 1) - 1, -1):
            if not joined(text, cut):
                return cut
    return 0


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
