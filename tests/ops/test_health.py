"""``/healthz``, ``/readyz`` and ``/metrics`` over HTTP: on the HTTP server's port, on ``METRICS_PORT`` for processes
without one (``worker``, Socket Mode), and the split mode's queue gauges read from Redis at scrape time."""

from __future__ import annotations

import asyncio
import json
import socket
from typing import Any

import fakeredis
import pytest
import redis.asyncio as aioredis
from slack_sdk.web.async_client import AsyncWebClient

from bot.fakeslack import Workspace
from bot.ops.metrics import QueueGauges
from bot.ops.server import Health, OpsEndpoints, start_ops_server
from bot.store import Keys
from bot.store.work_queue import GROUP, WorkQueue
from bot.testing.scrape import get, scrape
from bot.testing.slack_scenarios import ALICE, GENERAL
from tests.slack.test_serve_process import (
    APP_TOKEN,
    TOKEN,
    complete_env,
    error_lines,
    free_port,
    read_until,
    run_bot,
    start_bot,
)
from tests.slack.test_serve_process import stop as stop_bot


def base(process: Any) -> str:
    return str(process.url).removesuffix("/slack/events")


async def test_healthz_and_readyz_answer_on_the_http_server(fake_redis: aioredis.Redis, harness: Any) -> None:
    async with harness(fake_redis) as h:
        alive, alive_body, _ = await get(base(h.processes[0]), "/healthz")
        status, body, _ = await get(base(h.processes[0]), "/readyz")
    assert (alive, json.loads(alive_body)) == (200, {"status": "ok"})
    assert (status, json.loads(body)) == (200, {"status": "ready"})


async def test_readyz_is_503_while_redis_does_not_answer(harness: Any) -> None:
    dead = aioredis.from_url(f"redis://127.0.0.1:{free_port()}/0")  # nothing listens there
    try:
        async with harness(dead) as h:
            url = base(h.processes[0])
            status, body, _ = await get(url, "/readyz")
            alive, _, _ = await get(url, "/healthz")
    finally:
        await dead.aclose()
    assert status == 503 and alive == 200
    assert json.loads(body) == {"status": "not ready", "reason": "redis: Connection refused"}


async def test_readyz_is_503_while_slack_refuses_the_token(fake_redis: aioredis.Redis) -> None:
    async with Workspace(bot_token=TOKEN) as ws:
        for token, expected in (("xoxb-not-this-one", 503), (TOKEN, 200)):
            client = AsyncWebClient(token=token, base_url=ws.api_url)
            runner, port = await start_ops_server(
                OpsEndpoints(health=Health(fake_redis, slack=client)), host="127.0.0.1", port=0
            )
            try:
                status, body, _ = await get(f"http://127.0.0.1:{port}", "/readyz")
            finally:
                await runner.cleanup()
            assert status == expected, body
            if expected == 503:
                assert json.loads(body) == {"status": "not ready", "reason": "slack auth.test: invalid_auth"}
                assert token not in body


async def test_queue_gauges_are_read_from_redis_at_scrape_time(fake_redis: aioredis.Redis, prefix: str) -> None:
    keys = Keys(prefix)
    queue = WorkQueue(fake_redis, keys=keys)
    ops = OpsEndpoints(queue=QueueGauges(queue))
    runner, port = await start_ops_server(ops, host="127.0.0.1", port=0)
    url = f"http://127.0.0.1:{port}"
    try:
        empty = await scrape(url)
        for n in range(3):
            await queue.enqueue({"fn": "f", "body": {"n": n}})
        await asyncio.sleep(0.05)
        queued = await scrape(url)
        await fake_redis.xgroup_create(keys.work(), GROUP, id="0", mkstream=True)
        await fake_redis.xreadgroup(GROUP, "w1", {keys.work(): ">"}, count=2)
        taken = await scrape(url)
    finally:
        await runner.cleanup()
    assert empty.get("askbot_queue_jobs") == 0 and empty.get("askbot_queue_oldest_job_age_seconds") == 0
    assert queued.get("askbot_queue_jobs") == 3 and queued.get("askbot_queue_pending_jobs") == 0
    assert 0.04 <= queued.get("askbot_queue_oldest_job_age_seconds") < 30
    assert taken.get("askbot_queue_jobs") == 3 and taken.get("askbot_queue_pending_jobs") == 2


