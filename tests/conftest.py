"""Shared fixtures: fakeredis, the real Redis (unique key prefix per test), the loopback OpenAI server.

Real-Redis tests skip when Redis is unreachable, unless ``REQUIRE_REAL_REDIS=1`` (set by ``.ci/run``),
which turns the skip into a failure.

Every test using ``real_redis`` runs twice: against the single Redis (``REDIS_TEST_URL``) and against a Redis
Cluster (``REDIS_TEST_CLUSTER_URL``, default the local 3-master cluster ``.ci/run`` starts on 127.0.0.1:7000-7002),
ids ``[single]`` / ``[cluster]``. ``real_redis_env`` gives a bot subprocess the matching ``REDIS_URL`` and
``REDIS_CLUSTER``; ``connect_real_redis()`` makes more clients of the same kind. A test marked
``redis_kinds("single")`` runs against the single Redis only; that is for:

- the tests that cut or slow Redis with a ``TcpProxy`` in front of one server (a cluster client follows the
  nodes' own addresses past the proxy): they test the client's retries, not what the store keeps;
- most MCP server tests (``tests/slack/test_mcp_server.py``, subprocess-heavy: ~90 s on one Redis): two of them,
  the plain question and two answers racing in two processes, also run on the cluster, as does one ``serve``
  end to end; the rest exercise the same store calls.

The suite runs in parallel (pytest-xdist, ``-n auto`` in pyproject.toml): ``auto`` is twice the cores here
(:func:`pytest_xdist_auto_num_workers`), since the suite mostly waits (serially it keeps one core ~40 % busy: bot
subprocesses starting, sockets, timers). Nothing a test uses is shared between workers: key prefixes are unique
per test, ports are picked free by the OS, files go in ``tmp_path``.
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
from bot.store import RedisRunStore, connect_redis
from bot.testing.openai_server import FakeOpenAI
from bot.testing.tcp_proxy import TcpProxy

REAL_REDIS_URL = os.environ.get("REDIS_TEST_URL", "redis://127.0.0.1:6379/0")
REAL_CLUSTER_URL = os.environ.get("REDIS_TEST_CLUSTER_URL", "redis://127.0.0.1:7000/0")
REDIS_KINDS = ("single", "cluster")


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: twice the cores (at least 2, at most 8), or ``PYTEST_XDIST_AUTO_NUM_WORKERS`` when set."""
    if forced := os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return int(forced)
    return max(2, min(8, 2 * (os.cpu_count() or 1)))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Run each test using ``real_redis`` (or ``redis_kind``) on every kind its ``redis_kinds`` marker allows."""
    if "redis_kind" in metafunc.fixturenames:
        marker = metafunc.definition.get_closest_marker("redis_kinds")
        kinds = marker.args if marker is not None else REDIS_KINDS
        metafunc.parametrize("redis_kind", kinds)


@pytest.fixture
def redis_kind() -> str:
    """``single`` or ``cluster`` (parametrized by :func:`pytest_generate_tests`)."""
    return "single"


@pytest.fixture
def real_redis_env(redis_kind: str) -> dict[str, str]:
    """``REDIS_URL`` and ``REDIS_CLUSTER`` for a bot process on the real Redis of this test's kind."""
    cluster = redis_kind == "cluster"
    return {"REDIS_URL": REAL_CLUSTER_URL if cluster else REAL_REDIS_URL, "REDIS_CLUSTER": str(cluster).lower()}


@pytest.fixture
async def connect_real_redis(redis_kind: str) -> AsyncIterator[Callable[[], aioredis.Redis]]:
    """``connect_real_redis()``: another client (another "process") of this test's real Redis, closed at teardown."""
    clients: list[aioredis.Redis] = []

    def connect() -> aioredis.Redis:
        cluster = redis_kind == "cluster"
        clients.append(connect_redis(REAL_CLUSTER_URL if cluster else REAL_REDIS_URL, cluster=cluster))
        return clients[-1]

    yield connect
    for client in clients:
        await client.aclose()


@pytest.fixture(autouse=True)
def fresh_calibration() -> None:
    """What the process learned of models' token counts and windows does not carry from one test to the next."""
    from bot.agent._loop.budget import CALIBRATION

    CALIBRATION.clear()


@pytest.fixture(autouse=True)
def fresh_error_labels() -> None:
    """The bounded set of Slack error labels a process has seen (bot.ops.metrics.error_label) starts empty in each
    test: the suite's many refused calls would otherwise fill it, and a later test would see ``other``."""
    from bot.ops import metrics

    metrics._error_labels.clear()


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
async def real_redis(prefix: str, redis_kind: str) -> AsyncIterator[aioredis.Redis]:
    """A client of the real Redis (or of the cluster); deletes this test's keys (its prefix only) afterwards."""
    cluster = redis_kind == "cluster"
    url = REAL_CLUSTER_URL if cluster else REAL_REDIS_URL
    client = connect_redis(url, cluster=True, retries=0) if cluster else aioredis.from_url(url)
    try:
        await client.ping()
    except Exception as exc:
        await client.aclose()
        message = f"real Redis {'cluster ' if cluster else ''}not reachable at {url}: {type(exc).__name__}"
        if os.environ.get("REQUIRE_REAL_REDIS") == "1":
            pytest.fail(message)
        pytest.skip(message)
    yield client
    keys = [k async for k in client.scan_iter(match=f"{prefix}*")]  # a cluster client scans every node
    if keys:
        await client.delete(*keys)  # split per slot by a cluster client
    await client.aclose()


@pytest.fixture
async def proxied_redis(real_redis: aioredis.Redis) -> AsyncIterator[tuple[aioredis.Redis, TcpProxy]]:
    """A client of the real single Redis through a :class:`TcpProxy` (which counts round trips, cuts, loses
    replies), and that proxy; mark the test ``redis_kinds("single")``. Keys are deleted as ``real_redis``'s."""
    async with TcpProxy("127.0.0.1", 6379) as proxy:
        client = connect_redis(f"redis://127.0.0.1:{proxy.port}/0")
        try:
            await client.ping()
            yield client, proxy
        finally:
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
