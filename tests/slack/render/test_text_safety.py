"""Text from the model and from people pings nobody it shouldn't, shows every link's real host, loses its bidi and
control characters, and long look-alike labels stay distinguishable (unit, then end to end through the fake)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import redis.asyncio as aioredis

from bot.agent.ask_user import AskUserPayload
from bot.fakeslack.blockkit import blocks_text_length, validate_message_blocks
from bot.slack.refs import QuestionRef
from bot.slack.render.blocks import MESSAGE_TEXT_BUDGET, answer_display, question_blocks, reply_blocks, reply_messages
from bot.slack.render.mrkdwn import MARKDOWN_BLOCK, clip, distinct_clips, escape
from bot.slack.render.safe_text import WORD_JOINER, link_host, safe_markdown, safe_mrkdwn, strip_controls
from bot.testing.openai_server import FakeOpenAI, Reply
from bot.testing.slack_scenarios import (
    ALICE,
    FREE,
    GENERAL,
    ask,
    current,
    has_controls,
    is_choice_block,
    mrkdwn_texts,
)

WJ = WORD_JOINER
ATTACK = (
    "<!channel> <!here> <!everyone> <!subteam^S123|@team> <@U123> "
    "<https://evil.example|login> [login](https://evil.example) @channel @here @everyone"
)
BIDI_AND_CONTROLS = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u061c\u200e\u200f\x00\x07\x1b\x7f\x85\x9f"
FORBIDDEN = re.compile(f"[{BIDI_AND_CONTROLS}\r]")
PINGS = re.compile(r"<[!@]|(?<![\w@])@(channel|here|everyone)\b", re.IGNORECASE)
REF = QuestionRef.of("run1", "call1")


def long_labels(n: int = 100) -> list[str]:
    """``n`` distinct labels whose first 80 characters are the same (clipped to 75 they would all be alike)."""
    return [
        "Deploy the service to the production cluster in the primary region with a full rollout: " + f"v{i}.0"
        for i in range(n)
    ]


def shown_option_texts(blocks: list[dict[str, Any]]) -> list[str]:
    """Texts of every button (but Submit / Answer) and every menu or checkbox option in ``blocks``."""
    texts: list[str] = []
    for block in blocks:
        for element in block.get("elements", []) if block["type"] == "actions" else []:
            if element["type"] == "button" and element["action_id"].startswith("ask_option"):
                texts.append(element["text"]["text"])
            texts += [o["text"]["text"] for o in element.get("options", [])]
    return texts


def markdown_of(message: dict[str, Any]) -> str:
    return "".join(b["text"] for b in message.get("blocks", []) if b["type"] == "markdown")


def tool_result(model: FakeOpenAI) -> dict[str, Any]:
    last = next(m for m in reversed(model.requests[-1]["messages"]) if m["role"] == "tool")
    result: dict[str, Any] = json.loads(last["content"])
    return result


# --- 1. mentions and links ------------------------------------------------------------------------------


def test_markdown_reply_pings_nobody_and_shows_every_links_host() -> None:
    blocks = reply_blocks(ATTACK)
    assert blocks is not None
    text = blocks[0]["text"]
    assert not PINGS.search(text), text
    for name in ("channel", "here", "everyone", "team", "U123"):
        assert f"@{WJ}{name}" in text  # still visible, pings nobody
    assert text.count("(evil.example)") == 2
    assert "\\[login\\](https://evil.example) (evil.example)" in text


def reply_markdown(text: str, *, allow_user_mentions: bool = False) -> str:
    """The markdown block :func:`reply_blocks` makes of ``text``."""
    blocks = reply_blocks(text, allow_user_mentions=allow_user_mentions)
    assert blocks is not None and blocks[0]["type"] == "markdown"
    return str(blocks[0]["text"])


def test_user_mentions_ping_only_when_the_operator_allows_it() -> None:
    allowed = reply_markdown(ATTACK + " <@W42ABC|ann>", allow_user_mentions=True)
    assert "<@U123>" in allowed and "<@W42ABC>" in allowed
    assert "<!" not in allowed and f"@{WJ}here" in allowed and f"@{WJ}team" in allowed
    assert "<@" not in safe_markdown("<@U123>") and "<@" not in safe_markdown("<@not-an-id>", allow_user_mentions=True)
    assert safe_mrkdwn("hi <@U123|ann> <!here>", allow_user_mentions=True) == "hi <@U123> &lt;!here&gt;"
    assert safe_mrkdwn("hi <@U123>") == "hi &lt;@U123&gt;"


@pytest.mark.parametrize(
    ("written", "allow", "named"),
    [
        (":octagonal_sign: Stopped by <@U_ALICE|alice>.", False, f":octagonal_sign: Stopped by @{WJ}alice."),
        (":octagonal_sign: Stopped by <@U_ALICE|alice>.", True, ":octagonal_sign: Stopped by <@U_ALICE>."),
        ("ask <@W42ABC>", False, f"ask @{WJ}W42ABC"),
        ("cc <!here> and <!subteam^S1|@ops>", False, f"cc @{WJ}here and @{WJ}ops"),
        ("due <!date^1700000000^{date}|Nov 14>", True, "due Nov 14"),
    ],
)
def test_a_replys_notification_names_people_as_its_block_does(written: str, allow: bool, named: str) -> None:
    """The notification text (and the fallback shown when blocks are refused) of a reply names a mention as the
    markdown block does: a DM's "Stopped by" notification read ``Stopped by &lt;@U_ALICE|alice&gt;.`` before."""
    [(text, blocks)] = reply_messages(written, allow_user_mentions=allow)
    assert text == named and blocks is not None and blocks[0]["text"] == named
    assert not PINGS.search(text.replace("<@U_ALICE>", "").replace("<@W42ABC>", ""))


