"""Run the bot and the playground side by side on loopback: what ``python -m bot`` does without Slack credentials.

``await run_playground(settings, host="127.0.0.1", ui_port=None, ready=None)`` serves until cancelled
(Ctrl-C), printing ``Playground: http://127.0.0.1:3000/  (demo model (offline); in-process Redis)`` and the agent it
runs, ``Agent: bot.playground.demo_agent:build (tools: ask_user, deploy, lookup_ticket, refund, restart_service)``,
and the approval policy, ``Approval policy: .../bot/playground/demo_policy.yaml (the demo policy)``.

``Playground(settings, *, host="127.0.0.1", ui_port=None)`` is the same as an async context manager, for
tests and embedding: ``async with Playground(settings, ui_port=0) as pg: pg.url, pg.workspace, pg.bot``.

What runs (all in this process, on loopback):

- a fake Slack (:class:`~bot.fakeslack.workspace.Workspace`) with a random bot token and signing secret;
- the real bot (``build_bot`` + ``start_http`` on a free port), its ``SLACK_BOT_TOKEN`` /
  ``SLACK_SIGNING_SECRET`` / ``SLACK_API_URL`` pointed at the fake; every other setting as given;
- the browser UI (:class:`~bot.playground.ui.PlaygroundUI`) on ``ui_port`` (default ``settings.port``;
  0 = a free port) and ``host``;
- the bot's MCP server for MCP clients (:mod:`bot.playground.mcp`) on ``127.0.0.1``: ``MCP_PORT`` when set, else
  3100, or a free port when ``PORT`` or another process has 3100 (it never takes the UI's port);
- with the demo model, that model also as a loopback Chat Completions endpoint (:mod:`bot.playground.demo_endpoint`),
  which the agent-framework demo agents' own clients use (``--agent bot.playground.framework_demos:pydantic_ai``,
  ``:openai_agents``, ``:langgraph``; :mod:`bot.playground.framework_demos`);
- ``/healthz``, ``/readyz`` and ``/metrics`` on the bot's port, or with ``METRICS_PORT`` on
  ``METRICS_HOST:METRICS_PORT`` (as ``serve``; ``METRICS_ON_PORT`` decides whether the bot's port keeps them).

Every address is printed at start: ``Playground:`` (the UI), ``MCP server:``, ``Bot:`` and ``Health and
metrics:``.

Embedded defaults: ``REDIS_URL`` unset -> in-process Redis (``fakeredis``); ``OPENAI_API_KEY`` unset -> the
offline :class:`~bot.playground.demo_model.DemoModel`. With them set, the real Redis / OpenAI-compatible
model (``OPENAI_BASE_URL``, ``OPENAI_MODEL``) are used; on a real Redis the fake workspace (messages, threads, open
modals, Home tabs) is kept there too and loaded at start (:mod:`bot.playground.saved`), so questions asked before a
restart are answered in place after it. Nothing secret is printed: the Redis URL is shown
without its credentials, and the MCP server's bearer token only when the playground made it (else
``$MCP_TOKEN``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

import redis.asyncio as aioredis
from pydantic import SecretStr
from redis.exceptions import RedisError

from bot.agent import ChatModel, OpenAIChatModel
from bot.config import Settings
from bot.errors import ConfigError
from bot.fakeslack.sender import Sender
from bot.fakeslack.workspace import DEFAULT_SUBSCRIPTIONS, Workspace
from bot.playground.mcp import PlaygroundMcp, start_mcp
from bot.playground.saved import WorkspaceSaver
from bot.playground.timing import BotTiming
from bot.playground.ui import PlaygroundInfo, PlaygroundUI
from bot.serving import http_address, serve_ops
from bot.slack.app import EVENTS_PATH, Bot, build_bot, start_http
from bot.store import connect_redis
from bot.store.keys import Keys

log = logging.getLogger(__name__)

BOT_HOST = "127.0.0.1"
DEMO_AGENT = "bot.playground.demo_agent:build"
AGENT_EVENTS = ("agent_session_stopped", "app_context_changed", "app_home_opened")  # manifest.yml's agent_view events
DRAIN_SECONDS = 3.0


def redis_label(url: str) -> str:
    """``redis://:pw@db.example:6380/2`` -> ``Redis at db.example:6380/2`` (never the credentials)."""
    parts = urlsplit(url)
    if parts.scheme == "unix":
        return "Redis on a unix socket"
    try:
        port = parts.port
    except ValueError:
        port = None
    where = f"{parts.hostname or 'localhost'}:{port or 6379}"
    db = parts.path.strip("/")
    return f"Redis at {where}" + (f"/{db}" if db else "")


