"""Shared fixtures: fakeredis, the real Redis (unique key prefix per test), the loopback OpenAI server, and the
end-to-end harness (``harness``: the real bot, Bolt AsyncApp over HTTP, against the fake Slack and the loopback model).

Real-Redis tests skip when Redis is unreachable, unless ``REQUIRE_REAL_REDIS=1`` (set by ``.ci/run``),
which turns the skip into a failure.

Every test using ``real_redis`` runs twice: against the single Redis (``REDIS_TEST_URL``) and against a Redis
Cluster (``REDIS_TEST_CLUSTER_URL``, default the local 3-master cluster ``.ci/run`` starts on 127.0.0.1:7000-7002),
ids ``[single]`` / ``[cluster]``. ``real_redis_env`` gives a bot subprocess the matching ``REDIS_URL`` and
``REDIS_CLUSTER``; ``connect_real_redis()`` makes more clients of the same kind. A test marked
``redis_kinds("single")`` runs against the single Redis only; that is for:

- the tests that cut or slow Redis with a ``TcpProxy`` in front of one server (a cluster client follows the
  nodes' own addresses past the proxy): they test the client's retries, not what the store keeps;
- most MCP server tests (``tests/mcp_server/test_mcp_server.py``, subprocess-heavy: ~90 s on one Redis): two of them,
  the plain question and two answers racing in two processes, also run on the cluster, as does one ``serve``
  end to end; the rest exercise the same store calls.

The suite runs in parallel (pytest-xdist, ``-n auto`` in pyproject.toml): ``auto`` is twice the cores here
(:func:`pytest_xdist_auto_num_workers`), since the suite mostly waits (serially it keeps one core ~40 % busy: bot
subprocesses starting, sockets, timers). Nothing a test uses is shared between workers: key prefixes are unique
per test, a port a test must name before its server starts comes from its worker's own block
(:func:`bot.testing.ports.free_port`), files go in ``tmp_path``.

Bytecode is cached (``__pycache__``) even where ``PYTHONDONTWRITEBYTECODE`` is set, as it is on the CI machines: the
suite starts about a hundred Python processes (the bot's subprocesses, MCP servers, workers), each of which would
otherwise compile every module of ``bot/`` it imports, and every xdist worker would rewrite every test module's
asserts again (about a tenth of the suite's CPU). The controller compiles ``bot/`` once at the start
(:func:`pytest_configure`), so every process finds it compiled.
"""

from __future__ import annotations

import compileall
import importlib.util
import os
import py_compile
import re
import sys
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import fakeredis
import pytest
import redis.asyncio as aioredis
from aiohttp import web

from bot.agent import Agent, OpenAIChatModel, ask_user_tool
from bot.agent.model import ChatModel
from bot.agent.tools import Tool
from bot.config import Settings
from bot.fakeslack import Workspace
from bot.serving import model_for
from bot.slack.app import Bot, build_bot, start_http
from bot.store import RedisRunStore, connect_redis
from bot.testing.openai_server import FakeOpenAI
from bot.testing.tcp_proxy import TcpProxy

REAL_REDIS_URL = os.environ.get("REDIS_TEST_URL", "redis://127.0.0.1:6379/0")
REAL_CLUSTER_URL = os.environ.get("REDIS_TEST_CLUSTER_URL", "redis://127.0.0.1:7000/0")
REDIS_KINDS = ("single", "cluster")


FRAMEWORKS = {"pydantic_ai": "pydantic-ai", "agents": "openai-agents", "langgraph": "langgraph"}
"""The agent frameworks some tests use (top-level package -> the extra that installs it). Without one (the core-only
install of .ci/run's lowest-versions pass: ``.[test]``), a test module using it is reported skipped with the extra
to install, not an error."""
NAMED = {"pydantic_ai": r"pydantic_ai", "agents": r"openai_agents|\bagents\b", "langgraph": r"langgraph"}
"""How a module of tests/frameworks names a framework anywhere in it (its adapters, demos and examples import the
framework only when they run)."""


def missing_frameworks(source: str, *, anywhere: bool = False) -> list[str]:
    """The extras of the frameworks ``source`` (Python code) imports at the top of a line (``anywhere``: names
    anywhere) that are not installed."""
    if anywhere:
        used = {package for package, pattern in NAMED.items() if re.search(pattern, source)}
    else:
        used = set(re.findall(r"^\s*(?:from|import)\s+(\w+)", source, flags=re.MULTILINE))
    return [
        extra for package, extra in FRAMEWORKS.items() if package in used and importlib.util.find_spec(package) is None
    ]


class _FrameworkMissing(pytest.Module):
    def _getobj(self) -> Any:
        extras = ", ".join(_missing(self.path))
        raise pytest.skip.Exception(
            f"needs the framework extras it uses: {extras} (pip install -e '.[dev]')", allow_module_level=True
        )