@pytest.mark.parametrize("written", ["語@here", "@here語", "данные@channel", "é@everyone", "(@here)", "@here_"])
def test_a_broadcast_beside_a_letter_of_any_script_is_broken(written: str) -> None:
    """Only an ASCII word around "@here" makes it part of something else (an address); "語@here" was left live."""
    broken = written != "@here_"
    for out in (escape(written), safe_markdown(written), safe_mrkdwn(written)):
        assert (WJ in out) is broken, out


def test_mrkdwn_escapes_slack_syntax_and_breaks_bare_broadcasts() -> None:
    out = escape("@channel @Here @everyone: <!channel> & <https://evil.example|login> a@here.example")
    assert out == (
        f"@{WJ}channel @{WJ}Here @{WJ}everyone: &lt;!channel&gt; &amp; &lt;https://evil.example|login&gt; "
        "a@here.example"
    )
    assert not PINGS.search(out)


def test_markdown_keeps_what_was_written_outside_mentions_and_links() -> None:
    text = 'Use `a < b` & see [docs](https://docs.example/x "t")\n```\nx = [1](2)\n```\n@herein <#C1|general>'
    out = reply_markdown(text)
    assert out == (  # brackets escaped everywhere (code too): no link can form, whatever a renderer thinks is code
        'Use `a < b` & see \\[docs\\](https://docs.example/x "t") (docs.example)\n```\nx = \\[1\\](2)\n```\n'
        "@herein <#C1|general>"
    )


@pytest.mark.parametrize(
    ("markdown", "host"),
    [
        ("![logo](https://img.example/l.png)", "img.example"),
        ("[a [nested]](<https://x.example/a b>)", "x.example"),
        ("[x](https://good.example@evil.example/login)", "evil.example"),
        ("[x](https://\u0430pple.com)", "xn--pple-43d.com"),
        ("[x](//proto.example/p)", "proto.example"),
        ("[x](javascript:alert(1))", "javascript:"),
        ("[[inner](https://inner.example)](https://outer.example)", "inner.example"),
    ],
)
def test_every_markdown_link_shows_its_real_host(markdown: str, host: str) -> None:
    assert f"({host})" in reply_markdown(markdown)