async def test_web_and_worker_report_the_same_queue_depth(
    fake_server: fakeredis.FakeServer, harness: Any, prefix: str
) -> None:
    client = fakeredis.FakeAsyncRedis(server=fake_server)
    async with harness(client) as h:
        web = await h.start_process(fakeredis.FakeAsyncRedis(server=fake_server), role="web")
        worker = await h.start_process(fakeredis.FakeAsyncRedis(server=fake_server), role="worker")
        h.route_to(web)
        await h.ws.mention(ALICE, GENERAL, "queued, no worker consuming")
        await h.settle()
        from_web, from_worker = await scrape(base(web)), await scrape(base(worker))
    assert from_web.get("askbot_queue_jobs") == from_worker.get("askbot_queue_jobs") == 1


# --- METRICS_PORT in processes without an HTTP server ------------------------------------------


async def ops_of(port: int) -> tuple[int, int, str]:
    """(healthz status, readyz status, /metrics text) of the process serving ``port``."""
    url = f"http://127.0.0.1:{port}"
    alive, _, _ = await get(url, "/healthz")
    ready, _, _ = await get(url, "/readyz")
    status, text, _ = await get(url, "/metrics")
    assert status == 200
    return alive, ready, text


@pytest.mark.real_redis
@pytest.mark.redis_kinds("single")  # start-up and endpoints, no store behaviour
async def test_a_worker_serves_metrics_health_and_readiness_on_metrics_port(real_redis: Any, prefix: str) -> None:
    metrics_port = free_port()
    async with Workspace(bot_token=TOKEN) as ws:
        env = complete_env(
            SLACK_API_URL=ws.api_url, REDIS_PREFIX=prefix, METRICS_PORT=str(metrics_port), LOG_LEVEL="info"
        )
        proc = await start_bot("worker", env=env)
        try:
            await read_until(proc, "metrics: GET /metrics")
            alive, ready, text = await ops_of(metrics_port)
        finally:
            rest = await stop_bot(proc)
    assert (alive, ready) == (200, 200), rest
    assert "askbot_queue_jobs " in text and "askbot_runs_in_flight " in text
    assert proc.returncode == 0, rest
    assert TOKEN not in rest


@pytest.mark.real_redis
@pytest.mark.redis_kinds("single")  # start-up and endpoints, no store behaviour
async def test_socket_mode_serves_metrics_health_and_readiness_on_metrics_port(real_redis: Any, prefix: str) -> None:
    metrics_port = free_port()
    async with Workspace(bot_token=TOKEN, transport="socket", app_token=APP_TOKEN) as ws:
        env = complete_env(
            SLACK_APP_TOKEN=APP_TOKEN,
            SLACK_API_URL=ws.api_url,
            REDIS_PREFIX=prefix,
            METRICS_PORT=str(metrics_port),
            LOG_LEVEL="info",
        )
        del env["SLACK_SIGNING_SECRET"]
        proc = await start_bot("serve", env=env)
        try:
            await read_until(proc, "Socket Mode: connected")
            alive, ready, text = await ops_of(metrics_port)
        finally:
            rest = await stop_bot(proc)
    assert (alive, ready) == (200, 200), rest
    assert "# TYPE askbot_slack_api_calls_total counter" in text
    assert 'askbot_slack_api_calls_total{method="auth.test"}' in text  # the start-up check, through the bot's client
    assert proc.returncode == 0, rest


CLASH = (
    "error: METRICS_PORT is PORT: give /metrics, /healthz and /readyz a port of their own, or unset METRICS_PORT"
    " (PORT serves them then)"
)


def test_metrics_port_equal_to_the_http_port_is_refused() -> None:
    [line] = error_lines(run_bot("serve", env=complete_env(PORT="3555", METRICS_PORT="3555")))
    assert line == CLASH


def test_metrics_port_equal_to_the_http_port_is_told_with_the_other_settings_in_one_round() -> None:
    """Found by a break-it review: the clash was checked after everything else, so a setup with another problem took
    two rounds to fix. Now one: with a setting not set, and with another's bad value; a worker (no HTTP) is not told."""
    env = complete_env(PORT="3555", METRICS_PORT="3555")
    del env["OPENAI_API_KEY"]
    lines = error_lines(run_bot("serve", env=env))
    assert lines[0] == CLASH and lines[1].startswith("error: not set: OPENAI_API_KEY"), lines
    lines = error_lines(run_bot("serve", env={**env, "ASK_TTL_SECONDS": "soon"}))
    assert CLASH in lines and any(line.startswith("error: ASK_TTL_SECONDS") for line in lines), lines
    lines = error_lines(run_bot("worker", env=env))
    assert CLASH not in lines and lines[0].startswith("error: not set: OPENAI_API_KEY"), lines


