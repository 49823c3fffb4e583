"""What the run limits do under a burst: memory, model calls and CPU of the bot, limits as deployed vs. off.

Run: ``.venv/bin/python -m benchmarks.burst_memory [--mentions 500] [--seconds 10] [--model-delay 2.0]
[--redis redis://127.0.0.1:6379/0]``

One person (``U_ALICE``) mentions the bot ``--mentions`` times in ``--seconds`` s, open loop, each mention a new
top-level message (so a new thread and a new run). The bot is its own process, started as
``benchmarks.ack_latency`` starts it: ``python -m bot serve --http`` with ``SLACK_API_URL`` at the fake Slack
(``Workspace``, subscribed to ``app_mention`` only), ``OPENAI_BASE_URL`` at ``FakeOpenAI`` whose every turn takes
``--model-delay`` s and answers a short text (one model call per run), ``REDIS_URL`` the real Redis under a
unique ``REDIS_PREFIX``. Two phases, same load, a fresh bot process and fresh fakes each:

- (a) the limits as deployed: ``MAX_RUNS_PER_PERSON`` and ``MAX_RUNS_PER_PROCESS`` left at their defaults;
- (b) the baseline, the limits effectively off: both set to 100000.

Each phase: start the bot, one warm-up mention by another person (Bolt's ``auth.test``, connections, code
paths), let it finish, then the burst; then wait until the bot has made no Web API call for
``--model-delay`` + 1 s. Measured from the burst's start to then: the bot process's RSS (``VmRSS`` of
``/proc/<pid>/status``, sampled every 50 ms by a thread of this process), its CPU seconds (``utime + stime``),
model calls started and the most in flight at once (counted by the fake model server), mentions refused with the
"slow down" ephemeral, final replies posted, and ack p99. The subprocesses are stopped and the Redis keys
deleted at the end, also on error or Ctrl-C. Only loopback traffic.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import re
import sys
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from benchmarks._util import percentile, table
from benchmarks.ack_latency import Child, cpu_seconds, paced, run_cleanly, settle, spawn
from bot.config import Settings
from bot.fakeslack.sender import Ack
from bot.fakeslack.workspace import Workspace
from bot.slack.run_slots import TOO_BUSY, TOO_MANY_FOR_YOU
from bot.testing.openai_server import FakeOpenAI, Reply
from bot.testing.ports import free_port

ROOT = Path(__file__).resolve().parent.parent
CHANNEL = "C_GENERAL"
REQUESTER = "U_ALICE"
WARMUP_USER = "U_BOB"
SIGNING_SECRET = "bench-signing-secret"
BOT_TOKEN = "xoxb-bench"
REPLY = "Thanks, noted."
OFF = 100_000
SAMPLE_PERIOD = 0.05
TOO_MANY_PREFIX = TOO_MANY_FOR_YOU.split("{n}", 1)[0]


# --- measuring ------------------------------------------------------------------------------------


class CountingOpenAI(FakeOpenAI):
    """``FakeOpenAI`` that also counts requests being answered at once (a streamed turn until its last byte)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.in_flight = 0
        self.peak_in_flight = 0

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        try:
            return await super()._handle(request)
        finally:
            self.in_flight -= 1


def rss_kb(pid: int) -> int | None:
    """``VmRSS`` of process ``pid`` in kB (Linux ``/proc``); None once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


class RssSampler:
    """A thread that samples a process's RSS every ``period`` s until :meth:`stop` (at most ``limit`` s)."""

    def __init__(self, pid: int, *, period: float = SAMPLE_PERIOD, limit: float = 600.0) -> None:
        self.pid = pid
        self.period = period
        self.limit = limit
        self.samples: list[tuple[float, int]] = []  # (perf_counter, kB)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def _run(self) -> None:
        deadline = time.perf_counter() + self.limit
        while not self._stop.is_set() and time.perf_counter() < deadline:
            kb = rss_kb(self.pid)
            if kb is None:
                return
            self.samples.append((time.perf_counter(), kb))
            self._stop.wait(self.period)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    @property
    def peak_kb(self) -> int:
        return max((kb for _, kb in self.samples), default=0)

    @property
    def max_gap_ms(self) -> float:
        times = [t for t, _ in self.samples]
        return max((b - a for a, b in itertools.pairwise(times)), default=0.0) * 1000


@dataclass
class Result:
    """One phase's numbers (RSS in kB)."""

    name: str
    per_person: int
    per_process: int
    defaults: bool  # the limits left unset (as deployed), else set to per_person / per_process
    rss_before_kb: int = 0
    rss_peak_kb: int = 0
    rss_final_kb: int = 0
    samples: int = 0
    sample_gap_ms: float = 0.0
    model_calls: int = 0
    peak_in_flight: int = 0
    refused_person: int = 0
    refused_process: int = 0
    replies: int = 0
    other_posts: list[str] = field(default_factory=list)
    other_ephemerals: list[str] = field(default_factory=list)
    acks: list[Ack] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    cpu_s: float = 0.0
    burst_s: float = 0.0
    wall_s: float = 0.0
    settled: bool = True
    log_lines: list[str] = field(default_factory=list)

    @property
    def refused(self) -> int:
        return self.refused_person + self.refused_process

    @property
    def ack_p99_ms(self) -> float:
        return percentile([a.duration_ms for a in self.acks], 99)

    @property
    def non200(self) -> int:
        return sum(1 for a in self.acks if not a.ok)


