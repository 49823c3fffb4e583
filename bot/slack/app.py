"""Assembling the bot: the agent, the Bolt ``AsyncApp`` with its listeners and runner, and the HTTP server.

``build_bot(settings, model=..., redis_client=..., role=...)`` returns a :class:`Bot` whose ``app`` serves
``POST /slack/events`` (events and interactivity) in HTTP mode, or runs over Socket Mode. The Web API client
honours ``SLACK_API_URL`` and retries 429s, 5xx answers and connection errors with slack_sdk's retry handlers.

Roles: ``all`` runs the work in this process; ``web`` acks and queues it on Redis for ``worker`` processes, which
run :meth:`Bot.work` (see :mod:`bot.slack.transport.runner`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

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
from bot.agent.asking import APPROVAL_TOOL, approval_tool
from bot.agent.loading import load_agent
from bot.agent.run_limits import RunLimits
from bot.approval_policy import Policy, load_policy
from bot.config import Settings
from bot.errors import ConfigError, StoreUnavailable, describe_error
from bot.frameworks import adopt
from bot.ops.hooks import OpsHooks
from bot.ops.metrics import QueueGauges
from bot.ops.server import Health, OpsEndpoints
from bot.slack.approvals.cards import OpenCards
from bot.slack.approvals.deciding import Approving
from bot.slack.approvals.editing import Editing
from bot.slack.approvals.grants import StandingGrants
from bot.slack.assistant_pane import AssistantPane
from bot.slack.context import Origin
from bot.slack.conversations import Threads
from bot.slack.home import Home
from bot.slack.listeners import register
from bot.slack.questions.answer_modal import AnswerModal, modal_key
from bot.slack.questions.answering import Answering
from bot.slack.questions.approvers import approver_policy
from bot.slack.questions.follow_up_plan import FollowUpPlan, FollowUpSettings
from bot.slack.questions.follow_ups import FollowUps
from bot.slack.questions.messages import QuestionMessages
from bot.slack.questions.notices import STORE_DOWN
from bot.slack.questions.permissions import Permissions
from bot.slack.render.blocks import MAX_SELECT_OPTIONS
from bot.slack.replies.sessions import AgentSessions
from bot.slack.replies.thread_writer import ThreadWriter, quiet_tool
from bot.slack.run_slots import RunSlots, WaitingLimit
from bot.slack.transport.http import events_web_app, server_log
from bot.slack.transport.runner import InProcessRunner, LazyJobs, QueueRunner
from bot.slack.transport.web_api import SharedWebClient, SlackWeb, use_client
from bot.store import Keys, RedisRunStore
from bot.store.conversations import ConversationIndex
from bot.store.grants import GrantStore
from bot.store.inbox import Inbox
from bot.store.limits import ActiveRuns
from bot.store.pane_contexts import PaneContexts
from bot.store.quorum import Quorums
from bot.store.schedule import Schedule, Scheduler
from bot.store.work_queue import WorkQueue

if TYPE_CHECKING:
    from bot.agent.mcp.toolset import McpTools

EVENTS_PATH = "/slack/events"
Role = Literal["all", "web", "worker", "asker"]
"""``all``: everything here; ``web``: ack and queue; ``worker``: run queued work; ``asker``: only asks (the MCP
server: no requests arrive, answers are taken by the other roles, no scheduler)."""
log = logging.getLogger(__name__)


@dataclass
class Bot:
    """A ready bot: ``app`` (Bolt), ``agent``, the Web API ``client``, the lazy-listener ``runner`` and, in the
    split roles, the work ``queue``."""

    app: AsyncApp
    agent: Agent
    client: AsyncWebClient
    runner: InProcessRunner
    jobs: LazyJobs
    queue: WorkQueue | None = None
    signing_secret: str | None = None  # HTTP mode verifies requests with it (bot.slack.transport.http)
    is_new_event: Callable[[str], Awaitable[bool]] | None = None  # the replay guard's store (bot.slack.transport.http)
    mcp: McpTools | None = None  # MCP_CONFIG's servers, whose tools the agent gets once started
    scheduler: Scheduler | None = None  # deadlines, reminders, escalations (processes that run the agent)
    plan: FollowUpPlan | None = None  # what is scheduled while a question waits (its settings can change live)
    threads: Threads | None = None  # conversations and their questions (the MCP server asks through them)
    ops: OpsEndpoints = field(default_factory=OpsEndpoints)  # /metrics, /healthz, /readyz (bot.ops.server)
    _mcp_starting: asyncio.Future[None] | None = field(default=None, init=False, repr=False)
    _ticking: asyncio.Task[None] | None = field(default=None, init=False, repr=False)

    async def start(self, *, schedule: bool = True) -> None:
        """Open the MCP servers' sessions and add their tools to the agent (servers that fail are logged and left
        out), and start carrying out due items (``schedule``: tests drive :attr:`scheduler` themselves).
        ``build_bot`` starts the MCP part in the background when called in a running event loop; awaiting this
        (any number of times) waits until it is done."""
        if schedule and self.scheduler is not None and self._ticking is None:
            self._ticking = asyncio.ensure_future(self.scheduler.run())
        if self.mcp is not None:
            await asyncio.shield(self._start_in_background(self.mcp))

    def _start_in_background(self, mcp: McpTools) -> asyncio.Future[None]:
        if self._mcp_starting is None:
            self._mcp_starting = asyncio.ensure_future(self._start_mcp(mcp))
            self._mcp_starting.add_done_callback(_log_start_failure)
        return self._mcp_starting

    async def _start_mcp(self, mcp: McpTools) -> None:
        self.agent.add_tools(await mcp.start(reserved=set(self.agent.tools)))

    async def drain(self) -> None:
        """Wait for the work in flight in this process (tests, graceful shutdown)."""
        await self.runner.drain()

    async def hand_over(self) -> list[str]:
        """Plan going on elsewhere with every run this process still drives (a stop whose drain ran out of time:
        a long model turn, a slow tool): each is a :data:`~bot.slack.questions.follow_up_plan.CONTINUE` item due once
        its lease lapses, which any process's scheduler takes (:meth:`FollowUps.on_continue
        <bot.slack.questions.follow_ups.FollowUps.on_continue>`). Returns their run ids. Never raises (Redis down:
        logged; each is then gone on with on the next message in its thread)."""
        runs = list(self.agent.driving)
        if self.plan is None:
            return []
        for run_id in runs:
            try:
                await self.plan.continue_later(run_id, after=self.agent.store.lease_ttl + 1)
            except StoreUnavailable as exc:
                log.warning("run %s: left unfinished, and could not be handed over (%s)", run_id, exc)
        return runs

    async def work(self, *, stop: asyncio.Event, grace: float | None = None) -> None:
        """The ``worker`` role: run queued jobs until ``stop`` is set, then finish those in hand (for at most
        ``grace`` seconds: then the runs still going are left to :meth:`hand_over`). Raises ``ConfigError`` for a
        bot built without a queue."""
        if self.queue is None:
            raise ConfigError("this bot was not built with a work queue (role 'worker')")
        await self.start()  # the MCP servers' tools before the first job
        await self.queue.consume(self.run_job, stop=stop, grace=grace)

    async def run_job(self, job: dict[str, Any]) -> None:
        """Run one queued job here (see :meth:`bot.slack.transport.runner.LazyJobs.run_job`)."""
        await self.jobs.run_job(job, client=self.client, runner=self.runner)

    async def aclose(self) -> None:
        """Close the Web API client's HTTP session, the model's client, if it has one to close, and the MCP servers'
        sessions (stopping stdio servers) (after :meth:`drain`); stop retrying the bookkeeping owed to Redis since
        an outage (run slots given back once more, what is left logged)."""
        if self._ticking is not None and self.scheduler is not None:
            self.scheduler.stop()  # the items in hand finish (a handler cut short is tried again later)
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(self._ticking, 10.0)
        if self._mcp_starting is not None and not self._mcp_starting.done():
            self._mcp_starting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._mcp_starting
        if self.mcp is not None:
            await self.mcp.aclose()
        if self.threads is not None:  # bookkeeping owed to Redis since an outage: tried once more
            await self.threads.answering.gate.aclose()
            await self.threads.answering.messages.records.aclose()
            await self.threads.answering.messages.closes.aclose()
        session = self.client.session
        if session is not None and not session.closed:
            await session.close()
        close_model = getattr(self.agent.model, "aclose", None)
        if close_model is not None:
            await close_model()


def _log_start_failure(starting: asyncio.Future[None]) -> None:
    if not starting.cancelled() and (exc := starting.exception()) is not None:
        log.error("MCP: could not add the servers' tools: %s", describe_error(exc))


def web_client(settings: Settings) -> SharedWebClient:
    """The Web API client: ``SLACK_API_URL`` base, 429s retried (up to 3 times, honouring Retry-After),
    5xx answers and connection errors retried twice (with backoff),
    one shared aiohttp session (slack_sdk otherwise opens a session and a TCP connection per call).

    Call from a running event loop; close with :meth:`Bot.aclose`. Raises ``ConfigError`` without a bot token.
    """
    if settings.slack_bot_token is None:
        raise ConfigError("SLACK_BOT_TOKEN is not set")
    base = settings.slack_api_url if settings.slack_api_url.endswith("/") else settings.slack_api_url + "/"
    return SharedWebClient(
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
    """Wire agent, store, listeners and Bolt from ``settings``. Raises ``ConfigError`` when a secret is missing."""
    if role != "asker" and settings.slack_signing_secret is None and settings.slack_app_token is None:
        raise ConfigError("SLACK_SIGNING_SECRET is not set (needed in HTTP mode)")
    keys = Keys(settings.redis_prefix)
    retention = int(settings.run_retention_seconds)
    store = RedisRunStore(redis_client, prefix=settings.redis_prefix, retention=retention)
    rules = load_policy(settings.approval_policy) if settings.approval_policy else None  # checked by bot.config
    limits = run_limits(settings, rules=rules)  # the deployment's limits apply to every agent, its own or built-in
    kept = limits.kept_waiting(retention)  # what a waiting run's questions need outlives its longest wait
    if settings.agent:
        agent = load_agent(
            settings.agent, model=model, store=store, limits=limits, adopt=lambda obj: adopt(obj, store=store)
        )
    else:
        agent = Agent(
            id="slack-assistant",
            name="Assistant",
            instructions=settings.agent_instructions,
            model=model,
            tools=[make_ask_user_tool()],  # its options bounded by the limits' max_options, as every question is
            store=store,
            limits=limits,
        )
    agent.with_hooks(OpsHooks())  # metrics, audit lines and tracing spans of every run, whichever agent it is
    if APPROVAL_TOOL in agent.tools:
        log.warning("the agent has its own %s tool: the MCP server's approval requests can't be asked", APPROVAL_TOOL)
    else:
        agent.add_tools([approval_tool()])  # hidden from the model: outside agents' approval requests call it
    mcp = None
    if settings.mcp_config and role != "web":  # web processes run no agent
        from bot.agent.mcp.toolset import McpTools  # the MCP SDK is imported only when MCP_CONFIG is set

        # nothing starts yet: Bot.start() (below, or the caller's)
        mcp = McpTools.from_file(settings.mcp_config, url_schemes=settings.mcp_elicit_url_schemes)
    client = web_client(settings)  # after the agent: a factory that fails leaves no HTTP session open
    index = ConversationIndex(redis_client, keys=keys, retention=kept)
    web_api = SlackWeb(client)
    policy = approver_policy(settings, client=client, rules=rules)
    grants = None
    if policy.policy is not None:  # APPROVAL_POLICY: its rules' say on each call (require, declined at once, grants)
        grants = StandingGrants(
            GrantStore(redis_client, keys=keys), policy=policy.policy, approvers=policy, web=web_api
        )
        agent.approval_gate = grants.gate()
    plan = FollowUpPlan(Schedule(redis_client, prefix=settings.redis_prefix), wait_settings(settings))
    inbox = Inbox(redis_client, keys=keys, retention=kept)
    quorums = Quorums(redis_client, keys=keys, retention=kept)
    cards = OpenCards(approvers=policy, grants=grants, quorums=quorums)  # an open request's card, wherever it shows
    home = Home(
        agent=agent,
        web=web_api,
        index=index,
        inbox=inbox,
        schedule=plan.schedule,
        approvers=policy,
        answerers=settings.ask_answerers,
        grants=grants.store if grants is not None else None,
        cards=cards,
    )
    messages = QuestionMessages(
        web=web_api,
        index=index,
        answerers=settings.ask_answerers,
        approvers=policy,
        allow_user_mentions=settings.allow_user_mentions,
        plan=plan,
        home=home,
        grants=grants,
        cards=cards,
    )
    writer = ThreadWriter(
        web=web_api,
        index=index,
        messages=messages,
        allow_user_mentions=settings.allow_user_mentions,
        streaming=settings.reply_streaming,
        stream_interval=settings.stream_interval,
        is_question_tool=functools.partial(quiet_tool, agent),  # decided in replies/thread_writer.py, called there
        sessions=AgentSessions(web_api, enabled=settings.slack_view == "agent"),
        plan=plan,
    )
    gate = RunSlots(
        ActiveRuns(redis_client, keys=keys),
        per_person=settings.max_runs_per_person,
        per_process=settings.max_runs_per_process,
        runs=store,
    )
    permissions = Permissions(
        answerers=settings.ask_answerers,
        approvers=policy,
        index=index,
        escalate_answers=settings.ask_escalate_answers,
    )
    answering = Answering(
        agent=agent,
        index=index,
        web=web_api,
        writer=writer,
        messages=messages,
        answerers=settings.ask_answerers,
        gate=gate,
        permissions=permissions,
    )
    threads = Threads(
        agent=agent,
        index=index,
        web=web_api,
        writer=writer,
        answering=answering,
        waiting=WaitingLimit(inbox, agent, limit=settings.max_waiting_per_person),
    )
    secret = settings.slack_signing_secret.get_secret_value() if settings.slack_signing_secret else None
    app = AsyncApp(
        client=client,
        signing_secret=secret,
        process_before_response=True,  # ack functions finish before their lazy functions start (listeners.py)
    )
    queue = WorkQueue(redis_client, keys=keys) if role != "all" else None
    runner: InProcessRunner
    if role == "web" and queue is not None:

        async def store_down(body: dict[str, Any]) -> None:
            await tell_store_down(web_api, body)

        runner = QueueRunner(log, queue=queue, on_store_down=store_down)
    else:
        runner = InProcessRunner(log)
    app.listener_runner.lazy_listener_runner = runner
    app.middleware(use_client(client))  # first: the middleware and listeners after it get this client
    modal = AnswerModal(answering, key=modal_key(client.token or ""))
    approving = Approving(answering, modal=modal, quorums=quorums)
    pane = AssistantPane(
        threads=threads,
        web=web_api,
        contexts=PaneContexts(redis_client, keys=keys, retention=retention),
        greeting=settings.assistant_greeting,
        prompts=settings.assistant_prompts,
        messages_tab=settings.slack_view == "agent",
    )
    threads.dm_note = pane.viewing_note  # agent_view: the channel the person looks at (app_context_changed)
    editing = Editing(approving)
    jobs = register(
        app,
        threads=threads,
        answering=answering,
        modal=modal,
        approving=approving,
        editing=editing,
        home=home,
        pane=pane,
    )
    waiting = FollowUps(answering, plan=plan, approvers=policy, approving=approving)
    bot = Bot(
        app=app,
        agent=agent,
        client=client,
        runner=runner,
        jobs=jobs,
        queue=queue,
        signing_secret=secret,
        mcp=mcp,
        is_new_event=index.is_new_event,
        scheduler=None if role in ("web", "asker") else Scheduler(plan.schedule, waiting.handlers()),
        plan=plan,
        threads=threads,
        ops=OpsEndpoints(
            health=Health(redis_client, slack=client),
            queue=QueueGauges(queue) if queue is not None else None,
        ),
    )
    if mcp is not None and _loop_running():
        bot._start_in_background(mcp)  # MCP servers start while the caller goes on; Bot.start() waits for them
    return bot


def run_limits(settings: Settings, *, rules: Policy | None = None) -> RunLimits:
    """The deployment's run limits: ``ASK_TTL_SECONDS``, ``MODEL_TURN_TIMEOUT``, ``MAX_REPLY_CHARS``,
    ``HISTORY_TOKEN_BUDGET``, ``TOOL_RESULT_MAX_CHARS``; the most options a question may offer, Slack's
    (:data:`~bot.slack.render.blocks.MAX_SELECT_OPTIONS`); the longest wait ``APPROVAL_POLICY``'s ``rules`` allow
    (:meth:`~bot.approval_policy.Policy.longest_wait`)."""
    ask_ttl = float(settings.ask_ttl_seconds)
    return RunLimits(
        ask_ttl=ask_ttl,
        longest_wait=rules.longest_wait(ask_ttl) if rules is not None else None,
        turn_timeout=float(settings.model_turn_timeout),
        max_reply_chars=settings.max_reply_chars,
        history_budget=settings.history_token_budget,
        tool_result_max_chars=settings.tool_result_max_chars,
        max_options=MAX_SELECT_OPTIONS,
    )


def wait_settings(settings: Settings) -> FollowUpSettings:
    """What happens while a question waits, from ``ASK_ON_TIMEOUT``, ``ASK_REMIND_*`` and ``ASK_ESCALATE_*``."""
    return FollowUpSettings(
        on_timeout=settings.ask_on_timeout,
        remind_after=float(settings.ask_remind_after) if settings.ask_remind_after else None,
        remind_max=settings.ask_remind_max,
        escalate_after=float(settings.ask_escalate_after) if settings.ask_escalate_after else None,
        escalate_to=settings.ask_escalate_to,
    )


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


async def tell_store_down(web_api: SlackWeb, body: dict[str, Any]) -> None:
    """Tell whoever sent ``body`` that nothing was recorded: in the thread for events, else privately."""
    if body.get("event"):
        where = Origin.of_event(body)
        if where.channel_id:
            await web_api.post(where.channel_id, thread_ts=where.thread_ts, text=f":warning: {STORE_DOWN}")
        return
    where = Origin.of_action(body)
    await web_api.tell(where.user, STORE_DOWN, channel=where.channel_id, thread_ts=where.thread_ts)


async def start_http(
    bot: Bot, *, host: str = "0.0.0.0", port: int = 3000, ops: bool = True
) -> tuple[web.AppRunner, int]:
    """Serve ``POST /slack/events`` on ``host:port`` (0 = a free port), and (``ops``) ``GET /metrics``,
    ``/healthz``, ``/readyz`` (:mod:`bot.ops.server`; ``METRICS_ON_PORT``); returns the runner and the port.

    The body is capped, its Slack signature verified and then parsed before Bolt sees it (413 / 401 / 400, one
    short log line each; see :mod:`bot.slack.transport.http`). Raises ``ConfigError`` without a signing secret.
    """
    signing_secret = bot.signing_secret
    if not signing_secret:
        raise ConfigError("SLACK_SIGNING_SECRET is not set (needed in HTTP mode)")
    web_app = events_web_app(
        bot.app,
        signing_secret=signing_secret,
        path=EVENTS_PATH,
        is_new_event=bot.is_new_event,
        ops=bot.ops if ops else None,
    )
    runner = web.AppRunner(web_app, access_log=None, logger=server_log)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    bound = runner.addresses[0][1]
    return runner, int(bound)
