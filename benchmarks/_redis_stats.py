"""Redis traffic of a benchmark window: commands by name and bytes in and out, from ``INFO`` on a Redis that only
the bot under test uses (``own_redis`` starts one), so the counts are the bot's own."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import subprocess
import tempfile
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass

import redis.asyncio as aioredis


@dataclass(frozen=True)
class RedisTraffic:
    """Totals since the server started: ``commands`` by name (``INFO commandstats``' ``calls``; a Lua script's own
    calls are counted too, under their names, beside its ``evalsha``), ``bytes_in`` / ``bytes_out`` (``INFO
    stats`` ``total_net_input_bytes`` / ``total_net_output_bytes``), ``reads``: the server's read events (``INFO
    stats`` ``total_reads_processed``, Redis 6+; 0 where absent): one per request a client writes and then waits
    for (a pipeline or a MULTI/EXEC batch written at once is one), so its round trips, plus one per connection
    closed."""

    commands: Counter[str]
    bytes_in: int
    bytes_out: int
    reads: int = 0

    def __sub__(self, before: RedisTraffic) -> RedisTraffic:
        return RedisTraffic(
            self.commands - before.commands,
            self.bytes_in - before.bytes_in,
            self.bytes_out - before.bytes_out,
            self.reads - before.reads,
        )


async def traffic(url: str) -> RedisTraffic:
    """The server's totals now (one ``INFO commandstats`` and one ``INFO stats``, counted in themselves)."""
    client = aioredis.from_url(url)
    try:
        stats = await client.info("commandstats")
        net = await client.info("stats")
    finally:
        await client.aclose()
    commands = Counter({name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()})
    return RedisTraffic(
        commands,
        int(net["total_net_input_bytes"]),
        int(net["total_net_output_bytes"]),
        int(net.get("total_reads_processed", 0)),
    )


async def used_memory(url: str) -> int:
    """The server's ``INFO memory`` ``used_memory`` (bytes)."""
    client = aioredis.from_url(url)
    try:
        return int((await client.info("memory"))["used_memory"])
    finally:
        await client.aclose()


@contextlib.asynccontextmanager
async def own_redis() -> AsyncIterator[str]:
    """A ``redis-server`` of its own on a free loopback port (no persistence) for the ``with`` block; yields its URL."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    with tempfile.TemporaryDirectory(prefix="bench-redis-") as tmp:
        proc = await asyncio.create_subprocess_exec(
            *("redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"),
            *("--dir", tmp),
            stdout=subprocess.DEVNULL,
        )
        url = f"redis://127.0.0.1:{port}/0"
        try:
            client = aioredis.from_url(url)
            for _ in range(100):
                with contextlib.suppress(Exception):
                    if await client.ping():
                        break
                await asyncio.sleep(0.05)
            await client.aclose()
            yield url
        finally:
            proc.terminate()
            await proc.wait()
