"""A bare Bolt ``AsyncApp`` that only acks: the baseline for ``benchmarks.ack_latency``.

Run: ``SLACK_BOT_TOKEN=... SLACK_SIGNING_SECRET=... SLACK_API_URL=... PORT=... python -m benchmarks.bare_bolt``
(``benchmarks.ack_latency`` starts it this way)

Served exactly as the bot serves itself (``bot.slack.app.start_http``): aiohttp, ``POST /slack/events`` on
``$PORT``, no access log. Same signing secret, a Web API client pointed at ``SLACK_API_URL`` (Bolt calls
``auth.test`` there once), ``process_before_response=False``. Listeners: ``app_mention`` and ``message``
do nothing (Bolt acks events itself); every action only ``await ack()``. Stops on SIGINT/SIGTERM.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import signal
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from slack_bolt.async_app import AsyncApp
from slack_sdk.web.async_client import AsyncWebClient

EVENTS_PATH = "/slack/events"


def build_app(*, token: str, signing_secret: str, api_url: str) -> AsyncApp:
    """The ack-only app."""
    base = api_url if api_url.endswith("/") else api_url + "/"
    app = AsyncApp(
        client=AsyncWebClient(token=token, base_url=base),
        signing_secret=signing_secret,
        process_before_response=False,
    )

    async def ignore_event() -> None:
        return None

    async def ack_only(ack: Callable[..., Awaitable[Any]]) -> None:
        await ack()

    app.event("app_mention")(ignore_event)
    app.event("message")(ignore_event)
    app.action(re.compile(".*"))(ack_only)
    return app


async def serve_app(app: AsyncApp) -> None:
    """Serve ``app`` on ``POST /slack/events`` at ``$PORT`` (aiohttp, no access log) until SIGINT/SIGTERM."""
    port = int(os.environ.get("PORT", "3000"))
    runner = web.AppRunner(app.web_app(path=EVENTS_PATH, port=port), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "0.0.0.0", port).start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await runner.cleanup()


async def serve() -> None:
    app = build_app(
        token=os.environ["SLACK_BOT_TOKEN"],
        signing_secret=os.environ["SLACK_SIGNING_SECRET"],
        api_url=os.environ.get("SLACK_API_URL", "https://slack.com/api/"),
    )
    await serve_app(app)


def main() -> None:
    logging.basicConfig(level=os.environ.get("LOG_LEVEL", "WARNING").upper())
    asyncio.run(serve())


if __name__ == "__main__":
    main()
