"""A mention + click in a thread with a long history: the product against the tuned hand-written bot (issue 26,
"History: a mention + click at 1,000 messages of history within 1.5x of the tuned bot's").

Run: ``.venv/bin/python -m benchmarks.history_cost [--history 1000] [--threads 5] [--rounds 3]``

Targets as in ``benchmarks.cost`` (``tuned``: ``python -m benchmarks.handwritten_bot --tuned``; ``serve``:
``python -m bot serve``), each with its own fake Slack, loopback model (no delay) and key prefix on a redis-server of
this benchmark's own; rounds alternate the targets (the order rotated each round). Per target and round:

1. a warm-up mention + click (imports, pools, scripts);
2. ``--threads`` threads, each started by a mention the model answers in text (the thread's run finished, its
   messages stored as each bot stores them), then given ``--history`` messages of history (``benchmarks.history``'s
   plausible thread: user text, ``ask_user`` calls with their answers, replies; ~230 bytes a message), written into
   the bot's own record of the thread (the product: the thread's run's stored messages, ``RunState``; the
   hand-written bot: its thread key's JSON), and as many threads with no history beside them;
3. in each thread, one at a time, a mention the model answers with an ``ask_user`` question, then a click on an
   option (the reply posted), waiting for each; CPU of the target's process (``/proc``, user + system) from the
   first mention to the last reply, over the threads.

Printed: CPU ms per mention + click with no history and with ``--history`` messages, for each target, each round,
and the ratio serve / tuned within each round with its median (the gate: at most 1.5x at 1,000 messages).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

from benchmarks._redis_stats import own_redis
from benchmarks._util import table
from benchmarks.ack_latency import ANSWER, CHANNEL, REPLY, REQUESTER, Child, cpu_seconds, run_cleanly
from benchmarks.cost import Sitting
from benchmarks.history import history
from bot.fakeslack.state import BOT_USER_ID
from bot.fakeslack.workspace import Workspace
from bot.store.conversations import ConversationIndex
from bot.store.keys import Keys

TARGETS = ("tuned", "serve")
SENT: dict[str, dict[int, int]] = {}  # target -> history length -> messages the last model request carried


def bot_messages(ws: Workspace, thread_ts: str) -> list[dict[str, Any]]:
    """The bot's messages in ``thread_ts`` (replies, not the thread's first message), oldest first."""
    return [
        m
        for m in ws.state.conversations[CHANNEL].messages.values()
        if m.get("user") == BOT_USER_ID and m.get("thread_ts") == thread_ts and m["ts"] != thread_ts
    ]


def has_buttons(message: dict[str, Any]) -> bool:
    return any(b.get("type") == "actions" for b in message.get("blocks", []))


async def until(probe: Any, *, within: float = 30.0, what: str) -> Any:
    """Poll ``probe()`` until it returns something true (every 5 ms); raise ``RuntimeError`` after ``within`` s."""
    deadline = time.monotonic() + within
    while not (got := probe()):
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        await asyncio.sleep(0.005)
    return got


async def replies_count(ws: Workspace, thread_ts: str) -> int:
    return sum(1 for m in bot_messages(ws, thread_ts) if REPLY in str(m.get("text", "")))


async def mention_and_click(s: Sitting, thread_ts: str | None) -> str:
    """A mention (in ``thread_ts``, or a new thread) the model asks a question of, a click on it, the reply: waited
    for. Returns the thread's ts."""
    s.model.plain = False
    d = await s.ws.mention(REQUESTER, CHANNEL, "pick a colour", thread_ts=thread_ts)
    thread = thread_ts or d.message["ts"]
    replies = await replies_count(s.ws, thread)
    question = await until(
        lambda: next((m for m in reversed(bot_messages(s.ws, thread)) if has_buttons(m)), None), what="a question"
    )
    await s.ws.click({"channel": CHANNEL, "ts": question["ts"]}, ANSWER, user=REQUESTER)
    await until(
        lambda: len([m for m in bot_messages(s.ws, thread) if REPLY in str(m.get("text", ""))]) > replies,
        what="the reply",
    )
    return thread


async def started_thread(s: Sitting) -> str:
    """A thread whose first mention the model answered in text (its run finished): its ts."""
    s.model.plain = True
    d = await s.ws.mention(REQUESTER, CHANNEL, "hello")
    thread = str(d.message["ts"])
    await until(lambda: bot_messages(s.ws, thread), what="a reply in text")
    s.model.plain = False
    return thread


