"""``python -m bot [serve|web|worker|playground]``: run the bot; the mode comes from the environment.

- no ``SLACK_BOT_TOKEN``: the local playground (fake Slack + browser UI), see ``bot.playground.launcher``;
- ``SLACK_BOT_TOKEN`` + ``SLACK_SIGNING_SECRET``: HTTP mode, ``POST /slack/events`` on ``$PORT``;
- ``SLACK_APP_TOKEN`` (xapp-) as well: Socket Mode.

``serve`` insists on Slack credentials and handles everything in one process; ``web`` + ``worker`` split
it: ``web`` processes only ack and queue (so acks never wait behind model runs), ``worker`` processes run
the queued work; run as many of each as the load needs, all on one Redis. ``playground`` ignores Slack
credentials. Settings: ``bot/config.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys

from bot.config import Settings
from bot.errors import ConfigError
from bot.slack.app import Role

log = logging.getLogger("bot")


async def serve(settings: Settings, *, role: Role = "all") -> None:
    """Run against a real Slack workspace until SIGINT/SIGTERM. Raises ``ConfigError``."""
    from bot.agent import OpenAIChatModel
    from bot.slack.app import build_bot, run_socket_mode, start_http
    from bot.store import connect_redis

    required = (
        ("SLACK_SIGNING_SECRET", settings.slack_signing_secret or settings.slack_app_token, "verifies requests"),
        ("REDIS_URL", settings.redis_url, "runs must outlive the process, e.g. redis://127.0.0.1:6379/0"),
        ("OPENAI_API_KEY", settings.openai_api_key, "any OpenAI-compatible server; set OPENAI_BASE_URL too"),
    )
    missing = [f"{name} ({why})" for name, value, why in required if value is None]
    if missing:  # all at once, so setting up takes one round
        see = "See the README, 'Running against a real Slack workspace'."
        raise ConfigError("not set: " + "; ".join(missing) + ". " + see)
    assert settings.redis_url is not None and settings.openai_api_key is not None
    model = OpenAIChatModel(
        settings.openai_model, base_url=settings.openai_base_url, api_key=settings.openai_api_key.get_secret_value()
    )
    redis_client = connect_redis(settings.redis_url.get_secret_value())
    bot = build_bot(settings, model=model, redis_client=redis_client, role=role)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    runner = None
    socket_task = None
    if role == "worker":
        log.info("worker: handling queued Slack work; Ctrl-C to stop")
        await bot.work(stop=stop)
    elif settings.mode == "socket":
        assert settings.slack_app_token is not None
        socket_task = asyncio.ensure_future(run_socket_mode(bot, app_token=settings.slack_app_token.get_secret_value()))
        log.info("Socket Mode: connected as the app; Ctrl-C to stop")
    else:
        runner, port = await start_http(bot, port=settings.port)
        log.info("HTTP mode (%s): POST /slack/events on port %d; Ctrl-C to stop", role, port)
    await stop.wait()
    log.info("stopping: finishing work in flight (up to 10 s)")
    if socket_task:
        socket_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await socket_task  # closes the websocket and its session
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(bot.frontend.drain(), 10)
    if runner:
        await runner.cleanup()
    await bot.aclose()
    await redis_client.aclose()


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m bot", description=__doc__.splitlines()[0])
    parser.add_argument(
        "command", nargs="?", choices=["serve", "web", "worker", "playground"], help="default: from the environment"
    )
    args = parser.parse_args(argv)
    settings = Settings()
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # Bolt warns that its token is unused when given a ready client; that is this bot's design, not a mistake.
    logging.getLogger("slack_bolt.AsyncApp").addFilter(lambda r: "token will be unused" not in r.getMessage())
    command = args.command or ("playground" if settings.mode == "playground" else "serve")
    try:
        if command in ("serve", "web", "worker"):
            if settings.mode == "playground":
                raise ConfigError("SLACK_BOT_TOKEN is not set (run `python -m bot playground` to try it locally)")
            asyncio.run(serve(settings, role="all" if command == "serve" else command))  # type: ignore[arg-type]
        else:
            from bot.playground.launcher import run_playground

            signal.signal(signal.SIGTERM, signal.default_int_handler)  # SIGTERM stops it as cleanly as Ctrl-C
            with contextlib.suppress(KeyboardInterrupt):
                asyncio.run(run_playground(settings))
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
