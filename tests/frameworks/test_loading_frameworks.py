"""``AGENT=module:attr`` naming a framework's agent (or a factory returning one): adopted through the Slack bot's
``adopt`` hook; without it, the same one-line ``ConfigError`` as for any object that is not an Agent."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis.asyncio as aioredis

from bot.agent.loading import load_agent
from bot.errors import ConfigError
from bot.frameworks import adopt
from bot.frameworks.pydantic_ai import PydanticAIAgent
from bot.playground.demo_model import DemoModel
from bot.store import RedisRunStore

ROOT = Path(__file__).parent.parent.parent


async def test_a_pydantic_ai_agent_object_named_by_agent_is_adopted(
    fake_redis: aioredis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    store = RedisRunStore(fake_redis)
    agent = load_agent(
        "examples.pydantic_ai_agent:agent", model=DemoModel(), store=store, adopt=lambda obj: adopt(obj, store=store)
    )
    assert isinstance(agent, PydanticAIAgent) and agent.id == "ops-pydantic-ai" and agent.store is store


async def test_without_the_hook_a_framework_object_is_refused_in_one_line(
    fake_redis: aioredis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    with pytest.raises(ConfigError, match="is not callable"):
        load_agent("examples.pydantic_ai_agent:agent", model=DemoModel(), store=RedisRunStore(fake_redis))


async def test_a_factory_returning_a_framework_object_is_adopted(
    fake_redis: aioredis.Redis, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "my_graph.py").write_text(
        "from typing import TypedDict\n"
        "from langgraph.graph import START, END, StateGraph\n"
        "class S(TypedDict, total=False):\n    messages: list\n"
        "def build(*, model, store):\n"
        "    g = StateGraph(S)\n    g.add_node('n', lambda s: {'messages': [{'role': 'assistant', 'content': 'hi'}]})\n"
        "    g.add_edge(START, 'n')\n    g.add_edge('n', END)\n    return g.compile(name='mine')\n"
    )
    monkeypatch.chdir(tmp_path)
    store = RedisRunStore(fake_redis)
    agent = load_agent("my_graph:build", model=DemoModel(), store=store, adopt=lambda obj: adopt(obj, store=store))
    assert agent.id == "mine"
    stream = await agent.stream("hello")
    assert (await stream.result()).messages[-1]["content"] == "hi"  # type: ignore[union-attr]
