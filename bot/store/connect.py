"""Redis clients for the bot: one Redis or a Redis Cluster, with retries, health checks and bounded connections.

:func:`connect_redis` is the one place that decides which client a process uses (``REDIS_CLUSTER``): every
process role (``serve``/``web``/``worker``, the MCP server, the playground with ``REDIS_URL``) goes through it.

- Connections broken by an outage (or a Redis restart) are not handed out to fail once each: a connection idle
  longer than ``health_check_interval`` is PINGed before use, and a command that fails with a connection error
  or timeout is retried on a fresh connection (redis-py's ``Retry``; with exponential backoff on one Redis;
  redis-py 8's cluster client uses the same ``Retry`` for its count only and refreshes the cluster's layout
  before each retry, so a failed-over primary is found). Resent writes are safe: every write this project makes
  is idempotent under a resend (see :mod:`bot.store.redis_store`).
- A burst waits for a free connection instead of failing: redis-py's default async pool raises
  ``MaxConnectionsError`` at once when it is exhausted, and so does its cluster client per node; one Redis gets a
  ``BlockingConnectionPool``, a cluster a client that lets at most ``max_connections`` commands (or pipelines) be
  in flight at once, so no node ever needs more than that many connections.
- On a cluster every Lua script and every ``MULTI`` this project sends touches keys of one slot (hash tags, see
  :mod:`bot.store.keys`; checked by ``tests/store/test_cluster_slots.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from collections.abc import AsyncIterator
from typing import Any, cast

import redis.asyncio as aioredis
from redis.asyncio.cluster import ClusterPipeline, RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError


class _Slots:
    """At most ``size`` holders at once; a waiter gives up after ``wait`` seconds with ``ConnectionError``. A
    command sent while its task (or the task that started it) holds a slot, e.g. a pipeline's command resent after a
    MOVED, passes: it uses the holder's connection budget, one connection per node at a time."""

    def __init__(self, size: int, wait: float) -> None:
        self._free = asyncio.Semaphore(size)
        self._wait = wait
        self._held: contextvars.ContextVar[bool] = contextvars.ContextVar("redis_slot_held", default=False)

    @contextlib.asynccontextmanager
    async def hold(self) -> AsyncIterator[None]:
        """One slot for the block (none taken when this task holds one already)."""
        if self._held.get():
            yield
            return
        try:
            await asyncio.wait_for(self._free.acquire(), self._wait)
        except TimeoutError:
            raise ConnectionError(f"no free Redis connection within {self._wait:.0f} s") from None
        token = self._held.set(True)
        try:
            yield
        finally:
            self._held.reset(token)
            self._free.release()


class _Pipeline(ClusterPipeline):
    """A cluster pipeline whose execution holds one of its client's slots (one connection per node at most)."""

    async def execute(self, raise_on_error: bool = True, allow_redirections: bool = True) -> list[Any]:
        async with cast("WaitingRedisCluster", self.cluster_client).slots.hold():
            return await super().execute(raise_on_error, allow_redirections)


class WaitingRedisCluster(RedisCluster):
    """``redis.asyncio.RedisCluster`` whose commands wait for one of ``slots`` (see the module docstring)."""

    slots: _Slots

    async def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        async with self.slots.hold():
            if self._initialize:  # else redis-py 8.1 routes a new client's first commands by no slot map: each one
                await self.initialize()  # draws a MOVED, and every 5th MOVED closes the connections others are using
            return await super().execute_command(*args, **kwargs)

    def pipeline(self, transaction: Any | None = None, shard_hint: Any | None = None) -> ClusterPipeline:
        if shard_hint:
            raise ValueError("a cluster pipeline takes no shard_hint")
        return _Pipeline(self, transaction)  # type: ignore[abstract]  # as redis-py's own pipeline()


def connect_redis(
    url: str,
    *,
    cluster: bool = False,
    max_connections: int = 100,
    wait_timeout: float = 30.0,
    socket_timeout: float = 10.0,
    retries: int = 3,
    health_check_interval: float = 5.0,
) -> aioredis.Redis:
    """A client for ``url``: a ``redis.asyncio.Redis``, or with ``cluster`` a ``redis.asyncio.RedisCluster``
    (``url`` names any one node, ``redis://`` or ``rediss://``; the client finds the others and follows MOVED/ASK).

    At most ``max_connections`` connections (per node on a cluster; a command waits up to ``wait_timeout`` seconds
    for a free one, then ``redis.exceptions.ConnectionError``); connection errors and timeouts retried ``retries``
    times (on one Redis with backoff, 50 ms doubling, at most 1 s); idle connections checked after
    ``health_check_interval`` seconds. Times in seconds.

    The cluster client is returned typed as ``Redis``: it offers every command, script and pipeline call the stores
    make, with the same replies, so the stores take either. Raises ``redis.exceptions.RedisClusterException`` for a
    cluster URL naming a database other than 0 or a unix socket.
    """
    retry = Retry(ExponentialBackoff(cap=1.0, base=0.05), retries)
    if cluster:
        client = WaitingRedisCluster.from_url(
            url,
            max_connections=max_connections,
            socket_timeout=socket_timeout,
            socket_connect_timeout=5.0,
            retry=retry,
            retry_on_error=[ConnectionError, RedisTimeoutError],
            health_check_interval=health_check_interval,
        )
        assert isinstance(client, WaitingRedisCluster)  # from_url builds cls
        client.slots = _Slots(max_connections, wait_timeout)
        return cast(aioredis.Redis, client)
    pool = aioredis.BlockingConnectionPool.from_url(
        url,
        max_connections=max_connections,
        timeout=wait_timeout,
        socket_timeout=socket_timeout,
        socket_connect_timeout=5.0,
        retry=retry,
        retry_on_error=[ConnectionError, RedisTimeoutError],
        health_check_interval=health_check_interval,
    )
    return aioredis.Redis(connection_pool=pool)