def test_slack_syntax_written_with_html_entities_is_neutralised_too() -> None:
    out = reply_markdown("&lt;!here&gt; &#60;@U123&#62; &lt;https://evil.example|login&gt; &#64;channel &lt;b&gt;")
    assert out == f"@{WJ}here @{WJ}U123 \\[login\\](https://evil.example) (evil.example) @{WJ}channel &lt;b&gt;"


def test_reference_links_show_their_definition() -> None:
    shown = reply_markdown("[login][1]\n\n[1]: https://evil.example")
    assert shown == "\\[login\\]\\[1\\]\n\n\\[1\\]: https://evil.example"


def test_link_host_reads_mailto_and_survives_broken_urls() -> None:
    assert link_host("mailto:someone@Mail.Example") == "mail.example"
    assert link_host("http://[::1") == "http://[::1"  # unparsable: shown whole
    assert link_host("") == ""


def test_answer_display_quotes_a_typed_answer_without_pinging() -> None:
    shown = answer_display("<!channel> ok @here \u202eevil")
    assert shown == f"&lt;!channel&gt; ok @{WJ}here evil"


def test_long_reply_made_safe_still_fits_markdown_blocks_and_loses_nothing() -> None:
    text = " ".join(f"[l{i}](https://h{i % 10}.example)" for i in range(1500))  # ~36,000 chars; hosts add ~19,500
    messages = reply_messages(text)
    assert all(blocks is not None and len(blocks[0]["text"]) <= MARKDOWN_BLOCK for _t, blocks in messages)
    joined = " ".join(blocks[0]["text"] for _t, blocks in messages if blocks)
    assert joined.split() == safe_markdown(text).split()
    assert all(not PINGS.search(t) for t, _b in messages)


def test_reply_of_only_bidi_controls_is_posted_as_no_reply_not_as_an_empty_message() -> None:
    assert reply_messages("\u202e\u2066\u2069") == [("(no reply)", [{"type": "markdown", "text": "(no reply)"}])]


# --- 2. bidi and control characters --------------------------------------------------------------------


def test_bidi_and_control_characters_are_removed_but_newlines_and_tabs_stay() -> None:
    assert strip_controls(f"a{BIDI_AND_CONTROLS}b\tc\r\nd\re\n") == "ab\tc\nd\ne\n"
    assert not FORBIDDEN.search(safe_markdown(f"x{BIDI_AND_CONTROLS}y"))
    assert not FORBIDDEN.search(escape(f"x{BIDI_AND_CONTROLS}y"))


@pytest.mark.parametrize("mode", ["single_select", "multi_select"])
@pytest.mark.parametrize("count", [3, 12, 30])
def test_question_labels_and_descriptions_lose_bidi_characters_before_clipping(mode: str, count: int) -> None:
    sneaky = "\u202e" * 80 + "gpj.exe"  # 80 invisible overrides then a reversed name: clipped first, nothing shows
    payload = AskUserPayload.model_validate(
        {
            "question": f"Pick \u2066one\u2069 <!here>{BIDI_AND_CONTROLS}",
            "selection_mode": mode,
            "options": [{"label": f"{sneaky}{i}", "description": f"d\u202e{i}"} for i in range(count)],
        }
    )
    blocks = question_blocks(payload, ref=REF, requester=ALICE)
    assert not FORBIDDEN.search(json.dumps(blocks, ensure_ascii=False))
    assert [t for t in shown_option_texts(blocks)] == [f"gpj.exe{i}" for i in range(count)]
    assert validate_message_blocks(blocks) == []


# --- 3. look-alike labels ------------------------------------------------------------------------------


def test_clipped_labels_that_would_collide_show_the_part_that_differs() -> None:
    labels = long_labels(100)
    assert len({label[:74] for label in labels}) == 1
    shown = distinct_clips(labels, 75)
    assert len(set(shown)) == 100 and all(len(s) <= 75 for s in shown)
    assert shown[7].startswith(labels[7][:20]) and shown[7].endswith("v7.0")


