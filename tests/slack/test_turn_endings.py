"""A model turn that ends for another reason than ``stop`` / ``tool_calls`` (``finish_reason`` ``length``,
``content_filter``, one the bot does not know, or none) is told as what it was, in the thread, and counted:
without any text the run fails with a notice saying why and a Retry button (asking again may get a reply), never
"(no reply)"; with text the text stays, marked cut off, with a notice saying why it is incomplete."""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis.asyncio as aioredis

from bot.slack.replies.thread_writer import CUT_OFF
from bot.testing.openai_server import Reply
from bot.testing.scrape import scrape
from bot.testing.slack_scenarios import (
    ALICE,
    GENERAL,
    blocks_text,
    has_controls,
    text_is,
    texts_in,
)


def base(h: Any) -> str:
    return h.processes[0].url.removesuffix("/slack/events")


def texts(h: Any, thread: str) -> list[str]:
    return [m["text"] for m in h.ws.messages(GENERAL, thread_ts=thread)]


def body(content: str | None, finish_reason: str | None) -> dict[str, Any]:
    """A whole ``chat.completion`` body (a server that answers a stream request with one)."""
    choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": content}}
    if finish_reason is not None:
        choice["finish_reason"] = finish_reason
    return {"id": "c1", "object": "chat.completion", "created": 1, "model": "m", "choices": [choice]}


NO_TEXT = [
    pytest.param(Reply(finish_reason="content_filter"), "content_filter", "content filter stopped it", id="filtered"),
    pytest.param(Reply(finish_reason="length"), "length", "reached its output length limit", id="length"),
    pytest.param(
        Reply(reasoning="let me think about this at length", finish_reason="length"),
        "length",
        "reached its output length limit",
        id="length-after-reasoning",
    ),
    pytest.param(
        Reply(finish_reason="insufficient_system_resource"),
        "other",
        'finish_reason "insufficient_system_resource"',
        id="unknown",
    ),
    pytest.param(Reply(json_body=body(None, None)), "missing", "did not say why it ended", id="missing"),
    pytest.param(Reply(json_body=body("", "content_filter")), "content_filter", "content filter", id="json-filtered"),
]


@pytest.mark.parametrize(("reply", "label", "why"), NO_TEXT)
async def test_a_turn_that_ends_without_text_is_told_why_with_retry(
    fake_redis: aioredis.Redis, harness: Any, reply: Reply, label: str, why: str
) -> None:
    async with harness(fake_redis) as h:
        before = await scrape(base(h))
        h.model.script(reply, Reply(text="Here it is after all."))
        d = await h.ws.mention(ALICE, GENERAL, "summarise the incident")
        thread = d.message["ts"]
        notice = await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=has_controls)
        assert notice["text"].startswith("The model ended its turn without a reply: "), notice["text"]
        assert why in notice["text"] and "press Retry" in notice["text"]
        assert "Retry" in blocks_text(notice)
        await h.settle()
        assert "(no reply)" not in texts(h, thread)
        after = await scrape(base(h))
        assert after.since(before, "askbot_model_turn_endings_total", finish_reason=label) == 1
        assert after.since(before, "askbot_model_errors_total", kind="no_reply") == 1

        await h.ws.click(notice, "Retry", user=ALICE)  # asking again may get a reply: it did
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Here it is after all."))


async def test_a_reply_cut_at_the_length_limit_keeps_its_text_and_says_so(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    async with harness(fake_redis) as h:
        before = await scrape(base(h))
        h.model.script(Reply(text="Step one: stop the service. Step two: open the", finish_reason="length"))
        d = await h.ws.mention(ALICE, GENERAL, "how do I migrate?")
        thread = d.message["ts"]
        notice = await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=thread, predicate=lambda m: "incomplete" in m["text"]
        )
        assert notice["text"] == (
            "The reply above is incomplete: the model reached its output length limit. Ask me to go on and I will"
            " continue where it stopped."
        )
        assert not has_controls(notice)  # the run completed: going on is a new message, not Retry
        await h.settle()
        shown = texts(h, thread)
        assert any(
            t.startswith("Step one: stop the service. Step two: open the") and t.endswith(CUT_OFF) for t in shown
        )
        after = await scrape(base(h))
        assert after.since(before, "askbot_model_turn_endings_total", finish_reason="length") == 1
        assert after.since(before, "askbot_model_errors_total", kind="no_reply") == 0

        h.model.script(Reply(text="the config file."))
        await h.ws.mention(ALICE, GENERAL, "go on", thread_ts=thread)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("the config file."))
        sent = h.model.requests[-1]["messages"]
        assert sent[-2] == {"role": "assistant", "content": "Step one: stop the service. Step two: open the"}


