"""``python -m bot [serve|web|worker|playground|mcp] [--http|--socket]``: run the bot (``python -m bot policy
check|explain``: the approval policy, :mod:`bot.approval_policy.cli`).

- no ``SLACK_BOT_TOKEN``: the local playground (fake Slack + browser UI), see ``bot.playground.launcher``;
- ``SLACK_BOT_TOKEN`` + ``SLACK_SIGNING_SECRET``: HTTP mode, ``POST /slack/events`` on ``$PORT``;
- ``SLACK_APP_TOKEN`` (xapp-) as well: Socket Mode (an outgoing websocket; nothing listens on ``$PORT``).

``--http`` / ``--socket`` (``serve`` and ``web``) choose the transport explicitly instead of by
``SLACK_APP_TOKEN``. ``mcp`` serves the MCP server for outside agents over stdio, or ``--http`` with
``MCP_TOKEN`` (``bot.mcp_server``; it needs ``SLACK_BOT_TOKEN`` and ``REDIS_URL``, and ``serve`` processes on that
Redis take the answers).
``serve`` insists on Slack credentials and handles everything in one process; ``web`` +
``worker`` split it: ``web`` processes only ack and queue (so acks never wait behind model runs), ``worker``
processes run the queued work; run as many of each as the load needs, all on one Redis. ``playground``
ignores Slack credentials. Settings: ``bot/config.py``.

Start-up refuses with one ``error: ...`` line per problem on stderr and exit status 2: malformed or missing
settings, an unreachable Redis, a port in use, Slack refusing the Socket Mode connection.
"""

from __future__ import annotations

# ruff: noqa: E402 (SIGTERM's handler goes in before the imports, which take most of the start)
import signal
import sys


def _noted(signum: int, frame: object) -> None:
    """SIGTERM while ``python -m bot`` starts (its imports take about a second, its settings and checks more):
    noted, not fatal. ``serve``, ``web``, ``worker`` and ``playground`` take it over (:func:`bot.serving.on_signals`)
    and stop at once, exit status 0; ``policy`` and ``mcp`` have SIGTERM's default action back before they run
    (:func:`main`), as before. Before, the default action killed a process stopped in its first second (status -15:
    a supervisor's rolling restart reported a crash)."""
    _noted.arrived = True  # type: ignore[attr-defined]


_noted.arrived = False  # type: ignore[attr-defined]


def _quiet_on_ctrl_c(kind: type[BaseException], value: BaseException, tb: object) -> None:
    """``sys.excepthook``: a Ctrl-C that ends the process where it does not take SIGINT over (while it imports its
    modules or starts; ``mcp`` over stdio; :func:`bot.serving.on_signals` takes it once a server serves) ends it
    with one line, no traceback (the exit status stays a Ctrl-C's, 130); any other exception as Python reports
    it."""
    if issubclass(kind, KeyboardInterrupt):
        print("stopped (Ctrl-C)", file=sys.stderr)
        return
    sys.__excepthook__(kind, value, tb)  # type: ignore[arg-type]


if __name__ == "__main__":  # before the imports below; not when a test imports main()
    signal.signal(signal.SIGTERM, _noted)
    sys.excepthook = _quiet_on_ctrl_c


def _sigterm_as_default() -> None:
    """For a command that handles no signal while it starts (``policy``; ``mcp``: over stdio none, over HTTP only
    once it serves): SIGTERM's default action back, and a SIGTERM noted while starting acted on now (the process
    ends, status -15, as it would have)."""
    if signal.getsignal(signal.SIGTERM) is _noted:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        if _noted.arrived:  # type: ignore[attr-defined]
            signal.raise_signal(signal.SIGTERM)


import argparse
import contextlib

from bot.config import SettingsError, deployed_policy, load_settings
from bot.errors import ConfigError
from bot.logs import configure_logging, redact
from bot.ops.tracing import configure_tracing, shutdown_tracing
from bot.serving import ROLES, check_required_mcp, default_command, run_loop, serve, until_sigterm, with_missing

COMMANDS = """commands:
  serve       everything in one process (HTTP: POST /slack/events on $PORT; Socket Mode with SLACK_APP_TOKEN)
  web         the HTTP (or Socket Mode) front of the split: acks and queues the work
  worker      the split's workers: run the queued work
  playground  the local fake Slack in a browser (the default when SLACK_BOT_TOKEN is not set)
  mcp         the MCP server for outside agents: stdio, or --http (streamable HTTP, MCP_TOKEN or MCP_CALLERS)
  policy      policy check FILE | policy explain TOOL 'ARGS_JSON' --user U... (APPROVAL_POLICY files)

Settings come from the environment (docs/slack-setup.md, "Set the environment"); a bad or missing one exits 2
with one error: line each."""


