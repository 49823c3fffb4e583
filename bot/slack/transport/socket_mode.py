"""Socket Mode: connect the bot's Bolt app over Slack's websocket (no public URL needed).

:func:`connect_socket_mode` returns only once the websocket is open (so "connected" is logged when it is), and
turns what would be slack_sdk's endless retry-with-traceback at start-up into one clear ``ConfigError``.
:func:`run_socket_mode` serves until cancelled, then closes the websocket, its session and tasks.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Protocol
from urllib.parse import urlsplit

from slack_bolt.async_app import AsyncApp
from slack_sdk.web.async_client import AsyncWebClient

from bot.errors import ConfigError, describe_os_error

SOCKET_CONNECT_SECONDS = 30.0
SOCKET_PING_INTERVAL = 10.0


class Bot(Protocol):
    """What Socket Mode needs of the bot (:class:`bot.slack.app.Bot` has it): its Bolt ``app`` and its Web API
    ``client``. (A protocol, so that transport imports nothing of the assembly above it.)"""

    @property
    def app(self) -> AsyncApp: ...

    @property
    def client(self) -> AsyncWebClient: ...


async def connect_socket_mode(
    bot: Bot,
    *,
    app_token: str,
    api_url: str,
    within: float = SOCKET_CONNECT_SECONDS,
    ping_interval: float = SOCKET_PING_INTERVAL,
) -> Any:
    """Open the Socket Mode websocket for ``bot`` and return the connected ``AsyncSocketModeHandler`` (close it
    with ``close_async()``); it reconnects by itself afterwards. Returns only once the connection is open.

    Raises ``ConfigError`` when Slack refuses ``app_token`` (``apps.connections.open``), the Web API at
    ``api_url`` cannot be reached, or the websocket does not open within ``within`` seconds.
    """
    import aiohttp
    from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
    from slack_sdk.errors import SlackApiError

    handler = AsyncSocketModeHandler(bot.app, app_token, web_client=bot.client, ping_interval=ping_interval)
    client = handler.client
    failed: list[str] = []
    failure = asyncio.Event()

    def first_connect_errors(record: logging.LogRecord) -> bool:
        """slack_sdk logs a websocket failure with its traceback and retries forever; at start-up it is ours to
        report (and closing a connection never opened is no news)."""
        message = record.getMessage()
        if message.startswith("Failed to connect"):
            exc = record.exc_info[1] if record.exc_info else None
            failed.append(describe_os_error(exc) if exc is not None else "connection failed")
            failure.set()
            return False
        return "abandoned by disconnect()" not in message

    client.logger.addFilter(first_connect_errors)
    try:
        try:
            opened = await bot.client.apps_connections_open(app_token=app_token)
        except SlackApiError as exc:
            error = exc.response.get("error") if exc.response is not None else None
            raise ConfigError(
                f"Socket Mode: Slack refused SLACK_APP_TOKEN ({error or 'no reason given'}); it must be the app's "
                "app-level token (xapp-) with the connections:write scope, and the app must have Socket Mode enabled"
            ) from None
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            host = urlsplit(api_url).netloc
            raise ConfigError(
                f"Socket Mode: cannot reach the Slack API at {host} ({describe_os_error(exc)}); check SLACK_API_URL"
            ) from None
        client.wss_uri = opened["url"]
        connect = asyncio.ensure_future(handler.connect_async())  # type: ignore[no-untyped-call]
        failed_wait = asyncio.ensure_future(failure.wait())
        try:
            await asyncio.wait({connect, failed_wait}, timeout=within, return_when=asyncio.FIRST_COMPLETED)
        finally:
            failed_wait.cancel()
            if not connect.done():
                connect.cancel()
        if failed or not connect.done() or connect.cancelled() or not await client.is_connected():
            why = failed[0] if failed else f"not open after {within:.0f} s"
            raise ConfigError(f"Socket Mode: could not open the websocket ({why})")
        connect.result()
    except BaseException:
        await handler.close_async()  # type: ignore[no-untyped-call]
        raise
    finally:
        client.logger.removeFilter(first_connect_errors)
    return handler


async def run_socket_mode(
    bot: Bot, *, app_token: str, api_url: str = "", ping_interval: float = SOCKET_PING_INTERVAL
) -> None:
    """Connect over Socket Mode and serve until cancelled; then close the websocket, its session and tasks.

    ``apps.connections.open`` goes through the bot's Web API client (so ``SLACK_API_URL`` applies), with
    ``app_token`` (``xapp-...``) instead of the bot token. Raises ``ConfigError`` as :func:`connect_socket_mode`.
    """
    handler = await connect_socket_mode(bot, app_token=app_token, api_url=api_url, ping_interval=ping_interval)
    try:
        await asyncio.Event().wait()
    finally:
        await handler.close_async()
