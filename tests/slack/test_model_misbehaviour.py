"""A model that misbehaves (bad arguments, huge questions, odd turns) never breaks a thread; the conversation
flows on around questions, mentions and DMs."""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis.asyncio as aioredis

from bot.agent.text import is_blank
from bot.fakeslack.state import dm_channel_id
from bot.testing.openai_server import Reply, tool_call
from bot.testing.slack_scenarios import (
    ALICE,
    FREE,
    GENERAL,
    MULTI,
    SINGLE,
    ask,
    has_controls,
    resumed_requests,
    still_open,
    tool_results,
)


async def test_bad_tool_arguments_go_back_to_the_model(fake_redis: aioredis.Redis, harness: Any) -> None:
    bad = [
        tool_call("ask_user", "[1, 2, 3]", id="b1"),
        tool_call("ask_user", '"just a string"', id="b2"),
        tool_call("ask_user", "{not json", id="b3"),
        tool_call("ask_user", {"question": "Pick", "options": [{"label": ""}, {"label": "  "}]}, id="b4"),
        tool_call("ask_user", {"question": "Many", "options": [{"label": f"o{i}"} for i in range(1000)]}, id="b5"),
        tool_call("ask_user", {"question": "   "}, id="b6"),
        tool_call("ask_user", {"question": "x", "selection_mode": "multi_select"}, id="b7"),
        tool_call("ask_user", {"question": 42, "options": "a,b"}, id="b8"),
    ]
    async with harness(fake_redis) as h:
        h.model.script(Reply(tool_calls=bad), Reply(text="I will behave."))
        d = await h.ws.mention(ALICE, GENERAL, "go")
        await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=d.message["ts"], predicate=lambda m: m["text"] == "I will behave."
        )
        results = tool_results(h.model)
        assert len(results) == len(bad) and all("error" in r for r in results), results
        assert not any(has_controls(m) for m in h.ws.messages(GENERAL, thread_ts=d.message["ts"]))


async def test_huge_question_is_shortened_on_screen_but_whole_for_the_model(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    question = "Why? " * 12_000  # 60k characters: far past what a message shows, within the turn's output bound
    async with harness(fake_redis) as h:
        thread, q = await ask(h, {"question": question.strip()}, then="ok")
        assert "question shortened" in json.dumps(q["blocks"])
        await h.ws.reply_in_thread(ALICE, GENERAL, thread, "because")
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "ok")
        await h.settle()
        assert [c.error for c in h.ws.calls() if c.error] == []


async def test_100_long_options_with_a_long_question_fit_in_one_message(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    args = {
        "question": "Choose carefully. " * 200,
        "options": [{"label": f"{i:03d} " + "long label " * 10, "description": "d" * 100} for i in range(100)],
    }
    async with harness(fake_redis) as h:
        h.model.script(Reply(tool_calls=[tool_call("ask_user", args, id="c1")]))
        d = await h.ws.mention(ALICE, GENERAL, "go")
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=d.message["ts"], timeout=5)
        await h.settle()
        assert [c.error for c in h.ws.calls("chat.postMessage") if c.error] == []
        assert any(has_controls(m) for m in h.ws.messages(GENERAL, thread_ts=d.message["ts"]))


async def test_ask_user_and_another_tool_in_one_turn(fake_redis: aioredis.Redis, harness: Any) -> None:
    async with harness(fake_redis) as h:
        h.model.script(
            Reply(
                tool_calls=[
                    tool_call("lookup", {"q": "x"}, id="t0"),
                    tool_call("ask_user", SINGLE, id="t1"),
                    tool_call("ask_user", FREE, id="t2"),
                    tool_call("nope", "{}", id="t3"),
                ]
            ),
            Reply(text="All done."),
        )
        d = await h.ws.mention(ALICE, GENERAL, "go")
        thread = d.message["ts"]
        q1 = await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=has_controls)
        await h.ws.click(q1, "api", user=ALICE)
        q2 = await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=thread, predicate=lambda m: has_controls(m) and m["ts"] != q1["ts"]
        )
        assert "What is the goal?" in json.dumps(q2["blocks"])
        await h.ws.reply_in_thread(ALICE, GENERAL, thread, "ship it")
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "All done.")
        assert len(h.model.requests) == 2
        results = tool_results(h.model)
        assert "error" in results[0] and results[1]["answer"] == "api" and results[2]["answer"] == "ship it"
        assert "error" in results[3]


