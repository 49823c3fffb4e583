"""``python -m bot mcp --http`` as a process of its own for tests, on a port it picks itself (``MCP_PORT=0``): its
address is read from its log line ("MCP server: streamable HTTP at http://127.0.0.1:PORT/mcp"), so no other
process can have taken the port between a test choosing it and the server binding it (a test that picked a
"free" port could end up talking to another test's server)."""

from __future__ import annotations

import asyncio
import contextlib
import re
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

LISTENING = re.compile(r"streamable HTTP at (http://\S+/mcp)")


@dataclass
class McpProcess:
    """A running MCP server process: its ``url``, the ``process``, its log ``lines`` so far."""

    url: str
    process: asyncio.subprocess.Process
    lines: list[str] = field(default_factory=list)


@contextlib.asynccontextmanager
async def mcp_http_process(env: dict[str, str], *, startup: float = 60.0) -> AsyncIterator[McpProcess]:
    """Start ``python -m bot mcp --http`` with ``env`` (``MCP_PORT`` and ``LOG_LEVEL`` set here), yield it once it
    listens (within ``startup`` seconds, else ``AssertionError`` with its log), stop it (SIGTERM) on exit."""
    env = {**env, "MCP_PORT": "0", "LOG_LEVEL": "INFO"}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "mcp", "--http", env=env, stderr=asyncio.subprocess.PIPE
    )
    assert process.stderr is not None
    lines: list[str] = []
    found: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    async def drain() -> None:  # the whole log, so the pipe never fills
        assert process.stderr is not None
        async for raw in process.stderr:
            line = raw.decode(errors="replace")
            lines.append(line)
            if not found.done() and (match := LISTENING.search(line)):
                found.set_result(match.group(1))
        if not found.done():
            found.set_exception(AssertionError(f"the MCP server exited: {''.join(lines)[-2000:]}"))

    reader = asyncio.ensure_future(drain())
    try:
        started = time.monotonic()
        try:
            url = await asyncio.wait_for(asyncio.shield(found), startup)
        except TimeoutError:
            raise AssertionError(f"the MCP server did not listen within {startup:g} s") from None
        assert time.monotonic() - started <= startup
        yield McpProcess(url=url, process=process, lines=lines)
    finally:
        if process.returncode is None:
            process.terminate()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(process.wait(), 10)
        if process.returncode is None:
            process.kill()
        await asyncio.gather(reader, return_exceptions=True)
