"""End-to-end harness: the real bot (Bolt AsyncApp over HTTP) against the fake Slack and the loopback model."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis.asyncio as aioredis
from aiohttp import web

from bot.agent import OpenAIChatModel
from bot.config import Settings
from bot.fakeslack import Workspace
from bot.slack.app import Bot, build_bot, start_http
from bot.testing.openai_server import FakeOpenAI

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
        model = OpenAIChatModel(model="test", base_url=self.model.base_url, api_key="sk-test", max_retries=0)
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


@pytest.fixture(autouse=True)
def _module_redis_env(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A module declaring ``REDIS_ENV`` (the MCP tests: ``tests/slack/mcp_support.py``) gets this test's real
    Redis's environment in it, for the server processes it starts."""
    if isinstance(getattr(request.module, "REDIS_ENV", None), dict):
        monkeypatch.setattr(request.module, "REDIS_ENV", request.getfixturevalue("real_redis_env"))


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
