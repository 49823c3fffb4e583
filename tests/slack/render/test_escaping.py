"""Text from the model and from people is escaped where Slack would parse it, and reaches the model whole."""

from __future__ import annotations

import json
from typing import Any

import redis.asyncio as aioredis

from bot.slack.render.modals import ACT_TEXT, MODAL_INPUT_BLOCK
from bot.testing.slack_scenarios import (
    ALICE,
    FREE,
    GENERAL,
    ask,
    is_answer_form,
    mrkdwn_texts,
    still_open,
    tool_results,
)


async def test_special_characters_in_question_and_labels_are_escaped_and_full_labels_reach_model(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    label = "<!channel> & <@U_BOB> 🚀 ünïcödé"
    args = {"question": "Ping <!here> & <https://evil|click> 🤖?", "options": [{"label": label}, {"label": "ok"}]}
    async with harness(fake_redis) as h:
        thread, q = await ask(h, args, then="Fine.")
        shown = json.dumps(mrkdwn_texts(q["blocks"]), ensure_ascii=False)  # plain_text never pings
        assert "<!here>" not in shown and "<!channel>" not in shown and "<https://evil" not in shown
        assert "&lt;!here&gt; &amp; &lt;https://evil|click&gt; 🤖?" in shown
        await h.ws.click(q, label, user=ALICE)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "Fine.")
        assert tool_results(h.model)[-1]["answer"] == label
        closed = next(m for m in h.ws.messages(GENERAL, thread_ts=thread) if m["ts"] == q["ts"])
        closed_text = json.dumps(mrkdwn_texts(closed["blocks"]), ensure_ascii=False)
        assert "<!channel>" not in closed_text and "&lt;!channel&gt;" in closed_text


async def test_typed_answer_with_channel_ping_and_markup_is_escaped(fake_redis: aioredis.Redis, harness: Any) -> None:
    typed = "<!channel> <@U_BOB> *bold* & <https://evil.example|safe link> 🎉"
    async with harness(fake_redis) as h:
        thread, q = await ask(h, FREE, then="Thanks.")
        await h.ws.click(q, "Answer", user=ALICE)
        view = await h.ws.wait_for_view(user=ALICE, predicate=is_answer_form)
        await h.ws.submit_view(view, {MODAL_INPUT_BLOCK: {ACT_TEXT: typed}}, user=ALICE)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "Thanks.")
        assert tool_results(h.model)[-1]["answer"] == typed
        await h.settle()
        for call in h.ws.calls("chat.postMessage") + h.ws.calls("chat.update"):
            sent = json.dumps(call.params, ensure_ascii=False)
            assert "<!channel>" not in sent and "<https://evil" not in sent, sent


async def test_question_text_fallback_does_not_ping_channel(fake_redis: aioredis.Redis, harness: Any) -> None:
    async with harness(fake_redis) as h:
        thread, q = await ask(h, {"question": "Did you mean <!channel>?", "options": [{"label": "yes"}]}, then="k")
        await h.ws.click(q, "yes", user=ALICE)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "k")
        await h.settle()
        texts = [str(c.params.get("text")) for c in h.ws.calls("chat.postMessage") + h.ws.calls("chat.update")]
        assert not [t for t in texts if "<!channel>" in t], texts


async def test_modal_shows_the_question_escaped_once(fake_redis: aioredis.Redis, harness: Any) -> None:
    async with harness(fake_redis) as h:
        _thread, q = await ask(h, {"question": "Is a < b & c?"})
        await h.ws.click(q, "Answer", user=ALICE)
        view = await h.ws.wait_for_view(user=ALICE, predicate=is_answer_form)
        section = next(b for b in view["blocks"] if b["type"] == "section")
        assert section["text"]["text"] == "Is a &lt; b &amp; c?"


async def test_thread_reply_with_slack_entities_is_unescaped_for_the_model(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    async with harness(fake_redis) as h:
        thread, q = await ask(h, then="Noted.")
        await h.ws.reply_in_thread(ALICE, GENERAL, thread, "a &lt; b &amp;&amp; c")  # what Slack sends for a < b && c
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "Noted.")
        closed = next(m for m in h.ws.messages(GENERAL, thread_ts=thread) if m["ts"] == q["ts"])
        assert "&amp;lt;" not in json.dumps(closed["blocks"])
        assert tool_results(h.model)[-1]["answer"] == "a < b && c"


async def test_huge_typed_answer_in_thread_reaches_model_whole(fake_redis: aioredis.Redis, harness: Any) -> None:
    typed = ("x" * 99 + " ") * 100  # 10,000 characters
    async with harness(fake_redis) as h:
        thread, q = await ask(h, FREE, then="Read it all.")
        await h.ws.reply_in_thread(ALICE, GENERAL, thread, typed)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "Read it all.")
        assert tool_results(h.model)[-1]["answer"] == typed.strip()
        await h.settle()
        assert [c.error for c in h.ws.calls() if c.error] == []
        assert not await still_open(h, q)
