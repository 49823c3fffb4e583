"""The Redis commands and Web API calls of one mention and of one click, in order: where a request's round trips go.

Run: ``.venv/bin/python -m benchmarks.request_trace [--split]``

The bot runs as deployed (``python -m bot serve``, or ``web`` + ``worker`` with ``--split``) against the fake Slack,
the loopback model of ``benchmarks.ack_latency`` (a mention -> an ``ask_user`` single_select question; a click -> a
short reply) and a Redis of its own (``MONITOR`` on it sees only the bot). After a warm-up mention and click (Bolt's
``auth.test``, connections, script loads), one mention and then one click on its question are traced: each Redis
command (a pipeline's commands are marked as one round trip by their shared timestamp burst; a Lua script's inner
commands are listed under its ``EVALSHA``) and each Web API method, with counts at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import uuid
from collections import Counter
from pathlib import Path

import aiohttp
import redis.asyncio as aioredis

from benchmarks._redis_stats import own_redis
from benchmarks.ack_latency import (
    BOT_TOKEN,
    NO_LIMIT,
    SIGNING_SECRET,
    Child,
    Load,
    Model,
    question_messages,
    settle,
    spawn,
)
from bot.fakeslack.workspace import Workspace
from bot.testing.openai_server import FakeOpenAI
from bot.testing.ports import free_port


async def monitor(url: str, into: list[tuple[float, str, str]], ready: asyncio.Event) -> None:
    """Append ``(time, client, command)`` for every command the server runs (``MONITOR``) until cancelled."""
    client = aioredis.from_url(url)
    try:
        async with client.monitor() as m:
            ready.set()
            async for item in m.listen():
                into.append(
                    (
                        float(item["time"]),
                        str(item.get("client_address", item.get("client_type", ""))),
                        str(item["command"])[:160],
                    )
                )
    finally:
        await client.aclose()


def print_trace(title: str, commands: list[tuple[float, str, str]], calls: list[str]) -> None:
    """The commands in order; a command from a script (``client`` ``lua``) is indented under its ``EVALSHA``."""
    print(
        f"\n== {title}: {sum(1 for _t, c, _x in commands if c != 'lua')} commands sent "
        f"({sum(1 for _t, c, _x in commands if c == 'lua')} run inside scripts), {len(calls)} Web API calls"
    )
    for _t, client, command in commands:
        print(("      " if client == "lua" else f"  {client:>21} ") + command)
    names = Counter(command.split()[0].strip('"').upper() for _t, c, command in commands if c != "lua")
    print("  by name: " + ", ".join(f"{name} {count}" for name, count in names.most_common()))
    print("  Web API: " + ", ".join(calls))


async def trace(args: argparse.Namespace, logdir: Path) -> None:
    model = Model(delay=0.05)
    children: list[Child] = []
    async with (
        own_redis() as redis_url,
        FakeOpenAI(responder=model) as openai_server,
        Workspace("http://127.0.0.1:1/unset", SIGNING_SECRET, BOT_TOKEN, subscriptions=("app_mention",)) as ws,
    ):
        ws.sender._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10.0))
        env = {
            "SLACK_BOT_TOKEN": BOT_TOKEN,
            "SLACK_SIGNING_SECRET": SIGNING_SECRET,
            "SLACK_API_URL": ws.api_url,
            "LOG_LEVEL": "WARNING",
            "OPENAI_API_KEY": "sk-bench",
            "OPENAI_BASE_URL": openai_server.base_url,
            "REDIS_URL": redis_url,
            "REDIS_PREFIX": f"trace-{uuid.uuid4().hex[:6]}",
            "MAX_RUNS_PER_PERSON": str(NO_LIMIT),
            "MAX_RUNS_PER_PROCESS": str(NO_LIMIT),
        }
        bot = spawn("bot", "bot", env, free_port(), logdir, command="web" if args.split else "serve")
        children.append(bot)
        if args.split:
            children.append(spawn("worker", "bot", env, free_port(), logdir, command="worker"))
        try:
            await bot.wait_listening()
            ws.sender.bot_url = bot.url
            load = Load(ws)
            for _ in range(2):  # warm-up: a mention, its click
                await load.mention()
                await settle(ws, quiet=0.5, timeout=30)
                await load.click(question_messages(ws)[-1])
                await settle(ws, quiet=0.5, timeout=30)
            seen: list[tuple[float, str, str]] = []
            ready = asyncio.Event()
            watcher = asyncio.create_task(monitor(redis_url, seen, ready))
            await ready.wait()
            for title in ("mention", "click"):
                await asyncio.sleep(0.3)
                seen.clear()
                calls_before = len(ws.fake.calls)
                if title == "mention":
                    await load.mention()
                else:
                    await load.click(question_messages(ws)[-1])
                await settle(ws, quiet=1.0, timeout=30)
                await asyncio.sleep(0.3)
                print_trace(title, list(seen), [c.method for c in ws.fake.calls[calls_before:]])
            watcher.cancel()
        finally:
            await asyncio.gather(*(child.stop() for child in children))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--split", action="store_true", help="web + worker instead of one serve process")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="trace-") as tmp:
        asyncio.run(trace(args, Path(tmp)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
