"""``python -m bot serve`` as a real process, configured only by its environment."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bot.playground import Workspace
from bot.testing.openai_server import FakeOpenAI, Reply, tool_call

ROOT = Path(__file__).resolve().parent.parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "OPENAI_", "REDIS_", "ASK_"))}
    env.update(extra)
    return env


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({}, "SLACK_BOT_TOKEN is not set"),
        ({"SLACK_BOT_TOKEN": "xoxb-x"}, "not set: SLACK_SIGNING_SECRET (verifies requests); REDIS_URL ("),
        ({"SLACK_BOT_TOKEN": "xoxb-x", "SLACK_SIGNING_SECRET": "s"}, "not set: REDIS_URL ("),
        (
            {"SLACK_BOT_TOKEN": "xoxb-x", "SLACK_SIGNING_SECRET": "s", "REDIS_URL": "redis://127.0.0.1:6379/0"},
            "not set: OPENAI_API_KEY (",
        ),
        ({"SLACK_BOT_TOKEN": "xoxb-x", "ASK_ANSWERERS": "everyone"}, "ask_answerers"),
    ],
)
def test_serve_refuses_incomplete_settings(extra: dict[str, str], message: str) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "bot", "serve"],
        env=clean_env(**extra),
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert out.returncode != 0
    assert message in out.stderr
    assert "xoxb-x" not in out.stderr


@pytest.mark.real_redis
async def test_serve_answers_a_mention_end_to_end(real_redis: Any, prefix: str, openai_server: FakeOpenAI) -> None:
    port = free_port()
    secret = "serve-test-secret"
    async with Workspace(f"http://127.0.0.1:{port}/slack/events", secret, bot_token="xoxb-serve-test") as ws:
        env = clean_env(
            SLACK_BOT_TOKEN="xoxb-serve-test",
            SLACK_SIGNING_SECRET=secret,
            SLACK_API_URL=ws.api_url,
            OPENAI_API_KEY="sk-test",
            OPENAI_BASE_URL=openai_server.base_url,
            REDIS_URL="redis://127.0.0.1:6379/0",
            REDIS_PREFIX=prefix,
            PORT=str(port),
            LOG_LEVEL="INFO",
        )
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "bot",
            "serve",
            env=env,
            cwd=ROOT,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        try:
            for _ in range(100):
                try:
                    _r, w = await asyncio.open_connection("127.0.0.1", port)
                    w.close()
                    break
                except OSError:
                    await asyncio.sleep(0.1)
            openai_server.script(
                Reply(
                    tool_calls=[
                        tool_call("ask_user", {"question": "Which?", "options": [{"label": "a"}, {"label": "b"}]})
                    ]
                ),
                Reply(text="Served: b."),
            )
            d = await ws.mention("U_ALICE", "C_GENERAL", "hello")
            q = await ws.wait_for_message(
                channel="C_GENERAL",
                thread_ts=d.message["ts"],
                predicate=lambda m: any(b["type"] == "actions" for b in m.get("blocks", [])),
            )
            await ws.click(q, "b", user="U_ALICE")
            await ws.wait_for_message(
                channel="C_GENERAL", thread_ts=d.message["ts"], predicate=lambda m: m["text"] == "Served: b."
            )
        finally:
            proc.terminate()
            output, _ = await asyncio.wait_for(proc.communicate(), 20)
        assert proc.returncode == 0, output.decode()
        log = output.decode()
        assert "HTTP mode" in log and "stopping" in log
        assert "xoxb-serve-test" not in log and secret not in log and "sk-test" not in log