async def give_history(client: aioredis.Redis, target: str, prefix: str, thread: str, n: int) -> int:
    """Put ``n`` messages of history before what the thread's record holds; returns the messages it holds now."""
    old = history(n)
    if target == "tuned":
        key = f"{prefix}thread:{CHANNEL}:{thread}"
        raw = await until_async(lambda: client.get(key), what="the thread's key")
        messages = old + json.loads(raw)
        await client.set(key, json.dumps(messages), keepttl=True)
        return len(messages)
    keys = Keys(prefix)
    index = ConversationIndex(client, keys=keys)
    record = await until_async(
        lambda: index.thread("T_PLAYGROUND", channel_id=CHANNEL, thread_ts=thread), what="the thread's record"
    )
    run_key = keys.run(record.run_id)
    raw = await until_async(lambda: client.hget(run_key, "state"), what="the run")
    state = json.loads(raw)
    state["messages"] = old + state["messages"]
    await client.hset(run_key, "state", json.dumps(state))
    return len(state["messages"])


async def until_async(probe: Any, *, within: float = 30.0, what: str) -> Any:
    deadline = time.monotonic() + within
    while not (got := await probe()):
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)
    return got


async def measure(
    args: argparse.Namespace, target: str, prefix: str, logdir: Path, children: list[Child]
) -> dict[int, float]:
    """CPU ms per mention + click of ``target``, by history length (0 and ``--history``)."""
    out: dict[int, float] = {}
    sent = SENT.setdefault(target, {})
    client = aioredis.from_url(args.redis)
    try:
        async with Sitting(target, args=args, prefix=prefix, logdir=logdir, children=children) as s:
            await mention_and_click(s, None)  # warm-up
            await mention_and_click(s, None)
            pid = s.procs[0].proc.pid
            for n in (0, args.history):
                threads = [await started_thread(s) for _ in range(args.threads)]
                held = [await give_history(client, target, prefix, t, n) for t in threads] if n else []
                await asyncio.sleep(0.5)
                cpu = cpu_seconds(pid)
                for t in threads:
                    await mention_and_click(s, t)
                await asyncio.sleep(0.3)  # the last saves
                out[n] = (cpu_seconds(pid) - cpu) * 1000 / args.threads
                sent[n] = len(s.openai.requests[-1].get("messages") or [])  # what the last turn sent the model
                if held:
                    print(f"{target}: {args.threads} threads of {statistics.median(held)} messages", file=sys.stderr)
    finally:
        await client.aclose()
    return out


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--history", type=int, default=1000, help="messages of history in each thread")
    parser.add_argument("--threads", type=int, default=5, help="mention + click pairs measured per length")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    args.model_delay = 0.0
    args.split = False
    args.rate = 1.0
    results: dict[str, list[dict[int, float]]] = {t: [] for t in TARGETS}
    async with own_redis() as url:
        args.redis = url
        for r in range(args.rounds):
            order = TARGETS[r % 2 :] + TARGETS[: r % 2]
            for target in order:
                prefix = f"bench-hist:{target}:{uuid.uuid4().hex[:8]}:"
                got: list[dict[int, float]] = []

                async def body(
                    logdir: Path,
                    children: list[Child],
                    target: str = target,
                    prefix: str = prefix,
                    got: list[dict[int, float]] = got,
                ) -> None:
                    got.append(await measure(args, target, prefix, logdir, children))

                status = await run_cleanly(body, redis_url=url, prefix=prefix, budget=600, name=f"hist-{target}")
                if status:
                    return status
                results[target].append(got[0])
    n = args.history
    rows = []
    for target in TARGETS:
        for h in (0, n):
            rows.append(
                [
                    target,
                    h,
                    *(f"{r[h]:.1f}" for r in results[target]),
                    f"{statistics.median(r[h] for r in results[target]):.1f}",
                ]
            )
    for h in (0, n):
        ratios = [s[h] / t[h] for s, t in zip(results["serve"], results["tuned"], strict=True)]
        rows.append(["serve / tuned", h, *(f"{x:.2f}x" for x in ratios), f"{statistics.median(ratios):.2f}x"])
    headers = ["target", "history messages", *(f"round {i + 1} CPU ms" for i in range(args.rounds)), "median"]
    print(f"\nCPU ms per mention + click (a question asked, a click, the reply), {args.threads} threads a length")
    print(table(headers, rows))
    for target, by_length in SENT.items():
        print(f"{target}: messages sent in the last model request, by history length: {by_length}")
    print(f"load average (1, 5, 15 min): {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
