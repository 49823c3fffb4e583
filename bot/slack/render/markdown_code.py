"""Where a Markdown reply is code: the one place that reads fenced code blocks and code spans.

Two uses:

- a long reply cut into messages (:func:`bot.slack.render.mrkdwn.split_reply`, a streamed reply's messages): a cut
  inside a fenced code block closes it there, and the next message opens it again (:class:`Fence`);
- which characters are code for certain (:class:`CodeReader`), so that brackets there show as written (``arr[0]``)
  while everywhere else they are escaped and no Markdown link can form
  (:func:`bot.slack.render.safe_text.escape_brackets`).

Slack's markdown block takes "standard Markdown" (docs.slack.dev reference/block-kit/blocks/markdown-block) and its
docs say nothing of code. In CommonMark (0.31: 4.5 fenced code blocks, 6.1 code spans) nothing inside code is a link
and a backslash there is shown, so code is shown as written only if nothing is escaped in it. A renderer must never
see prose where this module sees code (a link could form there), so code is read narrowly, the same whether the
renderer knows HTML blocks, GFM tables or tilde fences or not, and whatever list item a fence is in:

- a fenced block opened by a line of 3+ backticks indented at most 3 spaces (its info string holds no backtick),
  outside a possible HTML block (a line starting with ``<``, to its end condition or a blank line): its lines up to
  the closing fence, while each is blank or indented at least as much as the opening fence (less: the list item
  the fence is in may have ended);
- a code span whose backtick strings pair on one line (a span over lines depends on where the paragraph ends), with
  no ``|`` in it (a table cell may end there), after no unpaired backtick string and no ``<`` (an HTML tag or
  autolink may hold a backtick) in its paragraph.

Tilde fences are followed (a cut closes and reopens them) but what they hold is read as prose. Where two readings
part for good (a fence-like line in a possible HTML block or in a tilde block, a line of a fenced block indented
less than its fence), nothing after it is code for certain.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass

_FENCE = re.compile(r"([ ]{0,3})(`{3,}|~{3,})(.*)")  # CommonMark 4.5: a fence line, up to 3 spaces indented
_RUN = re.compile(r"`+")
_HTML_ENDS = (  # CommonMark 4.6: HTML blocks 1-5 and what ends them; any other "<" line ends at a blank line
    (
        re.compile(r"<(?:script|pre|style|textarea)(?:[\s>]|$)", re.I),
        re.compile(r"</(?:script|pre|style|textarea)>", re.I),
    ),
    (re.compile(r"<!--"), re.compile(r"-->")),
    (re.compile(r"<\?"), re.compile(r"\?>")),
    (re.compile(r"<!\[CDATA\["), re.compile(r"\]\]>")),
    (re.compile(r"<![A-Za-z]"), re.compile(r">")),
)
_BLANK_ENDS = re.compile(r"^\s*$")  # HTML blocks 6 and 7 end at a blank line
_HTML_START = re.compile(r"[ ]{0,3}<[A-Za-z/!?]")


@dataclass(frozen=True)
class Fence:
    """A fenced code block's opening line: ``indent`` (0-3 spaces), ``mark`` (3+ backticks or tildes) and ``info``
    (what follows the mark, e.g. ``"python"``)."""

    indent: str
    mark: str
    info: str

    @property
    def opening(self) -> str:
        """The opening line, newline included: ``"```python\\n"``."""
        return f"{self.indent}{self.mark}{self.info}\n"

    @property
    def closing(self) -> str:
        """A line that closes the block (no newline): ``"```"``."""
        return f"{self.indent}{self.mark}"

    def closed_by(self, line: str) -> bool:
        """Whether ``line`` (no newline) closes the block: the same character, at least as many, then only spaces
        (CommonMark 4.5)."""
        m = _FENCE.fullmatch(line)
        return m is not None and m[2][0] == self.mark[0] and len(m[2]) >= len(self.mark) and not m[3].strip()


def fence_opened_by(line: str) -> Fence | None:
    """The fence ``line`` (no newline) opens, or None: 3+ backticks or tildes after at most 3 spaces; a backtick
    fence's info string holds no backtick (CommonMark 4.5)."""
    m = _FENCE.fullmatch(line)
    if m is None or (m[2][0] == "`" and "`" in m[3]):
        return None
    return Fence(m[1], m[2], m[3])


