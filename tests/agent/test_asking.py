"""Runs that only ask a person (``Agent.ask``, bot.agent.asking): suspended on their question at once, ended by its
outcome (answer, no answer, withdrawn) with their reply, in any process, and never a model turn."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
import redis.asyncio as aioredis

from bot.agent import tool
from bot.agent.asking import ask_outcome
from bot.agent.stream import FinishChunk, SuspendedChunk
from bot.agent.tools import ToolInputError
from bot.errors import RunConflict, RunNotFound
from bot.testing.openai_server import FakeOpenAI

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
    outcome = ask_outcome(await agent.get_run("run_ask2"))
    assert outcome is not None and outcome["status"] == "cancelled"
    await (await agent.ask({"question": "Name?"}, run_id="run_ask3", reply=REPLY)).collect()
    state = await agent.get_run("run_ask3")  # its deadline passes (moved back: no sleeping)
    assert state.pending is not None and state.pending.expires_at is not None
    pending = state.pending.model_copy(update={"expires_at": state.pending.expires_at - timedelta(days=2)})
    await agent.store.save(state.model_copy(update={"pending": pending}), owner="test")
    await (await agent.time_out(run_id="run_ask3")).collect()
    outcome = ask_outcome(await agent.get_run("run_ask3"))
    assert outcome is not None and outcome["status"] == "no_answer"


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