def test_labels_that_still_look_alike_are_numbered() -> None:
    labels = ["x" * 80 + " a", "x" * 80 + "  a", "x" * 80 + "\u200b a", "short"]  # differ only invisibly
    shown = distinct_clips(labels, 75)
    assert len({" ".join(s.split()) for s in shown}) == 4 and all(len(s) <= 75 for s in shown)
    assert shown[3] == "short" and shown[1].startswith("2. ")


@pytest.mark.parametrize("mark", ["\ufe0f", "\u034f", "\U000e0100", "\u180b"])
def test_labels_that_differ_only_by_a_mark_drawn_as_nothing_are_numbered(mark: str) -> None:
    """A variation selector or the combining grapheme joiner is drawn as nothing but is not a format character:
    ``"ok"`` and ``"ok\ufe0f"`` were two buttons reading "ok" (a break-it pass)."""
    shown = distinct_clips(["ok", f"ok{mark}", "no"], 75)
    assert shown[0].startswith("1. ") and shown[1].startswith("2. ") and shown[2] == "no", shown


@pytest.mark.parametrize("mode", ["single_select", "multi_select"])
@pytest.mark.parametrize("count", [8, 20, 100])
def test_question_with_look_alike_long_labels_renders_distinct_valid_options(mode: str, count: int) -> None:
    payload = AskUserPayload.model_validate(
        {
            "question": "Q" * 5000,
            "selection_mode": mode,
            "options": [{"label": label, "description": "d" * 200} for label in long_labels(count)],
        }
    )
    blocks = question_blocks(payload, ref=REF, requester=ALICE)
    shown = shown_option_texts(blocks)
    assert len(shown) == count and len(set(shown)) == count
    assert validate_message_blocks(blocks) == []
    assert blocks_text_length(blocks) <= MESSAGE_TEXT_BUDGET


# --- end to end through the fake Slack -----------------------------------------------------------------


async def test_reply_with_injected_mentions_and_links_pings_nobody(fake_redis: aioredis.Redis, harness: Any) -> None:
    async with harness(fake_redis, answerers="channel") as h:
        h.model.script(Reply(text=f"Done. {ATTACK} \u202eevil"))
        d = await h.ws.mention(ALICE, GENERAL, "go")
        reply = await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=d.message["ts"], predicate=lambda m: markdown_of(m) and not m.get("streaming")
        )
        shown = markdown_of(reply)
        assert not PINGS.search(shown) and not FORBIDDEN.search(shown), shown
        assert "\\[login\\](https://evil.example) (evil.example)" in shown and f"@{WJ}channel" in shown
        assert not PINGS.search(reply["text"]) and not FORBIDDEN.search(reply["text"]), reply["text"]
        await h.settle()
        assert [c.error for c in h.ws.calls() if c.error and c.method != "users.info"] == []  # <@U123>: nobody


async def test_typed_answer_is_quoted_without_pings_or_bidi_and_reaches_the_model_whole(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    typed = "@here <!channel> <!subteam^S1|@ops> \u202eevil [login](https://evil.example) &amp; @everyone"
    async with harness(fake_redis) as h:
        thread, q = await ask(h, FREE, then="Thanks.")
        await h.ws.reply_in_thread(ALICE, GENERAL, thread, typed)  # as Slack sends it: mentions as <!...>, & escaped
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "Thanks.")
        assert tool_result(h.model)["answer"] == typed.replace("&amp;", "&")
        closed = await current(h, q)
        outcome = " ".join(mrkdwn_texts(closed["blocks"]))
        assert "answered" in outcome and "evil" in outcome
        assert not PINGS.search(outcome.replace("<@U_ALICE>", "")) and not FORBIDDEN.search(outcome), outcome


