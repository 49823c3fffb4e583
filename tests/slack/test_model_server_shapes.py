"""Odd shapes OpenAI-compatible servers send, end to end through Slack: every call is asked, in turn."""

from __future__ import annotations

import json
from typing import Any

import redis.asyncio as aioredis

from bot.testing.openai_server import Reply
from bot.testing.slack_scenarios import ALICE, GENERAL, has_controls

WHICH = {"question": "Which repo?", "options": [{"label": "api"}, {"label": "web"}]}
WHEN = {"question": "When?", "options": [{"label": "now"}, {"label": "later"}]}


def whole_call(call_id: str, args: dict[str, Any], *, as_object: bool = False) -> dict[str, Any]:
    """A streamed delta carrying a whole tool call at ``index: 0`` (as some local servers send every call)."""
    arguments: Any = args if as_object else json.dumps(args)
    return {
        "tool_calls": [
            {"index": 0, "id": call_id, "type": "function", "function": {"name": "ask_user", "arguments": arguments}}
        ]
    }


async def test_two_whole_calls_on_index_0_with_object_arguments_are_two_questions_asked_in_turn(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    async with harness(fake_redis) as h:
        h.model.script(
            Reply(chunks=[whole_call("call_a", WHICH), whole_call("call_b", WHEN, as_object=True)]),
            Reply(text="Both answered."),
        )
        d = await h.ws.mention(ALICE, GENERAL, "deploy")
        thread = d.message["ts"]
        first = await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=has_controls)
        assert "Which repo?" in json.dumps(first["blocks"])
        await h.ws.click(first, "web", user=ALICE)
        second = await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=thread, predicate=lambda m: has_controls(m) and m["ts"] != first["ts"]
        )
        assert "When?" in json.dumps(second["blocks"])
        await h.ws.click(second, "later", user=ALICE)
        await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "Both answered."
        )
        results = [json.loads(m["content"]) for m in h.model.requests[-1]["messages"] if m["role"] == "tool"]
        assert [r["answer"] for r in results] == ["web", "later"]
        assert not [r for r in results if "error" in r]