def open_code_at(line: str) -> int | None:
    """Where, in an unfinished ``line``, code opens that its rest may close: 0 for a line that may be a fence line,
    else the first backtick string no later one on the line pairs with yet; None when there is none (a cut there
    reads the same as the whole line). Backslash escapes are skipped, as CommonMark does outside code."""
    if re.match(r"[ ]{0,3}(?:`{3}|~{3})", line):
        return 0
    i = 0
    while i < len(line):
        if line[i] == "\\":
            i += 2
        elif line[i] == "`":
            run = _RUN.match(line, i)
            assert run is not None
            closing = _closing_run(line, run.end(), len(run[0]))
            if closing is None:
                return i
            i = closing + len(run[0])
        else:
            i += 1
    return None


@dataclass
class CodeReader:
    """Reads Markdown as it comes (:meth:`read`) and tells which characters are code for certain (the module's
    rules). ``fence`` is the fenced block the text read so far is in, as CommonMark reads fences (tilde fences
    too, up to 3 spaces indented, HTML blocks not considered); ``trusted`` is False once two readings may part for
    good."""

    fence: Fence | None = None
    trusted: bool = True
    _html: re.Pattern[str] | None = None  # a possible HTML block is open: the line that ends it
    _unsure: bool = False  # this paragraph had an unpaired backtick string or a "<": no span after it is certain
    _line: str = ""  # the unfinished last line, read again with what follows

    def copy(self) -> CodeReader:
        """An independent reader in the same state."""
        return copy.copy(self)

    def read(self, text: str) -> list[tuple[int, int]]:
        """Read ``text`` (what follows what was read before) and return the ranges ``(start, end)`` of it that are
        code for certain, in order. An unfinished last line is read as far as it goes; a range found in it is
        certain whatever the line goes on with."""
        whole, before = self._line + text, len(self._line)
        lines = whole.split("\n")
        found: list[tuple[int, int]] = []
        at = 0
        for line in lines[:-1]:
            self._read_line(line, at, found, complete=True)
            at += len(line) + 1
        self._line = lines[-1]
        self.copy()._read_line(self._line, at, found, complete=False)
        return [(max(start - before, 0), end - before) for start, end in found if end > before]

    def ended(self) -> Fence | None:
        """The fenced block the text read so far would end inside, were it to end here (its unfinished last line
        read as a whole line)."""
        if not self._line:
            return self.fence
        reader = self.copy()
        reader._read_line(self._line, 0, [], complete=True)
        return reader.fence

    def _read_line(self, line: str, at: int, found: list[tuple[int, int]], *, complete: bool) -> None:
        fence, opened = self.fence, fence_opened_by(line) if complete else None
        if fence is not None and fence.mark[0] == "`":
            if complete and fence.closed_by(line):
                self.fence, self._unsure = None, False
                return
            if line.strip() and len(line) - len(line.lstrip(" ")) < len(fence.indent):
                self.trusted = False  # its list item may have ended: prose to one reader, code to another
            if self.trusted:
                found.append((at, at + len(line)))
            return
        if self._html is not None:  # HTML to a reader of HTML blocks, Markdown to another
            if opened is not None:
                self.trusted = False
            if self._html.search(line):
                self._html = None
        if fence is not None:  # a tilde block: code to CommonMark, prose to a reader without tilde fences
            if complete and fence.closed_by(line):
                self.fence = None
            elif opened is not None and opened.mark[0] == "`":
                self.trusted = False
        elif opened is not None:
            self.fence = opened
            if opened.mark[0] == "`":  # it ends a paragraph in every reading; its info string is not shown
                self._unsure = False
                return
        elif self._html is None and _HTML_START.match(line):
            self._html = next((end for start, end in _HTML_ENDS if start.match(line.lstrip(" "))), _BLANK_ENDS)
            if self._html.search(line, line.index("<") + 2):  # it ends on its first line
                self._html = None
        if not line.strip():
            self._unsure = False  # a blank line ends a paragraph in every reading
            return
        self._spans(line, at, found)

    def _spans(self, line: str, at: int, found: list[tuple[int, int]]) -> None:
        """The code spans of a prose ``line`` that are code for certain (the module's rules)."""
        i = 0
        while i < len(line) and not self._unsure:
            char = line[i]
            if char == "\\":
                i += 2
            elif char == "<":
                self._unsure = True
            elif char == "`":
                run = _RUN.match(line, i)
                assert run is not None
                closing = _closing_run(line, run.end(), len(run[0]))
                if closing is None or "|" in line[run.end() : closing]:
                    self._unsure = True
                    break
                if self.trusted:
                    found.append((at + run.end(), at + closing))
                i = closing + len(run[0])
            else:
                i += 1


def _closing_run(line: str, start: int, size: int) -> int | None:
    """Where the first backtick string of exactly ``size`` at or after ``start`` begins (backslashes are literal
    in a code span, CommonMark 6.1), or None."""
    for run in _RUN.finditer(line, start):
        if len(run[0]) == size:
            return run.start()
    return None
