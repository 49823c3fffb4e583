"""Starting and stopping the bot's processes, shared by every command of ``python -m bot`` (``bot/__main__.py`` only
parses arguments and dispatches here): the event loop (uvloop where installed), SIGTERM handling, the transport
choice, the start-up checks (required settings, a reachable Redis, a bot token Slack takes, a free port: each a
``ConfigError`` naming the setting to change), the ops server (``/metrics``, ``/healthz``, ``/readyz``) and
``serve``, the Slack-facing process (roles ``all``, ``web`` and ``worker``). ``bot.mcp_server.server`` and
``bot.playground.launcher`` use the same checks and ops server.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import errno
import gc
import logging
import signal
import socket
import sys
from collections.abc import Callable, Collection, Coroutine, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from bot.config import Settings, SettingsError, Transport, deployed_policy, redis_address, settings_beside
from bot.errors import ConfigError, describe_error, describe_os_error

if TYPE_CHECKING:  # bot.slack imports Bolt, openai and redis: only what starts needs them
    import redis.asyncio as aioredis

    from bot.agent.model import ChatModel
    from bot.slack.app import Bot, Role

log = logging.getLogger(__name__)
T = TypeVar("T")

REDIS_CHECK_SECONDS = 10.0
SLACK_CHECK_SECONDS = 15.0  # start-up's auth.test, its client's retries included
TOKEN_REFUSED = frozenset(
    {"invalid_auth", "not_authed", "account_inactive", "token_revoked", "token_expired", "not_allowed_token_type"}
)
"""auth.test's errors that say the token itself is no good (Slack: reference/methods/auth.test): start-up stops."""
STEP_CANCELS, STEP_CANCEL_SECONDS = 4, 0.5  # a start-up step stopped by SIGTERM: cancelled up to 4 times, 0.5 s apart
DRAIN_SECONDS = 10.0
SEE_README = "See docs/slack-setup.md (the README's 'Put it in Slack')."