# --- one phase ------------------------------------------------------------------------------------


def tally(result: Result, ws: Workspace, since_call: int) -> None:
    """What the bot posted since Web API call ``since_call``: refusals, replies, anything else."""
    for call in ws.fake.calls[since_call:]:
        text = str(call.params.get("text", ""))
        if call.method == "chat.postEphemeral" and call.params.get("user") == REQUESTER:
            if text.startswith(TOO_MANY_PREFIX):
                result.refused_person += 1
            elif text == TOO_BUSY:
                result.refused_process += 1
            else:
                result.other_ephemerals.append(text)
        elif call.method == "chat.postMessage":
            if text == REPLY:
                result.replies += 1
            else:
                result.other_posts.append(text)


async def run_phase(
    result: Result, args: argparse.Namespace, *, prefix: str, logdir: Path, children: list[Child]
) -> Result:
    limits = (
        {}
        if result.defaults
        else {
            "MAX_RUNS_PER_PERSON": str(result.per_person),
            "MAX_RUNS_PER_PROCESS": str(result.per_process),
        }
    )

    def model(_body: dict[str, Any]) -> Reply:
        return Reply(text=REPLY, delay=args.model_delay)

    quiet = args.model_delay + 1.0
    async with (
        CountingOpenAI(responder=model) as openai_server,
        Workspace("http://127.0.0.1:1/unset", SIGNING_SECRET, BOT_TOKEN, subscriptions=("app_mention",)) as ws,
    ):
        # open loop: no client-side connection limit (the Sender's default of 100 would queue the burst here)
        ws.sender._session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=10.0), connector=aiohttp.TCPConnector(limit=0)
        )
        env = {
            "SLACK_BOT_TOKEN": BOT_TOKEN,
            "SLACK_SIGNING_SECRET": SIGNING_SECRET,
            "SLACK_API_URL": ws.api_url,
            "OPENAI_API_KEY": "sk-bench",
            "OPENAI_BASE_URL": openai_server.base_url,
            "REDIS_URL": args.redis,
            "REDIS_PREFIX": prefix,
            "LOG_LEVEL": "WARNING",
            **limits,
        }
        bot = spawn(f"bot-{result.name[1]}", "bot", env, free_port(), logdir, command="serve --http")
        children.append(bot)
        sampler: RssSampler | None = None
        try:
            await bot.wait_listening()
            ws.sender.bot_url = bot.url
            pid = bot.proc.pid

            # warm-up: one run by someone else, finished before the burst
            await ws.mention(WARMUP_USER, CHANNEL, "warm-up")
            await settle(ws, quiet=quiet, timeout=30 + 3 * args.model_delay)
            result.rss_before_kb = rss_kb(pid) or 0
            calls_before, requests_before = len(ws.fake.calls), len(openai_server.requests)
            openai_server.peak_in_flight = openai_server.in_flight

            print(f"{result.name}: {args.mentions} mentions in {args.seconds:g} s ...", file=sys.stderr)
            sampler = RssSampler(pid, limit=args.seconds + 200)
            sampler.start()
            cpu0, t0 = cpu_seconds(pid), time.perf_counter()

            async def send(i: int) -> None:
                try:
                    delivery = await ws.mention(REQUESTER, CHANNEL, f"burst request {i}: say hi")
                except Exception as exc:  # a refused connection, a timeout: counted, never fatal
                    result.errors.append(type(exc).__name__)
                    return
                if delivery.ack is not None:
                    result.acks.append(delivery.ack)

            await paced(args.mentions, args.mentions / args.seconds, send, [])
            result.burst_s = time.perf_counter() - t0
            result.settled = await settle(ws, quiet=quiet, timeout=120 + 2 * args.model_delay)
            result.cpu_s = cpu_seconds(pid) - cpu0
            result.wall_s = time.perf_counter() - t0
            sampler.stop()
            result.rss_final_kb = rss_kb(pid) or 0
            result.rss_peak_kb = max(sampler.peak_kb, result.rss_final_kb)
            result.samples, result.sample_gap_ms = len(sampler.samples), sampler.max_gap_ms
            result.model_calls = len(openai_server.requests) - requests_before
            result.peak_in_flight = openai_server.peak_in_flight
            tally(result, ws, calls_before)
        except Exception:
            tail = "\n  ".join(bot.log_lines()[-15:])
            print(f"{bot.name} log (last lines):\n  {tail}", file=sys.stderr)
            raise
        finally:
            if sampler is not None:
                sampler.stop()
            await bot.stop()  # before the fakes close, so the bot drains against live servers
        result.log_lines = [
            re.sub(r"run_[\w-]+", "run_*", re.sub(r"^\d{4}-\d\d-\d\d \S+ ", "", line))
            for line in bot.log_lines()
            if re.search(r"WARNING|ERROR|Traceback", line) and "`token` will be unused" not in line
        ]
    return result


