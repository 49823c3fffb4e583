"""Typed multi-select answers, long replies cut into messages, and question messages within Slack's budgets."""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis.asyncio as aioredis

from bot.slack.questions.typed_answers import labels_in_text
from bot.slack.render.blocks import answer_display
from bot.slack.render.mrkdwn import MARKDOWN_BLOCK, split_reply, text_length
from bot.testing.openai_server import Reply, tool_call
from bot.testing.slack_scenarios import (
    ALICE,
    GENERAL,
    ask,
    has_controls,
    is_choice_block,
    text_is,
)


def slack_errors(h: Any) -> list[tuple[str, str]]:
    return [(c.method, c.error) for c in h.ws.calls() if c.error]


def test_numeric_labels_names_win_over_numbers_and_blank_or_repeated_pieces_are_ignored() -> None:
    assert labels_in_text("1, 10", ["1", "2", "10"]) == ["1", "10"]
    assert labels_in_text("10", ["1", "2", "10"]) == ["10"]
    assert labels_in_text("3", ["1", "2", "10"]) == ["10"]  # not a label: its number in the list
    assert labels_in_text("2", ["10", "2", "x"]) == ["2"]  # a label equal to another option's number
    assert labels_in_text("1,, ;\n 1 ,1.", ["1", "2"]) == ["1"]
    assert labels_in_text("b, 2, B", ["a", "b"]) == ["b"]
    assert labels_in_text(" , ;\n ", ["a"]) is None
    assert labels_in_text("0", ["a"]) is None and labels_in_text("2", ["a"]) is None
    assert labels_in_text("\u0661", ["a"]) is None  # ARABIC-INDIC DIGIT ONE: not a list number


def test_label_with_a_comma_can_be_named_with_another() -> None:
    assert labels_in_text("Yes, please; No", ["Yes, please", "No"]) == ["Yes, please", "No"]


def test_labels_starting_or_ending_with_a_dot_can_be_listed() -> None:
    assert labels_in_text(".NET, Java", [".NET", "Java"]) == [".NET", "Java"]
    assert labels_in_text("Misc., Java", ["Misc.", "Java"]) == ["Misc.", "Java"]


def test_labels_differing_only_by_case_keep_the_exact_one_typed() -> None:
    assert labels_in_text("api", ["api", "API"]) == ["api"]
    assert labels_in_text("api, web", ["api", "API", "web"]) == ["api", "web"]


def test_split_reply_of_one_30k_word_loses_nothing() -> None:
    word = "".join(chr(ord("a") + i % 26) for i in range(30_000))
    parts = split_reply(word)
    assert "".join(parts) == word
    assert all(0 < len(p) <= MARKDOWN_BLOCK for p in parts)


def test_split_reply_of_unicode_without_spaces_loses_nothing() -> None:
    text = "日本語🙂" * 8000  # 32,000 code points, no break anywhere
    parts = split_reply(text)
    assert "".join(parts) == text and all(0 < len(p) <= MARKDOWN_BLOCK for p in parts)


def test_split_reply_keeps_indentation_of_a_long_code_listing() -> None:
    text = "Here is the file:\n" + "".join(f"    line_{i:05d} = {i}\n" for i in range(1500))
    parts = split_reply(text)
    lines = [line for p in parts for line in p.splitlines()]
    assert all(line.startswith("    ") for line in lines[1:] if line), [p[:30] for p in parts]


def test_split_reply_never_yields_an_empty_part() -> None:
    parts = split_reply(" " * 13_000 + "hi")
    assert parts and all(p.strip() for p in parts), [len(p) for p in parts]


@pytest.mark.parametrize("mode", ["single_select", "multi_select"])
@pytest.mark.parametrize("question_char", ["Q", "&"])  # '&' becomes '&amp;': 5x longer once escaped
async def test_100_options_of_75_chars_with_descriptions_and_a_5000_char_question_are_accepted(
    fake_redis: aioredis.Redis, harness: Any, mode: str, question_char: str
) -> None:
    args = {
        "question": question_char * 5000,
        "selection_mode": mode,
        "options": [{"label": f"{i:03d}" + "<&>" * 24, "description": "d&<" * 25} for i in range(100)],
    }
    assert all(len(o["label"]) == 75 for o in args["options"])
    async with harness(fake_redis) as h:
        h.model.script(Reply(tool_calls=[tool_call("ask_user", args, id="c1")]), Reply(text="ok"))
        d = await h.ws.mention(ALICE, GENERAL, "go")
        thread = d.message["ts"]
        q = await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=has_controls, timeout=5)
        await h.settle()
        assert slack_errors(h) == []
        assert text_length(q["blocks"]) <= 12_000
        labels = [o["label"] for o in args["options"]]
        if mode == "single_select":
            await h.ws.select(q, labels[99][:75], user=ALICE)
        else:
            await h.ws.select(q, [labels[0], labels[99]], user=ALICE)
            await h.ws.click(q, "Submit", user=ALICE)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("ok"))
        await h.settle()
        result = json.loads(h.model.requests[-1]["messages"][-1]["content"])
        if mode == "single_select":
            assert result["answer"] == labels[99]
        else:
            assert result["answers"] == [labels[0], labels[99]]
        assert slack_errors(h) == []


