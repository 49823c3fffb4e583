"""``python -m bot mcp``: the MCP server through which any agent (an MCP client) asks a person on Slack.

Built on the official ``mcp`` SDK's ``MCPServer``; served over stdio, or streamable HTTP behind a bearer token
(:func:`run_mcp`, :mod:`bot.mcp_server.http`). Tools:

- ``ask_user``: the agent's own ``ask_user`` input (``question``, ``options`` of ``{label, description}``,
  ``selection_mode`` ``single_select`` | ``multi_select``), plus ``channel`` / ``user`` (defaults
  ``MCP_ASK_CHANNEL`` / ``MCP_ASK_USER``), ``context`` (a short text shown above the question) and
  ``request_key`` (the same key again waits for the same question instead of asking anew). The call waits
  however long the answer takes (up to the question's deadline, ``ASK_TTL_SECONDS``), sending progress
  notifications every ``MCP_PROGRESS_SECONDS`` (10 s) when the client asked for them (a progress token).
  Result: ``{"status": "answered", "answer": text | [labels], "answered_by": "U…"}`` (with ``"typed": true`` when
  the person wrote an answer of their own instead of picking one of the options), ``{"status":
  "no_answer"}`` or ``{"status": "cancelled", ...}``. A client's cancellation withdraws the question in Slack;
  with a ``request_key``, a client's own timeout, a closed transport or a stopping server does not (the same key
  later waits for it); without one, any end of the call does (nothing could pick the answer up).
- ``request_approval``: ``action`` (one line), ``details`` (Markdown or key/values), ``channel`` / ``user`` /
  ``context`` / ``request_key`` as above; asked as the bot's own tool approvals are (Approve, Decline with a
  reason; ``APPROVERS`` decides who may). Result: ``{"status": "approved", "approved_by"}`` or ``{"status":
  "declined", "declined_by", "reason"}`` (``reason`` ``"no answer"`` past the deadline).

- ``approve_tool_use``: Claude Code's permission prompt (``tool_name``, ``input``, ``tool_use_id``), asked as an
  approval; its result one text block of JSON (:mod:`bot.mcp_server.permission_prompt`).

A client that declares MCP tasks (the ``io.modelcontextprotocol/tasks`` extension, on the 2026-07-28 wire) gets a
task at once for each of these calls instead of a blocking one (:mod:`bot.mcp_server.tasks`), and is told of its
status changes when it listens for them (:mod:`bot.mcp_server.task_status`).

Every call is a caller's (:mod:`bot.mcp_server.callers`): over HTTP the one its bearer token names, over stdio the
process's (``MCP_CALLER``), or without ``MCP_CALLERS`` the one implicit caller, confined to ``MCP_ASK_CHANNEL``. A
call outside what its caller may do is refused with a ``ToolError`` naming the rule.

Every text field is bounded (:mod:`bot.agent.text`, shared by both tools); a call over a bound is refused before
anything is posted or stored, naming the field.

Answers are taken by ``python -m bot serve`` processes on the same Redis (the clicks reach them), or, with
``SLACK_APP_TOKEN``, by this process itself over Socket Mode (:func:`asking`). See :mod:`bot.mcp_server.asker`.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import logging
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Annotated, Any, Literal

import anyio
from mcp.server.context import ServerRequestContext
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.subscriptions import InMemorySubscriptionBus
from pydantic import BaseModel, Field

from bot.agent.asking import APPROVAL_TOOL
from bot.agent.text import (
    Action,
    AskContext,
    Details,
    OptionDescription,
    OptionLabel,
    Question,
    RequestKey,
    SlackTarget,
)
from bot.config import Settings
from bot.errors import BotError, describe_error
from bot.mcp_server.arguments import ArgumentErrors
from bot.mcp_server.asker import AGENT_THAT_ASKED, MCP_TOOL, Asker, AskError, WholeCall, outcome_of
from bot.mcp_server.callers import CALLER_STATE, Caller, Callers, Refused, implicit_caller, load_callers
from bot.mcp_server.cancellations import (
    CancelReasons,
    cancelled_by_client,
    over_stdio,
    server_stopping,
    withdrawn_by_client,
)
from bot.mcp_server.http import serve_http
from bot.mcp_server.permission_prompt import TOOL as PERMISSION_TOOL
from bot.mcp_server.permission_prompt import TOOL_INPUT, approval_request, decision_result, decision_text, summary
from bot.mcp_server.task_status import TaskListen
from bot.mcp_server.tasks import TASKING, Tasks, structured_result
from bot.serving import check_redis, listen_error, model_for, serve_ops, slack_team
from bot.slack.render.blocks import MAX_SELECT_OPTIONS
from bot.store.redis_store import DEFAULT_RETENTION

if TYPE_CHECKING:
    from bot.slack.app import Role

log = logging.getLogger(__name__)

RESTARTING = "this MCP server is restarting: call again with the same request_key to go on waiting for the answer"
"""A keyed call's result when its server stops while it waits (``{"status": "waiting", "note": ...}``)."""

