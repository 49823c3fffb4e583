"""A streamed reply is made safe piece by piece (bot.slack.render.stream_text): whatever the cuts, the pieces together
show no live Slack link, mention or Markdown link, and read as the whole reply made safe at once."""

from __future__ import annotations

import base64
import json
import random
import re
import time
import unicodedata

import pytest

from bot.slack.render.safe_text import WORD_JOINER, safe_markdown
from bot.slack.render.stream_text import HOLD_LIMIT, StreamText

TRICKY = [
    "Hello <https://evil.example|click here for\n\nthe prize> and more text after it.",
    "Encoded &lt;https://evil.example|log in now&gt; and &lt;!here&gt; and &#60;@U123|x&#62; done",
    "Ping <!here|everyone> or <!subteam^S1|oncall> or <@U_BOB|bob> and @here and @channel please",
    'A [login](https://evil.example/path "title with spaces") and ![img](http://i.example/x.png) end',
    "Reference [id]\n\n[id]: https://evil.example\n\nand [another][id] here",
    "Code:\n```python\nx = [1](http://in.code.example) < 3\nprint('<https://a.example|b>')\n```\nafter [y](http://d.example)",
    "~~~~\nfence with ~~~ inside\n~~~~\nthen <mailto:a@b.example|mail me> and `inline <!here>` code",
    "Nested <https://a.example|<https://b.example|c>> and < spaced > and a<b>c and x < y and z > w",
    "\\[escaped\\](http://e.example) and \\\\[double](http://f.example) and ]( stray",
    # An entity-written tag whose label has a space, closed right before an open "<", "&lt;" or "](".
    "&lt;!here|hey you&gt;<x and &lt;https://evil.example|Open your invoice&gt;<y\nand &lt;!here|h ey&gt;](\n",
    "&lt;&lt;!here&gt; and &lt;!here> and <&#33;here> and <https&#58;//evil.example|invoice> end",
]
LIVE_SLACK = re.compile(
    r"(?:<|&(?:lt|#0*60|#x0*3c);)(?!\u2060)(?:[!@#](?!\u2060)|[A-Za-z][A-Za-z0-9+.-]*:)[^<>]*(?:>|&(?:gt|#0*62|#x0*3e);)"
)
OPEN_BRACKET = re.compile(r"(?<!\\)[\[\]]")


def streamed(text: str, sizes: list[int], *, finals: frozenset[int] = frozenset()) -> str:
    """``text`` fed in deltas of ``sizes`` (cycled), taking after each; ``finals``: delta indexes after which a
    model turn ended (take(final=True)); the last take is final."""
    st, out, at, i = StreamText(), [], 0, 0
    while at < len(text):
        size = sizes[i % len(sizes)]
        st.add(text[at : at + size])
        at += size
        out.append(st.take(final=i in finals))
        i += 1
    out.append(st.take(final=True))
    return "".join(out)


def assert_safe(shown: str) -> None:
    assert not LIVE_SLACK.search(shown), shown
    assert not OPEN_BRACKET.search(shown), shown


@pytest.mark.parametrize("text", TRICKY)
@pytest.mark.parametrize("size", [1, 2, 3, 5, 8, 13])
def test_pieces_show_what_the_whole_reply_made_safe_shows(text: str, size: int) -> None:
    shown = streamed(text, [size])
    assert_safe(shown)
    unsealed = shown.replace("<" + WORD_JOINER, "<")  # a "<" still open at the end is sealed; nothing else differs
    assert unsealed == safe_markdown(text).replace("<" + WORD_JOINER, "<")


@pytest.mark.parametrize("seed", range(40))
def test_random_cuts_and_turn_ends_never_make_a_live_link(seed: int) -> None:
    rng = random.Random(seed)
    text = "".join(rng.choice(TRICKY) + rng.choice([" ", "\n", "\n\n", ""]) for _ in range(4))
    sizes = [rng.randint(1, 20) for _ in range(10)]
    finals = frozenset(rng.sample(range(200), 5))
    assert_safe(streamed(text, sizes, finals=finals))


def test_the_checker_catches_pieces_made_safe_naively() -> None:
    """Each delta made safe alone (what safe_markdown can't do) lets a link through: the check above can fail."""
    text = TRICKY[0]
    naive = "".join(safe_markdown(text[i : i + 4]) for i in range(0, len(text), 4))
    with pytest.raises(AssertionError):
        assert_safe(naive)


def test_an_open_link_is_held_back_until_it_closes() -> None:
    st = StreamText()
    st.add("Read <https://evil.example|the ")
    assert st.take() == "Read "
    st.add("docs> now ")
    assert st.take() == "\\[the docs\\](https://evil.example) (evil.example) now "


def test_a_turn_that_ends_on_an_open_link_is_sealed_against_the_next_turn() -> None:
    st = StreamText()
    st.add("see <https://evil.example|click")
    first = st.take(final=True)
    st.add(" here> please")
    shown = first + st.take(final=True)
    assert "<" + WORD_JOINER + "https://evil.example|click" in shown
    assert_safe(shown)