async def test_empty_model_stream_finishes_with_a_visible_reply(fake_redis: aioredis.Redis, harness: Any) -> None:
    async with harness(fake_redis) as h:
        h.model.script(Reply(chunks=[]))
        d = await h.ws.mention(ALICE, GENERAL, "go")
        reply = await h.ws.wait_for_message(channel=GENERAL, thread_ts=d.message["ts"])
        assert reply["text"] == "(no reply)"


@pytest.mark.parametrize(
    "text",
    [
        "   ",
        "\n",
        " \n\t ",
        "\n" * 3000,
        "\u200b",
        "\u200d\u2060 \u200b",
        "\u2800",
        "\u3164",
        "\u115f\u1160",
        "\ufe0f",
        "\u034f",
    ],
)
@pytest.mark.parametrize("streaming", [True, False])
async def test_a_reply_with_nothing_visible_is_posted_as_no_reply(
    fake_redis: aioredis.Redis, harness: Any, text: str, streaming: bool
) -> None:
    """Whitespace or zero-width characters alone, streamed or posted, after a question too: "(no reply)" (before:
    the thread stayed silent, or showed an invisible message, the run completed)."""
    async with harness(fake_redis, settings={"reply_streaming": streaming}) as h:
        h.model.script(Reply(text=text), Reply(tool_calls=[tool_call("ask_user", SINGLE, id="q1")]), Reply(text=text))
        d = await h.ws.mention(ALICE, GENERAL, "go")
        thread = d.message["ts"]
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=no_reply)

        await h.ws.mention(ALICE, GENERAL, "again", thread_ts=thread)
        q = await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=has_controls)
        await h.ws.click(q, "web", user=ALICE)
        await h.settle()
        replies = [m for m in h.ws.messages(GENERAL, thread_ts=thread) if m.get("bot_id") and no_reply(m)]
        assert len(replies) == 2, h.ws.messages(GENERAL, thread_ts=thread)


def no_reply(message: dict[str, Any]) -> bool:
    """The message says "(no reply)" and nothing else visible (the blank text before it may stay)."""
    text = str(message.get("text") or "")
    return "(no reply)" in text and is_blank(text.replace("(no reply)", ""))


async def test_double_click_does_not_answer_the_next_question_when_call_ids_repeat(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    second = {"question": "Delete production?", "options": [{"label": "no"}, {"label": "yes"}]}
    async with harness(fake_redis) as h:
        h.model.script(
            Reply(tool_calls=[tool_call("ask_user", SINGLE, id="call_0")]),
            Reply(tool_calls=[tool_call("ask_user", second, id="call_0")]),
            Reply(text="Deleted production."),
        )
        d = await h.ws.mention(ALICE, GENERAL, "go")
        thread = d.message["ts"]
        q1 = await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=has_controls)
        await h.ws.click(q1, "web", user=ALICE)
        await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=thread, predicate=lambda m: has_controls(m) and m["ts"] != q1["ts"]
        )
        await h.ws.click(q1, "web", user=ALICE, as_seen=True)  # the second half of a double click, delivered late
        await h.settle()
        assert resumed_requests(h.model) == 1, "the second question was answered by a click on the first"
        assert h.ws.ephemerals(user=ALICE)[-1]["text"] == "Your answer *web* was recorded."


async def test_blank_mention_while_question_open_is_not_an_answer(fake_redis: aioredis.Redis, harness: Any) -> None:
    async with harness(fake_redis) as h:
        thread, q = await ask(h, FREE)
        await h.ws.mention(ALICE, GENERAL, "<@U_BOT>", thread_ts=thread)
        await h.settle()
        assert resumed_requests(h.model) == 0, tool_results(h.model)
        assert await still_open(h, q)


async def test_thread_reply_and_mention_while_running(fake_redis: aioredis.Redis, harness: Any) -> None:
    async with harness(fake_redis) as h:
        h.model.script(Reply(text="Slow.", delay=1.0))
        d = await h.ws.mention(ALICE, GENERAL, "think")
        thread = d.message["ts"]
        await h.ws.wait_for_call("assistant.threads.setStatus")  # the run is working
        await h.ws.reply_in_thread(ALICE, GENERAL, thread, "hurry up")  # not a question: ignored
        await h.ws.mention(ALICE, GENERAL, "are you there?", thread_ts=thread)
        note = await h.ws.wait_for_ephemeral(user=ALICE)
        assert "still working" in note["text"]
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "Slow.")
        await h.settle()
        assert len(h.model.requests) == 1


