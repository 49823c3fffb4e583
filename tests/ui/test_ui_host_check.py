"""The playground UI answers only requests addressed to loopback (the DNS-rebinding defence).

A page that rebinds its own name to 127.0.0.1 sends same-origin requests with ``Host: evil.example``: every
route, pages included, refuses them (421) before doing anything; requests to 127.0.0.1, localhost or [::1]
(on the UI's port, or with no port) work as before.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import aiohttp
import pytest

from bot.config import Settings
from bot.playground.host_check import is_loopback_host
from bot.playground.launcher import Playground

SAY = {"user": "U_ALICE", "channel": "C_GENERAL", "text": "<@U_BOT> deploy"}
ROUTES = [("GET", "/"), ("GET", "/static/app.js"), ("GET", "/api/state"), ("GET", "/api/events")] + [
    ("POST", f"/api/{name}") for name in ("say", "click", "toggle", "select", "submit_view", "close_view")
]


@pytest.fixture
async def pg() -> AsyncIterator[Playground]:
    settings = Settings(slack_bot_token=None, openai_api_key=None, redis_url=None, port=0, mcp_port=0)
    async with Playground(settings, ui_port=0) as playground:
        yield playground


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=15)) as session:
        yield session


def port_of(pg: Playground) -> int:
    port = urlsplit(pg.url).port
    assert port is not None
    return port


async def status(http: aiohttp.ClientSession, pg: Playground, method: str, path: str, host: str) -> int:
    """One request to the UI server with ``Host: host`` (and, for POSTs, the matching ``Origin``)."""
    headers = {"Host": host}
    kwargs = {}
    if method == "POST":
        headers["Origin"] = f"http://{host}"
        kwargs = {"json": SAY}
    async with http.request(method, f"{pg.url.rstrip('/')}{path}", headers=headers, **kwargs) as response:
        if response.status == 421:
            assert response.headers["X-Content-Type-Options"] == "nosniff"
            body = await response.json()
            assert body["ok"] is False and host not in body["error"]
        return response.status


async def test_every_route_refuses_a_host_that_is_not_loopback_and_nothing_is_posted(
    pg: Playground, http: aiohttp.ClientSession
) -> None:
    port = port_of(pg)
    foreign = [
        "evil.example",
        f"evil.example:{port}",
        f"127.0.0.1.evil.example:{port}",
        f"localhost.evil.example:{port}",
        f"0.0.0.0:{port}",
        f"127.0.0.2:{port}",
        f"127.0.0.1:{port + 1}",
        f"localhost:{port}0",
        f"[::1]:{port + 1}",
        f"[::ffff:127.0.0.1]:{port}",
    ]
    statuses = {
        (method, path, host): await status(http, pg, method, path, host) for method, path in ROUTES for host in foreign
    }
    assert set(statuses.values()) == {421}, {k: v for k, v in statuses.items() if v != 421}
    await asyncio.sleep(0.2)
    assert pg.workspace is not None and pg.workspace.messages("C_GENERAL") == []


async def test_a_request_without_host_is_refused(pg: Playground) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port_of(pg))
    try:
        writer.write(b"GET /api/state HTTP/1.0\r\n\r\n")
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(), 5)
    finally:
        writer.close()
    assert answer.split(b"\r\n", 1)[0].split(b" ")[1] == b"421"


async def test_loopback_hosts_still_work(pg: Playground, http: aiohttp.ClientSession) -> None:
    port = port_of(pg)
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"LocalHost:{port}", f"[::1]:{port}", "127.0.0.1"):
        for method, path in ROUTES[:3]:
            assert await status(http, pg, method, path, host) == 200, (host, path)
    assert await status(http, pg, "POST", "/api/say", f"localhost:{port}") == 200
    assert pg.workspace is not None
    await pg.workspace.wait_for_message(channel="C_GENERAL", predicate=lambda m: m.get("user") == "U_BOT", timeout=10)


def test_is_loopback_host() -> None:
    for host in ("127.0.0.1:3000", "localhost:3000", "LOCALHOST", "[::1]:3000", "[::1]", "127.0.0.1"):
        assert is_loopback_host(host, port=3000), host
    for host in (
        None,
        "",
        "evil.example",
        "::1",
        "[::1]x",
        "localhost:",
        "localhost:3000:3000",
        "localhost:+3000",
        "localhost:\uff13\uff10\uff10\uff10",  # full-width digits
        "127.0.0.1:3001",
        "localhost.",
        "127.1:3000",
    ):
        assert not is_loopback_host(host, port=3000), host
    assert is_loopback_host("localhost:1234", port=None)
