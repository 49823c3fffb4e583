"""Shared by the job-queue library evaluations (issue 13, part 3): worker subprocesses and their job log.

Each evaluated library runs its own worker in a subprocess (so a test can kill -9 it); the job it runs logs
``{"event": "start"|"done", "n": ..., "pid": ...}`` on the Redis list ``<queue>:log``. The tests skip when the
library is not installed (the ``[queue-eval]`` extra; CI does not install it). ``real_redis`` (tests/conftest.py)
gives the single Redis or the local cluster, per the ``redis_kinds`` marker.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

ROOT = Path(__file__).resolve().parents[2]
REAL_REDIS_URL = os.environ.get("REDIS_TEST_URL", "redis://127.0.0.1:6379/0")
CLUSTER_URL = os.environ.get("REDIS_TEST_CLUSTER_URL", "redis://127.0.0.1:7000/0")
Log = list[dict[str, Any]]


class Procs:
    """Subprocesses of one test, killed at teardown."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, script: str, *args: str) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen([sys.executable, "-c", script, *args], cwd=ROOT)
        self.procs.append(proc)
        return proc


@pytest.fixture
def procs() -> Iterator[Procs]:
    group = Procs()
    yield group
    for proc in group.procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)


async def log_of(client: aioredis.Redis, queue: str) -> Log:
    return [json.loads(e) for e in await client.lrange(f"{queue}:log", 0, -1)]


async def wait_log(client: aioredis.Redis, queue: str, predicate: Any, *, seconds: float) -> Log:
    """The job log once ``predicate(log)`` holds; ``AssertionError`` after ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        log = await log_of(client, queue)
        if predicate(log):
            return log
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out after {seconds} s; log: {await log_of(client, queue)}")


def done(n: int) -> Any:
    return lambda log: any(e["event"] == "done" and e["n"] == n for e in log)


def starts(log: Log, n: int) -> int:
    return sum(1 for e in log if e["event"] == "start" and e["n"] == n)