@pytest.mark.real_redis
@pytest.mark.redis_kinds("single")  # start-up and endpoints, no store behaviour
async def test_the_mcp_server_serves_metrics_health_and_readiness_on_metrics_port(real_redis: Any, prefix: str) -> None:
    metrics_port = free_port()
    async with Workspace(bot_token=TOKEN) as ws:
        env = complete_env(
            SLACK_API_URL=ws.api_url,
            REDIS_PREFIX=prefix,
            METRICS_PORT=str(metrics_port),
            MCP_PORT=str(free_port()),
            MCP_TOKEN="mcp-test-token-0123456789abcdef",
            LOG_LEVEL="info",
        )
        proc = await start_bot("mcp", "--http", env=env)
        try:
            await read_until(proc, "metrics: GET /metrics")
            alive, ready, text = await ops_of(metrics_port)
        finally:
            rest = await stop_bot(proc)
    assert (alive, ready) == (200, 200), rest
    assert 'askbot_slack_api_calls_total{method="auth.test"}' in text


async def test_readyz_stays_fast_while_slack_hangs(fake_redis: aioredis.Redis) -> None:
    """A Slack that accepts auth.test and never answers: /readyz answers 503 within about a second (a probe's usual
    timeout), not after the 5 s the check itself may take; a later /readyz tells the check's outcome."""
    from aiohttp import web

    from bot.testing.loopback import one_route

    async def hang(request: web.Request) -> web.Response:
        await asyncio.sleep(8)
        return web.json_response({"ok": True})

    async with one_route("/api/auth.test", hang) as slack_url:
        client = AsyncWebClient(token=TOKEN, base_url=f"{slack_url}/api/")
        ops = OpsEndpoints(health=Health(fake_redis, slack=client))
        runner, port = await start_ops_server(ops, host="127.0.0.1", port=0)
        loop = asyncio.get_running_loop()
        try:
            started = loop.time()
            first = await asyncio.gather(*(get(f"http://127.0.0.1:{port}", "/readyz") for _ in range(5)))
            took = loop.time() - started
            await asyncio.sleep(5.5)  # the check gives up (SLACK_CHECK_SECONDS)
            later, later_body, _ = await get(f"http://127.0.0.1:{port}", "/readyz")
        finally:
            await runner.cleanup()
    assert took < 1.8, took
    assert {status for status, _, _ in first} == {503}
    assert json.loads(first[0][1])["reason"].startswith("slack auth.test: ")
    assert (later, json.loads(later_body)["reason"]) == (503, "slack auth.test: no answer")


async def test_a_malformed_request_is_answered_400_and_logged_in_one_line(fake_redis: aioredis.Redis) -> None:
    """A request with a 20 KB header (or any malformed HTTP): 400, and one INFO line, not an ERROR traceback per
    request (anyone reaching the port could fill the log)."""
    import io
    import logging

    from bot.logs import configure_logging

    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    stream = io.StringIO()
    handler = configure_logging("info", "text", stream=stream)
    runner, port = await start_ops_server(OpsEndpoints(health=Health(fake_redis)), host="127.0.0.1", port=0)
    try:
        for _ in range(3):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 20000 + b"\r\n\r\n")
            await writer.drain()
            status_line = await reader.readline()
            writer.close()
            assert status_line.split()[1:2] == [b"400"], status_line
        await asyncio.sleep(0.1)
    finally:
        await runner.cleanup()
        root.removeHandler(handler)
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
    text = stream.getvalue()
    assert "Traceback" not in text and "ERROR" not in text, text
    assert text.count("bad HTTP request (LineTooLong), answered 400") == 3, text


# --- where each server listens: a host setting each, loopback unless it must be public -----------------------
# On Linux all of 127.0.0.0/8 is loopback: a server bound to 0.0.0.0 answers on 127.0.0.2 too, one bound to
# 127.0.0.1 does not. That tells "all interfaces" from "loopback only" without a second network interface.

OTHER_ADDRESS = "127.0.0.2"


async def answers(host: str, port: int) -> bool:
    """Whether something accepts a TCP connection on ``host:port``."""
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 5)
    except OSError:
        return False
    writer.close()
    return True


