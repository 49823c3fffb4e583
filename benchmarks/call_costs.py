"""CPU of one outside call, the unit cost behind issue 26's CPU per request: a Web API call, a Redis round trip.

Run: ``.venv/bin/python -m benchmarks.call_costs [--calls 3000] [--redis redis://127.0.0.1:6379/0]``

Each call is made ``--calls`` times in a row from this process (uvloop, as ``serve`` runs) after a warm-up, and the
process's CPU time (user + system, ``time.process_time``) is divided by the count. The fake Slack answers in a
process of its own, so its work is not counted. Logging is configured as ``benchmarks.cost``'s processes have it
(``WARNING``, :func:`bot.logs.configure_logging`). Rows, each beside its baseline measured in the same run:

- a Web API call (``chat.postMessage`` with four blocks; ``assistant.threads.setStatus``) through the bot's client
  (``bot.slack.app.web_client``: slack_sdk's ``AsyncWebClient`` on one shared aiohttp session, its retry handlers,
  counted and traced per method), against the same request as a bare aiohttp POST;
- a Redis round trip through the bot's client (``bot.store.connect.connect_redis``: a blocking pool, socket
  timeouts, retries, health checks): one ``GET``, a pipeline of 8 commands, a script (``EVALSHA``), against a
  ``GET`` through redis-py's defaults;
- a click's body (``payload=``, percent-encoded JSON, ~3.8 KB: a question of four buttons) read as the endpoint
  and Bolt read it: Bolt's ``parse_body`` (``urllib`` percent-decoding, in Python), the JSON text kept of that
  parse (``json.dumps``, in ``HttpBoltRequest.parsed``) and the lazy listener's copy read from it
  (``HttpBoltRequest.to_copyable``), against ``json.loads`` of the payload. Before, the copy was a second
  ``parse_body`` (and the same context copy).

Multiply by a request's calls (``benchmarks.request_trace``, ``tests/slack/test_cost_counts.py``) for the CPU its
outside calls cost: the floor under ``benchmarks.cost``'s CPU per request, before any of the bot's own work.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlencode

import aiohttp
import redis.asyncio as aioredis
import uvloop
from slack_bolt.request.internals import parse_body

from benchmarks._util import table
from bot.testing.ports import free_port

TOKEN = "xoxb-call-costs"
BLOCKS = [{"type": "section", "text": {"type": "mrkdwn", "text": "Which environment should I deploy to? " * 4}}] * 4
BUTTONS = [
    {
        "type": "button",
        "action_id": f"ask_option_{i}",
        "text": {"type": "plain_text", "text": f"Option {i}: staging, then production"},
        "value": json.dumps({"run_id": "run_odcgN2X7uBVZ9hfNiEgC5g", "tool_call_id": "call_2de31705830a", "i": i}),
    }
    for i in range(4)
]
CLICK = {  # a block_actions payload as Slack sends it for a click on one of a question's buttons
    "type": "block_actions",
    "user": {"id": "U_ALICE", "username": "alice", "team_id": "T_PLAYGROUND"},
    "team": {"id": "T_PLAYGROUND", "domain": "playground"},
    "channel": {"id": "C_GENERAL", "name": "general"},
    "container": {"type": "message", "message_ts": "1796416842.129130", "channel_id": "C_GENERAL"},
    "trigger_id": "1796416843.1.0123456789abcdef",
    "message": {
        "type": "message",
        "ts": "1796416842.129130",
        "blocks": [*BLOCKS, {"type": "actions", "elements": BUTTONS}],
    },
    "state": {"values": {}},
    "actions": [{**BUTTONS[0], "block_id": "ask", "action_ts": "1796416843.100000"}],
}


async def serve_fake_slack(port: int) -> None:
    """The fake Slack on ``port`` until this process is killed (run in a child: ``--serve-fake-slack PORT``)."""
    from bot.fakeslack import FakeSlack

    async with FakeSlack(bot_token=TOKEN, port=port):
        await asyncio.Event().wait()


async def cpu_per_call(call: Callable[[], Awaitable[Any]], calls: int) -> float:
    """CPU milliseconds of this process per ``await call()``, over ``calls`` calls after ``calls // 10`` warm-up."""
    for _ in range(max(1, calls // 10)):
        await call()
    start = time.process_time()
    for _ in range(calls):
        await call()
    return (time.process_time() - start) * 1000 / calls


async def measure(args: argparse.Namespace, api_url: str) -> list[tuple[str, str, float, float]]:
    from bot.config import load_settings
    from bot.logs import configure_logging
    from bot.slack.app import web_client
    from bot.slack.transport.runner import HttpBoltRequest
    from bot.store.connect import connect_redis

    configure_logging("WARNING")  # as the processes benchmarks.cost starts log (it pins slack_sdk's logger too)

    rows: list[tuple[str, str, float, float]] = []
    session = aiohttp.ClientSession()
    client = web_client(load_settings(slack_bot_token=TOKEN, slack_api_url=api_url))
    posted = await client.chat_postMessage(channel="C_GENERAL", text="thread")
    thread_ts = str(posted["ts"])
    headers = {"Authorization": f"Bearer {TOKEN}"}
    message: dict[str, Any] = {"channel": "C_GENERAL", "text": "hi", "blocks": BLOCKS, "thread_ts": thread_ts}

    async def bare_post() -> None:
        async with session.post(api_url + "chat.postMessage", json=message, headers=headers) as response:
            await response.json()

    async def bot_post() -> None:
        await client.chat_postMessage(**message)

    async def bot_status() -> None:
        await client.assistant_threads_setStatus(channel_id="C_GENERAL", thread_ts=thread_ts, status="is thinking...")

    prefix = f"bench:{uuid.uuid4().hex[:8]}:"
    plain = aioredis.Redis.from_url(args.redis)
    bot_redis = connect_redis(args.redis)
    sha = await bot_redis.script_load("return redis.call('EXISTS', KEYS[1])")

    async def plain_get() -> None:
        await plain.get(prefix + "x")

    async def bot_get() -> None:
        await bot_redis.get(prefix + "x")

    async def bot_pipeline() -> None:
        async with bot_redis.pipeline(transaction=False) as pipe:
            for name, *command in (
                ("zrem", prefix + "z", "a"),
                ("lrem", prefix + "l", 0, "x"),
                ("lpush", prefix + "l", "x"),
                ("ltrim", prefix + "l", 0, 9),
                ("expire", prefix + "l", 60),
                ("delete", prefix + "a"),
                ("delete", prefix + "b"),
                ("get", prefix + "x"),
            ):
                getattr(pipe, name)(*command)
            await pipe.execute()

    async def bot_script() -> None:
        await bot_redis.evalsha(sha, 1, prefix + "x")

    payload = json.dumps(CLICK)
    form = urlencode({"payload": payload})
    form_type = "application/x-www-form-urlencoded"
    request = HttpBoltRequest.parsed(form, parse_body(form, form_type), query="", headers={"content-type": [form_type]})

    async def loads() -> None:
        json.loads(payload)

    async def bolt_parse() -> None:
        parse_body(form, form_type)

    async def snapshot() -> None:
        json.dumps(request.body)

    async def lazy_copy() -> None:
        request.to_copyable()

    # (kind, what, the call): each kind's first row is the baseline the rows after it are divided by
    calls: list[tuple[str, str, Callable[[], Awaitable[Any]]]] = [
        ("Web API", "chat.postMessage, bare aiohttp POST (baseline)", bare_post),
        ("Web API", "chat.postMessage, the bot's client", bot_post),
        ("Web API", "assistant.threads.setStatus, the bot's client", bot_status),
        ("Redis", "GET, redis-py defaults (baseline)", plain_get),
        ("Redis", "GET, the bot's client", bot_get),
        ("Redis", "EVALSHA, the bot's client", bot_script),
        ("Redis", "pipeline of 8 commands, the bot's client", bot_pipeline),
        ("Parse", f"a click's payload, json.loads ({len(payload):,} B) (baseline)", loads),
        ("Parse", f"a click's form body, Bolt's parse_body ({len(form):,} B)", bolt_parse),
        ("Parse", "a click's JSON text kept, json.dumps in HttpBoltRequest.parsed", snapshot),
        ("Parse", "a click's lazy copy, HttpBoltRequest.to_copyable", lazy_copy),
    ]
    try:
        for _ in range(args.rounds):
            baselines: dict[str, float] = {}
            for kind, what, call in calls:
                cpu = await cpu_per_call(call, args.calls)
                baseline = baselines.setdefault(kind, cpu)
                rows.append((kind, what, cpu, cpu / baseline))
    finally:
        await bot_redis.delete(prefix + "l")
        await asyncio.gather(session.close(), client.session.close() if client.session else asyncio.sleep(0))
        await bot_redis.aclose()
        await plain.aclose()
    return rows


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=3000, help="calls of each kind per round")
    parser.add_argument("--rounds", type=int, default=2, help="rounds, each measuring every kind once")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--serve-fake-slack", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_fake_slack:
        await serve_fake_slack(args.serve_fake_slack)
        return 0
    port = free_port()
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "benchmarks.call_costs", "--serve-fake-slack", str(port), stdin=asyncio.subprocess.DEVNULL
    )
    try:
        api_url = f"http://127.0.0.1:{port}/api/"
        async with aiohttp.ClientSession() as probe:
            for _ in range(100):
                try:
                    async with probe.post(api_url + "auth.test", headers={"Authorization": f"Bearer {TOKEN}"}):
                        break
                except aiohttp.ClientConnectionError:
                    await asyncio.sleep(0.1)
        rows = await measure(args, api_url)
    finally:
        child.kill()
        await child.wait()
    print(table(["kind", "call", "CPU ms per call", "/ its baseline"], [(k, c, round(v, 3), r) for k, c, v, r in rows]))
    return 0


if __name__ == "__main__":
    raise SystemExit(uvloop.run(main()))
