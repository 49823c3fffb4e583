"""Streamed replies: how soon the first words show, and what a reply costs in Web API calls.

Run: ``.venv/bin/python -m benchmarks.streaming [--replies 5] [--chars 2000] [--seconds 5]``

The real bot (Bolt over HTTP, fakeredis) against the fake Slack and the loopback model, both on loopback. The model
writes a reply of ``--chars`` characters, word by word, over ``--seconds``. For each way of showing it, the table
gives the time from the model's first token to the first text visible in the thread (the fake Slack's change
events), the time to the whole reply, and the Web API calls per reply. The baseline row is the bot before
streaming: the reply posted once the model finished, so its first visible text comes after the model's last token
(measured here as the model's own writing time, plus one post).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections import Counter
from typing import Any

import fakeredis

from benchmarks._util import summary, table
from bot.agent import OpenAIChatModel
from bot.config import Settings
from bot.fakeslack import Workspace
from bot.fakeslack.state import BOT_USER_ID
from bot.slack.app import build_bot, start_http
from bot.testing.openai_server import FakeOpenAI, Reply

TOKEN, SECRET = "xoxb-bench-0123456789", "bench-signing-secret-0123456789"
MODES = {  # name -> settings
    "stream, 1.0 s": {"reply_streaming": True, "stream_interval": 1.0},
    "stream, 0.5 s": {"reply_streaming": True, "stream_interval": 0.5},
    "post + update, 1.0 s": {"reply_streaming": False, "stream_interval": 1.0},
}


def reply_text(chars: int) -> str:
    words, n = [], 0
    while n < chars:
        word = f"word{len(words) % 100:02d}"
        words.append(word)
        n += len(word) + 1
    return " ".join(words)[:chars].rstrip()


async def one_mode(settings_extra: dict[str, Any], *, replies: int, text: str, seconds: float) -> dict[str, Any]:
    words = text.count(" ") + 1
    delay = seconds / words
    async with FakeOpenAI() as model, Workspace("http://127.0.0.1:9/unset", SECRET, bot_token=TOKEN) as ws:
        settings = Settings(
            slack_bot_token=TOKEN,
            slack_signing_secret=SECRET,
            slack_api_url=ws.api_url,
            redis_prefix="bench-stream:",
            **settings_extra,
        )
        chat = OpenAIChatModel(model="bench", base_url=model.base_url, api_key="sk-bench", max_retries=0)
        bot = build_bot(settings, model=chat, redis_client=fakeredis.FakeAsyncRedis())
        runner, port = await start_http(bot, host="127.0.0.1", port=0)
        ws.sender.bot_url = f"http://127.0.0.1:{port}/slack/events"
        first_seen, whole, model_time, calls = [], [], [], Counter[str]()
        try:
            for i in range(replies):
                asked: dict[str, float] = {}

                def respond(_body: dict[str, Any], asked: dict[str, float] = asked) -> Reply:
                    asked["at"] = time.monotonic()  # the first delta goes out right after
                    return Reply(text=text, chunk_delay=delay)

                model.responder = respond
                before = len(ws.calls())
                changes = ws.fake.subscribe()
                d = await ws.mention("U_ALICE", "C_GENERAL", f"write {i}")
                thread = d.message["ts"]
                seen = done = None
                while done is None:
                    event = await asyncio.wait_for(changes.get(), 60)
                    message = event.get("message") or {}
                    if message.get("user") != BOT_USER_ID or message.get("thread_ts") != thread:
                        continue
                    shown = str(message.get("text") or "")
                    if seen is None and shown.strip():
                        seen = time.monotonic()
                    if shown == text and not message.get("streaming"):
                        done = time.monotonic()
                ws.fake.unsubscribe(changes)
                await bot.drain()
                first_seen.append((seen - asked["at"]) * 1000)
                whole.append((done - asked["at"]) * 1000)
                model_time.append(delay * words * 1000)
                calls.update(c.method for c in ws.calls()[before:] if c.method != "auth.test")
        finally:
            await runner.cleanup()
            await bot.drain()
            await bot.aclose()
    return {"first": summary(first_seen), "whole": summary(whole), "model": summary(model_time), "calls": calls}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replies", type=int, default=5)
    parser.add_argument("--chars", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=5.0, help="how long the model takes to write a reply")
    args = parser.parse_args()
    text = reply_text(args.chars)
    rows, results = [], {}
    for name, extra in MODES.items():
        results[name] = await one_mode(extra, replies=args.replies, text=text, seconds=args.seconds)
    model_ms = next(iter(results.values()))["model"][0]
    before = "reactions.add 1, postMessage 1, reactions.remove 1"  # the bot's calls for a reply before streaming
    rows.append(["before streaming (post at the end)", model_ms, model_ms, "1", before, 3.0])
    for name, r in results.items():
        per_reply = {m: n / args.replies for m, n in r["calls"].items()}
        api = sum(per_reply.values())
        detail = ", ".join(f"{m.split('.')[-1]} {n:g}" for m, n in sorted(per_reply.items()))
        rows.append([name, r["first"][0], r["whole"][0], f"{r['first'][0] / model_ms:.4f}", detail, api])
    print(f"{args.replies} replies of {args.chars} characters, written by the model over {args.seconds:g} s")
    print(
        table(
            ["how the reply is shown", "first text p50 ms", "whole p50 ms", "first / baseline", "calls", "calls/reply"],
            rows,
        )
    )


if __name__ == "__main__":
    asyncio.run(main())