def model_label(settings: Settings) -> str:
    """``gpt-4.1-mini via api.openai.com`` (the base URL's host only)."""
    host = urlsplit(settings.openai_base_url).hostname if settings.openai_base_url else None
    return f"{settings.openai_model} via {host or 'api.openai.com'}"


def make_redis(settings: Settings) -> tuple[aioredis.Redis, str, str]:
    """``(client, kind, label)``: the configured Redis, or an in-process one when ``REDIS_URL`` is unset."""
    if settings.redis_url is not None:
        url = settings.redis_url.get_secret_value()
        return connect_redis(url, cluster=settings.redis_cluster), "redis", redis_label(url)
    try:
        import fakeredis
    except ImportError as exc:  # pragma: no cover - fakeredis ships with the package
        raise ConfigError("the in-process Redis needs the fakeredis package; install it or set REDIS_URL") from exc
    client: aioredis.Redis = fakeredis.FakeAsyncRedis()
    return client, "memory", "in-process Redis"


DEMO_DELAY = 0.06  # seconds per two words: the demo model's replies stream visibly, as a real model's do


def make_model(settings: Settings) -> tuple[ChatModel, str, str]:
    """``(model, kind, label)``: the OpenAI-compatible model with a key, else the offline demo model."""
    if settings.openai_api_key is not None:
        model = OpenAIChatModel(
            settings.openai_model,
            api_key=settings.openai_api_key.get_secret_value(),
            base_url=settings.openai_base_url,
        )
        return model, "openai", model_label(settings)
    from bot.playground.demo_model import DemoModel

    return DemoModel(delay=DEMO_DELAY, words_per_piece=2), "demo", "demo model (offline)"


DEMO_PROMPTS = [
    {"title": "Pick where to deploy", "message": "deploy the new build: pick where"},
    {"title": "Plan a release", "message": "plan the release: which features go in?"},
    {"title": "Restart a service", "message": "restart web"},
    {"title": "What can you do?", "message": "help"},
]
"""The assistant pane's suggested prompts with the offline demo model: each one of its demo words (README); the
deployment's defaults (``ASSISTANT_PROMPTS``) are for a real model, and the demo answered them with another demo."""