def _missing(path: Path) -> list[str]:
    return missing_frameworks(path.read_text(), anywhere=path.parent.name == "frameworks")


def pytest_pycollect_makemodule(module_path: Path, parent: pytest.Collector) -> pytest.Module | None:
    """A test module that uses a framework not installed is collected as one skip saying which extra."""
    if module_path.name.startswith("test_") and _missing(module_path):
        return _FrameworkMissing.from_parent(parent, path=module_path)
    return None


def pytest_configure(config: pytest.Config) -> None:
    """Bytecode caches on (see the module docstring), and ``bot/`` compiled once, by the controller (or a run without
    workers), before any worker or test process starts."""
    sys.dont_write_bytecode = False
    if not hasattr(config, "workerinput"):
        compile_package(Path(__file__).resolve().parent.parent / "bot")


def compile_package(package: Path) -> None:
    """Compile every module under ``package`` into ``__pycache__``, checked by the source's hash when imported (not
    by its mtime and size: an edit within the same second as the compile, of the same size, is never taken for
    the compiled module); nothing, and no error lines, in a read-only checkout."""
    if os.access(package, os.W_OK):
        compileall.compile_dir(package, quiet=2, invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)


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


# --- the end-to-end harness: the real bot (Bolt AsyncApp over HTTP) against the fake Slack and the loopback model

TOKEN = "xoxb-test-token-0123456789"
SECRET = "signing-secret-abcdef0123456789"
ALICE, BOB, CAROL = "U_ALICE", "U_BOB", "U_CAROL"
GENERAL = "C_GENERAL"


@dataclass
class BotProcess:
    """One bot 'process': its Bolt app served on its own port."""

    bot: Bot
    runner: web.AppRunner
    url: str

    async def stop(self) -> None:
        await self.bot.drain()
        await self.runner.cleanup()
        await self.bot.aclose()


@dataclass
class Harness:
    ws: Workspace
    model: FakeOpenAI
    settings: Settings
    processes: list[BotProcess] = field(default_factory=list)

    @property
    def bot(self) -> Bot:
        return self.processes[0].bot

    async def start_process(self, redis_client: aioredis.Redis, *, role: str = "all") -> BotProcess:
        """Start another bot process on the same Redis (it gets no traffic until routed to)."""
        model: ChatModel = OpenAIChatModel(model="test", base_url=self.model.base_url, api_key="sk-test", max_retries=0)
        if role == "web":  # as deployed: it runs no agent, so it holds no model (a turn there fails the test's run)
            model = model_for(self.settings, role="web")
        bot = build_bot(self.settings, model=model, redis_client=redis_client, role=role)  # type: ignore[arg-type]
        runner, port = await start_http(bot, host="127.0.0.1", port=0)
        process = BotProcess(bot=bot, runner=runner, url=f"http://127.0.0.1:{port}/slack/events")
        self.processes.append(process)
        return process

    def route_to(self, process: BotProcess) -> None:
        """Send the fake Slack's next requests to ``process``."""
        self.ws.sender.bot_url = process.url

    async def settle(self) -> None:
        """Wait until every process has finished its background work."""
        for p in self.processes:
            await p.bot.drain()


@pytest.fixture
def slack_secrets() -> tuple[str, str]:
    """(bot token, signing secret) the harness uses, for leak checks."""
    return TOKEN, SECRET


HarnessFactory = Callable[..., AbstractAsyncContextManager[Harness]]


@pytest.fixture
def harness(openai_server: FakeOpenAI, prefix: str) -> HarnessFactory:
    """``async with harness(redis_client, answerers=..., ttl=..., settings={...}) as h``: fake Slack + one bot
    process (``settings``: more ``Settings`` fields; ``SLACK_VIEW`` follows the workspace's ``agent_view``
    unless given)."""

    @asynccontextmanager
    async def make(
        redis_client: aioredis.Redis,
        *,
        answerers: str = "requester",
        ttl: int = 3600,
        settings: dict[str, Any] | None = None,
        **ws_kwargs: Any,
    ) -> AsyncIterator[Harness]:
        async with Workspace("http://127.0.0.1:9/unset", SECRET, bot_token=TOKEN, **ws_kwargs) as ws:
            settings = Settings(
                slack_bot_token=TOKEN,
                slack_signing_secret=SECRET,
                slack_api_url=ws.api_url,
                redis_prefix=prefix,
                ask_answerers=answerers,
                ask_ttl_seconds=ttl,
                # the fake app is declared as the workspace says: agent_view=True is an agent app
                **{"slack_view": "agent" if ws_kwargs.get("agent_view") else "assistant", **(settings or {})},
            )
            h = Harness(ws=ws, model=openai_server, settings=settings)
            first = await h.start_process(redis_client)
            h.route_to(first)
            try:
                yield h
            finally:
                for p in h.processes:
                    await p.stop()

    return make
