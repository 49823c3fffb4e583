"""The playground's framework demo agents (bot/playground/framework_demos.py), loaded as ``AGENT`` is, each
framework's own client talking to the offline demo model served as a loopback Chat Completions endpoint
(bot/playground/demo_endpoint.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from bot.agent import Agent
from bot.agent.loading import load_agent
from bot.agent.stream import ApprovalChunk, FinishChunk, SuspendedChunk, TextDeltaChunk
from bot.frameworks import adopt
from bot.frameworks.base import FrameworkAgent
from bot.playground import framework_demos
from bot.playground.demo_endpoint import serve_demo_model
from bot.playground.demo_model import DemoModel
from bot.store import RedisRunStore


@pytest.fixture
async def served() -> AsyncIterator[DemoModel]:
    model = DemoModel()
    server = await serve_demo_model(model)
    yield model
    await server.stop()


@pytest.fixture(autouse=True)
def quick_restarts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(framework_demos, "RESTART_DELAY", 0)


def load(name: str, model: DemoModel, redis: aioredis.Redis, prefix: str) -> Agent:
    store = RedisRunStore(redis, prefix=prefix)
    spec = f"bot.playground.framework_demos:{name}"
    return load_agent(spec, model=model, store=store, adopt=lambda obj: adopt(obj, store=store))


def text_of(chunks: list[Any]) -> str:
    assert isinstance(chunks[-1], FinishChunk) and chunks[-1].payload.status == "completed", chunks[-1]
    return "".join(c.payload.text for c in chunks if isinstance(c, TextDeltaChunk))


@pytest.mark.parametrize("name", ["pydantic_ai", "langgraph"])
async def test_a_demo_agent_asks_its_question_in_slacks_shape_and_replies_with_the_answer(
    name: str, served: DemoModel, fake_redis: aioredis.Redis, prefix: str
) -> None:
    agent = load(name, served, fake_redis, prefix)
    assert isinstance(agent, FrameworkAgent)
    run = await agent.stream("deploy please")
    asked = next(c for c in await run.collect() if isinstance(c, SuspendedChunk))
    assert asked.payload.suspend_payload.labels == ["staging", "production", "development"]
    rest = await (await agent.resume_stream("production", run_id=run.run_id, answered_by="U1")).collect()
    assert "production" in text_of(rest)


async def test_the_langgraph_demo_replies_to_several_options_with_their_labels(
    served: DemoModel, fake_redis: aioredis.Redis, prefix: str
) -> None:
    # the graph's answer reaches the demo model as the list itself (no ``answers``); before: "['Search', ...]"
    agent = load("langgraph", served, fake_redis, prefix)
    run = await agent.stream("plan the next release")
    asked = next(c for c in await run.collect() if isinstance(c, SuspendedChunk))
    assert asked.payload.suspend_payload.selection_mode == "multi_select"
    rest = await (await agent.resume_stream(["Search", "Dark mode"], run_id=run.run_id, answered_by="U1")).collect()
    assert "Search, Dark mode" in text_of(rest) and "['" not in text_of(rest)


@pytest.mark.parametrize("name", ["pydantic_ai", "openai_agents"])
async def test_a_demo_agents_restart_waits_for_an_approval_and_runs_once_approved(
    name: str, served: DemoModel, fake_redis: aioredis.Redis, prefix: str
) -> None:
    agent = load(name, served, fake_redis, prefix)
    run = await agent.stream("restart web")
    approval = next(c for c in await run.collect() if isinstance(c, ApprovalChunk))
    assert (approval.payload.tool_name, approval.payload.args) == ("restart_service", {"name": "web"})
    rest = await (await agent.approve_tool_call(run_id=run.run_id, approved_by="U1")).collect()
    assert "restarted web" in text_of(rest)


@pytest.mark.parametrize("name", ["pydantic_ai", "openai_agents"])
async def test_a_demo_agents_ticket_lookup_reads_as_the_ticket_not_its_python_form(
    name: str, served: DemoModel, fake_redis: aioredis.Redis, prefix: str
) -> None:
    """``ticket SUP-12``: the reply names the ticket's title and status (before, with the OpenAI Agents SDK: the
    tool's dict reached the model as ``str(dict)``, Python's form, and the reply showed it as it was)."""
    agent = load(name, served, fake_redis, prefix)
    said = text_of(await (await agent.stream("ticket SUP-12")).collect())
    assert "SUP-12 \u201cCSV export" in said and "{" not in said and "'id'" not in said, said


async def test_a_bare_framework_agent_is_adopted(fake_redis: aioredis.Redis, served: DemoModel) -> None:
    store = RedisRunStore(fake_redis)
    inner = framework_demos.pydantic_ai(model=served, store=store)
    assert isinstance(inner, FrameworkAgent)
    adopted = adopt(inner.agent, store=store)  # type: ignore[attr-defined]
    assert adopted is not None and adopted.framework == "pydantic-ai"  # type: ignore[attr-defined]
    assert adopt(object(), store=store) is None


# --- the examples (examples/*.py), loaded as AGENT=examples.<module>:build ---------------------------------------


def load_example(module: str, model: DemoModel, redis: aioredis.Redis, prefix: str, monkeypatch: Any) -> Agent:
    monkeypatch.chdir(Path(__file__).parent.parent.parent)  # AGENT=examples....:build from the project's folder
    store = RedisRunStore(redis, prefix=prefix)
    return load_agent(f"examples.{module}:build", model=model, store=store, adopt=lambda obj: adopt(obj, store=store))


async def test_the_pydantic_ai_example_asks_and_its_deferred_tool_gets_a_persons_answer(
    served: DemoModel, fake_redis: aioredis.Redis, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = load_example("pydantic_ai_agent", served, fake_redis, prefix, monkeypatch)
    run = await agent.stream('call order_status {"order_id": "A-1"}')  # the demo model calls what it is told
    asked = next(c for c in await run.collect() if isinstance(c, SuspendedChunk))
    assert asked.payload.suspend_payload.question == "What is the status of order A-1?"
    rest = await (await agent.resume_stream("shipped", run_id=run.run_id, answered_by="U1")).collect()
    assert "shipped" in text_of(rest)


async def test_the_openai_agents_example_waits_for_an_approval(
    served: DemoModel, fake_redis: aioredis.Redis, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = load_example("openai_agents_agent", served, fake_redis, prefix, monkeypatch)
    run = await agent.stream("restart web")
    assert any(isinstance(c, ApprovalChunk) for c in await run.collect())
    rest = await (await agent.decline_tool_call(run_id=run.run_id, reason="busy", declined_by="U1")).collect()
    assert text_of(rest)


async def test_the_langgraph_example_asks_a_choice_then_lists_another_payload_and_asks_for_words(
    served: DemoModel, fake_redis: aioredis.Redis, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = load_example("langgraph_agent", served, fake_redis, prefix, monkeypatch)
    run = await agent.stream("ship it")
    first = next(c for c in await run.collect() if isinstance(c, SuspendedChunk))
    assert first.payload.suspend_payload.labels == ["staging", "production"]
    chunks = await (await agent.resume_stream("staging", run_id=run.run_id, answered_by="U1")).collect()
    second = next(c for c in chunks if isinstance(c, SuspendedChunk))
    # a plain payload listed a key a line, saying what to do (a new user's trial: before, JSON and no hint)
    assert second.payload.suspend_payload.question == (
        "The agent stopped to ask about this (`interrupt`):\n• action: deploy\n• environment: staging\n"
        "Answer in your own words: the agent gets what you write."
    )
    rest = await (await agent.resume_stream("yes, go", run_id=run.run_id, answered_by="U1")).collect()
    # its reply node's model call, answered by the demo model (before: the demo model's whole help text)
    assert text_of(rest) == "(demo model) deploy to staging; the person said: yes, go"