class Playground:
    """Fake Slack + the real bot + the browser UI, started and stopped together. See the module docstring."""

    def __init__(self, settings: Settings, *, host: str = "127.0.0.1", ui_port: int | None = None) -> None:
        self.settings = settings
        self.host = host
        self.ui_port = settings.port if ui_port is None else ui_port
        self.workspace: Workspace | None = None
        self.bot: Bot | None = None
        self.ui: PlaygroundUI | None = None
        self.mcp: PlaygroundMcp | None = None  # the bot's MCP server for MCP clients, on loopback
        self.bot_url = ""  # the bot's own HTTP server (POST /slack/events), e.g. http://127.0.0.1:40123
        self.metrics_url: str | None = None  # where /metrics, /healthz and /readyz are served
        self.info = PlaygroundInfo()
        self.agent_spec: str | None = None  # the agent factory the bot runs (None: the built-in agent)
        self.approval_policy: str | None = None  # the APPROVAL_POLICY file the bot runs with (demo_policy)
        self._stack = contextlib.AsyncExitStack()

    @property
    def url(self) -> str:
        """The page to open, e.g. ``http://127.0.0.1:3000/``."""
        return self.ui.url if self.ui is not None else ""

    async def start(self) -> None:
        try:
            await self._start()
        except BaseException:
            await self.stop()
            raise

    async def _start(self) -> None:
        metrics_port = self.settings.metrics_port
        if metrics_port and metrics_port == self.ui_port:
            raise ConfigError(
                f"METRICS_PORT is PORT ({metrics_port}), the playground's browser UI; give /metrics, /healthz and"
                " /readyz another port, or unset METRICS_PORT"
            )
        redis_client, redis_kind, redis_text = make_redis(self.settings)
        self._stack.push_async_callback(_close_redis, redis_client)
        if self.settings.redis_url is not None:  # a real Redis: as serve checks it (one that never answers too)
            from bot.serving import check_redis

            await check_redis(redis_client, self.settings.redis_url.get_secret_value())
        else:
            try:
                await redis_client.ping()
            except RedisError as exc:
                raise ConfigError(f"{redis_text} is not reachable ({type(exc).__name__}); check REDIS_URL") from None
        model, model_kind, model_text = make_model(self.settings)
        if model_kind == "demo":  # also as a loopback Chat Completions endpoint, for agent frameworks' own clients
            from bot.playground.demo_endpoint import serve_demo_model
            from bot.playground.demo_model import DemoModel

            assert isinstance(model, DemoModel)
            served = await serve_demo_model(model)
            self._stack.push_async_callback(served.stop)
        self.info = PlaygroundInfo(
            model=model_kind,
            model_label=model_text,
            redis=redis_kind,
            redis_label=redis_text,
            answerers=self.settings.ask_answerers,
        )

        secret = secrets.token_urlsafe(24)
        workspace = Workspace(
            f"http://{BOT_HOST}:1{EVENTS_PATH}",  # replaced below, once the bot listens
            secret,
            f"xoxb-playground-{secrets.token_hex(8)}",
            agent_view=self.settings.slack_view == "agent",  # the app as manifest.yml declares it
            subscriptions=(*DEFAULT_SUBSCRIPTIONS, *AGENT_EVENTS),
        )
        await workspace.start()
        self._stack.push_async_callback(workspace.stop)
        self.workspace = workspace
        if redis_kind == "redis":  # the runs outlast a restart on this Redis: so must the messages they point at
            saver = WorkspaceSaver(redis_client, workspace.fake, keys=Keys(self.settings.redis_prefix))
            await saver.load()
            saver.start()
            self._stack.push_async_callback(saver.stop)  # after the bot's last work (the stack unwinds backwards)

        # The offline demo model comes with the demo agent's tools (one needs approval), unless AGENT is set.
        self.agent_spec = self.settings.agent or (DEMO_AGENT if model_kind == "demo" else None)
        self.approval_policy = demo_policy(self.settings, agent_spec=self.agent_spec)
        demo_prompts = model_kind == "demo" and "assistant_prompts" not in self.settings.model_fields_set
        bot_settings = self.settings.model_copy(
            update={
                "slack_bot_token": SecretStr(workspace.fake.bot_token),
                "slack_signing_secret": SecretStr(secret),
                "slack_app_token": None,
                "slack_api_url": workspace.api_url,
                "agent": self.agent_spec,
                "approval_policy": self.approval_policy,
                # the offline model's own words (README), not prompts it would answer with another demo
                **({"assistant_prompts": DEMO_PROMPTS} if demo_prompts else {}),
            }
        )
        bot = build_bot(bot_settings, model=model, redis_client=redis_client)
        self.bot = bot
        self._stack.push_async_callback(bot.aclose)  # last: after the runs in flight are drained
        await bot.start()  # MCP servers' tools are there before the first message
        runner, bot_port = await start_http(bot, host=BOT_HOST, port=0, ops=self.settings.ops_on_port)
        self._stack.push_async_callback(runner.cleanup)
        self._stack.push_async_callback(_drain, bot)
        assert isinstance(workspace.sender, Sender)  # the playground's workspace is HTTP
        workspace.sender.bot_url = f"http://{BOT_HOST}:{bot_port}{EVENTS_PATH}"
        self.bot_url = f"http://{BOT_HOST}:{bot_port}"
        self.metrics_url = self.bot_url if self.settings.ops_on_port else None
        if self.settings.metrics_port is not None:  # on METRICS_HOST (loopback by default), as serve does
            ops_port = await serve_ops(bot, self.settings, self._stack)
            assert ops_port is not None
            self.metrics_url = http_address(self.settings.metrics_host, ops_port)

        ui = PlaygroundUI(workspace, self.info, timing=BotTiming(bot))
        self.ui = ui
        self._stack.push_async_callback(ui.stop)
        try:
            await ui.start(self.host, self.ui_port)
        except OSError as exc:
            raise ConfigError(f"cannot listen on {self.host}:{self.ui_port} ({exc.strerror}); set PORT") from exc

        # After the UI, so PORT is the UI's and the MCP server's port is chosen around it (bot.playground.mcp).
        self.mcp = await start_mcp(self.settings, bot, ui_port=int(urlsplit(ui.url).port or 0))
        self._stack.push_async_callback(self.mcp.stop)

    async def stop(self) -> None:
        """Stop the UI, let the bot's background work finish (a few seconds at most), stop the rest."""
        await self._stack.aclose()

    async def __aenter__(self) -> Playground:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()