COMMAND_HELP = {
    "serve": (
        "Everything in one process: Slack's requests (HTTP: POST /slack/events on $PORT; Socket Mode when "
        "SLACK_APP_TOKEN is set), the agent's runs, deadlines and reminders.",
        ("--http", "--socket", "--agent"),
    ),
    "web": (
        "The HTTP (or Socket Mode) front of the split: acks Slack's requests and queues the work.",
        ("--http", "--socket"),
    ),
    "worker": (
        "The split's workers: run the work web queued, the agent's runs, deadlines and reminders.",
        ("--agent",),
    ),
    "playground": (
        "The local fake Slack in a browser, with the real bot (no Slack workspace, no API key needed).",
        ("--agent",),
    ),
    "mcp": (
        "The MCP server for outside agents (ask_user, request_approval, approve_tool_use): stdio, or streamable "
        "HTTP with --http (MCP_TOKEN or MCP_CALLERS).",
        ("--http", "--agent"),
    ),
}
"""Each command's ``--help``: what it runs, and the options it takes."""
OPTION_HELP = {
    "--http": "serve POST /slack/events on $PORT (mcp: streamable HTTP on $MCP_PORT)",
    "--socket": "connect over Socket Mode (SLACK_APP_TOKEN)",
    "--agent": "your agent's factory, MODULE:ATTR, build(model=..., store=...) (or AGENT=...)",
}


def command_help(command: str) -> str:
    """``python -m bot COMMAND --help``: the command's usage, what it runs and its options."""
    what, options = COMMAND_HELP[command]
    parser = argparse.ArgumentParser(
        prog=f"python -m bot {command}",
        description=what,
        epilog='Settings come from the environment (docs/slack-setup.md, "Set the environment").',
    )
    for option in options:
        if option == "--agent":
            parser.add_argument(option, metavar="MODULE:ATTR", help=OPTION_HELP[option])
        else:
            parser.add_argument(option, action="store_true", help=OPTION_HELP[option])
    return parser.format_help()


def main(argv: list[str] | None = None) -> int:
    """Entry point: parse ``argv``, load the settings and run; returns the exit status (2: refused to start,
    with one ``error: ...`` line per problem on stderr)."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["policy"]:  # check / explain an approval policy: no settings needed but the file
        from bot.approval_policy.cli import main as policy_main

        _sigterm_as_default()
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # a filter's end: `policy check ... | head` just stops there
        # (Python's own ignored SIGPIPE made it a BrokenPipeError traceback)
        return policy_main(argv[1:], deployed=lambda: deployed_policy(load_settings()))
    if argv[:1] and argv[0] in COMMAND_HELP and {"-h", "--help"} & set(argv[1:]):
        print(command_help(argv[0]), end="")
        return 0
    parser = argparse.ArgumentParser(
        prog="python -m bot",
        description="Run the Slack bot, its local playground, or its MCP server for outside agents.",
        epilog=COMMANDS,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "command",
        nargs="?",
        choices=["serve", "web", "worker", "playground", "mcp", "policy"],  # policy: handled above, its own arguments
        help="default: from the environment",
    )
    transport = parser.add_mutually_exclusive_group()
    transport.add_argument(
        "--http", dest="transport", action="store_const", const="http", help="serve POST /slack/events on $PORT"
    )
    transport.add_argument(
        "--socket", dest="transport", action="store_const", const="socket", help="connect over Socket Mode"
    )
    parser.add_argument(
        "--agent", metavar="MODULE:ATTR", help="your agent's factory, build(model=..., store=...) (or AGENT=...)"
    )
    args = parser.parse_args(argv)
    tracing = None
    try:
        given = {"agent": args.agent} if args.agent else {}
        try:
            settings = load_settings(**given)
        except SettingsError as refused:  # and what else the command lacks, in the same round
            raise with_missing(refused, command=args.command, transport=args.transport, **given) from None
        configure_logging(settings.log_level, settings.log_format, secrets=settings.secret_values())
        tracing = configure_tracing()  # OTEL_* variables, when the OpenTelemetry SDK is installed
        if args.command == "policy":  # listed in the usage; its own arguments follow it, first (see above)
            raise ConfigError("policy comes first: python -m bot policy check FILE | policy explain TOOL 'ARGS_JSON'")
        command = args.command or default_command(settings, args.transport)
        if args.transport and command not in ("serve", "web", "mcp"):
            raise ConfigError(f"--{args.transport} applies to serve, web and mcp only, not {command}")
        if args.transport == "socket" and command == "mcp":
            raise ConfigError("python -m bot mcp serves stdio, or streamable HTTP with --http; not --socket")
        if command == "mcp":
            check_required_mcp(settings, http=args.transport == "http")  # before the MCP SDK's imports (seconds)
            from bot.mcp_server.server import run_mcp

            _sigterm_as_default()  # stdio handles no signal; --http from serving only (bot.mcp_server.http)
            run_loop(run_mcp(settings, http=args.transport == "http"))
        elif command in ("serve", "web", "worker"):  # without SLACK_BOT_TOKEN: told with the rest (check_required)
            run_loop(serve(settings, role=ROLES[command], transport=args.transport))
        else:
            from bot.playground.launcher import run_playground

            with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C: asyncio.Runner cancelled the main task
                run_loop(until_sigterm(run_playground(settings)))
    except ConfigError as exc:
        for line in str(exc).splitlines():
            print(f"error: {redact(line)}", file=sys.stderr)
        return 2
    finally:
        shutdown_tracing(tracing)
    return 0


if __name__ == "__main__":
    sys.exit(main())
