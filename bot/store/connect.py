"""Redis clients for the bot: a blocking connection pool, so a burst waits for a connection instead of
failing (redis-py's default async pool raises ``MaxConnectionsError`` at once when it is exhausted)."""

from __future__ import annotations

import redis.asyncio as aioredis


def connect_redis(
    url: str, *, max_connections: int = 100, wait_timeout: float = 30.0, socket_timeout: float = 10.0
) -> aioredis.Redis:
    """A ``redis.asyncio.Redis`` for ``url`` with at most ``max_connections`` connections; a command waits
    up to ``wait_timeout`` seconds for a free one (then ``redis.exceptions.ConnectionError``)."""
    pool = aioredis.BlockingConnectionPool.from_url(
        url,
        max_connections=max_connections,
        timeout=wait_timeout,
        socket_timeout=socket_timeout,
        socket_connect_timeout=5.0,
    )
    return aioredis.Redis(connection_pool=pool)