INSTRUCTIONS = (
    "Ask a person on Slack and wait for the answer: a free-form question, one choice or several. Use it when a "
    "decision is the person's, or you lack information only they have. The call can take minutes or hours."
)


ASKED_THROUGH: dict[str, str | None] = {
    "ask_user": None,
    "request_approval": APPROVAL_TOOL,
    PERMISSION_TOOL: APPROVAL_TOOL,
}
"""Each MCP tool's question, by the bot's tool it is asked as: None the question tool (``ask_user``), else an
approval request (:data:`bot.agent.asking.APPROVAL_TOOL`)."""


class Option(BaseModel):
    """One choice: `label` (what the person picks and the answer says), `description` (shown under it)."""

    # The docstring is the schema's description MCP clients show their model; both fields are bounded as
    # bot.agent.text says (OptionLabel, OptionDescription).

    label: OptionLabel
    description: OptionDescription | None = None


Options = Annotated[list[Option], Field(json_schema_extra={"maxItems": MAX_SELECT_OPTIONS})]
"""A question's options: the schema tells the client's model the bound (Slack shows at most 100); more are refused
by the asking itself, in its own words (not a validation dump)."""


def callers_of(settings: Settings) -> Callers | None:
    """The callers of ``MCP_CALLERS`` (None when unset). Raises ``ConfigError`` naming it (the file changed since
    the settings were read)."""
    from bot.errors import ConfigError

    if settings.mcp_callers is None:
        return None
    try:
        return load_callers(settings.mcp_callers)
    except ConfigError as exc:
        raise ConfigError(f"MCP_CALLERS: {exc}") from None


def process_caller(settings: Settings, callers: Callers | None) -> Caller | None:
    """The caller a request without its own (stdio's) is: ``MCP_CALLER``'s entry, the implicit caller without
    ``MCP_CALLERS``, or None (every caller is named by its token)."""
    if callers is None:
        return implicit_caller(channel=settings.mcp_ask_channel)
    return callers.named(settings.mcp_caller) if settings.mcp_caller else None


def caller_of(ctx: Context | ServerRequestContext[Any, Any], default: Caller | None) -> Caller:
    """The caller making this request (a tool's ``Context``, or a request handler's): the HTTP request's (its
    bearer token's, put in the ASGI scope's ``state`` by :class:`bot.mcp_server.http.BearerAuth`), else
    ``default``. Raises ``ToolError`` when there is none."""
    if isinstance(ctx, Context):
        try:
            request = ctx.request_context.request
        except ValueError:
            request = None
    else:
        request = ctx.request
    scope = getattr(request, "scope", None)
    found = (scope.get("state") or {}).get(CALLER_STATE) if isinstance(scope, dict) else None
    caller = found if isinstance(found, Caller) else default
    if caller is None:
        raise ToolError("refused: this request names no caller (MCP_CALLER, or a caller's bearer token)")
    return caller


def client_name(ctx: Context) -> str | None:
    """The MCP client's own name (``clientInfo.name`` of its initialize request), or None."""
    try:
        params = ctx.request_context.session.client_params
    except ValueError:
        return None
    info = getattr(params, "client_info", None)
    name = getattr(info, "name", None)
    return name if isinstance(name, str) else None