def freeze_heap() -> int:
    """Move every object alive now (imported modules, the built app, its clients) into the garbage collector's
    permanent generation (``gc.freeze``), after a full collection; returns how many are frozen. A process calls it
    once its start-up is done (as it starts serving): they live as long as the process, and the collector's
    full passes no longer walk them. Without it a full pass walked the whole start-up heap (~130,000 objects)
    on the event loop's thread, stalling every ack and stream in the process for tens of milliseconds (issue 26,
    "the single-process ack"; measured in ``benchmarks.ack_latency``). What start-up left as garbage is collected
    first, so nothing unreachable is kept."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


def run_loop(main: Coroutine[Any, Any, None]) -> None:
    """Run ``main`` to the end on uvloop's event loop where it is installed (a C loop on libuv: less CPU per socket
    read, write and callback; Linux and macOS), otherwise on asyncio's own. ``asyncio.Runner`` either way, as
    ``asyncio.run`` does (Ctrl-C cancels ``main``)."""
    try:
        import uvloop
    except ImportError:  # e.g. Windows, where uvloop is not installed (pyproject's marker)
        factory = None
    else:
        factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(main)


@contextlib.contextmanager
def on_signals(callback: Callable[[], None], *signals: signal.Signals) -> Iterator[bool]:
    """Within: each of ``signals`` runs ``callback`` on the running loop (from the main thread). Leaving once one has
    arrived, or by a cancellation or a Ctrl-C (the process stops all the same), sets them ignored until the process
    exits; leaving otherwise restores the handlers from before. ``signal.signal`` handlers, not
    ``loop.add_signal_handler``: removing one of the loop's handlers (as closing the loop does) restores the default
    action first, and a SIGTERM arriving in that moment, at any of the process's threads (uvloop's libuv workers
    too), ended the process (status -15: a supervisor that signals until the process is gone). The loop still runs
    them at once: uvloop wakes on every signal (its wakeup fd), asyncio's own loop by the interrupted wait. A signal
    that came while the process started, to a handler that only noted it (``bot/__main__.py``'s, an ``arrived``
    attribute set), runs ``callback`` at once too, and the context's value is True (else False). Raises
    ``ValueError`` off the main thread."""
    loop = asyncio.get_running_loop()
    arrived = stopping = False

    def handler(signum: int, frame: object) -> None:
        nonlocal arrived
        arrived = True
        loop.call_soon_threadsafe(callback)  # it runs between any two bytecodes, the loop's own too

    previous = {sig: signal.signal(sig, handler) for sig in signals}
    early = any(getattr(before, "arrived", False) for before in previous.values())  # it came while starting
    if early:
        arrived = True
        loop.call_soon(callback)
    try:
        yield early
    except (asyncio.CancelledError, KeyboardInterrupt):
        stopping = True
        raise
    finally:
        if arrived or stopping:
            drop_ignored_signal_reports()
        for sig, before in previous.items():  # handler to SIG_IGN in one step: never the default action between
            kept = before if before is not None else signal.SIG_DFL
            signal.signal(sig, signal.SIG_IGN if arrived or stopping else kept)


def drop_ignored_signal_reports() -> None:
    """From now on, leave out CPython's report of a signal that arrived just as its handler became ``SIG_IGN``: the
    interpreter, processing the signal its C handler had caught, finds it ignored and reports "OSError: Signal 15
    ignored due to race condition" through ``sys.unraisablehook`` (a traceback on stderr; CPython's
    ``_PyErr_CheckSignalsTstate``). For a signal ignored on purpose, while the process stops, that is noise (a
    supervisor signalling until the process is gone printed it in about 1 run in 3). Every other report goes to the
    hook that was there. Idempotent."""
    before = sys.unraisablehook
    if getattr(before, "drops_ignored_signals", False):
        return

    def hook(unraisable: Any) -> None:
        error = unraisable.exc_value
        if isinstance(error, OSError) and str(error).endswith(" ignored due to race condition"):
            return
        before(unraisable)

    hook.drops_ignored_signals = True  # type: ignore[attr-defined]
    sys.unraisablehook = hook


async def until_sigterm(main: Coroutine[Any, Any, None]) -> None:
    """Await ``main``; SIGTERM cancels it as Ctrl-C does, and then this returns (exit status 0). Its own handler
    (:func:`on_signals`), so it works also where the process started with SIGINT ignored (``nohup cmd &`` in a
    script, some supervisors), which leaves asyncio.Runner without its SIGINT handler; a KeyboardInterrupt raised
    from a signal handler would land in whatever task runs, a traceback. A later SIGTERM (after the first, or after a
    Ctrl-C) changes nothing, to the process's end (a Ctrl-C while it stops still cancels the clean-up, as
    asyncio.Runner's second Ctrl-C does). A SIGTERM that came while the process started (see :func:`on_signals`):
    ``main`` is closed unstarted (its start-up could absorb the one cancellation, e.g. fakeredis's ``ping``)."""
    task = asyncio.current_task()
    assert task is not None
    stopped = asyncio.Event()

    def stop() -> None:
        # a second SIGTERM, or one after a Ctrl-C (asyncio.Runner cancelled the task), while it stops: let the
        # clean-up finish
        if not stopped.is_set() and not task.cancelling():
            stopped.set()
            task.cancel()

    with on_signals(stop, signal.SIGTERM) as early:
        if early:  # a SIGTERM while the process started: ``main`` is not started at all
            main.close()
            return
        try:
            await main
        except asyncio.CancelledError:
            if not stopped.is_set():
                raise


def choose_transport(settings: Settings, requested: Transport | None) -> Transport:
    """``requested`` (``--http`` / ``--socket``) if given, else ``socket`` when ``SLACK_APP_TOKEN`` is set."""
    if requested is not None:
        return requested
    return "socket" if settings.slack_app_token is not None else "http"


ROLES: dict[str, Role] = {"serve": "all", "web": "web", "worker": "worker"}
"""The commands that run the bot against Slack, and the role each runs it in."""


def default_command(settings: Settings, transport: Transport | None) -> str:
    """``python -m bot`` with no command: ``serve`` with a transport flag or a ``SLACK_BOT_TOKEN``, else the
    ``playground``."""
    return "serve" if transport or settings.mode != "playground" else "playground"


METRICS_ON_PORT_CLASH = (
    "METRICS_PORT is PORT: give /metrics, /healthz and /readyz a port of their own, or unset METRICS_PORT"
    " (PORT serves them then)"
)
"""The line told (with the settings not set) when a process serving HTTP on ``PORT`` has ``METRICS_PORT`` set to
the same port: two servers can't listen there."""


def check_required(
    settings: Settings, *, role: Role, transport: Transport, explicit: bool = False, refused: Collection[str] = ()
) -> None:
    """Raise ``ConfigError`` naming every setting ``role`` over ``transport`` needs but lacks, a line each, and
    ``METRICS_PORT`` set to ``PORT`` where ``PORT`` serves HTTP (:data:`METRICS_ON_PORT_CLASH`); ``refused``:
    settings (``REDIS_URL``) whose value was refused already, so not told as not set too."""
    flag = f"; --{transport} needs it" if explicit else ""
    required: list[tuple[str, object, str]] = [
        ("SLACK_BOT_TOKEN", settings.slack_bot_token, "xoxb-; `python -m bot playground` tries it without Slack")
    ]
    if role == "worker":  # no requests arrive, but the bot is built as for either transport
        required.append(
            ("SLACK_SIGNING_SECRET", settings.slack_signing_secret or settings.slack_app_token, "verifies requests")
        )
    elif transport == "socket":
        required.append(("SLACK_APP_TOKEN", settings.slack_app_token, "xapp-, scope connections:write" + flag))
    else:
        required.append(("SLACK_SIGNING_SECRET", settings.slack_signing_secret, "verifies requests" + flag))
    required.append(("REDIS_URL", settings.redis_url, "runs must outlive the process, e.g. redis://127.0.0.1:6379/0"))
    if role != "web":  # a web process runs no agent (model_for)
        why = "the model's key; OPENAI_BASE_URL picks another OpenAI-compatible server"
        required.append(("OPENAI_API_KEY", settings.openai_api_key, why))
    missing = [f"not set: {name} ({why})" for name, value, why in required if value is None and name not in refused]
    serves_http = role != "worker" and transport == "http"
    clash = serves_http and settings.metrics_port is not None and settings.metrics_port == settings.port
    lines = [METRICS_ON_PORT_CLASH] if clash and not {"PORT", "METRICS_PORT"} & set(refused) else []
    if missing:  # all at once, so setting up takes one round: a line each (the last points at the README)
        lines += [*missing[:-1], f"{missing[-1]}. {SEE_README}"]
    if lines:
        raise ConfigError("\n".join(lines))


def with_missing(
    refused: SettingsError, *, command: str | None, transport: Transport | None, **values: Any
) -> SettingsError:
    """``refused`` (the settings' bad values; ``values`` as given to :func:`bot.config.load_settings`) with, in the
    same round, a line per setting ``python -m bot [command] [--transport]`` needs that is not set: what
    :func:`check_required` / :func:`check_required_mcp` say of :func:`bot.config.settings_beside`."""
    beside = settings_beside(refused, **values)
    if beside is None:
        return refused
    names = tuple(field.upper() for field in refused.fields)
    command = command or default_command(beside, transport)
    try:
        if command == "mcp":
            check_required_mcp(beside, http=transport == "http", refused=names)
        elif command in ROLES:
            chosen = choose_transport(beside, transport)
            check_required(beside, role=ROLES[command], transport=chosen, explicit=transport is not None, refused=names)
    except ConfigError as exc:
        return SettingsError([*refused.problems, *str(exc).splitlines()], fields=refused.fields)
    return refused


def model_for(settings: Settings, *, role: Role) -> ChatModel:
    """The model of a process of ``role``, the one place that decides it: the OpenAI-compatible server's
    (``OPENAI_API_KEY``, ``OPENAI_BASE_URL``, ``OPENAI_MODEL``), except for a ``web`` process, which only acks and
    queues (the workers run the agent: it never holds the key nor loads the openai client), and for an MCP server
    without ``OPENAI_API_KEY`` (its runs only ask): :class:`bot.agent.model.NoModel` then, whose refusal says why."""
    from bot.agent.model import NoModel

    if role == "web":
        return NoModel("a web process only acks and queues Slack's requests; the workers run the agent")
    if settings.openai_api_key is None:
        return NoModel("this process only asks questions (python -m bot mcp); it runs no model")
    from bot.agent.model.openai_chat import OpenAIChatModel

    return OpenAIChatModel(
        settings.openai_model, base_url=settings.openai_base_url, api_key=settings.openai_api_key.get_secret_value()
    )


def check_required_mcp(settings: Settings, *, http: bool = False, refused: Collection[str] = ()) -> None:
    """Raise ``ConfigError`` naming every setting ``python -m bot mcp`` needs but lacks (``SLACK_BOT_TOKEN``,
    ``REDIS_URL``: it asks through Slack and Redis; over ``http`` ``MCP_TOKEN`` or ``MCP_CALLERS`` too: it refuses
    requests without a token), a line each; ``refused`` as for :func:`check_required`."""
    why = "python -m bot mcp asks through Slack and Redis"
    needed: list[tuple[str, object, str]] = [
        ("SLACK_BOT_TOKEN", settings.slack_bot_token, why),
        ("REDIS_URL", settings.redis_url, why),
    ]
    if http and "MCP_CALLERS" not in refused:
        lacks = "or MCP_CALLERS: python -m bot mcp --http refuses requests without a token"
        needed.append(("MCP_TOKEN", settings.mcp_token or settings.mcp_callers, lacks))
    missing = [f"not set: {n} ({why})" for n, v, why in needed if v is None and n not in refused]
    if missing:  # a line each
        raise ConfigError("\n".join(missing))


async def check_redis(client: aioredis.Redis, url: str, *, within: float = REDIS_CHECK_SECONDS) -> None:
    """PING the Redis at ``url``; raise ``ConfigError`` naming its host:port (never its credentials) when it
    does not answer within ``within`` seconds or refuses."""
    from redis.exceptions import AuthenticationError, RedisError

    try:
        await asyncio.wait_for(client.ping(), within)
    except AuthenticationError:
        raise ConfigError(f"Redis at {redis_address(url)} refused the credentials; check REDIS_URL") from None
    except TimeoutError:
        raise ConfigError(
            f"Redis at {redis_address(url)} did not answer within {within:.0f} s; check REDIS_URL"
        ) from None
    except (RedisError, OSError) as exc:
        raise ConfigError(
            f"cannot reach Redis at {redis_address(url)} ({describe_os_error(exc)}); is it running? check REDIS_URL"
        ) from None


async def slack_team(client: Any, *, required: bool = True, within: float = SLACK_CHECK_SECONDS) -> str | None:
    """The bot's team id, by ``auth.test`` on ``client`` (the bot token's ``AsyncWebClient``): the start-up check of
    ``SLACK_BOT_TOKEN``. A token Slack refuses (:data:`TOKEN_REFUSED`) raises ``ConfigError`` naming the setting
    (never its value). Slack unreachable (no such host, nothing listening, no answer within ``within`` seconds) or
    failing otherwise (``ratelimited``, ``fatal_error``): ``required`` (the MCP server, which needs the team id)
    raises ``ConfigError`` naming the host and ``SLACK_API_URL``; else logs a warning and returns None (``serve``
    starts: Slack may be back in a moment, and ``/readyz`` answers 503 until ``auth.test`` passes,
    :mod:`bot.ops.server`)."""
    from urllib.parse import urlsplit

    import aiohttp
    from slack_sdk.errors import SlackApiError

    from bot.slack.transport.web_api import error_code, slack_error

    host = urlsplit(str(getattr(client, "base_url", ""))).netloc or "?"
    try:
        resp = await asyncio.wait_for(client.auth_test(), within)
    except SlackApiError as exc:
        code = error_code(exc)  # None for an answer that is not Slack's JSON (a proxy's)
        if code in TOKEN_REFUSED:
            raise ConfigError(
                f"Slack refused SLACK_BOT_TOKEN (auth.test: {code}); check the token (xoxb-...) and that the app is"
                " installed in the workspace"
            ) from None
        problem = f"Slack's auth.test failed ({slack_error(exc)})"
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        problem = f"cannot reach the Slack API at {host} ({describe_os_error(exc)}); check SLACK_API_URL"
    else:
        return str(resp.get("team_id") or "")
    if required:
        raise ConfigError(problem)
    log.warning("start-up: %s; starting anyway (/readyz answers 503 until auth.test passes)", problem)
    return None


def listen_error(
    exc: OSError, host: str, port: int, *, port_setting: str = "PORT", host_setting: str = "HTTP_HOST"
) -> ConfigError:
    """The ``ConfigError`` for a server that could not listen on ``host:port``, naming the setting to change: the
    port's when it is in use or privileged, the host's when the address is not this machine's (or no address)."""
    if exc.errno == errno.EADDRINUSE:
        return ConfigError(
            f"cannot listen on port {port}: it is in use by another process; stop it or set {port_setting}"
        )
    if exc.errno == errno.EACCES:
        return ConfigError(
            f"cannot listen on port {port}: permission denied (ports below 1024 need privileges); set {port_setting}"
        )
    if exc.errno == errno.EADDRNOTAVAIL or isinstance(exc, socket.gaierror):
        return ConfigError(
            f"cannot listen on {host}: not an address of this machine ({describe_error(exc)}); set {host_setting}"
        )
    return ConfigError(f"cannot listen on {host}:{port} ({describe_error(exc)}); set {port_setting} or {host_setting}")


async def serve_ops(bot: Bot, settings: Settings, stack: contextlib.AsyncExitStack) -> int | None:
    """When ``METRICS_PORT`` is set, serve ``/metrics``, ``/healthz`` and ``/readyz`` on ``METRICS_HOST`` (default
    127.0.0.1) at that port until ``stack`` unwinds (and, in multiprocess mode, drop this process's live gauges
    then); returns the port listened on (None: not served). Raises ``ConfigError`` when that address can't be
    listened on."""
    from bot.ops.metrics import process_exiting
    from bot.ops.server import start_ops_server

    stack.callback(process_exiting)
    if settings.metrics_port is None:
        return None
    host = settings.metrics_host
    try:
        runner, port = await start_ops_server(bot.ops, host=host, port=settings.metrics_port)
    except OSError as exc:
        raise listen_error(
            exc, host, settings.metrics_port, port_setting="METRICS_PORT", host_setting="METRICS_HOST"
        ) from None
    stack.push_async_callback(runner.cleanup)
    log.info("metrics: GET /metrics, /healthz, /readyz on %s", http_address(host, port))
    return port


def http_address(host: str, port: int) -> str:
    """``http://127.0.0.1:9100`` (an IPv6 host bracketed)."""
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


class Stopped(enum.Enum):
    """:func:`unless_stopped`'s answer when the stop came first."""

    STOPPED = "stopped"


STOPPED = Stopped.STOPPED


async def unless_stopped(stop: asyncio.Event, step: Coroutine[Any, Any, T]) -> T | Stopped:
    """``step``'s result, unless ``stop`` is set first (SIGTERM or Ctrl-C while the process starts): then ``step`` is
    cancelled, logged, and :data:`STOPPED` returned, so the process stops without finishing its start. Before, it
    finished starting first: a Redis that did not answer held a stopped process up to ``REDIS_CHECK_SECONDS``, then
    it exited 2 with an error. A step that finished is kept (the stop is acted on at the next step); its errors are
    raised."""
    task = asyncio.ensure_future(step)
    stopping = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({task, stopping}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
        for _ in range(STEP_CANCELS):
            if task.done():
                break
            # again if need be: redis-py (8.2) can swallow a cancellation that lands in its connection's handshake
            # and wait on for a reply that never comes
            task.cancel()
            await asyncio.wait({task}, timeout=STEP_CANCEL_SECONDS)
    if not task.done():  # the stack's clean-up (closing the Redis client) ends it
        log.warning("stopped while starting; a start-up step did not stop when cancelled")
        task.add_done_callback(lambda t: t.cancelled() or t.exception())  # its end, an error too, is not news
        return STOPPED
    if task.cancelled():
        log.info("stopped while starting")
        return STOPPED
    return task.result()  # or its error, raised


async def serve(settings: Settings, *, role: Role = "all", transport: Transport | None = None) -> None:
    """Run against a real Slack workspace until SIGINT/SIGTERM; ``transport`` overrides the choice by
    ``SLACK_APP_TOKEN`` (ignored by the ``worker`` role). Raises ``ConfigError`` for missing settings, an
    unreachable Redis, a bot token Slack refuses (:func:`slack_team`), a port in use or a refused Socket Mode
    connection (nothing keeps running then)."""
    from bot.slack.app import build_bot, start_http
    from bot.slack.transport.socket_mode import connect_socket_mode
    from bot.store import connect_redis

    chosen = choose_transport(settings, transport)
    check_required(settings, role=role, transport=chosen, explicit=transport is not None)
    assert settings.redis_url is not None
    redis_url = settings.redis_url.get_secret_value()

    stop = asyncio.Event()
    async with contextlib.AsyncExitStack() as stack:  # unwinds in reverse: stop listening, drain, close
        stack.enter_context(on_signals(stop.set, signal.SIGINT, signal.SIGTERM))  # ignored from then to the end
        redis_client = connect_redis(redis_url, cluster=settings.redis_cluster)
        stack.push_async_callback(redis_client.aclose)
        if await unless_stopped(stop, check_redis(redis_client, redis_url)) is STOPPED:
            return
        bot = build_bot(settings, model=model_for(settings, role=role), redis_client=redis_client, role=role)
        stack.push_async_callback(bot.aclose)
        for warning in deployed_policy(settings).warnings():  # as `policy check` prints them (not the playground's
            log.warning("APPROVAL_POLICY %s", warning)  # demo policy: its one rule nobody else satisfies is its point)
        if await unless_stopped(stop, slack_team(bot.client, required=False)) is STOPPED:  # a refused token: stop
            return
        if await unless_stopped(stop, bot.start()) is STOPPED:  # MCP servers' tools are there before the first request
            return
        await serve_ops(bot, settings, stack)

        async def hand_over() -> None:  # runs still going (a long model turn): another process goes on with them
            if handed := await bot.hand_over():
                log.info("stopping: %d run(s) unfinished, to be gone on with by another process", len(handed))

        async def drain() -> None:
            log.info("stopping: finishing work in flight (up to %.0f s)", DRAIN_SECONDS)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(bot.drain(), DRAIN_SECONDS)
            await hand_over()

        if role == "worker":
            stack.push_async_callback(hand_over)  # the jobs in hand have their drain in bot.work
            log.info("worker: handling queued Slack work; Ctrl-C to stop")
            log.info("start-up heap frozen: %d objects", freeze_heap())

            async def stopping() -> None:
                await stop.wait()
                log.info("stopping: finishing work in flight (up to %.0f s)", DRAIN_SECONDS)

            told = asyncio.ensure_future(stopping())
            try:
                await bot.work(stop=stop, grace=DRAIN_SECONDS)
            finally:
                told.cancel()
            return
        if chosen == "socket":
            assert settings.slack_app_token is not None
            handler = await unless_stopped(
                stop,
                connect_socket_mode(
                    bot, app_token=settings.slack_app_token.get_secret_value(), api_url=settings.slack_api_url
                ),
            )
            if handler is STOPPED:  # stopped while connecting: connect_socket_mode closes what it opened
                return

            async def disconnect_then_drain() -> None:
                await handler.close_async()
                await drain()

            stack.push_async_callback(disconnect_then_drain)
            log.info("Socket Mode: connected as the app (%s); Ctrl-C to stop", role)
        else:
            try:
                runner, port = await start_http(
                    bot, host=settings.http_host, port=settings.port, ops=settings.ops_on_port
                )
            except OSError as exc:
                raise listen_error(exc, settings.http_host, settings.port) from None
            stack.push_async_callback(runner.cleanup)
            stack.push_async_callback(drain)  # before the server stops, as the requests in flight finish
            ops = "; GET /metrics, /healthz, /readyz there too" if settings.ops_on_port else ""
            log.info("HTTP mode (%s): POST /slack/events on port %d%s; Ctrl-C to stop", role, port, ops)
        log.info("start-up heap frozen: %d objects", freeze_heap())  # once started: a refusal says one line
        await stop.wait()