async def run_playground(
    settings: Settings,
    *,
    host: str = "127.0.0.1",
    ui_port: int | None = None,
    ready: asyncio.Event | None = None,
) -> None:
    """Serve the playground until cancelled; ``ready`` is set once the URL is printed."""
    async with Playground(settings, host=host, ui_port=ui_port) as playground:
        info = playground.info
        print(f"Playground: {playground.url}  ({info.model_label}; {info.redis_label})", flush=True)
        print(f"Agent: {agent_label(playground)}", flush=True)
        if playground.approval_policy is not None:
            demo = " (the demo policy)" if settings.approval_policy is None else ""
            print(f"Approval policy: {playground.approval_policy}{demo}", flush=True)
        if playground.mcp is not None:
            shown = "$MCP_TOKEN" if settings.mcp_token is not None else playground.mcp.token  # made here: local only
            print(f"MCP server: {playground.mcp.url}  (Authorization: Bearer {shown})", flush=True)
        print(f"Bot: {playground.bot_url}{EVENTS_PATH}", flush=True)
        if playground.workspace is not None:  # AsyncWebClient(base_url=...) and the bot's token talk to it
            print(f"Fake Slack Web API: {playground.workspace.api_url}", flush=True)
        if playground.metrics_url is not None:
            where = playground.metrics_url
            print(f"Health and metrics: {where}/healthz  {where}/readyz  {where}/metrics", flush=True)
        if ready is not None:
            ready.set()
        await asyncio.Event().wait()


def demo_policy(settings: Settings, *, agent_spec: str | None) -> str | None:
    """The ``APPROVAL_POLICY`` the playground's bot runs with: the settings' own when set; else, for the demo agent
    (:data:`DEMO_AGENT`) and no ``APPROVERS``, the demo policy
    (:data:`bot.playground.demo_agent.DEMO_POLICY`: two of Bob and Carol restart, finance refunds over 100, prod
    deploys' arguments in Details only); else none (``APPROVERS`` or the requester decide)."""
    if settings.approval_policy is not None:
        return settings.approval_policy
    if agent_spec != DEMO_AGENT or "approvers" in settings.model_fields_set:
        return None
    from bot.playground.demo_agent import DEMO_POLICY

    return str(DEMO_POLICY)


def agent_label(playground: Playground) -> str:
    """``my_agent:build (tools: ask_user, coffee_count)``: the agent's factory (``AGENT`` / ``--agent``, the demo
    agent with the demo model, else ``built-in``) and the tools the model is offered."""
    bot = playground.bot
    spec = playground.agent_spec or "built-in"
    framework = getattr(bot.agent, "framework", None) if bot is not None else None
    if isinstance(framework, str):  # a framework's agent: its tools are the framework's
        return f"{spec} ({framework} agent)"
    tools = sorted(t.id for t in bot.agent.tools.values() if not t.hidden) if bot is not None else []
    return f"{spec} (tools: {', '.join(tools) or 'none'})"


async def _drain(bot: Bot) -> None:
    """Wait briefly for runs in flight; cancel what is still running after ``DRAIN_SECONDS``."""
    try:
        await asyncio.wait_for(bot.drain(), DRAIN_SECONDS)
    except TimeoutError:
        log.warning("stopped with bot work still running")


async def _close_redis(client: Any) -> None:
    with contextlib.suppress(Exception):
        await client.aclose()
