"""Each selection mode from mention to final reply, through the fake Slack over real HTTP and signatures."""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis.asyncio as aioredis

from bot.testing.openai_server import FakeOpenAI, Reply, tool_call
from bot.testing.slack_scenarios import ALICE, BOB, is_answer_form

GENERAL = "C_GENERAL"
SINGLE = {"question": "Which repo?", "options": [{"label": "api", "description": "Backend"}, {"label": "web"}]}
MULTI = {
    "question": "What next?",
    "selection_mode": "multi_select",
    "options": [{"label": "Add tests"}, {"label": "Update docs"}, {"label": "Refactor"}],
}


def last_tool_result(model: FakeOpenAI) -> dict[str, Any]:
    msgs = model.requests[-1]["messages"]
    return json.loads(next(m for m in reversed(msgs) if m["role"] == "tool")["content"])


def has_buttons(message: dict[str, Any]) -> bool:
    return any(b["type"] == "actions" for b in message.get("blocks", []))


async def test_single_select_mention_to_reply(fake_redis: aioredis.Redis, harness: Any) -> None:
    async with harness(fake_redis) as h:
        h.model.script(Reply(tool_calls=[tool_call("ask_user", SINGLE, id="c1")]), Reply(text="Summarizing *web*."))
        d = await h.ws.mention(ALICE, GENERAL, "summarize my project")
        assert d.ack is not None and d.ack.status == 200
        thread = d.message["ts"]
        q = await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=has_buttons)
        assert "Which repo?" in json.dumps(q["blocks"])
        ack = await h.ws.click(q, "web", user=ALICE)
        assert ack.status == 200 and ack.duration_ms < 3000
        reply = await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=thread, predicate=lambda m: "Summarizing" in m["text"]
        )
        assert reply["thread_ts"] == thread
        answered = next(m for m in h.ws.messages(GENERAL, thread_ts=thread) if m["ts"] == q["ts"])
        assert not has_buttons(answered) and "<@U_ALICE> answered" in json.dumps(answered["blocks"])
        assert last_tool_result(h.model) == {"answer": "web", "answer_type": "option", "answered_by": ALICE}
        await h.settle()
        assert [c for c in h.ws.calls() if c.error] == []


async def test_multi_select_ticks_and_submit(fake_redis: aioredis.Redis, harness: Any) -> None:
    async with harness(fake_redis) as h:
        h.model.script(Reply(tool_calls=[tool_call("ask_user", MULTI, id="m1")]), Reply(text="Planned."))
        d = await h.ws.mention(ALICE, GENERAL, "plan the week")
        q = await h.ws.wait_for_message(channel=GENERAL, thread_ts=d.message["ts"], predicate=has_buttons)
        await h.ws.click(q, "Submit", user=ALICE)  # nothing ticked
        eph = await h.ws.wait_for_ephemeral(user=ALICE, predicate=lambda m: "at least one" in m["text"])
        assert eph["channel"] == GENERAL
        for label in ("Add tests", "Refactor", "Update docs"):
            ack = await h.ws.toggle(q, label, user=ALICE)
            assert ack.status == 200
        await h.ws.toggle(q, "Update docs", user=ALICE)  # untick
        assert len(h.model.requests) == 1  # toggles never resume
        await h.ws.click(q, "Submit", user=ALICE)
        await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=d.message["ts"], predicate=lambda m: m["text"] == "Planned."
        )
        assert last_tool_result(h.model) == {
            "answers": ["Add tests", "Refactor"],
            "answer_type": "options",
            "answered_by": ALICE,
        }


async def test_free_form_modal_blank_then_typed(fake_redis: aioredis.Redis, harness: Any) -> None:
    async with harness(fake_redis) as h:
        h.model.script(
            Reply(tool_calls=[tool_call("ask_user", {"question": "What is the goal?"}, id="f1")]),
            Reply(text="Goal noted."),
        )
        d = await h.ws.mention(ALICE, GENERAL, "help me")
        q = await h.ws.wait_for_message(channel=GENERAL, thread_ts=d.message["ts"], predicate=has_buttons)
        await h.ws.click(q, "Answer", user=ALICE)
        view = await h.ws.wait_for_view(user=ALICE, predicate=is_answer_form)
        assert "What is the goal?" in json.dumps(view["blocks"])
        blank = await h.ws.submit_view(view, {"answer_input": {"answer_text": "   "}}, user=ALICE)
        assert blank.json == {"response_action": "errors", "errors": {"answer_input": "Please write an answer."}}
        assert len(h.model.requests) == 1
        ok = await h.ws.submit_view(view, {"answer_input": {"answer_text": "Ship v2 by Friday"}}, user=ALICE)
        assert ok.status == 200 and not ok.body
        await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=d.message["ts"], predicate=lambda m: m["text"] == "Goal noted."
        )
        assert last_tool_result(h.model) == {"answer": "Ship v2 by Friday", "answer_type": "text", "answered_by": ALICE}
        closed = next(m for m in h.ws.messages(GENERAL, thread_ts=d.message["ts"]) if m["ts"] == q["ts"])
        assert not has_buttons(closed) and "Ship v2 by Friday" in json.dumps(closed["blocks"])


