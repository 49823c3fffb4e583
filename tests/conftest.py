"""Shared fixtures: fakeredis, the real Redis (unique key prefix per test), the loopback OpenAI server.

Real-Redis tests skip when Redis is unreachable, unless ``REQUIRE_REAL_REDIS=1`` (set by ``.ci/run``),
which turns the skip into a failure.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import fakeredis
import pytest
import redis.asyncio as aioredis

from bot.agent import Agent, OpenAIChatModel, ask_user_tool
from bot.agent.tools import Tool
from bot.store import RedisRunStore
from bot.testing.openai_server import FakeOpenAI

REAL_REDIS_URL = os.environ.get("REDIS_TEST_URL", "redis://127.0.0.1:6379/0")


@pytest.fixture(autouse=True)
def fresh_calibration() -> None:
    """What the process learned of models' token counts and windows does not carry from one test to the next."""
    from bot.agent.budget import CALIBRATION

    CALIBRATION.clear()


@pytest.fixture
def fake_server() -> fakeredis.FakeServer:
    """One in-memory Redis 'server'; several clients on it behave like several processes."""
    return fakeredis.FakeServer()


@pytest.fixture
async def fake_redis(fake_server: fakeredis.FakeServer) -> AsyncIterator[aioredis.Redis]:
    client = fakeredis.FakeAsyncRedis(server=fake_server)
    yield client
    await client.aclose()


@pytest.fixture
def prefix() -> str:
    """A key prefix no other test uses."""
    return f"test:{uuid.uuid4().hex[:12]}:"


@pytest.fixture
async def real_redis(prefix: str) -> AsyncIterator[aioredis.Redis]:
    """A client of the real Redis; deletes this test's keys (its prefix only) afterwards."""
    client = aioredis.from_url(REAL_REDIS_URL)
    try:
        await client.ping()
    except Exception as exc:
        await client.aclose()
        message = f"real Redis not reachable at {REAL_REDIS_URL}: {type(exc).__name__}"
        if os.environ.get("REQUIRE_REAL_REDIS") == "1":
            pytest.fail(message)
        pytest.skip(message)
    yield client
    keys = [k async for k in client.scan_iter(match=f"{prefix}*")]
    if keys:
        await client.delete(*keys)
    await client.aclose()


@pytest.fixture
async def openai_server() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI() as server:
        yield server


AgentFactory = Callable[..., Agent]


@pytest.fixture
async def make_agent(openai_server: FakeOpenAI, prefix: str) -> AsyncIterator[AgentFactory]:
    """Build an agent on the loopback model: ``make_agent(redis_client, tools=..., **agent_kwargs)``.

    The models' HTTP clients are closed at teardown, inside the test's event loop.
    """
    models: list[OpenAIChatModel] = []

    def build(
        client: aioredis.Redis,
        *,
        tools: list[Tool] | None = None,
        store_kwargs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> Agent:
        model = OpenAIChatModel(
            model="test-model", base_url=openai_server.base_url, api_key="sk-test", max_retries=0, timeout=10
        )
        models.append(model)
        return Agent(
            id="assistant",
            name="Assistant",
            instructions="Ask the user for clarification when the request is ambiguous.",
            model=model,
            tools=tools if tools is not None else [ask_user_tool],
            store=RedisRunStore(client, prefix=prefix, **(store_kwargs or {})),
            **kwargs,
        )

    yield build
    for model in models:
        await model.aclose()
