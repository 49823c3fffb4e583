"""What the tests of ``python -m bot mcp`` (``tests/mcp_server/``) share:
the harness's bot token for the server processes they start, the start-up budget, and the SDK's client over
streamable HTTP with a bearer token. A test module that declares ``REDIS_ENV: dict[str, str] = {}`` gets it filled
with its real Redis's ``REDIS_URL`` / ``REDIS_CLUSTER`` for those processes (``tests/mcp_server/conftest.py``)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Any

from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

SLACK_TOKEN = "xoxb-test-token-0123456789"  # the harness's (tests/conftest.py TOKEN)
STARTUP_SECONDS = 60  # how long a server process may take to start and ask (a loaded machine is slow): a budget


@contextlib.asynccontextmanager
async def bearer_client(
    url: str, token: str, *, extensions: Sequence[Any] = (), client_info: Any = None
) -> AsyncIterator[Client]:
    """The SDK's client over streamable HTTP to ``url`` with ``Authorization: Bearer token``, declaring
    ``extensions`` (e.g. :class:`bot.mcp_server.tasks.TasksClient`), named ``client_info`` when given."""
    named = {"client_info": client_info} if client_info is not None else {}
    async with (
        create_mcp_http_client(headers={"Authorization": f"Bearer {token}"}) as http,
        streamable_http_client(url, http_client=http) as streams,
        Client(contextlib.nullcontext(streams), mode="auto", extensions=list(extensions), **named) as client,
    ):
        yield client
