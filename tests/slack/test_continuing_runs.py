"""Continuing failed and abandoned runs: valid histories, no forks, no lost answers."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import redis.asyncio as aioredis

from bot.testing.openai_server import Reply, tool_call
from bot.testing.slack_scenarios import (
    ALICE,
    GENERAL,
    SINGLE,
    assert_tool_messages_complete,
    has_controls,
    text_is,
    thread_run,
)

SECOND = {"question": "Which env?", "options": [{"label": "staging"}, {"label": "prod"}]}


async def test_follow_up_after_a_model_500_sends_a_valid_history_with_the_earlier_answer(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    async with harness(fake_redis) as h:
        h.model.script(
            Reply(tool_calls=[tool_call("ask_user", SINGLE, id="call_0"), tool_call("lookup", "{}", id="call_0")]),
            Reply(status=500),
        )
        d = await h.ws.mention(ALICE, GENERAL, "go")
        thread = d.message["ts"]
        q = await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=has_controls)
        await h.ws.click(q, "web", user=ALICE)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=lambda m: "failed" in m["text"])
        await h.settle()
        h.model.script(Reply(tool_calls=[tool_call("ask_user", SECOND, id="call_0")]), Reply(text="Carried on."))
        await h.ws.mention(ALICE, GENERAL, "try again please", thread_ts=thread)
        q2 = await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=thread, predicate=lambda m: has_controls(m) and "Which env?" in m["text"]
        )
        await h.ws.click(q2, "staging", user=ALICE)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Carried on."))
        await h.settle()
        assert_tool_messages_complete(h.model)
        last = h.model.requests[-1]["messages"]
        assert [m["content"] for m in last if m["role"] == "user"] == ["go", "try again please"]
        answers = [json.loads(m["content"]).get("answer") for m in last if m["role"] == "tool"]
        assert answers[0] == "web" and answers[-1] == "staging"
        ids = [c["id"] for m in last if m["role"] == "assistant" for c in m.get("tool_calls") or []]
        assert len(ids) == len(set(ids)) == 3


async def test_mention_after_a_crash_with_a_queued_question_continues_the_run_first(
    fake_redis: aioredis.Redis, harness: Any, prefix: str
) -> None:
    """A process died right after the first of two questions was answered: the run is left running (the answer
    claimed) with a queued call, and nobody drives it. A later mention continues it at once (no stale window):
    the second question is asked, the first answer is kept, and the mention is not taken as its answer."""
    async with harness(fake_redis) as h:
        h.model.script(
            Reply(tool_calls=[tool_call("ask_user", SINGLE, id="a"), tool_call("ask_user", SECOND, id="b")]),
        )
        d = await h.ws.mention(ALICE, GENERAL, "go")
        thread = d.message["ts"]
        first = await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=has_controls)
        await h.settle()
        state = await thread_run(fake_redis, prefix, thread)
        assert state.status == "suspended" and [c.id for c in state.queued] == ["b"]
        stream = await h.bot.agent.resume_stream("web", run_id=state.run_id, answered_by=ALICE)
        assert stream._task is not None
        stream._task.cancel()  # the process dies right after claiming the answer
        await asyncio.sleep(0)
        claimed = await thread_run(fake_redis, prefix, thread)
        assert claimed.status == "running" and claimed.queued
        await h.ws.mention(ALICE, GENERAL, "anyone?", thread_ts=thread)
        second = await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=thread, predicate=lambda m: has_controls(m) and m["ts"] != first["ts"]
        )
        await h.settle()
        assert "Which env?" in json.dumps(second["blocks"])
        resumed = await thread_run(fake_redis, prefix, thread)
        assert resumed.status == "suspended" and [a.resume_data for a in resumed.answers] == ["web"]
        assert "picked up where I left off" in h.ws.ephemerals(user=ALICE)[-1]["text"]


async def test_retry_on_an_old_failure_after_the_thread_moved_on_does_not_fork(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    async with harness(fake_redis) as h:
        h.model.script(Reply(status=500))
        d = await h.ws.mention(ALICE, GENERAL, "go")
        thread = d.message["ts"]
        failure = await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=has_controls)
        await h.settle()
        h.model.script(Reply(text="New run reply."))
        await h.ws.mention(ALICE, GENERAL, "again", thread_ts=thread)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("New run reply."))
        await h.settle()
        before = len(h.model.requests)
        h.model.script(Reply(text="Old run reply."))
        await h.ws.click(failure, "Retry", user=ALICE)
        await h.settle()
        texts = [m["text"] for m in h.ws.messages(GENERAL, thread_ts=thread)]
        assert len(h.model.requests) == before and "Old run reply." not in texts