async def test_follow_up_mention_on_open_multi_select_names_options_or_gets_a_hint(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    async with harness(fake_redis) as h:
        thread, q = await ask(h, MULTI, call_id="m1", then="Planned.")
        await h.ws.mention(ALICE, GENERAL, "whatever you think", thread_ts=thread)
        note = await h.ws.wait_for_ephemeral(user=ALICE)
        assert "Tick the options" in note["text"]
        assert await still_open(h, q) and resumed_requests(h.model) == 0
        await h.ws.mention(ALICE, GENERAL, "add tests, 3", thread_ts=thread)  # a name and a number
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "Planned.")
        assert tool_results(h.model)[-1]["answers"] == ["Add tests", "Refactor"]


async def test_question_in_a_dm_is_answered_by_click(fake_redis: aioredis.Redis, harness: Any) -> None:
    async with harness(fake_redis) as h:
        h.model.script(Reply(tool_calls=[tool_call("ask_user", SINGLE, id="c1")]), Reply(text="DM done."))
        d = await h.ws.dm(ALICE, "help")
        channel = dm_channel_id(ALICE)
        q = await h.ws.wait_for_message(channel=channel, predicate=has_controls)
        await h.ws.click(q, "api", user=ALICE)
        await h.ws.wait_for_message(channel=channel, predicate=lambda m: m["text"] == "DM done.")
        assert q["thread_ts"] == d.message["ts"]
        assert tool_results(h.model)[-1]["answer"] == "api"


async def test_retried_old_event_after_completion_starts_nothing(fake_redis: aioredis.Redis, harness: Any) -> None:
    async with harness(fake_redis, subscriptions=("app_mention",)) as h:
        h.model.script(Reply(text="Only once."))
        d = await h.ws.mention(ALICE, GENERAL, "hi")
        await h.ws.wait_for_message(channel=GENERAL, predicate=lambda m: m["text"] == "Only once.")
        await h.settle()
        assert d.ack is not None
        for n in (1, 2, 3):
            assert (await h.ws.retry(d.ack, n)).status == 200
        await h.settle()
        assert len(h.model.requests) == 1


async def test_duplicate_labels_and_too_many_options_go_back_to_the_model(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    async with harness(fake_redis) as h:
        h.model.script(
            Reply(
                tool_calls=[
                    tool_call("ask_user", {"question": "Dup", "options": [{"label": "a"}, {"label": "a"}]}, id="d1")
                ]
            ),
            Reply(
                tool_calls=[
                    tool_call(
                        "ask_user", {"question": "Many", "options": [{"label": str(i)} for i in range(101)]}, id="d2"
                    )
                ]
            ),
            Reply(text="I'll ask differently."),
        )
        d = await h.ws.mention(ALICE, GENERAL, "go")
        await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=d.message["ts"], predicate=lambda m: m["text"] == "I'll ask differently."
        )
        errors = [json.loads(m["content"])["error"] for m in h.model.requests[-1]["messages"] if m["role"] == "tool"]
        assert "unique; repeated: a" in errors[0] and "too many options (101); offer at most 100" in errors[1]


@pytest.mark.parametrize("depth", [150, 500, 5000])
async def test_tool_arguments_nested_too_deeply_are_a_tool_error_the_model_reads(
    fake_redis: aioredis.Redis, harness: Any, depth: int
) -> None:
    """~1 KB of nested arrays in a tool call's arguments: the model is told (a tool error) and goes on (before: a
    RecursionError in the runtime, "Something went wrong" with no Retry, the run left ``running``)."""
    args = '{"question": "Deploy?", "meta": ' + "[" * depth + "]" * depth + "}"
    async with harness(fake_redis) as h:
        h.model.script(Reply(tool_calls=[tool_call("ask_user", args, id="t1")]), Reply(text="Asked plainly instead."))
        d = await h.ws.mention(ALICE, GENERAL, "go")
        await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=d.message["ts"], predicate=lambda m: m["text"] == "Asked plainly instead."
        )
        [result] = [m for m in h.model.requests[-1]["messages"] if m["role"] == "tool"]
        assert "nested too deeply" in result["content"]