@pytest.mark.real_redis
@pytest.mark.redis_kinds("single")  # start-up and endpoints, no store behaviour
async def test_with_metrics_port_the_ops_endpoints_are_on_loopback_and_off_the_public_port(
    real_redis: Any, prefix: str
) -> None:
    """/metrics, /healthz and /readyz shared the public PORT with /slack/events, and METRICS_PORT listened on every
    interface: with METRICS_PORT they are on METRICS_HOST (127.0.0.1) alone; METRICS_ON_PORT=true keeps PORT's."""
    port, metrics_port = free_port(), free_port()
    async with Workspace(bot_token=TOKEN) as ws:
        env = complete_env(
            SLACK_API_URL=ws.api_url,
            REDIS_PREFIX=prefix,
            PORT=str(port),
            METRICS_PORT=str(metrics_port),
            LOG_LEVEL="info",
        )
        proc = await start_bot("serve", env=env)
        started: list[str] = []
        try:
            started = await read_until(proc, "HTTP mode")
            alive, ready, text = await ops_of(metrics_port)
            on_other = await answers(OTHER_ADDRESS, metrics_port)
            public = [(await get(f"http://127.0.0.1:{port}", path))[0] for path in ("/metrics", "/healthz")]
            events_public = await answers(OTHER_ADDRESS, port)  # HTTP_HOST's default: Slack must reach it
        finally:
            rest = "\n".join(started) + "\n" + await stop_bot(proc)
        assert (alive, ready) == (200, 200), rest
        assert "askbot_runs_in_flight " in text
        assert not on_other  # loopback only
        assert public == [404, 404]
        assert events_public
        assert f"on http://127.0.0.1:{metrics_port}" in rest

        env["METRICS_ON_PORT"] = "true"
        proc = await start_bot("serve", env=env)
        try:
            await read_until(proc, "HTTP mode")
            both = [(await get(f"http://127.0.0.1:{p}", "/healthz"))[0] for p in (port, metrics_port)]
        finally:
            await stop_bot(proc)
        assert both == [200, 200]


@pytest.mark.real_redis
@pytest.mark.redis_kinds("single")  # start-up and endpoints, no store behaviour
async def test_the_public_port_keeps_its_ops_endpoints_without_metrics_port_and_http_host_is_honoured(
    real_redis: Any, prefix: str
) -> None:
    """Backward compatible: without METRICS_PORT the HTTP server still answers /healthz on PORT (probes); HTTP_HOST
    binds /slack/events to one address."""
    port = free_port()
    async with Workspace(bot_token=TOKEN) as ws:
        env = complete_env(SLACK_API_URL=ws.api_url, REDIS_PREFIX=prefix, PORT=str(port), HTTP_HOST="127.0.0.1")
        proc = await start_bot("serve", env=env)
        try:
            await read_until(proc, "HTTP mode")
            alive, _, _ = await get(f"http://127.0.0.1:{port}", "/healthz")
            on_other = await answers(OTHER_ADDRESS, port)
        finally:
            await stop_bot(proc)
    assert alive == 200 and not on_other


@pytest.mark.parametrize(
    ("extra", "line"),
    [
        ({"HTTP_HOST": "not a host!"}, "HTTP_HOST: must be an IP address to listen on"),
        ({"MCP_HOST": "256.1.1.1"}, "MCP_HOST: must be an IP address to listen on"),
        ({"METRICS_HOST": "10.255.255.254"}, "cannot listen on 10.255.255.254: not an address of this machine"),
    ],
)
def test_a_host_setting_that_is_no_address_here_is_refused_naming_it(extra: dict[str, str], line: str) -> None:
    env = complete_env(METRICS_PORT=str(free_port()), **extra)
    lines = error_lines(run_bot("worker", env=env, timeout=30))
    assert any(line in one for one in lines), lines
    if "cannot listen" in line:
        assert lines[-1].endswith("set METRICS_HOST")


@pytest.mark.real_redis
@pytest.mark.redis_kinds("single")  # start-up checks, no store behaviour
async def test_mcp_over_http_on_a_taken_port_or_a_foreign_address_is_refused_naming_the_setting(
    real_redis: Any, prefix: str
) -> None:
    """uvicorn, binding the port itself, logged the error and exited the process (no ``error:`` line)."""
    async with Workspace(bot_token=TOKEN) as ws:
        base_env = complete_env(SLACK_API_URL=ws.api_url, REDIS_PREFIX=prefix, MCP_TOKEN="mcp-test-token-0123456789abc")
        with socket.socket() as held:
            held.bind(("127.0.0.1", 0))
            held.listen()
            taken = held.getsockname()[1]
            out = await asyncio.to_thread(run_bot, "mcp", "--http", env={**base_env, "MCP_PORT": str(taken)})
        foreign = {**base_env, "MCP_PORT": str(free_port()), "MCP_HOST": "10.255.255.254"}
        out_host = await asyncio.to_thread(run_bot, "mcp", "--http", env=foreign)
    assert error_lines(out)[-1] == (
        f"error: cannot listen on port {taken}: it is in use by another process; stop it or set MCP_PORT"
    )
    line = error_lines(out_host)[-1]
    assert line.startswith("error: cannot listen on 10.255.255.254: not an address of this machine"), line
    assert line.endswith("set MCP_HOST")
