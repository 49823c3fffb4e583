"""A streamed reply is made safe piece by piece (bot.slack.render.stream_text): whatever the cuts, the pieces together
show no live Slack link, mention or Markdown link, and read as the whole reply made safe at once."""

from __future__ import annotations

import random
import re

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
