"""The playground restarted on the same Redis: ``python -m bot playground`` as a real process, twice, with
``REDIS_URL`` and a unique ``REDIS_PREFIX``. A question asked before the restart is answered after it: the question
message is updated and the run's reply lands in the same thread (it was ``message_not_found`` /
``invalid_thread_ts``: the runs outlasted the restart in Redis, the fake workspace's messages did not)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import redis.asyncio as aioredis

from bot.store.keys import Keys
from bot.testing.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
SETTING_PREFIXES = ("SLACK_", "OPENAI_", "REDIS_", "ASK_", "RUN_", "LOG_", "PORT", "AGENT", "MCP_")
REAL_REDIS = os.environ.get("REDIS_TEST_URL", "redis://127.0.0.1:6379/0")
BOT = "<@U_BOT>"


def playground_env(prefix: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith(SETTING_PREFIXES)}
    env.update(PORT="0", MCP_PORT=str(free_port()), REDIS_URL=REAL_REDIS, REDIS_PREFIX=prefix)
    return env


class Running:
    """One ``python -m bot playground`` process: its page's URL and its output so far."""

    def __init__(self, proc: asyncio.subprocess.Process, url: str, lines: list[str]) -> None:
        self.proc, self.url, self.lines = proc, url, lines

    async def state(self, http: aiohttp.ClientSession) -> dict[str, Any]:
        async with http.get(self.url + "api/state") as response:
            assert response.status == 200
            result: dict[str, Any] = await response.json()
            return result

    async def post(self, http: aiohttp.ClientSession, name: str, body: dict[str, Any]) -> dict[str, Any]:
        async with http.post(self.url + f"api/{name}", json=body) as response:
            assert response.status == 200, await response.text()
            result: dict[str, Any] = await response.json()
            return result


@contextlib.asynccontextmanager
async def playground(prefix: str) -> AsyncIterator[Running]:
    """Start the playground process, yield it once its banner is out, stop it with SIGTERM (as Ctrl-C)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot",
        "playground",
        env=playground_env(prefix),
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    assert proc.stdout is not None
    lines: list[str] = []

    async def read() -> None:  # all along: a full pipe would stall the process
        assert proc.stdout is not None
        while raw := await proc.stdout.readline():
            lines.append(raw.decode().rstrip("\n"))

    reader = asyncio.create_task(read())
    try:
        url = await until(lambda: _banner_url(lines), what="the banner", lines=lines)
        yield Running(proc, url, lines)
        proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(proc.wait(), 20)
        assert proc.returncode == 0, "\n".join(lines)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        await asyncio.wait_for(reader, 5)


def _banner_url(lines: list[str]) -> str | None:
    for line in lines:
        if match := re.search(r"Playground: (http://127\.0\.0\.1:\d+/)", line):
            return match.group(1)
    return None


async def until(probe: Callable[[], Any], *, what: str, lines: list[str], within: float = 60) -> Any:
    """Poll ``probe`` (sync or async) until it returns something truthy; fail naming ``what`` and the output."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        found = probe()
        if asyncio.iscoroutine(found):
            found = await found
        if found:
            return found
        if loop.time() > deadline:
            pytest.fail(f"no {what} within {within} s; output:\n" + "\n".join(lines))
        await asyncio.sleep(0.1)


def thread_of(state: dict[str, Any], channel: str, thread_ts: str) -> list[dict[str, Any]]:
    return [m for m in state["messages"].get(channel, []) if m.get("thread_ts") == thread_ts or m["ts"] == thread_ts]


@pytest.mark.real_redis
@pytest.mark.redis_kinds("single")
async def test_a_question_asked_before_a_restart_is_answered_after_it(real_redis: aioredis.Redis, prefix: str) -> None:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=15)) as http:
        async with playground(prefix) as first:
            said = await first.post(http, "say", {"user": "U_ALICE", "channel": "C_GENERAL", "text": f"{BOT} deploy"})
            root = said["message"]["ts"]

            async def asked() -> dict[str, Any] | None:
                thread = thread_of(await first.state(http), "C_GENERAL", root)
                return next((m for m in thread if "Which environment" in str(m.get("blocks"))), None)

            question = await until(asked, what="the question", lines=first.lines)
        assert await real_redis.exists(Keys(prefix).playground_workspace())  # written, under this prefix

        async with playground(prefix) as second:
            state = await second.state(http)
            before = thread_of(state, "C_GENERAL", root)
            assert [m["ts"] for m in before] == [root, question["ts"]]  # the thread came back, as it was
            clicked = await second.post(
                http, "click", {"user": "U_ALICE", "channel": "C_GENERAL", "ts": question["ts"], "label": "production"}
            )
            assert clicked["ok"], clicked

            async def replied() -> dict[str, Any] | None:
                thread = thread_of(await second.state(http), "C_GENERAL", root)
                return next((m for m in thread if "Deploying to" in m.get("text", "")), None)

            reply = await until(replied, what="the reply in the thread", lines=second.lines)
            assert "production" in reply["text"] and reply["thread_ts"] == root
            state = await second.state(http)
            [updated] = [m for m in state["messages"]["C_GENERAL"] if m["ts"] == question["ts"]]
            assert "production" in str(updated["blocks"]) and "actions" not in [b["type"] for b in updated["blocks"]]
            refused = [e for e in state["log"] if e.get("error")]
            assert refused == [], refused  # no message_not_found, no invalid_thread_ts