@pytest.mark.parametrize(
    ("finish_reason", "said"),
    [
        ("content_filter", "The reply above is incomplete: the model provider's content filter stopped it."),
        ("abort", 'The reply above may be incomplete: the model server ended it with finish_reason "abort".'),
        ("<!channel> {evil}", "The reply above may be incomplete: the model server ended it with finish_reason an"),
    ],
)
async def test_a_reply_ended_otherwise_keeps_its_text_and_says_why(
    fake_redis: aioredis.Redis, harness: Any, finish_reason: str, said: str
) -> None:
    async with harness(fake_redis) as h:
        h.model.script(Reply(text="The first half of the answer", finish_reason=finish_reason))
        d = await h.ws.mention(ALICE, GENERAL, "tell me")
        thread = d.message["ts"]
        notice = await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=thread, predicate=lambda m: "incomplete" in m["text"]
        )
        assert notice["text"].startswith(said), notice["text"]
        assert "<!channel>" not in notice["text"] and "evil" not in notice["text"]  # the server's words: not shown
        await h.settle()
        assert any(t.startswith("The first half of the answer") and t.endswith(CUT_OFF) for t in texts(h, thread))


async def test_a_finished_reply_and_an_empty_stop_are_as_before(fake_redis: aioredis.Redis, harness: Any) -> None:
    """The neighbours: ``stop`` with text is the answer, no notice; a JSON body without finish_reason but with text
    is taken as finished (small servers omit it). (``stop`` with nothing: the model's own empty answer, "(no reply)",
    tests/slack/test_model_misbehaviour.py.)"""
    async with harness(fake_redis) as h:
        h.model.script(Reply(text="All good."), Reply(json_body=body("Also fine.", None)))
        d = await h.ws.mention(ALICE, GENERAL, "status?")
        thread = d.message["ts"]
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("All good."))
        await h.ws.mention(ALICE, GENERAL, "and now?", thread_ts=thread)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Also fine."))
        await h.settle()
        assert not any("incomplete" in t or "without a reply" in t for t in texts(h, thread))


async def test_a_reply_stream_cut_off_before_its_end_is_not_posted_as_the_final_answer(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    """README (Failures): "If the model fails, the thread gets a message saying what failed with a Retry button".
    A model server whose stream stops mid-sentence (the connection closes cleanly, with no finish_reason and no
    ``data: [DONE]``) has failed: Alice expects a failure notice with Retry, not the half sentence posted as the
    bot's final answer and the run marked completed."""
    from aiohttp import web

    from bot.testing.loopback import one_route

    async def cut_short(request: web.Request) -> web.StreamResponse:
        await request.json()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for piece in ("To deploy safely you must first ", "disable the"):
            chunk = {
                "id": "x",
                "object": "chat.completion.chunk",
                "created": 1,
                "model": "m",
                "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}],
            }
            await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())
        return resp  # ends the body here: no finish_reason, no [DONE]

    async with one_route("/v1/chat/completions", cut_short) as url, harness(fake_redis) as h:
        h.model.base_url = f"{url}/v1"
        h.route_to(await h.start_process(fake_redis))
        d = await h.ws.mention(ALICE, GENERAL, "how do I deploy?")
        await h.settle()
        thread = d.message["ts"]
        texts = texts_in(h, thread)
        # What streamed before the cut is shown as cut off, never as the answer.
        assert "To deploy safely you must first disable the" not in texts, texts
        assert any(t.startswith("To deploy safely") and t.endswith(CUT_OFF) for t in texts), texts
        assert any("Retry" in blocks_text(m) for m in h.ws.messages(GENERAL, thread_ts=thread)), texts