def test_a_lone_less_than_sign_holds_nothing_back_for_long() -> None:
    st = StreamText()
    st.add("x < y " + "word " * (HOLD_LIMIT // 5 + 10))
    piece = st.take()
    assert piece.startswith("x <" + WORD_JOINER + " y word")  # sealed, so a later ">" closes nothing
    st.add("then https://evil.example|z> ")
    assert_safe(piece + st.take(final=True))


def test_code_cut_inside_a_fence_stays_code() -> None:
    st = StreamText()
    st.add("```\nline one [a](http://x.example) ")
    first = st.take()
    st.add("and [b](http://y.example)\n```\nafter [c](http://z.example)")
    rest = st.take(final=True)
    assert "(x.example) " not in first and "(y.example)\n" not in rest  # no host notes inside code
    assert rest.endswith("\\[c\\](http://z.example) (z.example)")


def test_raw_keeps_what_the_model_wrote() -> None:
    st = StreamText()
    for part in ("a <b", "|c> ", "d"):
        st.add(part)
        st.take()
    assert st.raw == "a <b|c> d"


# Text written without spaces (Chinese, Japanese, Thai) is cut inside its runs too, never inside a character as
# people see it, a bare link, an emoji code or Slack syntax. Before: cut only after a space or a newline, so such a
# reply showed nothing until the model finished (found by a break-it review).
JAPANESE = "これは日本語の長い返答です。モデルは空白を使わずに文章を書きます、そして続けます！" * 4  # noqa: RUF001
THAI = "ภาษาไทยไม่มีการเว้นวรรคระหว่างคำและน้ำกำลังไหล" * 4  # combining vowels and tone marks, SARA AM
# Characters of more than one code point: a ZWJ family, two flags, a skin tone, a keycap, e + combining acute.
GRAPHEMES = [
    "家",
    "族",
    "👨\u200d👩\u200d👧\u200d👦",
    "と",
    "🇯🇵",
    "🇺🇸",
    "と",
    "👍🏽",
    "の",
    "1\ufe0f\u20e3",
    "と",
    "e\u0301",
    "だ",
]
WITHOUT_SPACES = [
    JAPANESE,
    "日本語<https://evil.example|ここをクリック>です。日本語&lt;!here&gt;です。日本語<@U_BOB>さん",
    "日本語\\\\[リンク\\\\](http://e.example)です。日本語\\[x](http://f.example)です。",
    "これは&#00060;!here&#62;です。これは&#x3c;https://evil.example|請求書&#x3e;です。",
    "絵文字:いいね:と:thumbsup:です。絵文字：全角：です。" + "漢字" * 30,  # noqa: RUF001
    "詳細はhttps://ja.wikipedia.org/wiki/日本語を参照、それから[リンク](https://evil.example/日本)です。",
]


def pieces_of(text: str, size: int) -> list[str]:
    """``text`` fed in deltas of ``size``, taking after each; the last take is final."""
    st, out = StreamText(), []
    for at in range(0, len(text), size):
        st.add(text[at : at + size])
        out.append(st.take())
    out.append(st.take(final=True))
    return out


def cuts(pieces: list[str]) -> set[int]:
    """Where, in the pieces joined, one ends and the next starts (of those not empty)."""
    ends, at = set(), 0
    for piece in pieces[:-1]:
        at += len(piece)
        ends.add(at)
    return ends - {0, sum(map(len, pieces))}


@pytest.mark.parametrize("text", WITHOUT_SPACES, ids=["japanese", "slack", "escapes", "entities", "emoji", "link"])
@pytest.mark.parametrize("size", [1, 3, 10, 29])
def test_text_without_spaces_is_cut_safely_while_written(text: str, size: int) -> None:
    pieces = pieces_of(text, size)
    shown = "".join(pieces)
    assert_safe(shown)
    assert shown.replace("<" + WORD_JOINER, "<") == safe_markdown(text).replace("<" + WORD_JOINER, "<")
    assert any(pieces[:-1]), "nothing was sent before the model finished"


@pytest.mark.parametrize("size", [1, 4, 10])
def test_japanese_streams_in_pieces_and_ends_as_written(size: int) -> None:
    pieces = pieces_of(JAPANESE, size)
    assert "".join(pieces) == JAPANESE  # nothing lost or doubled
    assert len([p for p in pieces[:-1] if p]) >= len(JAPANESE) // 40  # pieces while written, not one at the end


def test_a_cut_prefers_cjk_punctuation_near_the_end() -> None:
    st = StreamText()
    st.add("これは日本語の文です。次の文")
    assert st.take() == "これは日本語の文です。"
    st.add("は句読点なしでとても長く長く長く長く長く長く長く長く続きます")
    piece = st.take()
    assert piece and not piece.endswith("。")  # none near the end: cut between two letters


@pytest.mark.parametrize("size", [1, 2, 3, 5])
def test_thai_is_never_cut_before_a_combining_mark(size: int) -> None:
    pieces = pieces_of(THAI, size)
    assert "".join(pieces) == THAI
    assert any(pieces[:-1])
    for at in cuts(pieces):
        assert unicodedata.category(THAI[at]) not in ("Mn", "Mc") and THAI[at] != "\u0e33", (at, THAI[at - 2 : at + 2])


@pytest.mark.parametrize("size", [1, 2, 3, 4, 5, 7])
def test_an_emoji_sequence_at_the_cut_stays_whole(size: int) -> None:
    text = "".join(GRAPHEMES) * 3
    bounds, at = set(), 0
    for grapheme in GRAPHEMES * 3:
        at += len(grapheme)
        bounds.add(at)
    pieces = pieces_of(text, size)
    assert "".join(pieces) == text
    assert any(pieces[:-1])
    assert cuts(pieces) <= bounds  # every cut between two characters as people see them


def test_a_bare_link_without_spaces_is_not_cut_inside() -> None:
    url = "https://ja.wikipedia.org/wiki/日本語の記事"
    text = "詳細は" + url + "を見てください。 それから"
    pieces = pieces_of(text, 3)
    start = text.index(url)
    assert not {at for at in cuts(pieces) if start < at < text.index(" ")}  # held until the space after it
    assert "".join(pieces) == text


def test_a_long_token_without_spaces_is_cut_once_past_the_hold_limit() -> None:
    url = "https://example.com/" + "a" * (3 * HOLD_LIMIT)
    pieces = pieces_of("See " + url, 500)
    assert "".join(pieces) == "See " + url
    sent = [p for p in pieces[:-1] if p]
    assert len(sent) >= 3 and sent[0] == "See "  # the token streams, in pieces ...
    assert len(sent[1]) > HOLD_LIMIT  # ... once held as long as any link may be


def test_a_long_run_is_not_cut_inside_an_entity_or_after_a_backslash() -> None:
    """The long-run cut is inside letters or digits only, and not in a run after ``&`` or ``#`` (an entity such as
    ``&#000…60;``, decoded by Markdown as ``<``)."""
    text = "x" + "\\" * 3000 + "&#" + "0" * 3000 + "60;!here&#62;" + "[a" * 1500 + "](http://evil.example)"
    pieces = pieces_of(text, 250)
    shown = "".join(pieces)
    assert_safe(shown)
    assert shown.replace("<" + WORD_JOINER, "<") == safe_markdown(text).replace("<" + WORD_JOINER, "<")
    assert not any(pieces[:-1])  # no cut was safe: all of it at the end


@pytest.mark.parametrize("size", [1, 2, 5])
def test_an_emoji_code_without_spaces_is_not_cut_inside(size: int) -> None:
    text = "今日は:いいね:を押しました。" * 3 + "明日も:thumbsup::skin-tone-2:です" + "漢字" * 40
    pieces = pieces_of(text, size)
    assert "".join(pieces) == text and any(pieces[:-1])
    codes = [(m.start(), m.end()) for m in re.finditer(r":[^:\s]+:", text)]
    assert not [at for at in cuts(pieces) for start, end in codes if start < at < end]


def streamed_timed(text: str, *, delta: int) -> tuple[str, float]:
    """``text`` streamed in ``delta``-character pieces, each taken at once: what was shown, and the CPU seconds it
    took."""
    stream = StreamText()
    started = time.process_time()
    shown = []
    for i in range(0, len(text), delta):
        stream.add(text[i : i + delta])
        shown.append(stream.take())
    shown.append(stream.take(final=True))
    return "".join(shown), time.process_time() - started


@pytest.mark.parametrize("kind", ["letters and digits", "base64", "a link's tail"])
def test_a_long_run_without_spaces_streams_in_time_linear_in_its_length(kind: str) -> None:
    """A 60 KB run with no space (a hash, base64, minified code) streamed in 20-character deltas: every take scanned
    the whole run in Python and tried the bare-link pattern from each of its letters, which backtracked over the
    rest: seconds to tens of seconds of event loop (found by a helper's measure). Not a benchmark: the bound is
    CPU seconds against tens before, and the text comes out whole."""
    if kind == "base64":
        text = base64.b64encode(bytes(range(256)) * 180).decode()[:60_000]
    elif kind == "letters and digits":
        text = ("abcdefghij0123456789" * 3000)[:60_000]
    else:
        text = "see https://example.com/" + "a1" * 30_000
    shown, cpu = streamed_timed(text, delta=20)
    assert cpu < 2.0
    assert shown.replace("\\", "") == safe_markdown(text).replace("\\", "")


@pytest.mark.parametrize("kind", ["brackets", "minified JSON"])
def test_a_run_with_no_cut_at_all_is_held_at_a_cost_linear_in_its_length(kind: str) -> None:
    """A 30 KB run with neither a space nor a long word to cut in (a line of brackets, minified JSON with short keys
    and numbers) is held to the end of the turn; each take looked for a cut character by character over all of it,
    so 4-character deltas cost 9 to 14 s of event loop. Not a benchmark: the bound is CPU seconds against that."""
    if kind == "brackets":
        text = "[" * 30_000
    else:
        text = json.dumps([{"id": i, "tags": ["a", "b"]} for i in range(1200)], separators=(",", ":"))[:30_000]
    shown, cpu = streamed_timed(text, delta=4)
    assert cpu < 4.0
    assert shown == safe_markdown(text)