async def test_thread_reply_answers_as_typed_text(fake_redis: aioredis.Redis, harness: Any) -> None:
    async with harness(fake_redis) as h:
        h.model.script(Reply(tool_calls=[tool_call("ask_user", SINGLE, id="c1")]), Reply(text="Mobile it is."))
        d = await h.ws.mention(ALICE, GENERAL, "summarize")
        thread = d.message["ts"]
        q = await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=has_buttons)
        await h.ws.reply_in_thread(BOB, GENERAL, thread, "I think mobile")  # not the requester: ignored
        await h.settle()
        assert len(h.model.requests) == 1
        await h.ws.reply_in_thread(ALICE, GENERAL, thread, "the mobile app")
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "Mobile it is.")
        assert last_tool_result(h.model)["answer_type"] == "typed_text"
        assert last_tool_result(h.model)["answer"] == "the mobile app"
        closed = next(m for m in h.ws.messages(GENERAL, thread_ts=thread) if m["ts"] == q["ts"])
        assert not has_buttons(closed)


async def test_follow_up_mention_continues_the_conversation(fake_redis: aioredis.Redis, harness: Any) -> None:
    async with harness(fake_redis) as h:
        h.model.script(Reply(text="First answer."), Reply(text="Second answer."))
        d = await h.ws.mention(ALICE, GENERAL, "first question")
        thread = d.message["ts"]
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "First answer.")
        await h.settle()
        await h.ws.mention(ALICE, GENERAL, "second question", thread_ts=thread)
        await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "Second answer."
        )
        contents = [m.get("content") for m in h.model.requests[-1]["messages"]]
        assert contents[-3:] == ["first question", "First answer.", "second question"]


async def test_dm_starts_a_run(fake_redis: aioredis.Redis, harness: Any) -> None:
    async with harness(fake_redis) as h:
        h.model.script(Reply(text="Hello in DM."))
        d = await h.ws.dm(ALICE, "hi there")
        msg = await h.ws.wait_for_message(channel=d.message["channel"], predicate=lambda m: m["text"] == "Hello in DM.")
        assert msg["thread_ts"] == d.message["ts"]
        assert h.model.requests[0]["messages"][-1]["content"] == "hi there"


async def test_working_sign_shows_while_the_model_runs(fake_redis: aioredis.Redis, harness: Any) -> None:
    async with harness(fake_redis) as h:
        h.model.script(Reply(text="Done.", delay=0.5))
        d = await h.ws.mention(ALICE, GENERAL, "slow one")
        status = await h.ws.wait_for_call("assistant.threads.setStatus")  # the thread's status, where allowed
        assert status.params["thread_ts"] == d.message["ts"] and status.params["status"] == "is thinking..."
        assert not status.error and h.ws.calls("reactions.add") == []
        await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=d.message["ts"], predicate=lambda m: m["text"] == "Done."
        )


async def test_rate_limited_web_api_calls_are_retried(fake_redis: aioredis.Redis, harness: Any) -> None:
    """slack_sdk's rate-limit retry handler: a 429 with Retry-After is retried, the question still arrives."""
    async with harness(fake_redis) as h:
        h.ws.fake.fail_next("chat.postMessage", "ratelimited", status=429)
        h.model.script(Reply(tool_calls=[tool_call("ask_user", SINGLE, id="c1")]), Reply(text="ok"))
        d = await h.ws.mention(ALICE, GENERAL, "go")
        q = await h.ws.wait_for_message(channel=GENERAL, thread_ts=d.message["ts"], predicate=has_buttons)
        posts = h.ws.calls("chat.postMessage")
        assert [p.status for p in posts[:2]] == [429, 200]
        assert q["ts"] == posts[1].response["ts"]


@pytest.mark.parametrize("first", [ALICE, BOB])
async def test_a_modal_sent_after_the_question_was_answered_says_so_in_plain_text(
    fake_redis: aioredis.Redis, harness: Any, first: str
) -> None:
    """The Answer modal, sent once the question was answered in the thread (by its sender, or by Bob): the error
    under the input is plain text, as Slack shows it (before: "*From the thread*" with its asterisks, and a raw
    "<@U_BOB>")."""
    async with harness(fake_redis, answerers="channel") as h:
        h.model.script(
            Reply(tool_calls=[tool_call("ask_user", {"question": "What is the goal?"}, id="f1")]), Reply(text="Ok.")
        )
        d = await h.ws.mention(ALICE, GENERAL, "help me")
        thread = d.message["ts"]
        q = await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=has_buttons)
        await h.ws.click(q, "Answer", user=ALICE)
        view = await h.ws.wait_for_view(user=ALICE, predicate=is_answer_form)
        await h.ws.reply_in_thread(first, GENERAL, thread, "From the thread")
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "Ok.")
        typed = "5 * 3 & *the* modal"  # the person's own asterisks and ampersand stay as typed
        late = await h.ws.submit_view(view, {"answer_input": {"answer_text": typed}}, user=ALICE)
        said = late.json["errors"]["answer_input"]
        who = "You" if first == ALICE else "@bob"
        assert said == f"{who} had already answered From the thread; your choice {typed} was not recorded."
