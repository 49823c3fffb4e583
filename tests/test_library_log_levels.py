"""slack_sdk and Bolt build their debug lines whenever their logger's own level is unset; configure_logging sets it."""

from __future__ import annotations

import io
import logging

import aiohttp
from slack_sdk.web.async_client import AsyncWebClient

from bot.fakeslack.workspace import Workspace
from bot.logs import PINNED_LIBRARY_LOGGERS, configure_logging


class Counting(str):
    """A string (sent as JSON like any other) whose ``repr``, which an f-string of a dict holding it calls, is
    counted."""

    formatted = 0

    def __repr__(self) -> str:
        type(self).formatted += 1
        return "'counted'"


async def post_with(level: str) -> tuple[int, str]:
    """One chat.postMessage whose JSON body holds a :class:`Counting` string, logging at ``level``; returns how often
    it was formatted and what was logged."""
    Counting.formatted = 0
    marker = Counting("counted")
    out = io.StringIO()
    configure_logging(level, stream=out)
    async with Workspace("http://127.0.0.1:1/unset", "signing-secret", "xoxb-test") as ws:
        base = ws.api_url if ws.api_url.endswith("/") else ws.api_url + "/"
        async with aiohttp.ClientSession() as session:
            client = AsyncWebClient(token="xoxb-test", base_url=base, session=session)
            await client.api_call("chat.postMessage", json={"channel": "C_GENERAL", "text": "hi", "x": marker})
    return marker.formatted, out.getvalue()


async def test_at_warning_the_web_client_builds_no_debug_lines() -> None:
    try:
        formatted, logged = await post_with("WARNING")
        assert formatted == 0 and logged == ""
        assert all(logging.getLogger(name).level == logging.WARNING for name in PINNED_LIBRARY_LOGGERS)
    finally:
        configure_logging("WARNING")


async def test_at_debug_the_web_client_still_logs_its_requests() -> None:
    try:
        formatted, logged = await post_with("DEBUG")
        assert formatted >= 1 and "Sending a request" in logged and "xoxb-test" not in logged
    finally:
        configure_logging("WARNING")
        for name in PINNED_LIBRARY_LOGGERS:
            logging.getLogger(name).setLevel(logging.NOTSET)


def test_the_mcp_sdks_session_manager_says_nothing_at_info_and_all_at_debug() -> None:
    """Its "StreamableHTTP session manager started" / "... shutting down" came before the playground's banner and
    after it on every stop (a new user's trial); its warnings still show."""
    manager = logging.getLogger("mcp.server.streamable_http_manager")
    try:
        for level, info_shown in (("INFO", False), ("DEBUG", True)):
            out = io.StringIO()
            configure_logging(level, stream=out)
            manager.info("StreamableHTTP session manager started")
            manager.warning("a warning of its own")
            logged = out.getvalue()
            assert ("session manager started" in logged) is info_shown and "a warning of its own" in logged, logged
    finally:
        configure_logging("WARNING")
        manager.setLevel(logging.NOTSET)