async def test_question_with_bidi_labels_shows_them_clean_and_the_model_gets_the_full_label(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    labels = ["\u202eabc.exe", "safe \u2066x\u2069"]
    args = {"question": "Open \u202efile?", "options": [{"label": label} for label in labels]}
    async with harness(fake_redis) as h:
        thread, q = await ask(h, args, then="Opened.")
        assert not FORBIDDEN.search(json.dumps(q["blocks"], ensure_ascii=False))
        assert shown_option_texts(q["blocks"]) == ["abc.exe", "safe x"]
        await h.ws.click(q, "abc.exe", user=ALICE)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "Opened.")
        assert tool_result(h.model)["answer"] == labels[0]
        closed = await current(h, q)
        assert not FORBIDDEN.search(json.dumps(closed["blocks"], ensure_ascii=False))


@pytest.mark.parametrize("mode", ["single_select", "multi_select"])
async def test_100_look_alike_long_options_are_told_apart_and_the_click_gives_the_full_label(
    fake_redis: aioredis.Redis, harness: Any, mode: str
) -> None:
    labels = long_labels(100)
    args = {"question": "Which rollout?", "selection_mode": mode, "options": [{"label": lb} for lb in labels]}
    async with harness(fake_redis) as h:
        thread, q = await ask(h, args, then="Rolling out.")
        shown = shown_option_texts(q["blocks"])
        assert len(shown) == 100 and len(set(shown)) == 100 and all(len(s) <= 75 for s in shown)
        assert validate_message_blocks(q["blocks"]) == []
        await h.ws.select(q, shown[42] if mode == "single_select" else [shown[42], shown[7]], user=ALICE)
        if mode == "multi_select":
            await h.ws.click(q, "Submit", user=ALICE)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "Rolling out.")
        result = tool_result(h.model)
        assert result.get("answer", result.get("answers")) in (
            labels[42],
            [labels[42], labels[7]],
            [labels[7], labels[42]],
        )
        await h.settle()
        assert [c.error for c in h.ws.calls() if c.error] == []
        assert not has_controls(await current(h, q))


