"""Runs that only ask a person (``Agent.ask``, bot.agent.asking): suspended on their question at once, ended by its
outcome (answer, no answer, withdrawn) with their reply, in any process, and never a model turn."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
import redis.asyncio as aioredis

from bot.agent import ask_user_tool, tool
from bot.agent.asking import APPROVAL_TOOL, ENDED, approval_outcome, approval_tool, ask_outcome, asked_tool
from bot.agent.stream import ApprovalChunk, FinishChunk, SuspendedChunk, ToolResultChunk
from bot.agent.tools import ToolInputError
from bot.errors import RunConflict, RunNotFound
from bot.testing.openai_server import FakeOpenAI, Reply, tool_call

QUESTION = {"question": "Which repo?", "options": [{"label": "api"}, {"label": "web"}]}
REPLY = "Sent back to the agent that asked."


async def test_an_ask_run_suspends_at_once_and_ends_with_the_answer(
    fake_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI
) -> None:
    agent = make_agent(fake_redis)
    chunks = await (await agent.ask(QUESTION, run_id="run_ask1", reply=REPLY)).collect()
    assert isinstance(chunks[-2], SuspendedChunk) and chunks[-2].payload.suspend_payload.question == "Which repo?"
    assert (await agent.get_run("run_ask1")).status == "suspended"
    other = make_agent(fake_redis)  # another process takes the answer
    done = await (await other.resume_stream("web", run_id="run_ask1", answered_by="U_BOB")).collect()
    assert next(c for c in done if isinstance(c, FinishChunk)).payload.text == REPLY
    state = await agent.get_run("run_ask1")
    assert state.status == "completed" and state.turns == 0
    assert ask_outcome(state) == {"answer": "web", "answer_type": "option", "answered_by": "U_BOB"}
    assert openai_server.requests == []  # no model turn, before or after


async def test_no_answer_and_withdrawn_are_outcomes_too(fake_redis: aioredis.Redis, make_agent: Any) -> None:
    agent = make_agent(fake_redis)
    await (await agent.ask({"question": "Name?"}, run_id="run_ask2", reply=REPLY)).collect()
    await (await agent.cancel_question(run_id="run_ask2", cancelled_by="U_ALICE")).collect()
    state = await agent.get_run("run_ask2")
    outcome = ask_outcome(state)
    assert outcome is not None and outcome["status"] == "cancelled"
    assert state.messages[-1]["content"] == ENDED["cancelled"]  # not the reply meant for an answer
    await (await agent.ask({"question": "Name?"}, run_id="run_ask3", reply=REPLY)).collect()
    state = await agent.get_run("run_ask3")  # its deadline passes (moved back: no sleeping)
    assert state.pending is not None and state.pending.expires_at is not None
    pending = state.pending.model_copy(update={"expires_at": state.pending.expires_at - timedelta(days=2)})
    await agent.store.save(state.model_copy(update={"pending": pending}), owner="test")
    await (await agent.time_out(run_id="run_ask3")).collect()
    state = await agent.get_run("run_ask3")
    outcome = ask_outcome(state)
    assert outcome is not None and outcome["status"] == "no_answer"
    assert state.messages[-1]["content"] == ENDED["no_answer"]


async def test_a_malformed_question_is_refused_before_anything_is_stored(
    fake_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI
) -> None:
    agent = make_agent(fake_redis)
    bad = {"question": "Pick", "selection_mode": "multi_select"}  # several choices need options
    with pytest.raises(ToolInputError, match="invalid arguments for ask_user"):
        await agent.ask(bad, run_id="run_ask4", reply=REPLY)
    with pytest.raises(RunNotFound):
        await agent.get_run("run_ask4")
    assert openai_server.requests == []


async def test_the_same_run_id_is_not_asked_twice(fake_redis: aioredis.Redis, make_agent: Any) -> None:
    agent = make_agent(fake_redis)
    await (await agent.ask(QUESTION, run_id="run_ask5", reply=REPLY)).collect()
    with pytest.raises(RunConflict):
        await agent.ask(QUESTION, run_id="run_ask5", reply=REPLY)


async def test_an_agent_without_a_question_tool_cannot_ask(fake_redis: aioredis.Redis, make_agent: Any) -> None:
    @tool
    async def noop() -> str:
        """Nothing."""
        return "ok"

    with pytest.raises(ValueError, match="no question tool"):
        await make_agent(fake_redis, tools=[noop]).ask(QUESTION, reply=REPLY)


async def test_the_hidden_approval_tool_is_offered_to_no_model_and_a_model_cannot_call_it(
    fake_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI
) -> None:
    agent = make_agent(fake_redis, tools=[ask_user_tool, approval_tool()])
    openai_server.script(
        Reply(tool_calls=[tool_call("request_approval", {"action": "rm -rf /"}, id="c1")]), Reply(text="ok")
    )
    chunks = await (await agent.stream("do it")).collect()
    offered = [t["function"]["name"] for t in openai_server.requests[0]["tools"]]
    assert offered == ["ask_user"]
    result = next(c for c in chunks if isinstance(c, ToolResultChunk))
    assert result.payload.is_error and "unknown tool" in str(result.payload.result)
    assert not any(isinstance(c, ApprovalChunk) for c in chunks)


async def test_an_approval_request_run_waits_for_a_decision_and_ends_with_it(
    fake_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI
) -> None:
    agent = make_agent(fake_redis, tools=[ask_user_tool, approval_tool()])
    ask = {"action": "Restart api", "details": {"env": "prod"}}
    chunks = await (await agent.ask(ask, run_id="run_ap1", reply=REPLY, tool_id=APPROVAL_TOOL)).collect()
    assert any(isinstance(c, ApprovalChunk) for c in chunks)
    await (await agent.decline_tool_call(run_id="run_ap1", reason="not now", declined_by="U_BOB")).collect()
    state = await agent.get_run("run_ap1")
    assert state.status == "completed" and asked_tool(state) == APPROVAL_TOOL
    assert approval_outcome(state) == {"status": "declined", "declined_by": "U_BOB", "reason": "not now"}
    assert openai_server.requests == []