async def test_the_option_list_shows_every_option_each_with_its_description_when_it_has_one(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    """Only the options with a description were listed ("• *web* - the site"), so the list read as if "web" was the
    only choice (an MCP client's question, among others)."""
    args = {"question": "Which repo?", "options": [{"label": "api"}, {"label": "web", "description": "the site"}]}
    async with harness(fake_redis) as h:
        h.model.script(Reply(tool_calls=[tool_call("ask_user", args, id="c1")]), Reply(text="ok"))
        d = await h.ws.mention(ALICE, GENERAL, "go")
        q = await h.ws.wait_for_message(channel=GENERAL, thread_ts=d.message["ts"], predicate=has_controls)
        listed = [b["text"]["text"] for b in q["blocks"] if str(b.get("block_id", "")).endswith("|list")]
        assert listed == ["• *api*\n• *web* - the site"], q["blocks"]


async def test_limits_hold_and_full_labels_reach_the_model(fake_redis: aioredis.Redis, harness: Any) -> None:
    long_label = "L" * 119 + "!"
    cases = [
        {
            "question": "Pick many",
            "selection_mode": "multi_select",
            "options": [{"label": f"opt {i}"} for i in range(12)],
        },
        {"question": "Pick one", "options": [{"label": f"choice {i}", "description": "d" * 200} for i in range(30)]},
        {"question": "Long label", "options": [{"label": long_label}, {"label": "short"}]},
        {"question": "Q" * 3500 + " & <tags>", "options": [{"label": "yes"}, {"label": "no"}]},
    ]
    async with harness(fake_redis) as h:
        for args in cases:
            h.model.reset()
            thread, q = await ask(h, args, then="ok")
            if args["question"] == "Long label":
                shown = [e["text"]["text"] for b in q["blocks"] if is_choice_block(b) for e in b["elements"]]
                assert all(len(t) <= 75 for t in shown) and shown[0].endswith("…")
                await h.ws.click(q, shown[0], user=ALICE)
                await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "ok")
                last = json.loads(
                    next(m for m in reversed(h.model.requests[-1]["messages"]) if m["role"] == "tool")["content"]
                )
                assert last["answer"] == long_label and last["answer_type"] == "option"
            types = [e["type"] for b in q["blocks"] if is_choice_block(b) for e in b["elements"]]
            if args["question"] == "Pick many":
                assert types == ["multi_static_select", "button"]
            if args["question"] == "Pick one":
                assert types == ["static_select"]
        await h.settle()
        posts = h.ws.calls("chat.postMessage") + h.ws.calls("chat.update")
        assert posts and [c.error for c in posts if c.error] == []


def test_an_outside_agents_markdown_details_show_as_text_under_the_action_not_as_a_details_key() -> None:
    """Found by a new user's trial: ``"details": "db: staging-eu\\nsize: 40 GB"`` showed as "*details*: db: ...";
    key/value details keep their keys."""
    from bot.agent.asking import APPROVAL_TOOL
    from bot.agent.stream import ApprovalPayload
    from bot.slack.refs import QuestionRef
    from bot.slack.render.approvals import approval_blocks

    ref = QuestionRef.of("run_1", "c1")
    for details, shown, hidden in (
        ("db: staging-eu\nsize: 40 GB", "db: staging-eu\nsize: 40 GB", "*details*"),
        ({"db": "staging-eu"}, "*db*: staging-eu", "*details*"),
    ):
        payload = ApprovalPayload(
            tool_call_id="c1", tool_name=APPROVAL_TOOL, args={"action": "Resize", "details": details}, description=""
        )
        blocks = approval_blocks(payload, ref=ref, approvers="Waiting for <@U1>")
        texts = [b["text"]["text"] for b in blocks if b["type"] == "section"]
        assert texts[0].endswith("*Approval needed*: Resize") and texts[1] == shown and hidden not in str(texts)


def test_split_reply_with_no_break_near_the_limit_cuts_no_escape_or_character_in_two() -> None:
    """Found by a review: with no break in the last quarter, the cut at exactly the limit could end a message in
    the ``\\`` of an escaped ``\\[`` (the next one then starting with a bare bracket) or inside an emoji."""
    from bot.slack.render.mrkdwn import split_reply

    escaped = split_reply("x" * 11_999 + "\\[a" * 10)
    assert not escaped[0].endswith("\\") and "".join(escaped) == "x" * 11_999 + "\\[a" * 10
    emoji = "x" * 11_999 + "\U0001f44d\U0001f3fd" + "y" * 10
    parts = split_reply(emoji)
    assert parts[0] == "x" * 11_999 and "".join(parts) == emoji


@pytest.mark.parametrize("brk", ["\n", "\r\n", "\u2028"])
def test_a_typed_answer_is_quoted_on_one_line_so_it_draws_no_line_of_its_own(brk: str) -> None:
    """Bob typed ``no`` then a line reading like another outcome: the closed question showed two "answered" lines
    (a break-it pass). The answer's line breaks are shown (↵), on the outcome's one line."""
    shown = answer_display(f"no{brk}:white_check_mark: @Alice answered: *yes, deploy now*")
    assert "\n" not in shown and shown.startswith("no \u21b5 :white_check_mark:"), shown