async def test_allow_user_mentions_lets_a_reply_ping_a_person_but_never_a_channel(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    async with harness(fake_redis, settings={"allow_user_mentions": True}) as h:
        h.model.script(Reply(text="Ask <@U_BOB> about it. <!channel>"))
        d = await h.ws.mention(ALICE, GENERAL, "who knows?")
        reply = await h.ws.wait_for_message(channel=GENERAL, thread_ts=d.message["ts"], predicate=markdown_of)
        shown = markdown_of(reply)
        assert "<@U_BOB>" in shown and "<!channel>" not in shown, shown


@pytest.mark.parametrize(
    "reply",
    [
        "[paypal.com](https://evil.example/\\))",  # an escaped ")" in the URL
        "[paypal.com](https://evil.example/a(b(c)d)e)",  # nested balanced parentheses
        "\\`x [paypal.com](https://evil.example) \\`",  # escaped backticks are not a code span
        "```a`b\n[paypal.com](https://evil.example)\n```",  # a backtick fence whose info has a backtick is no fence
        "[paypal.com][x]\n\n> [x]: https://evil.example",  # a reference definition inside a block quote
        "[paypal.com][x]\n\n- [x]: https://evil.example",  # ... inside a list item
        "[paypal.com][x]\n\n[\nx]: https://evil.example",  # ... whose label starts on the line before
        "\\\\[paypal.com\\\\](https://evil.example)",  # escaped backslashes before the brackets
        "&#91;paypal.com&#93;(https://evil.example)",  # brackets written as entities
    ],
)
def test_no_markdown_link_can_form_however_the_parser_is_tricked(reply: str) -> None:
    """Tricks that make a Markdown parser and a renderer disagree on where code or a link is (found by trying
    them against CommonMark): after neutralising, every bracket is escaped once, so no link text can hide its
    target and the URL shows as written."""
    shown = reply_markdown(reply)
    assert not re.search(r"(?<!\\)[\[\]]", shown) and "\\\\[" not in shown and "\\\\]" not in shown, shown
    assert "evil.example" in shown


@pytest.mark.parametrize(
    "nested",
    [
        "<https://a.example|<https://b.example|see b>>",
        "<https://a.example|<!here>>",
        "<https://a.example|<@U_BOB|bob>>",
        "<https://a.example|" * 12 + "x" + ">" * 12,  # deeper than the passes over it
        "&lt;&lt;https://a.example|invoice&gt;",  # entity forms, nested or mixed with plain ones
        "<https&#58;//a.example|invoice>",
    ],
)
def test_nested_slack_links_never_hide_where_the_outer_one_goes(nested: str) -> None:
    shown = safe_markdown(nested)
    assert not re.search(r"<(?!\u2060)[A-Za-z][A-Za-z0-9+.-]*:[^<>]*>", shown), shown
    assert "(a.example)" in shown or "<\u2060https://a.example" in shown


@pytest.mark.parametrize("mention", ["&lt;&lt;!here&gt;", "x &lt;b&lt;!channel&gt;", "&lt;!here>", "<&#33;here>"])
def test_mentions_written_with_entities_nested_or_mixed_ping_nobody(mention: str) -> None:
    shown = safe_markdown(mention)
    assert "\u2060" in shown and not re.search(r"(<|&lt;)!(here|channel)", shown), shown


_CONFUSABLES = str.maketrans(
    "\u0430\u0435\u043e\u0440\u0441\u0443\u0445\u0410\u0412\u0415\u041a\u041c\u041d\u041e\u0420\u0421\u0422\u0425",
    "aeopcyxABEKMHOPCTX",
)  # Cyrillic letters drawn like Latin ones


@pytest.mark.parametrize(
    "twin",
    [
        lambda label: label.replace("cafe\u0301", "café"),  # the same text, composed (NFC) vs decomposed (NFD)
        lambda label: label.replace("o", "\u043e"),  # Cyrillic o (U+043E) for Latin o
    ],
    ids=["nfc-vs-nfd", "cyrillic-o"],
)
async def test_long_look_alike_labels_are_told_apart_on_the_buttons(
    fake_redis: aioredis.Redis, harness: Any, twin: Any
) -> None:
    """README (Security): "long look-alike labels are shown so they can be told apart". Two long options whose full
    labels look the same (canonically equivalent Unicode, or a Cyrillic letter drawn like the Latin one) are shown
    on two buttons that look exactly alike; Alice can't tell which one she clicks. Expected: buttons that look
    different (e.g. numbered, as distinct_clips does for other look-alikes)."""
    import unicodedata

    async with harness(fake_redis) as h:
        first = "Roll out the new build to every production cluster tonight and then notify the cafe\u0301 team"
        options = [{"label": first}, {"label": twin(first)}]
        assert options[0]["label"] != options[1]["label"]
        _thread, q = await ask(h, {"question": "Which?", "options": options})
        shown = [e["text"]["text"] for b in q["blocks"] if is_choice_block(b) for e in b["elements"]]
        seen = [unicodedata.normalize("NFKC", s).translate(_CONFUSABLES) for s in shown]
        assert len(set(seen)) == 2, shown


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        ("a" * 76 + "\U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466 tail", "a" * 76),  # a ZWJ family
        ("a" * 77 + "\U0001f1eb\U0001f1f7\U0001f1e9\U0001f1ea", "a" * 77 + "\U0001f1eb\U0001f1f7"),  # two flags
        ("a" * 78 + "e\u0301xyz", "a" * 78),  # an accent stays on its letter
        ("a" * 78 + "\U0001f44d\U0001f3fdxyz", "a" * 78),  # a skin tone stays on its emoji
        ("a" * 78 + "1\ufe0f\u20e3xyz", "a" * 78),  # a keycap
        ("a" * 85, "a" * 79),  # plain text: the limit, as before
    ],
)
def test_clip_never_cuts_a_character_as_people_see_it(text: str, kept: str) -> None:
    """Found by a break-it pass: a session title clipped at 80 ended in half an emoji sequence (a dangling joiner
    before the ellipsis)."""
    assert clip(text, 80) == kept + "…"
