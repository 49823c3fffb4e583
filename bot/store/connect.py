"""Redis clients for the bot: retries with backoff, health checks, and a blocking connection pool.

- Connections broken by an outage (or a Redis restart) are not handed out to fail once each: a connection idle
  longer than ``health_check_interval`` is PINGed before use, and a command that fails with a connection error
  or timeout is retried on a fresh connection with exponential backoff (redis-py's ``Retry``). Resent writes
  are safe: every write this project makes is idempotent under a resend (see :mod:`bot.store.redis_store`).
- A burst waits for a free connection instead of failing (redis-py's default async pool raises
  ``MaxConnectionsError`` at once when it is exhausted).
"""

from __future__ import annotations

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError, TimeoutError


def connect_redis(
    url: str,
    *,
    max_connections: int = 100,
    wait_timeout: float = 30.0,
    socket_timeout: float = 10.0,
    retries: int = 3,
    health_check_interval: float = 5.0,
) -> aioredis.Redis:
    """A ``redis.asyncio.Redis`` for ``url``: at most ``max_connections`` connections (a command waits up to
    ``wait_timeout`` seconds for a free one, then ``redis.exceptions.ConnectionError``); connection errors and
    timeouts retried ``retries`` times with backoff (50 ms doubling, at most 1 s); idle connections checked
    after ``health_check_interval`` seconds. Times in seconds."""
    pool = aioredis.BlockingConnectionPool.from_url(
        url,
        max_connections=max_connections,
        timeout=wait_timeout,
        socket_timeout=socket_timeout,
        socket_connect_timeout=5.0,
        retry=Retry(ExponentialBackoff(cap=1.0, base=0.05), retries),
        retry_on_error=[ConnectionError, TimeoutError],
        health_check_interval=health_check_interval,
    )
    return aioredis.Redis(connection_pool=pool)