def build_mcp_server(settings: Settings, asker: Asker, *, callers: Callers | None = None) -> MCPServer[Any]:
    """The MCP server whose tools ask through ``asker``, for ``callers`` (``MCP_CALLERS``; None: the implicit
    caller, or over HTTP each request's, see :func:`caller_of`)."""
    default = process_caller(settings, callers)
    tasks = Tasks(
        asker,
        tools={
            "ask_user": lambda state: structured_result(outcome_of(state)),
            "request_approval": lambda state: structured_result(outcome_of(state)),
            PERMISSION_TOOL: decision_result,
        },
        caller_of=lambda ctx: caller_of(ctx, default),
        retention=float(getattr(asker.agent.store, "retention", DEFAULT_RETENTION)),
    )
    bus = InMemorySubscriptionBus()  # the SDK's change events; task status is read from Redis (TaskListen)
    reasons = CancelReasons()  # why a client cancelled a call: withdrawn, or only no longer waited for
    server: MCPServer[Any] = MCPServer(
        "askbot",
        instructions=INSTRUCTIONS,
        log_level=settings.log_level,
        extensions=[tasks],
        subscriptions=bus,
        middleware=[TaskListen(tasks, bus), reasons, ArgumentErrors()],
    )

    async def ask(
        ctx: Context,
        mcp_tool: str,
        args: dict[str, Any],
        *,
        channel: str | None = None,
        user: str | None = None,
        context: str | None = None,
        request_key: str | None = None,
        metadata: dict[str, Any] | None = None,
        whole: WholeCall | None = None,
    ) -> dict[str, Any]:
        """The one place a tool asks: as this request's caller, through the tool :data:`ASKED_THROUGH` names for
        ``mcp_tool`` (:func:`ask_and_wait`)."""
        return await ask_and_wait(
            asker,
            settings,
            ctx,
            args,
            channel=channel,
            user=user,
            context=context,
            request_key=request_key,
            tool_id=ASKED_THROUGH[mcp_tool],
            caller=caller_of(ctx, default),
            mcp_tool=mcp_tool,
            metadata=metadata,
            whole=whole,
            reasons=reasons,
        )

    def tool(**kwargs: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """``server.tool(**kwargs)``, described by the function's docstring without its source indentation (FastMCP
        passes ``__doc__`` as it is: a client's model read runs of spaces in each tool's description)."""

        def register(fn: Callable[..., Any]) -> Callable[..., Any]:
            return server.tool(description=inspect.cleandoc(fn.__doc__ or ""), **kwargs)(fn)

        return register

    @tool(name="ask_user")
    async def ask_user(
        question: Question,
        ctx: Context,
        options: Options | None = None,
        selection_mode: Literal["single_select", "multi_select"] | None = None,
        channel: SlackTarget | None = None,
        user: SlackTarget | None = None,
        context: AskContext | None = None,
        request_key: RequestKey | None = None,
    ) -> dict[str, Any]:
        """Ask a person on Slack and wait for the answer. Give `options` for one choice (or several, with
        `selection_mode` "multi_select"), none for a free-form answer. `channel` / `user`: where and whom to ask
        (Slack ids; defaults are the server's). `context`: one short line shown above the question (e.g. which
        repository you work in). `request_key`: any id of yours for this question; calling again with it waits for
        the same question instead of asking anew (after a timeout or restart)."""
        args: dict[str, Any] = {"question": question}
        if options is not None:
            args["options"] = [o.model_dump(exclude_none=True) for o in options]
        if selection_mode is not None:
            args["selection_mode"] = selection_mode
        return await ask(ctx, "ask_user", args, channel=channel, user=user, context=context, request_key=request_key)

    @tool(name="request_approval")
    async def request_approval(
        action: Action,
        ctx: Context,
        details: Details | None = None,
        channel: SlackTarget | None = None,
        user: SlackTarget | None = None,
        context: AskContext | None = None,
        request_key: RequestKey | None = None,
    ) -> dict[str, Any]:
        """Ask a person on Slack to approve an action before you take it, and wait for the decision. `action`: one
        line saying what you will do; `details`: Markdown, or key/values (e.g. {"service": "api", "env": "prod"}).
        `channel` / `user` / `context` / `request_key` as for ask_user. Result: {"status": "approved",
        "approved_by"} or {"status": "declined", "declined_by", "reason"}; take the action only when approved."""
        args: dict[str, Any] = {"action": action, **({"details": details} if details is not None else {})}
        return await ask(
            ctx, "request_approval", args, channel=channel, user=user, context=context, request_key=request_key
        )

    @tool(name=PERMISSION_TOOL, structured_output=False)
    async def approve_tool_use(
        tool_name: Action,
        input: dict[str, Any],  # Claude Code's name for it
        ctx: Context,
        tool_use_id: RequestKey | None = None,
    ) -> str:
        """Claude Code's permission prompt (--permission-prompt-tool mcp__<server>__approve_tool_use): asks a person
        on Slack whether `tool_name` may run with `input`, and waits. Result: one text block of JSON,
        {"behavior": "allow", "updatedInput": {...}} or {"behavior": "deny", "message": "..."}."""
        try:
            args = approval_request(tool_name, input, caller=caller_of(ctx, default).name)
        except AskError as exc:
            raise ToolError(str(exc)) from None
        outcome = await ask(
            ctx,
            PERMISSION_TOOL,
            args,
            context=summary(tool_name, input),
            request_key=tool_use_id,
            metadata={TOOL_INPUT: json.dumps(input, ensure_ascii=False)},
            whole=WholeCall(tool_name, input),
        )
        return decision_text(outcome, input)

    return server


async def ask_and_wait(
    asker: Asker,
    settings: Settings,
    ctx: Context,
    args: dict[str, Any],
    *,
    channel: str | None,
    user: str | None,
    context: str | None,
    request_key: str | None,
    tool_id: str | None = None,
    caller: Caller | None = None,
    mcp_tool: str,
    metadata: dict[str, Any] | None = None,
    whole: WholeCall | None = None,
    reasons: CancelReasons,
) -> dict[str, Any]:
    """Ask ``args`` (through ``tool_id``: the question tool by default) for MCP tool ``mcp_tool`` as ``caller``
    (default: the implicit one) and wait for the outcome, telling the client how long it waited; the client's end
    of the call withdraws it, unless it has a ``request_key`` and did not say it cancelled (its own request timeout,
    a closed stream: ``reasons``, the server's :class:`~bot.mcp_server.cancellations.CancelReasons`,
    :func:`~bot.mcp_server.cancellations.withdrawn_by_client`): the question then stays, for the same call with the
    same ``request_key``. For a call that becomes a task
    (:data:`bot.mcp_server.tasks.TASKING` set) the question is posted and left there, and ``{}`` returned at once
    (the task is the answer). The defaults:
    ``MCP_ASK_CHANNEL`` (a named caller's first channel when that is not one of its), ``MCP_ASK_USER`` (when the
    caller may ask them). ``metadata`` / ``whole``: as :meth:`Asker.ask` takes them. Raises ``ToolError``
    (what went wrong, or the caller's rule refused)."""
    if request_key is not None and not request_key.strip():
        raise ToolError("request_key is blank: give an id of yours for this question, or leave it out")
    caller = caller or implicit_caller(channel=settings.mcp_ask_channel)
    if channel is None:
        channel = settings.mcp_ask_channel
        if caller.name and caller.channels and channel not in caller.channels:
            channel = caller.channels[0]
    if user is None and settings.mcp_ask_user and caller.may_ask(settings.mcp_ask_user):
        user = settings.mcp_ask_user
    try:
        if tool_id == APPROVAL_TOOL and caller.policy_rule:
            args = {**args, "policy_rule": caller.policy_rule}  # the rule that decides it, in the serve processes too
        with anyio.CancelScope(shield=True):  # a cancellation waits until the question is posted and recorded
            asked = await asker.ask(
                args,
                channel=channel,
                user=user,
                context=context,
                request_key=request_key,
                tool_id=tool_id,
                caller=caller,
                client=client_name(ctx),
                metadata={**(metadata or {}), MCP_TOOL: mcp_tool},
                whole=whole,
            )
    except (AskError, Refused) as exc:
        raise ToolError(str(exc)) from None
    except BotError as exc:
        raise ToolError(f"could not ask: {describe_error(exc)}") from None
    if (tasked := TASKING.get()) is not None:
        tasked.asked = asked
        return {}

    async def progress(waited: float, message: str) -> None:
        await ctx.report_progress(waited, None, message)

    def ended() -> bool:
        return cancelled_by_client(ctx) or server_stopping(ctx)

    try:
        outcome = await asker.wait(asked, progress=progress, every=settings.mcp_progress_seconds, cancelled=ended)
        if outcome is None and server_stopping(ctx):  # this server stops: its waiting calls end, told why, within
            # its grace (else cut short: the client told only that the server erred, a traceback in the log)
            if request_key:
                return {"status": "waiting", "note": RESTARTING}
            with anyio.CancelScope(shield=True):
                await asker.withdraw(asked)
            raise ToolError(
                "this MCP server is restarting: the question was withdrawn before anyone answered; ask again"
            )
        if outcome is None:  # the client cancelled (the SDK lets the call run on, told so)
            if not await withdrawn_by_client(ctx, reasons, keyed=bool(request_key)):
                return {"status": "waiting", "note": "the client stopped waiting; the same request_key waits on"}
            await asker.withdraw(asked)
            return {"status": "cancelled", "cancelled_by": AGENT_THAT_ASKED}
        return outcome
    except BaseException as exc:
        cut = isinstance(exc, asyncio.CancelledError)
        if cut and (cancelled_by_client(ctx) or over_stdio(ctx)):  # withdrawn, then gone; or stdio's client gone
            with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
                if await withdrawn_by_client(ctx, reasons, keyed=bool(request_key), cut_short=True):
                    await asker.withdraw(asked)
                else:
                    log.info("an MCP client stopped waiting: its question stays for the same request_key")
        if isinstance(exc, BotError):
            raise ToolError(f"stopped waiting: {describe_error(exc)}") from None
        raise  # the transport closed or the server stops: the question stays, a retry with its key waits on


@contextlib.asynccontextmanager
async def asking(settings: Settings) -> AsyncIterator[Asker]:
    """An :class:`Asker` on the bot's Slack client, agent and Redis (``REDIS_URL``), closed on exit. With
    ``SLACK_APP_TOKEN`` this process also takes what Slack sends over Socket Mode, with the same listeners as
    ``serve`` (Slack spreads an app's requests over all its Socket Mode connections) and runs the scheduler: no
    public URL and no other process needed. Raises ``ConfigError`` when Slack or Redis can't be reached."""
    from bot.slack.app import build_bot
    from bot.store import connect_redis

    assert settings.redis_url is not None
    redis_url = settings.redis_url.get_secret_value()
    redis_client = connect_redis(redis_url, cluster=settings.redis_cluster)
    try:
        await check_redis(redis_client, redis_url)
        socket = settings.slack_app_token is not None
        role: Role = "all" if socket else "asker"
        bot = build_bot(settings, model=model_for(settings, role=role), redis_client=redis_client, role=role)
        async with contextlib.AsyncExitStack() as stack:
            stack.push_async_callback(bot.aclose)
            stack.push_async_callback(bot.drain)
            team_id = await slack_team(bot.client) or ""
            await serve_ops(bot, settings, stack)  # METRICS_PORT: /metrics, /healthz, /readyz
            if socket:
                from bot.slack.transport.socket_mode import connect_socket_mode

                assert settings.slack_app_token is not None
                await bot.start()
                handler = await connect_socket_mode(
                    bot, app_token=settings.slack_app_token.get_secret_value(), api_url=settings.slack_api_url
                )
                stack.push_async_callback(handler.close_async)
                log.info("MCP server: taking Slack's requests over Socket Mode too")
            assert bot.threads is not None
            yield Asker(bot.threads, team_id=team_id)
    finally:
        await redis_client.aclose()


async def run_mcp(settings: Settings, *, http: bool = False) -> None:
    """Serve the MCP server over stdio until the client closes it, or (``http``) over streamable HTTP on
    ``MCP_HOST:MCP_PORT`` (default ``127.0.0.1:3100``) until stopped (:mod:`bot.mcp_server.http`). Raises
    ``ConfigError`` for missing settings (the token in HTTP mode), an unreachable Redis, a refused bot token or
    an address that can't be listened on (naming ``MCP_PORT`` or ``MCP_HOST``)."""
    from bot.config import MCP_PORT_DEFAULT
    from bot.errors import ConfigError

    callers = callers_of(settings)
    if http and settings.mcp_token is None and callers is None:
        raise ConfigError(
            "MCP_TOKEN (or MCP_CALLERS) is not set: python -m bot mcp --http refuses requests without a token"
        )
    if http and callers is not None and not any(c.token_sha256 for c in callers.entries):
        raise ConfigError(
            "MCP_CALLERS: no caller has a token_sha256: python -m bot mcp --http could accept nobody (give each HTTP"
            " caller its token's hash)"
        )
    if not http and callers is not None and settings.mcp_caller is None:
        raise ConfigError("MCP_CALLER is not set: over stdio it names which of MCP_CALLERS' callers this process is")
    async with asking(settings) as asker:
        server = build_mcp_server(settings, asker, callers=callers)
        if not http:
            await server.run_stdio_async()
            return
        port = MCP_PORT_DEFAULT if settings.mcp_port is None else settings.mcp_port
        token = settings.mcp_token.get_secret_value() if settings.mcp_token is not None else None
        try:
            await serve_http(server, host=settings.mcp_host, port=port, token=token, callers=callers)
        except OSError as exc:
            raise listen_error(exc, settings.mcp_host, port, port_setting="MCP_PORT", host_setting="MCP_HOST") from None
