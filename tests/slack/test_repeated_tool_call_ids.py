"""Model servers that repeat tool_call_ids: each question gets its own answer."""

from __future__ import annotations

import json
from typing import Any

import redis.asyncio as aioredis

from bot.testing.openai_server import Reply, tool_call
from bot.testing.slack_scenarios import ALICE, GENERAL, SINGLE, assert_tool_messages_complete, has_controls, text_is

SECOND = {"question": "Which env?", "options": [{"label": "staging"}, {"label": "prod"}]}


async def test_two_questions_with_the_same_id_in_one_turn_each_get_their_own_answer(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    async with harness(fake_redis) as h:
        h.model.script(
            Reply(tool_calls=[tool_call("ask_user", SINGLE, id="call_0"), tool_call("ask_user", SECOND, id="call_0")]),
            Reply(text="Both answered."),
        )
        d = await h.ws.mention(ALICE, GENERAL, "go")
        thread = d.message["ts"]
        q1 = await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=has_controls)
        assert "Which repo?" in json.dumps(q1["blocks"])
        await h.ws.click(q1, "web", user=ALICE)
        q2 = await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=thread, predicate=lambda m: has_controls(m) and m["ts"] != q1["ts"]
        )
        assert "Which env?" in json.dumps(q2["blocks"])
        await h.ws.click(q1, "api", user=ALICE, as_seen=True)  # late double click on the first question
        await h.settle()
        told = h.ws.ephemerals(user=ALICE)[-1]["text"]
        assert told == "You had already answered *web*; your choice *api* was not recorded."
        await h.ws.click(q2, "prod", user=ALICE)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Both answered."))
        await h.settle()
        assert len(h.model.requests) == 2
        assert_tool_messages_complete(h.model)
        msgs = h.model.requests[-1]["messages"]
        calls = next(m for m in msgs if m.get("tool_calls"))["tool_calls"]
        ids = [c["id"] for c in calls]
        assert len(set(ids)) == 2
        by_id = {m["tool_call_id"]: json.loads(m["content"])["answer"] for m in msgs if m["role"] == "tool"}
        questions = {c["id"]: json.loads(c["function"]["arguments"])["question"] for c in calls}
        assert {questions[i]: by_id[i] for i in ids} == {"Which repo?": "web", "Which env?": "prod"}