# --- report ---------------------------------------------------------------------------------------


def mb(kb: int) -> float:
    return kb / 1024


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b else "-"


def report(args: argparse.Namespace, a: Result, b: Result) -> None:
    print(
        f"\nburst: {args.mentions} mentions in {args.seconds:g} s from one person, each a new thread; model turn "
        f"{args.model_delay:g} s; one bot process (`python -m bot serve --http`)\n"
    )
    head_a = f"(a) limits {a.per_person}/person, {a.per_process}/process"
    head_b = "(b) limits off"
    grow_a, grow_b = a.rss_peak_kb - a.rss_before_kb, b.rss_peak_kb - b.rss_before_kb
    rows: list[list[object]] = [
        ["RSS before the burst, MB", mb(a.rss_before_kb), mb(b.rss_before_kb), ""],
        ["peak RSS, MB", mb(a.rss_peak_kb), mb(b.rss_peak_kb), ratio(a.rss_peak_kb, b.rss_peak_kb)],
        ["peak RSS growth over before, MB", mb(grow_a), mb(grow_b), ratio(grow_a, grow_b)],
        ["final RSS (settled), MB", mb(a.rss_final_kb), mb(b.rss_final_kb), ""],
        ["model calls started", a.model_calls, b.model_calls, ratio(a.model_calls, b.model_calls)],
        ["model calls in flight, peak", a.peak_in_flight, b.peak_in_flight, ""],
        ['refused with "slow down"', a.refused, b.refused, ""],
        [
            "refused: per person / per process",
            f"{a.refused_person} / {a.refused_process}",
            f"{b.refused_person} / {b.refused_process}",
            "",
        ],
        ["replies posted", a.replies, b.replies, ""],
        ["ack p99, ms", a.ack_p99_ms, b.ack_p99_ms, ""],
        ["acks non-200 / send errors", f"{a.non200} / {len(a.errors)}", f"{b.non200} / {len(b.errors)}", ""],
        ["CPU of the bot, s", a.cpu_s, b.cpu_s, ratio(a.cpu_s, b.cpu_s)],
    ]
    print(table(["", head_a, head_b, "a/b"], rows))
    print()
    for r in (a, b):
        print(
            f"{r.name}: burst sent in {r.burst_s:.1f} s, measured {r.wall_s:.1f} s "
            f"({'settled' if r.settled else 'STILL BUSY at the timeout'}); {r.samples} RSS samples, "
            f"longest gap {r.sample_gap_ms:.0f} ms; {len(r.other_posts)} other posts, "
            f"{len(r.other_ephemerals)} other ephemerals"
        )
        accounted = r.replies + r.refused
        if accounted != len(r.acks) - r.non200:
            print(f"  note: {accounted} replies + refusals for {len(r.acks) - r.non200} acked mentions")
        for label, texts in (("other post", r.other_posts), ("other ephemeral", r.other_ephemerals)):
            for text, count in Counter(texts).most_common(3):
                print(f"  {label}: {count} x {text[:150]!r}")
        for line, count in Counter(r.log_lines).most_common(3):
            print(f"  bot log: {count} x {line[:200]}")


# --- main -----------------------------------------------------------------------------------------


async def run(args: argparse.Namespace, prefix: str, logdir: Path, children: list[Child]) -> None:
    fields = Settings.model_fields
    per_person = int(fields["max_runs_per_person"].default)
    per_process = int(fields["max_runs_per_process"].default)
    for var in (
        "SLACK_APP_TOKEN",
        "OPENAI_MODEL",
        "ASK_ANSWERERS",
        "ASK_TTL_SECONDS",
        "MAX_RUNS_PER_PERSON",
        "MAX_RUNS_PER_PROCESS",
        "MODEL_TURN_TIMEOUT",
    ):
        os.environ.pop(var, None)  # the children inherit the environment: keep them on the defaults
    limited = await run_phase(
        Result("(a) limits", per_person, per_process, defaults=True),
        args,
        prefix=f"{prefix}a:",
        logdir=logdir,
        children=children,
    )
    baseline = await run_phase(
        Result("(b) no limits", OFF, OFF, defaults=False), args, prefix=f"{prefix}b:", logdir=logdir, children=children
    )
    report(args, limited, baseline)


async def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--mentions", type=int, default=500, help="mentions in the burst")
    parser.add_argument("--seconds", type=float, default=10.0, help="length of the burst")
    parser.add_argument("--model-delay", type=float, default=2.0, help="seconds per loopback model turn")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    args = parser.parse_args()
    if args.mentions < 1 or args.seconds <= 0 or args.model_delay < 0:
        parser.error("--mentions must be at least 1, --seconds more than 0, --model-delay at least 0")

    prefix = f"bench-burst:{uuid.uuid4().hex[:8]}:"
    budget = 2 * (30 + 30 + args.seconds + 140 + 5 * args.model_delay + 20) + 30
    return await run_cleanly(
        lambda logdir, children: run(args, prefix, logdir, children),
        redis_url=args.redis,
        prefix=prefix,
        budget=budget,
        name="burst-memory",
    )


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
