"""``PROMETHEUS_MULTIPROC_DIR``: several processes behind one port; any process's ``/metrics`` shows their sum, and
a process that stopped cleanly no longer counts in the live gauge."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bot.ops.metrics import MULTIPROC_ENV
from bot.ops.server import OpsEndpoints, start_ops_server
from bot.testing.scrape import scrape

ROOT = Path(__file__).resolve().parent.parent.parent

# One bot process's worth of work: two Web API calls (one refused by Slack), a run driven, a model turn.
WORK = """
import asyncio, sys
from slack_sdk.errors import SlackApiError
from bot.ops import metrics, observe

async def main():
    with observe.slack_call("chat.postMessage"):
        pass
    try:
        with observe.slack_call("chat.update"):
            raise SlackApiError("refused", {"ok": False, "error": "message_not_found"})
    except SlackApiError:
        pass
    with observe.model_turn("run_x"):
        pass
    async with observe.run_segment("run_x"):
        if sys.argv[1] == "running":  # still driving a run: until told to stop
            print("driving", flush=True)
            await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    metrics.process_exiting()  # stopping cleanly (as python -m bot does)

asyncio.run(main())
"""


def start_process(directory: Path, how: str) -> subprocess.Popen[str]:
    env = {"PATH": "/usr/bin:/bin", MULTIPROC_ENV: str(directory)}
    return subprocess.Popen(
        [sys.executable, "-c", WORK, how], env=env, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )


async def test_several_processes_are_summed_on_one_scrape(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert start_process(tmp_path, "done").wait(60) == 0  # did its work and stopped
    running = start_process(tmp_path, "running")
    try:
        assert running.stdout is not None and running.stdout.readline() == "driving\n"
        monkeypatch.setenv(MULTIPROC_ENV, str(tmp_path))  # this process serves the scrape of both
        runner, port = await start_ops_server(OpsEndpoints(), host="127.0.0.1", port=0)
        try:
            samples = await scrape(f"http://127.0.0.1:{port}")
        finally:
            await runner.cleanup()
    finally:
        running.communicate("stop\n", timeout=60)
    assert samples.get("askbot_slack_api_calls_total", method="chat.postMessage") == 2
    assert samples.get("askbot_slack_api_calls_total", method="chat.update") == 2
    assert samples.get("askbot_slack_api_errors_total", method="chat.update", error="message_not_found") == 2
    assert samples.get("askbot_model_turn_seconds_count") == 2
    assert samples.get("askbot_runs_in_flight") == 1
    assert "python_gc_objects_collected_total" not in samples.names()  # per-process collectors are left out
