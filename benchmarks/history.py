"""What one turn of a long thread costs, against its history length, with the token budget off and on.

Run: ``.venv/bin/python -m benchmarks.history [--turns 5] [--redis redis://127.0.0.1:6379/0]``

For each history length (10 / 100 / 1,000 / 5,000 messages: user text, assistant text, ask_user calls with their
answers, ~230 bytes a message) a finished run holding that history is stored, as an earlier release left it; then
one thread turn is repeated ``--turns`` times after a warm-up turn, as a new mention in the thread does it: load the
thread's last run, start the next run with its history (create), one model turn, final save. Printed per turn
(medians): the bot's CPU (ms, the main thread only: the loopback model server and a byte-counting TCP proxy in
front of the real Redis run in another thread), the stored run's size, the bytes read from and written to Redis
(on the wire), and the model request's size (JSON bytes, the agent's estimated tokens, the server's count).
Keys use a unique prefix and are deleted at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import threading
import time
import uuid
from typing import Any
from urllib.parse import urlsplit

import redis.asyncio as aioredis

from benchmarks._util import table
from bot.agent import Agent, OpenAIChatModel, ask_user_tool
from bot.agent._loop.budget import DEFAULT_HISTORY_BUDGET, Calibration, message_tokens, tools_tokens
from bot.agent.state import RunState
from bot.store import RedisRunStore
from bot.store.keys import Keys
from bot.testing.openai_server import FakeOpenAI, Reply

LENGTHS = (10, 100, 1000, 5000)
ANSWER = "Here is what I found: the deploy went out at noon, two services restarted, nothing is pending. " * 2


def history(n: int) -> list[dict[str, Any]]:
    """``n`` messages of a plausible thread: per 5, a question, an ask_user call, its answer, a reply, a thanks."""
    out: list[dict[str, Any]] = []
    k = 0
    while len(out) < n:
        cid = f"call_{k:06d}"
        args = json.dumps({"question": f"Which environment for step {k}?", "options": [{"label": "staging"}]})
        out += [
            {"role": "user", "content": f"Step {k}: please check the deploy of service {k % 7} and tell me."},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": cid, "type": "function", "function": {"name": "ask_user", "arguments": args}}],
            },
            {"role": "tool", "tool_call_id": cid, "content": json.dumps({"answer": "staging", "by": "U123"})},
            {"role": "assistant", "content": ANSWER},
            {"role": "user", "content": "Thanks, that helps."},
        ]
        k += 1
    out = out[:n]
    while out and (out[-1]["role"] != "assistant" or out[-1].get("tool_calls")):  # end on a finished turn
        out.pop()
    return out


class Background:
    """An event loop in another thread: the loopback model server and a TCP proxy to Redis counting bytes."""

    def __init__(self, redis_host: str, redis_port: int) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.redis = (redis_host, redis_port)
        self.to_redis = 0  # bytes written by the bot
        self.from_redis = 0  # bytes read by the bot
        self.server = FakeOpenAI(responder=lambda body: Reply(text=ANSWER))
        self.proxy_port = 0

    def run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def start(self) -> None:
        self.thread.start()
        self.run(self.server.start())
        self.proxy_port = self.run(self._proxy())

    async def _proxy(self) -> int:
        async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, up: bool) -> None:
            try:
                while data := await reader.read(1 << 16):
                    if up:
                        self.to_redis += len(data)
                    else:
                        self.from_redis += len(data)
                    writer.write(data)
                    await writer.drain()
            except ConnectionError:
                pass
            finally:
                writer.close()

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            r_reader, r_writer = await asyncio.open_connection(*self.redis)
            await asyncio.gather(pipe(reader, r_writer, True), pipe(r_reader, writer, False))

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        return int(server.sockets[0].getsockname()[1])

    def stop(self) -> None:
        self.run(self.server.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)


async def measure(bg: Background, client: aioredis.Redis, n: int, budget: int | None, turns: int) -> list[Any]:
    prefix = f"bench-history:{uuid.uuid4().hex[:8]}:"
    store = RedisRunStore(client, prefix=prefix)
    model = OpenAIChatModel(model="bench", base_url=bg.server.base_url, api_key="sk-bench", max_retries=0)
    agent = Agent(
        id="bench",
        name="Bench",
        instructions="You are a helpful assistant in a Slack workspace. Keep replies short.",
        model=model,
        tools=[ask_user_tool],
        store=store,
        history_budget=budget,
    )
    agent.budget.calibration = Calibration()
    seed = RunState(run_id=f"run_seed{n}", agent_id="bench", status="completed", messages=history(n))
    previous = (await store.create(seed, owner="seed")).run_id
    rows: dict[str, list[float]] = {k: [] for k in ("cpu", "stored", "io", "req", "est", "count", "sent")}
    try:
        for turn in range(turns + 1):
            bg.server.requests.clear()
            bg.server.prompt_tokens.clear()
            before_io = bg.to_redis + bg.from_redis
            cpu = time.thread_time()
            state = await agent.get_run(previous)  # what a mention in the thread does
            stream = await agent.stream(f"turn {turn}: what next?", history=agent.history_of(state))
            done = await stream.result()
            cpu = time.thread_time() - cpu
            assert done is not None and done.status == "completed", done
            previous = done.run_id
            if turn == 0:  # warm-up (and, with the budget on, the turn that cuts the old history)
                continue
            [body] = bg.server.requests
            ratio = agent.budget.calibration.ratio("bench")
            raw = sum(message_tokens(m) for m in body["messages"]) + tools_tokens(body.get("tools") or [])
            rows["cpu"].append(cpu * 1000)
            rows["stored"].append(await client.hstrlen(Keys(prefix).run(previous), "state") / 1024)
            rows["io"].append((bg.to_redis + bg.from_redis - before_io) / 1024)
            rows["req"].append(len(json.dumps(body)) / 1024)
            rows["est"].append(raw * ratio)
            rows["count"].append(bg.server.prompt_tokens[0])
            rows["sent"].append(len(body["messages"]))
    finally:
        await model.aclose()
        keys = [k async for k in client.scan_iter(match=f"{prefix}*")]
        if keys:
            await client.delete(*keys)
    m = {k: statistics.median(v) for k, v in rows.items()}
    return [
        n,
        "off" if budget is None else str(budget),
        m["cpu"],
        f"{m['stored']:.1f}",
        f"{m['io']:.1f}",
        f"{m['req']:.1f}",
        int(m["est"]),
        int(m["count"]),
        int(m["sent"]),
    ]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    args = parser.parse_args()
    url = urlsplit(args.redis)
    bg = Background(url.hostname or "127.0.0.1", url.port or 6379)
    bg.start()
    client = aioredis.from_url(f"redis://127.0.0.1:{bg.proxy_port}{url.path or '/0'}")
    rows = []
    try:
        for n in LENGTHS:
            for budget in (None, DEFAULT_HISTORY_BUDGET):
                rows.append(await measure(bg, client, n, budget, args.turns))
    finally:
        await client.aclose()
        bg.stop()
    headers = [
        "history msgs",
        "budget",
        "CPU ms/turn",
        "stored run KB",
        "Redis KB r+w/turn",
        "request KB",
        "est. tokens",
        "server tokens",
        "msgs sent",
    ]
    print(table(headers, rows))


if __name__ == "__main__":
    asyncio.run(main())
