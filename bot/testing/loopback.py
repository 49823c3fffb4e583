"""A stand-in for a server the tests need only one answer of (a Slack API method, a Chat Completions endpoint
answering oddly): :func:`one_route`, an aiohttp server on a loopback port it picks itself."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

from aiohttp import web

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@contextlib.asynccontextmanager
async def one_route(path: str, handler: Handler, *, method: str = "POST") -> AsyncIterator[str]:
    """Serve ``handler`` for ``method path`` on 127.0.0.1 (a port of the kernel's choosing) and yield its base URL,
    ``http://127.0.0.1:PORT`` (the path not included); stopped on exit."""
    app = web.Application()
    app.router.add_route(method, path, handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()
