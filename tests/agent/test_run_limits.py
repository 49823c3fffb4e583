"""The limits of runs as one value (``bot.agent.RunLimits``), given at construction: ``Agent(limits=...)``, and the
deployment's limits reaching an agent loaded with ``AGENT=`` through ``load_agent(..., limits=...)`` (passed to a
factory that takes them, applied with ``Agent.with_limits`` either way; the agent's own turn limit is kept)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from bot.agent import Agent, OpenAIChatModel, RunLimits
from bot.agent.loading import load_agent
from bot.store import RedisRunStore
from bot.testing.openai_server import FakeOpenAI

DEPLOYMENT = RunLimits(
    ask_ttl=120.0, turn_timeout=7.0, max_reply_chars=900, history_budget=5000, tool_result_max_chars=300
)
FACTORIES = """
from bot.agent import Agent, make_ask_user_tool

seen = {}


def build_with_limits(*, model, store, limits):
    seen["limits"] = limits
    return Agent(id="a", name="A", instructions="Ask.", model=model, store=store, tools=[make_ask_user_tool()],
                 limits=limits, max_turns=3)


def build_plain(*, model, store):
    return Agent(id="b", name="B", instructions="Ask.", model=model, store=store, tools=[make_ask_user_tool()],
                 ask_ttl=60.0, turn_timeout=None, history_budget=None, max_turns=4)
"""


@pytest.fixture
async def model(openai_server: FakeOpenAI) -> AsyncIterator[OpenAIChatModel]:
    chat = OpenAIChatModel(model="test-model", base_url=openai_server.base_url, api_key="sk-test", max_retries=0)
    yield chat
    await chat.aclose()


@pytest.fixture
def factories(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "limits_factories.py").write_text(FACTORIES)
    monkeypatch.syspath_prepend(str(tmp_path))
    return "limits_factories"


def test_an_agent_takes_its_limits_at_construction(
    fake_redis: aioredis.Redis, prefix: str, model: OpenAIChatModel
) -> None:
    store = RedisRunStore(fake_redis, prefix=prefix)
    agent = Agent(id="x", name="X", instructions="Ask.", model=model, store=store, limits=DEPLOYMENT)
    assert agent.limits == DEPLOYMENT
    assert (agent.ask_ttl, agent.turn_timeout, agent.max_reply_chars, agent.tool_result_max_chars) == (
        120.0,
        7.0,
        900,
        300,
    )
    assert agent.budget.budget == 5000
    single = Agent(id="y", name="Y", instructions="Ask.", model=model, store=store, ask_ttl=None, max_reply_chars=5)
    assert single.limits == RunLimits(ask_ttl=None, max_reply_chars=5)  # the single keywords make the same value
    with pytest.raises(AttributeError):
        single.ask_ttl = 3.0  # type: ignore[misc]  # read, never assigned: with_limits is the one way


def test_a_factory_that_takes_limits_is_given_the_deployments(
    fake_redis: aioredis.Redis, prefix: str, model: OpenAIChatModel, factories: str
) -> None:
    store = RedisRunStore(fake_redis, prefix=prefix)
    agent = load_agent(f"{factories}:build_with_limits", model=model, store=store, limits=DEPLOYMENT)
    import limits_factories  # type: ignore[import-not-found]

    assert limits_factories.seen["limits"] is DEPLOYMENT
    assert agent.limits == DEPLOYMENT and agent.max_turns == 3


def test_any_other_factorys_agent_gets_the_deployments_limits_and_keeps_its_turn_limit(
    fake_redis: aioredis.Redis, prefix: str, model: OpenAIChatModel, factories: str
) -> None:
    store = RedisRunStore(fake_redis, prefix=prefix)
    agent = load_agent(f"{factories}:build_plain", model=model, store=store, limits=DEPLOYMENT)
    assert agent.limits == DEPLOYMENT
    assert agent.ask_ttl == 120.0 and agent.turn_timeout == 7.0 and agent.budget.budget == 5000
    assert agent.max_turns == 4  # the agent's own
    own = load_agent(f"{factories}:build_plain", model=model, store=store)  # no deployment limits: its own stay
    assert own.ask_ttl == 60.0 and own.turn_timeout is None and own.budget.budget is None
