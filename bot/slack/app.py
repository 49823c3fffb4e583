"""Assembling the bot: the agent, the Bolt ``AsyncApp`` with its listeners, and the HTTP server.

``build_bot(settings, model=..., redis_client=...)`` returns a :class:`Bot` whose ``app`` serves
``POST /slack/events`` (events and interactivity) in HTTP mode, or runs over Socket Mode. The Web API
client honours ``SLACK_API_URL`` and retries 429s with slack_sdk's async rate-limit retry handler.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Literal

import aiohttp
import redis.asyncio as aioredis
from aiohttp import web
from slack_bolt.async_app import AsyncApp
from slack_sdk.http_retry.builtin_async_handlers import (
    AsyncConnectionErrorRetryHandler,
    AsyncRateLimitErrorRetryHandler,
    AsyncServerErrorRetryHandler,
)
from slack_sdk.web.async_client import AsyncWebClient

from bot.agent import Agent, ChatModel, make_ask_user_tool
from bot.config import Settings
from bot.errors import ConfigError
from bot.slack.blocks import MAX_SELECT_OPTIONS
from bot.slack.frontend import SlackFrontend
from bot.store import Keys, RedisRunStore
from bot.store.conversations import ConversationIndex
from bot.store.work_queue import WorkQueue

EVENTS_PATH = "/slack/events"
Role = Literal["all", "web", "worker"]


@dataclass
class Bot:
    """A ready bot: ``app`` (Bolt), ``frontend`` (listeners), ``agent`` and the Web API ``client``."""

    app: AsyncApp
    frontend: SlackFrontend
    agent: Agent
    client: AsyncWebClient
    queue: WorkQueue | None = None

    async def work(self, *, stop: asyncio.Event) -> None:
        """The ``worker`` role: handle queued jobs until ``stop`` is set, then finish those in hand."""
        if self.queue is None:
            raise ConfigError("this bot was not built with a work queue (role 'worker')")
        await self.queue.consume(self.frontend.handle, stop=stop)

    async def aclose(self) -> None:
        """Close the Web API client's HTTP session and the model's client, if it has one to close (after
        :meth:`SlackFrontend.drain`)."""
        session = self.client.session
        if session is not None and not session.closed:
            await session.close()
        close_model = getattr(self.agent.model, "aclose", None)
        if close_model is not None:
            await close_model()


def web_client(settings: Settings) -> AsyncWebClient:
    """The Web API client: ``SLACK_API_URL`` base, 429s retried (up to 3 times, honouring Retry-After),
    5xx answers and connection errors retried twice (with backoff),
    one shared aiohttp session (slack_sdk otherwise opens a session and a TCP connection per call).

    Call from a running event loop; close with :meth:`Bot.aclose`.
    """
    if settings.slack_bot_token is None:
        raise ConfigError("SLACK_BOT_TOKEN is not set")
    base = settings.slack_api_url if settings.slack_api_url.endswith("/") else settings.slack_api_url + "/"
    return AsyncWebClient(
        token=settings.slack_bot_token.get_secret_value(),
        base_url=base,
        retry_handlers=[
            AsyncRateLimitErrorRetryHandler(max_retry_count=3),
            AsyncServerErrorRetryHandler(max_retry_count=2),  # Slack's 5xx: transient by nature
            AsyncConnectionErrorRetryHandler(max_retry_count=2),
        ],
        session=aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)),
    )


def build_bot(settings: Settings, *, model: ChatModel, redis_client: aioredis.Redis, role: Role = "all") -> Bot:
    """Wire agent, store, listeners and Bolt from ``settings``. Raises ``ConfigError`` when a secret is missing.

    ``role``: ``all`` handles requests in this process; ``web`` acks and queues them (Redis stream) for
    ``worker`` processes, which run :meth:`Bot.work`; see :class:`bot.slack.frontend.SlackFrontend`.
    """
    if settings.slack_signing_secret is None and settings.slack_app_token is None:
        raise ConfigError("SLACK_SIGNING_SECRET is not set (needed in HTTP mode)")
    client = web_client(settings)
    keys = Keys(settings.redis_prefix)
    store = RedisRunStore(redis_client, prefix=settings.redis_prefix, suspended_ttl=settings.ask_ttl_seconds)
    agent = Agent(
        id="slack-assistant",
        name="Assistant",
        instructions=settings.agent_instructions,
        model=model,
        tools=[make_ask_user_tool(max_options=MAX_SELECT_OPTIONS)],
        store=store,
    )
    index = ConversationIndex(redis_client, keys=keys, thread_ttl=settings.ask_ttl_seconds)
    app = AsyncApp(
        client=client,
        signing_secret=settings.slack_signing_secret.get_secret_value() if settings.slack_signing_secret else None,
        process_before_response=False,
    )
    queue = WorkQueue(redis_client, keys=keys) if role != "all" else None
    frontend = SlackFrontend(
        agent=agent,
        index=index,
        client=client,
        answerers=settings.ask_answerers,
        queue=queue if role == "web" else None,
    )
    frontend.register(app)
    return Bot(app=app, frontend=frontend, agent=agent, client=client, queue=queue)


async def start_http(bot: Bot, *, host: str = "0.0.0.0", port: int = 3000) -> tuple[web.AppRunner, int]:
    """Serve ``POST /slack/events`` on ``host:port`` (0 = a free port); returns the runner and the port."""
    web_app = bot.app.web_app(path=EVENTS_PATH, port=port)
    runner = web.AppRunner(web_app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    bound = runner.addresses[0][1]
    return runner, int(bound)


async def run_socket_mode(bot: Bot, *, app_token: str, ping_interval: float = 10) -> None:
    """Connect over Socket Mode and serve until cancelled; then close the websocket, its session and tasks.

    ``apps.connections.open`` goes through the bot's Web API client (so ``SLACK_API_URL`` applies), with
    ``app_token`` (``xapp-...``) instead of the bot token.
    """
    from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler

    handler = AsyncSocketModeHandler(bot.app, app_token, web_client=bot.client, ping_interval=ping_interval)
    try:
        await handler.start_async()  # type: ignore[no-untyped-call]
    finally:
        await handler.close_async()  # type: ignore[no-untyped-call]
