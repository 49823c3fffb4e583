"""``GET /metrics``, ``/healthz`` and ``/readyz``: with ``METRICS_PORT`` on a server of their own at
``METRICS_HOST:METRICS_PORT`` (default host 127.0.0.1: loopback), in every kind of process (``serve``, ``web``,
``worker``, ``mcp``, the playground); on the HTTP server's ``PORT`` beside ``POST /slack/events`` while
``METRICS_PORT`` is unset, or when ``METRICS_ON_PORT=true`` (:attr:`bot.config.Settings.ops_on_port`).

- ``/healthz``: ``200 {"status": "ok"}`` while the event loop runs (it answers at all);
- ``/readyz``: ``200 {"status": "ready"}`` when Redis answers ``PING`` (within 1 s, asked at each request) and
  Slack's ``auth.test`` passed within the last :data:`SLACK_FRESH_SECONDS` (checked at the first ``/readyz``, then
  again when stale, a failed result at most every :data:`SLACK_RETRY_SECONDS`; a request waits for a running check
  at most :data:`SLACK_WAIT_SECONDS`, then answers from the last result, so a hanging Slack or Redis never makes
  ``/readyz`` slower than about a second, a probe's usual timeout); else ``503 {"status": "not ready",
  "reason": "..."}`` (a short reason: ``redis: ...`` or ``slack auth.test: <error>``; never a secret);
- ``/metrics``: Prometheus text (:func:`bot.ops.metrics.exposition`), the queue's gauges read at scrape time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field

import redis.asyncio as aioredis
from aiohttp import web
from prometheus_client.registry import Collector
from redis.exceptions import RedisError
from slack_sdk.web.async_client import AsyncWebClient

from bot.errors import describe_os_error
from bot.ops import metrics as m
from bot.ops.observe import slack_error_code

REDIS_PING_SECONDS = 1.0
SLACK_CHECK_SECONDS = 5.0
SLACK_FRESH_SECONDS = 300.0
SLACK_RETRY_SECONDS = 30.0
SLACK_WAIT_SECONDS = 1.0  # a /readyz waits this long for a running auth.test (the check goes on in the background)
NOT_CHECKED = "not checked yet"

log = logging.getLogger(__name__)


@dataclass
class Health:
    """What ``/readyz`` checks: ``redis`` answers PING, ``slack``'s token passes ``auth.test``."""

    redis: aioredis.Redis
    slack: AsyncWebClient | None = None
    _slack_ok_at: float | None = field(default=None, init=False)
    _slack_checked_at: float | None = field(default=None, init=False)
    _slack_problem: str | None = field(default=NOT_CHECKED, init=False)
    _slack_checking: asyncio.Future[str | None] | None = field(default=None, init=False, repr=False)

    async def check_slack(self) -> str | None:
        """Call ``auth.test`` now; returns the problem (``"invalid_auth"``...) or None, and remembers it. A change
        between passing and failing is logged (one line)."""
        if self.slack is None:
            self._slack_problem = None
            return None
        before = self._slack_problem
        try:
            await asyncio.wait_for(self.slack.auth_test(), SLACK_CHECK_SECONDS)
        except TimeoutError:
            self._slack_problem = "no answer"
        except Exception as exc:  # SlackApiError, connection errors
            self._slack_problem = slack_error_code(exc)
        else:
            self._slack_problem = None
            self._slack_ok_at = time.monotonic()
        self._slack_checked_at = time.monotonic()
        if self._slack_problem and self._slack_problem != before:
            log.warning("readiness: Slack auth.test failed (%s); /readyz answers 503", self._slack_problem)
        elif self._slack_problem is None and before not in (None, NOT_CHECKED):
            log.info("readiness: Slack auth.test passes again")
        return self._slack_problem

    async def _slack_state(self) -> str | None:
        now = time.monotonic()
        if self._slack_ok_at is not None and now - self._slack_ok_at < SLACK_FRESH_SECONDS:
            return None
        if self._slack_checked_at is None or now - self._slack_checked_at >= SLACK_RETRY_SECONDS:
            if self._slack_checking is None or self._slack_checking.done():  # one check at a time
                self._slack_checking = asyncio.ensure_future(self.check_slack())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._slack_checking), SLACK_WAIT_SECONDS)
        return self._slack_problem

    async def problem(self) -> str | None:
        """Why the process is not ready (``redis: ...`` / ``slack auth.test: ...``), or None."""
        redis, slack = await asyncio.gather(self._redis_problem(), self._slack_state())  # both at once
        if redis:
            return redis
        return f"slack auth.test: {slack}" if slack else None

    async def _redis_problem(self) -> str | None:
        try:
            await asyncio.wait_for(self.redis.ping(), REDIS_PING_SECONDS)
        except TimeoutError:
            return "redis: no answer to PING"
        except (RedisError, OSError) as exc:
            return f"redis: {describe_os_error(exc)}"
        return None


@dataclass
class OpsEndpoints:
    """The handlers; ``health`` None answers ``/readyz`` from the event loop alone, ``queue`` adds its gauges."""

    health: Health | None = None
    queue: m.QueueGauges | None = None

    async def healthz(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def readyz(self, request: web.Request) -> web.Response:
        problem = await self.health.problem() if self.health is not None else None
        if problem:
            return web.json_response({"status": "not ready", "reason": problem}, status=503)
        return web.json_response({"status": "ready"})

    async def metrics(self, request: web.Request) -> web.Response:
        collectors: list[Collector] = []
        if self.queue is not None:
            await self.queue.refresh()
            collectors.append(self.queue)
        body = m.exposition(collectors)
        return web.Response(body=body, headers={"Content-Type": m.CONTENT_TYPE})

    def add_routes(self, app: web.Application) -> None:
        """Serve ``/metrics``, ``/healthz`` and ``/readyz`` on ``app``."""
        app.router.add_get("/metrics", self.metrics)
        app.router.add_get("/healthz", self.healthz)
        app.router.add_get("/readyz", self.readyz)


async def start_ops_server(ops: OpsEndpoints, *, host: str, port: int) -> tuple[web.AppRunner, int]:
    """Serve ``ops`` alone on ``host:port`` (0: a free port); returns the runner (``cleanup()`` stops it) and the
    port. Raises ``OSError`` when the port can't be listened on."""
    app = web.Application()
    ops.add_routes(app)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    try:
        await site.start()
    except OSError:
        await runner.cleanup()
        raise
    return runner, int(runner.addresses[0][1])
