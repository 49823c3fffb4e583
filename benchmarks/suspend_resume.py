"""Suspend + resume overhead per question: zero-latency loopback model, real Redis.

Run: ``.venv/bin/python -m benchmarks.suspend_resume [--runs 300] [--redis redis://127.0.0.1:6379/0]``

For each run: ``agent.stream()`` until the ``tool-call-suspended`` chunk (create + model turn + suspend
save), then ``agent.resume_stream()`` until ``finish`` (load + claim + model turn + final save). Redis
round trips are counted on the wire (one per packed command sent), per phase. Keys use a unique prefix and
are deleted at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from typing import Any

import redis.asyncio as aioredis

from benchmarks._util import summary, table
from bot.agent import Agent, OpenAIChatModel, ask_user_tool
from bot.store import RedisRunStore
from bot.testing.openai_server import FakeOpenAI, Reply, tool_call


class CountingConnection(aioredis.Connection):
    """Counts the packed commands written to Redis (one per round trip, pipelines included)."""

    sent = 0

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        CountingConnection.sent += 1
        await super().send_packed_command(command, check_health)


def respond(body: dict[str, Any]) -> Reply:
    if body["messages"][-1]["role"] == "tool":
        return Reply(text="Thanks, done.")
    question = {"question": "Which?", "options": [{"label": "a"}, {"label": "b"}]}
    return Reply(tool_calls=[tool_call("ask_user", question, id="c1")])


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    args = parser.parse_args()

    prefix = f"bench:{uuid.uuid4().hex[:8]}:"
    pool = aioredis.ConnectionPool.from_url(args.redis, connection_class=CountingConnection)
    client = aioredis.Redis(connection_pool=pool)
    await client.ping()
    async with FakeOpenAI(responder=respond) as server:
        model = OpenAIChatModel(model="bench", base_url=server.base_url, api_key="sk-bench")
        agent = Agent(
            id="bench",
            name="Bench",
            instructions="",
            model=model,
            tools=[ask_user_tool],
            store=RedisRunStore(client, prefix=prefix),
        )
        for _ in range(10):  # warm up: connections, script cache, HTTP keep-alive
            s = await agent.stream("warm up")
            await s.collect()
            await (await agent.resume_stream("a", run_id=s.run_id)).collect()

        suspend_ms: list[float] = []
        resume_ms: list[float] = []
        model_ms: list[float] = []
        suspend_rt: list[int] = []
        resume_rt: list[int] = []
        for _ in range(args.runs):
            before = CountingConnection.sent
            t0 = time.perf_counter()
            stream = await agent.stream("Summarize my project")
            await stream.collect()
            t1 = time.perf_counter()
            suspend_rt.append(CountingConnection.sent - before)
            before = CountingConnection.sent
            resumed = await agent.resume_stream("a", run_id=stream.run_id, answered_by="U1")
            await resumed.collect()
            t2 = time.perf_counter()
            resume_rt.append(CountingConnection.sent - before)
            suspend_ms.append((t1 - t0) * 1000)
            resume_ms.append((t2 - t1) * 1000)
            t3 = time.perf_counter()
            async for _event in model.stream_turn([{"role": "user", "content": "x"}], tools=[]):
                pass
            model_ms.append((time.perf_counter() - t3) * 1000)
        await model.aclose()

    keys = [k async for k in client.scan_iter(match=f"{prefix}*")]
    if keys:
        await client.delete(*keys)
    await client.aclose()

    rows = []
    for name, ms, rts in (
        ("suspend (start -> question)", suspend_ms, suspend_rt),
        ("resume (answer -> reply)", resume_ms, resume_rt),
    ):
        p50, p99, mean = summary(ms)
        rows.append([name, len(ms), p50, p99, mean, f"{sum(rts) / len(rts):.2f}", max(rts)])
    p50, p99, mean = summary(model_ms)
    rows.append(["one loopback model turn alone", len(model_ms), p50, p99, mean, "-", "-"])
    print(table(["phase", "n", "p50 ms", "p99 ms", "mean ms", "redis RT mean", "redis RT max"], rows))


if __name__ == "__main__":
    asyncio.run(main())
