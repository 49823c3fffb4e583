"""Ack latency of mentions and clicks under steady load, the bot beside a bare Bolt app that only acks.

Run: ``.venv/bin/python -m benchmarks.ack_latency [--rate 100] [--seconds 10] [--model-delay 1.0]
[--redis redis://127.0.0.1:6379/0]``

Three processes, so the measurement is honest on a small machine:

- the bot under test, as deployed: ``python -m bot serve`` (HTTP mode) with ``SLACK_API_URL`` at the
  fake Slack, ``OPENAI_BASE_URL`` at the loopback model, the real Redis under a unique ``REDIS_PREFIX``, and
  the run limits off (``MAX_RUNS_PER_PERSON`` / ``MAX_RUNS_PER_PROCESS`` 100000: one requester opens every run,
  and the point is acks while runs work; what the limits do is ``benchmarks.burst_memory``'s subject);
- the baseline, ``python -m benchmarks.bare_bolt``: a Bolt ``AsyncApp`` served the same way that only acks;
- this process: the load generator, the fake Slack (``Workspace``; the app is subscribed to ``app_mention``
  only, so a mention is one event) and ``FakeOpenAI``, whose every turn takes ``--model-delay`` seconds
  (a user message last -> an ``ask_user`` single_select call with 3 options; a tool result last -> a short
  reply).

Before the bot phase, warm-up mentions (at most 25/s) open one question per click to come (not measured). Then
``--rate`` requests/s for ``--seconds`` s, open loop (each request is a task started at its time slot),
alternating a mention (a new run) and a click by the requester on an option of a distinct open question (a
resume). ``Ack.duration_ms`` of the fake Slack's signed sender is recorded. The same mix is then sent to the
bare app (clicks on still-open question messages; it only acks). Each target gets a few warm-up requests
first, and the bot is left to finish its runs before the bare phase starts.

Diagnostics per phase: CPU of each process (% of one core), this process's event-loop lag (its own
scheduling delay is inside every measured ack), how late requests left their slots, and model calls in
flight. The subprocesses are stopped and the Redis keys deleted at the end, also on error.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import gc
import math
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import redis.asyncio as aioredis

from benchmarks._redis_stats import RedisTraffic, own_redis, traffic, used_memory
from benchmarks._util import percentile, table
from bot.fakeslack.sender import Ack
from bot.fakeslack.state import BOT_USER_ID, JSON
from bot.fakeslack.workspace import Workspace
from bot.testing.openai_server import FakeOpenAI, Reply, tool_call
from bot.testing.ports import free_port

ROOT = Path(__file__).resolve().parent.parent
CHANNEL = "C_GENERAL"
REQUESTER = "U_ALICE"
LABELS = ("Red", "Green", "Blue")
ANSWER = "Green"
SIGNING_SECRET = "bench-signing-secret"
BOT_TOKEN = "xoxb-bench"
OPTION_ACTION = re.compile(r"^ask_option_\d+$")
WARMUP_REQUESTS = 10  # per target, half mentions and half clicks, sent one at a time
NO_LIMIT = 100_000  # MAX_RUNS_PER_PERSON / MAX_RUNS_PER_PROCESS / MAX_WAITING_PER_PERSON for the bot under test
WARMUP_RATE = 25.0  # mentions/s that open the questions: slow enough for the bot to keep up
QUESTION = "Which colour should it be?"
REPLY = "Thanks, noted."
TARGET_P99_MS = 100.0
TARGET_RATIO = 1.5


# --- the loopback model ---------------------------------------------------------------------------


@dataclass
class Model:
    """The responder of ``FakeOpenAI``: every turn waits ``delay`` s; records when each call started."""

    delay: float
    started: list[float] = field(default_factory=list)
    plain: bool = False  # answer every turn with text (no question): a burst that leaves nothing waiting

    def __call__(self, body: dict[str, Any]) -> Reply:
        self.started.append(time.perf_counter())
        if body["messages"][-1]["role"] == "tool" or self.plain:
            return Reply(text=REPLY, delay=self.delay)
        question = {
            "question": QUESTION,
            "options": [{"label": label} for label in LABELS],
            "selection_mode": "single_select",
        }
        return Reply(tool_calls=[tool_call("ask_user", question, id=f"call_{uuid.uuid4().hex[:12]}")], delay=self.delay)

    def max_in_flight(self, since: float, until: float) -> int:
        """Most model calls waiting at once between ``since`` and ``until`` (each lasts ``delay`` s)."""
        times = sorted(t for t in self.started if since - self.delay <= t <= until)
        best, lo = 0, 0
        for hi, t in enumerate(times):
            while times[lo] <= t - self.delay:
                lo += 1
            if t >= since:
                best = max(best, hi - lo + 1)
        return best


# --- processes ------------------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` so far (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Child:
    name: str
    proc: subprocess.Popen[bytes]
    port: int
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/slack/events"

    async def wait_listening(self, timeout: float = 30.0) -> None:  # noqa: ASYNC109
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"{self.name} exited with {self.proc.returncode}; log: {self.log.read_text()[-2000:]}"
                )
            try:
                _reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{self.name} did not listen on port {self.port} in {timeout:g} s") from None
                await asyncio.sleep(0.05)
                continue
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
            return

    async def stop(self) -> None:
        """SIGTERM (the bot drains its work in flight for up to 10 s, so keep the fakes up), then SIGKILL."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.to_thread(self.proc.wait, 15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def log_lines(self) -> list[str]:
        return [line for line in self.log.read_text(errors="replace").splitlines() if line.strip()]


def spawn(
    name: str, module: str, env: dict[str, str], port: int, logdir: Path, *, command: str = "", nice: int = 0
) -> Child:
    """``python -m module command...`` (``command`` split on spaces) on loopback port ``port``, under ``nice -n
    nice`` if given, its output to ``logdir/name.log``."""
    log = logdir / f"{name}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                *(["nice", "-n", str(nice)] if nice else []),
                sys.executable,
                "-m",
                module,
                *command.split(),
            ],
            cwd=ROOT,
            env={**os.environ, **env, "PORT": str(port)},
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    return Child(name=name, proc=proc, port=port, log=log)


# --- load -----------------------------------------------------------------------------------------


@dataclass
class Phase:
    """What one target's measured window produced."""

    acks: dict[str, list[Ack]] = field(default_factory=lambda: {"mention": [], "click": []})
    errors: dict[str, list[str]] = field(default_factory=lambda: {"mention": [], "click": []})
    late_ms: list[float] = field(default_factory=list)  # how late each request left its slot
    loop_lag_ms: list[float] = field(default_factory=list)  # this process's scheduling delay
    cpu: dict[str, float] = field(default_factory=dict)  # process name -> % of one core
    cpu0: dict[str, float] = field(default_factory=dict)  # process name -> CPU s at the window's start
    cpu_ms: dict[str, float] = field(default_factory=dict)  # process name -> CPU ms per request, work included
    redis: RedisTraffic | None = None  # the bot's Redis traffic, window + its work (with --own-redis)
    slack_calls: Counter[str] = field(default_factory=Counter)  # the bot's Web API calls, window + its work
    started: float = 0.0
    ended: float = 0.0


async def loop_lag(into: list[float], stop: asyncio.Event, period: float = 0.005) -> None:
    """Record how much later than asked each short sleep of this event loop wakes up."""
    while not stop.is_set():
        t0 = time.perf_counter()
        await asyncio.sleep(period)
        into.append(max(0.0, (time.perf_counter() - t0 - period) * 1000))


def question_messages(ws: Workspace) -> list[JSON]:
    """The bot's messages in CHANNEL that still offer option buttons, oldest first (``{channel, ts}``)."""
    found = []
    for message in ws.state.conversations[CHANNEL].messages.values():
        if message.get("user") != BOT_USER_ID:
            continue
        if any(
            OPTION_ACTION.match(str(element.get("action_id", "")))
            for block in message.get("blocks", [])
            if block.get("type") == "actions"
            for element in block.get("elements", [])
        ):
            found.append({"channel": CHANNEL, "ts": message["ts"]})
    return found


async def settle(ws: Workspace, *, quiet: float, timeout: float) -> bool:  # noqa: ASYNC109
    """Wait until the bot has made no Web API call for ``quiet`` seconds; False after ``timeout``."""
    deadline = time.monotonic() + timeout
    seen, since = len(ws.fake.calls), time.monotonic()
    while time.monotonic() - since < quiet:
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.1)
        if len(ws.fake.calls) != seen:
            seen, since = len(ws.fake.calls), time.monotonic()
    return True


async def paced(n: int, rate: float, send: Callable[[int], Awaitable[None]], late_ms: list[float]) -> None:
    """Start ``send(i)`` at ``start + i / rate`` for i in 0..n-1 without waiting for earlier ones; then wait all."""
    loop = asyncio.get_running_loop()
    start = loop.time() + 0.05
    tasks = []
    for i in range(n):
        slot = start + i / rate
        if (wait := slot - loop.time()) > 0:
            await asyncio.sleep(wait)
        late_ms.append(max(0.0, (loop.time() - slot) * 1000))
        tasks.append(asyncio.create_task(send(i)))
    await asyncio.gather(*tasks)


class Load:
    """Mentions and clicks from the fake Slack, recorded into a :class:`Phase`."""

    def __init__(self, ws: Workspace) -> None:
        self.ws = ws
        self.counter = 0

    async def mention(self, phase: Phase | None = None) -> None:
        self.counter += 1
        try:
            delivery = await self.ws.mention(REQUESTER, CHANNEL, f"bench request {self.counter}: pick a colour")
        except Exception as exc:  # a refused connection, a timeout: counted, never fatal
            if phase is not None:
                phase.errors["mention"].append(type(exc).__name__)
            return
        if phase is not None and delivery.ack is not None:
            phase.acks["mention"].append(delivery.ack)

    async def click(self, question: JSON, phase: Phase | None = None) -> None:
        try:
            ack = await self.ws.click(question, ANSWER, user=REQUESTER)
        except Exception as exc:
            if phase is not None:
                phase.errors["click"].append(type(exc).__name__)
            return
        if phase is not None:
            phase.acks["click"].append(ack)

    async def warm_up(self, questions: list[JSON]) -> None:
        """A few requests one at a time: connections, Bolt's auth.test, code paths."""
        for i in range(WARMUP_REQUESTS // 2):
            await self.mention()
            await self.click(questions[i % len(questions)])

    async def measure(self, *, n: int, rate: float, questions: list[JSON], pids: dict[str, int]) -> Phase:
        """``n`` requests at ``rate``/s: even slots mention, odd slots click ``questions[i // 2]``."""
        phase = Phase()
        stop = asyncio.Event()
        lag_task = asyncio.create_task(loop_lag(phase.loop_lag_ms, stop))

        async def send(i: int) -> None:
            if i % 2 == 0:
                await self.mention(phase)
            else:
                await self.click(questions[(i // 2) % len(questions)], phase)

        cpu0 = phase.cpu0 = {name: cpu_seconds(pid) for name, pid in pids.items()}
        # The load generator shares its process with the fakes (Slack, the model), whose heap grows with every
        # message: a full collection of it stalled this loop for 100+ ms, which every ack in flight then counted
        # as the bot's. The window measures the bot, so this process collects before it and not during it.
        gc.collect()
        gc.disable()
        phase.started = time.perf_counter()
        try:
            await paced(n, rate, send, phase.late_ms)
        finally:
            phase.ended = time.perf_counter()
            gc.enable()
            stop.set()
            await lag_task
        wall = phase.ended - phase.started
        phase.cpu = {name: (cpu_seconds(pid) - cpu0[name]) / wall * 100 for name, pid in pids.items()}
        return phase

    @staticmethod
    def settled(phase: Phase, *, n: int, pids: dict[str, int]) -> None:
        """Record each process's CPU per request from the window's start until now (the runs the window started
        have finished: their model turns, Slack calls and saves are included)."""
        phase.cpu_ms = {name: (cpu_seconds(pid) - phase.cpu0[name]) * 1000 / n for name, pid in pids.items()}


# --- the run --------------------------------------------------------------------------------------


async def delete_keys(redis_url: str, prefix: str) -> int:
    client = aioredis.from_url(redis_url)
    try:
        keys = [k async for k in client.scan_iter(match=f"{prefix}*", count=1000)]
        for i in range(0, len(keys), 1000):
            await client.delete(*keys[i : i + 1000])
        return len(keys)
    finally:
        await client.aclose()


@dataclass
class Outcome:
    """What the bot posted after a phase: questions asked, final replies, anything else (failures, notes)."""

    questions: int = 0
    replies: int = 0
    other_posts: list[str] = field(default_factory=list)
    ephemerals: list[str] = field(default_factory=list)
    finished: bool = True

    @classmethod
    def of(cls, ws: Workspace, since: int, finished: bool) -> Outcome:
        out = cls(finished=finished)
        for call in ws.fake.calls[since:]:
            text = str(call.params.get("text", ""))
            if call.method == "chat.postMessage":
                if text.startswith(QUESTION):
                    out.questions += 1
                elif text == REPLY:
                    out.replies += 1
                else:
                    out.other_posts.append(text)
            elif call.method == "chat.postEphemeral":
                out.ephemerals.append(text)
            elif call.method == "chat.stopStream":  # a streamed reply: its text is the message's, once stopped
                message = ws.state.message(str(call.params.get("channel")), str(call.params.get("ts")))
                if message is not None and str(message.get("text", "")).strip() == REPLY:
                    out.replies += 1
        return out


@dataclass
class Figures:
    """One run's headline figures: CPU ms per request by process (``bot`` is the serve or web process) and ack p99
    by request kind, for the bot and the bare app."""

    cpu_ms: dict[str, float]
    bare_cpu_ms: float
    p99: dict[str, float]
    bare_p99: dict[str, float]


async def run(
    args: argparse.Namespace, prefix: str, logdir: Path, children: list[Child], *, into: list[Figures]
) -> None:
    n = round(args.rate * args.seconds)
    n_mentions, n_clicks = (n + 1) // 2, n // 2
    model = Model(delay=args.model_delay)
    async with (
        FakeOpenAI(responder=model) as openai_server,
        Workspace("http://127.0.0.1:1/unset", SIGNING_SECRET, BOT_TOKEN, subscriptions=("app_mention",)) as ws,
    ):
        # The Sender's default aiohttp connector allows 100 connections; an open-loop load must not queue
        # behind that client-side limit, or slow acks would be measured late. Same session for both targets.
        ws.sender._session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=10.0), connector=aiohttp.TCPConnector(limit=0)
        )
        common = {
            "SLACK_BOT_TOKEN": BOT_TOKEN,
            "SLACK_SIGNING_SECRET": SIGNING_SECRET,
            "SLACK_API_URL": ws.api_url,
            "LOG_LEVEL": "WARNING",
        }
        bot_env = {
            **common,
            "OPENAI_API_KEY": "sk-bench",
            "OPENAI_BASE_URL": openai_server.base_url,
            "REDIS_URL": args.redis,
            "REDIS_PREFIX": prefix,
            # one requester opens every run and ~100 model calls are in flight: the run limits (3 per person, 50
            # per process by default) would refuse most of them; this measures acks of runs that do their work
            "MAX_RUNS_PER_PERSON": str(NO_LIMIT),
            "MAX_RUNS_PER_PROCESS": str(NO_LIMIT),
            "MAX_WAITING_PER_PERSON": str(NO_LIMIT),  # each run leaves a question waiting: never refused here
        }
        for var in ("SLACK_APP_TOKEN", "OPENAI_MODEL", "ASK_ANSWERERS", "ASK_TTL_SECONDS"):
            os.environ.pop(var, None)  # the children inherit the environment: keep them in HTTP mode, defaults
        bot = spawn("bot", "bot", bot_env, free_port(), logdir, command="web" if args.split else "serve")
        children.append(bot)
        if args.split:  # the web process only acks and queues; this worker runs the queued work
            worker = spawn("worker", "bot", bot_env, free_port(), logdir, command="worker", nice=args.worker_nice)
            children.append(worker)
        bare = spawn("bare", "benchmarks.bare_bolt", common, free_port(), logdir)
        children.append(bare)
        try:
            worker = next((c for c in children if c.name == "worker"), None)
            phases = await drive(args, ws, model, bot, bare, worker)
        except Exception:
            for child in children:
                tail = "\n  ".join(child.log_lines()[-15:])
                print(f"{child.name} log (last lines):\n  {tail}", file=sys.stderr)
            raise
        finally:
            # before the fakes close, so the bot drains against live servers
            await asyncio.gather(*(child.stop() for child in children))
    report(args, n, n_mentions, n_clicks, phases.bot, phases.bare, model)
    into.append(
        Figures(
            cpu_ms={k: v for k, v in phases.bot.cpu_ms.items() if k in ("bot", "worker")},
            bare_cpu_ms=phases.bare.cpu_ms.get("bare", 0.0),
            p99={k: percentile([a.duration_ms for a in phases.bot.acks[k]], 99) for k in ("mention", "click")},
            bare_p99={k: percentile([a.duration_ms for a in phases.bare.acks[k]], 99) for k in ("mention", "click")},
        )
    )
    bare_ms = max(phases.bare.cpu_ms["bare"], 1e-9)
    cpu_rows = [[name, f"{ms:.2f}", f"{ms / bare_ms:.2f}x"] for name, ms in into[-1].cpu_ms.items()]
    cpu_rows.append(["bare Bolt", f"{phases.bare.cpu_ms['bare']:.2f}", "1.00x"])
    print(table(["process", "CPU ms per request (its work included)", "/ bare Bolt's"], cpu_rows))
    print_traffic(phases.bot, n)
    o = phases.outcome
    mentions_ok = sum(1 for a in phases.bot.acks["mention"] if a.ok)
    clicks_ok = sum(1 for a in phases.bot.acks["click"] if a.ok)
    print(
        f"bot runs after the measured window ({'settled' if o.finished else 'STILL BUSY after the timeout'}): "
        f"{o.questions}/{mentions_ok} mentions got their question, {o.replies}/{clicks_ok} clicks got the final "
        f"reply; {len(o.other_posts)} other thread posts, {len(o.ephemerals)} ephemerals"
    )
    for label, texts in (("other posts", o.other_posts), ("ephemerals", o.ephemerals)):
        for text, count in Counter(texts).most_common(3):
            print(f"  {label}: {count} x {text[:150]!r}")
    print(f"bare clicks went to {phases.bare_questions} open question messages")
    for child in children:
        lines = [
            re.sub(r"run_[\w-]+", "run_*", re.sub(r"^\d{4}-\d\d-\d\d \S+ ", "", line))
            for line in child.log_lines()
            if re.search(r"WARNING|ERROR|Traceback", line) and "`token` will be unused" not in line
        ]
        for line, count in Counter(lines).most_common(3):
            print(f"{child.name} log: {count} x {line[:200]}")


@dataclass
class Phases:
    bot: Phase
    bare: Phase
    outcome: Outcome
    bare_questions: int


async def drive(
    args: argparse.Namespace, ws: Workspace, model: Model, bot: Child, bare: Child, worker: Child | None = None
) -> Phases:
    n = round(args.rate * args.seconds)
    n_clicks = n // 2
    await asyncio.gather(bot.wait_listening(), bare.wait_listening())
    pids = {"bot": bot.proc.pid, "bare": bare.proc.pid, "load+fakes": os.getpid()}
    if worker is not None:
        pids["worker"] = worker.proc.pid
    load = Load(ws)

    # -- bot: open questions for every click to come (+ warm-up clicks), not measured --------------
    ws.sender.bot_url = bot.url
    needed = n_clicks + WARMUP_REQUESTS // 2
    quiet = args.model_delay + 1.0
    await load.mention()  # Bolt's first request calls auth.test
    await settle(ws, quiet=quiet, timeout=30)
    memory_before = await used_memory(args.redis) if args.own_redis else 0
    questions = await open_questions(
        load, needed=needed, rate=min(args.rate, WARMUP_RATE), model_delay=args.model_delay
    )
    if args.own_redis:  # the bot's Redis holds little else than these waiting questions (and one thread each)
        per_question = (await used_memory(args.redis) - memory_before) / max(1, len(questions) - 1)
        print(f"Redis memory per waiting question (its run, thread, inbox, schedule): {per_question / 1024:.1f} KB")
    await load.warm_up(questions[:WARMUP_REQUESTS])
    measured_questions = questions[WARMUP_REQUESTS // 2 :]
    await settle(ws, quiet=quiet, timeout=30)  # the warm-up runs finish

    # -- bot: measured ---------------------------------------------------------------------------
    print(f"bot: {n} requests at {args.rate:g}/s ...", file=sys.stderr)
    profilers = start_profilers(args, pids)
    calls_before = len(ws.fake.calls)
    redis_before = await traffic(args.redis) if args.own_redis else None
    bot_phase = await load.measure(n=n, rate=args.rate, questions=measured_questions, pids=pids)
    finished = await settle(ws, quiet=quiet, timeout=60 + 3 * args.model_delay)
    Load.settled(bot_phase, n=n, pids=pids)
    if redis_before is not None:
        bot_phase.redis = await traffic(args.redis) - redis_before
    bot_phase.slack_calls = Counter(call.method for call in ws.fake.calls[calls_before:])
    for profiler in profilers:
        profiler.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
        await asyncio.to_thread(profiler.wait, 30)
    outcome = Outcome.of(ws, calls_before, finished)

    # -- bare Bolt: same mix; clicks on question messages that are still open ----------------------
    ws.sender.bot_url = bare.url
    open_now = question_messages(ws)
    print(f"bare: warm-up, then {n} requests at {args.rate:g}/s ...", file=sys.stderr)
    await load.warm_up(open_now)
    bare_phase = await load.measure(n=n, rate=args.rate, questions=open_now, pids=pids)
    await asyncio.sleep(0.5)  # the bare app only acks: nothing runs on after its window
    Load.settled(bare_phase, n=n, pids=pids)
    return Phases(bot=bot_phase, bare=bare_phase, outcome=outcome, bare_questions=len(open_now))


async def open_questions(load: Load, *, needed: int, rate: float, model_delay: float, name: str = "bot") -> list[JSON]:
    """Mentions at ``rate``/s (not measured) until at least ``needed`` question messages are open (up to 4 tries,
    each followed by the bot settling); returns the open question messages. Raises ``RuntimeError`` short of it."""
    ws = load.ws
    for attempt in range(4):
        missing = needed - len(question_messages(ws))
        if missing <= 0:
            break
        print(f"{name}: warm-up, {missing} mentions at {rate:g}/s to open questions for the clicks", file=sys.stderr)
        await paced(missing, rate, lambda _i: load.mention(), [])
        await settle(ws, quiet=model_delay + 1.0, timeout=60 + 3 * model_delay)
        if attempt == 3:
            raise RuntimeError(f"only {len(question_messages(ws))} of {needed} questions were posted")
    return question_messages(ws)


def print_traffic(phase: Phase, n: int) -> None:
    """Web API calls and (with ``--own-redis``) Redis commands and bytes per request, for the window and its work."""
    calls = ", ".join(f"{method} {count / n:.2f}" for method, count in phase.slack_calls.most_common())
    print(f"Web API calls per request: {sum(phase.slack_calls.values()) / n:.2f} ({calls})")
    if phase.redis is not None:
        top = ", ".join(f"{name} {count / n:.2f}" for name, count in phase.redis.commands.most_common(12))
        print(
            f"Redis per request: {phase.redis.commands.total() / n:.2f} commands ({top}); "
            f"{phase.redis.bytes_in / n / 1024:.1f} KB in, {phase.redis.bytes_out / n / 1024:.1f} KB out"
        )


def start_profilers(args: argparse.Namespace, pids: dict[str, int]) -> list[subprocess.Popen[bytes]]:
    """With ``--profile DIR``: py-spy (a sampling profiler, installed separately: ``pip install py-spy``) attached to
    the bot's processes for the measured window and the work after it; collapsed stacks in ``DIR/<name>.txt``."""
    if not args.profile:
        return []
    Path(args.profile).mkdir(parents=True, exist_ok=True)
    return [
        subprocess.Popen(
            ["py-spy", "record", "-p", str(pid), "-f", "raw", "-r", "200", "-o", f"{args.profile}/{name}.txt"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for name, pid in pids.items()
        if name in ("bot", "worker")
    ]


def latency_row(target: str, kind: str, acks: list[Ack], errors: list[str]) -> list[object]:
    ms = [a.duration_ms for a in acks]
    non200 = sum(1 for a in acks if not a.ok)
    slow = sum(1 for a in acks if a.duration_ms >= 3000)
    return [
        target,
        kind,
        len(acks),
        non200,
        slow,
        len(errors),
        percentile(ms, 50),
        percentile(ms, 99),
        max(ms, default=0.0),
    ]


def report(
    args: argparse.Namespace, n: int, n_mentions: int, n_clicks: int, bot: Phase, bare: Phase, model: Model
) -> None:
    print(
        f"\nack latency: {args.rate:g} requests/s for {args.seconds:g} s ({n_mentions} mentions + {n_clicks} clicks "
        f"per target), model turn {args.model_delay:g} s\n"
    )
    rows = [
        latency_row("bot", "mention", bot.acks["mention"], bot.errors["mention"]),
        latency_row("bot", "click", bot.acks["click"], bot.errors["click"]),
        latency_row("bare Bolt", "mention", bare.acks["mention"], bare.errors["mention"]),
        latency_row("bare Bolt", "click", bare.acks["click"], bare.errors["click"]),
    ]
    print(table(["target", "request", "acks", "non-200", "acks >3 s", "errors", "p50 ms", "p99 ms", "max ms"], rows))
    print()
    verdict_rows = []
    for kind in ("mention", "click"):
        bot_p99 = percentile([a.duration_ms for a in bot.acks[kind]], 99)
        bare_p99 = percentile([a.duration_ms for a in bare.acks[kind]], 99)
        ratio = bot_p99 / bare_p99 if bare_p99 else math.inf
        ok = bot_p99 < TARGET_P99_MS and ratio <= TARGET_RATIO and not bot.errors[kind]
        ok = ok and all(a.ok for a in bot.acks[kind])
        verdict_rows.append([kind, bot_p99, bare_p99, f"{ratio:.2f}x", "yes" if ok else "NO"])
    print(
        table(
            ["request", "bot p99 ms", "bare p99 ms", "bot/bare p99", "meets target"],
            verdict_rows,
        )
    )
    print(f"target: bot p99 < {TARGET_P99_MS:g} ms and within {TARGET_RATIO:g}x of bare Bolt's p99, all acked 200\n")
    diag = []
    for name, phase in (("bot", bot), ("bare Bolt", bare)):
        diag.append(
            [
                name,
                f"{phase.ended - phase.started:.1f}",
                f"{phase.cpu.get('bot', 0):.0f}"
                + (f" (+{phase.cpu['worker']:.0f} worker)" if "worker" in phase.cpu else ""),
                f"{phase.cpu.get('bare', 0):.0f}",
                f"{phase.cpu.get('load+fakes', 0):.0f}",
                percentile(phase.loop_lag_ms, 99),
                max(phase.loop_lag_ms, default=0.0),
                max(phase.late_ms, default=0.0),
                model.max_in_flight(phase.started, phase.ended),
            ]
        )
    print(
        table(
            [
                "phase",
                "wall s",
                "CPU% bot",
                "CPU% bare",
                "CPU% load+fakes",
                "gen loop lag p99 ms",
                "lag max ms",
                "send late max ms",
                "model calls in flight",
            ],
            diag,
        )
    )


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=100.0, help="requests per second (half mentions, half clicks)")
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each measured window")
    parser.add_argument("--model-delay", type=float, default=1.0, help="seconds per loopback model turn")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    parser.add_argument(
        "--split", action="store_true", help="run the bot as `python -m bot web` + `python -m bot worker` processes"
    )
    parser.add_argument("--profile", default="", help="py-spy the bot's processes into this folder (collapsed stacks)")
    parser.add_argument(
        "--own-redis", action="store_true", help="start a redis-server of its own (counts the bot's Redis traffic)"
    )
    parser.add_argument("--runs", type=int, default=1, help="repeat the whole measurement; print medians")
    parser.add_argument("--worker-nice", type=int, default=0, help="with --split: run the worker under `nice -n N`")
    args = parser.parse_args()

    if args.own_redis:
        async with own_redis() as url:
            args.redis = url
            args.own_redis = True
            return await measure_all(args)
    return await measure_all(args)


async def measure_all(args: argparse.Namespace) -> int:
    """``--runs`` runs of the whole measurement; with more than one, the medians."""
    n = args.rate * args.seconds
    budget = 120 + 4 * args.seconds + n / WARMUP_RATE + 10 * args.model_delay
    figures: list[Figures] = []
    for i in range(args.runs):
        if args.runs > 1:
            print(f"\n=== run {i + 1} of {args.runs} ===", file=sys.stderr)
        prefix = f"bench-ack:{uuid.uuid4().hex[:8]}:"
        status = await run_cleanly(
            functools.partial(run, args, prefix, into=figures),
            redis_url=args.redis,
            prefix=prefix,
            budget=budget,
            name="ack-latency",
        )
        if status:
            return status
    if args.runs > 1:
        print_medians(figures, split=args.split)
    return 0


def print_medians(figures: list[Figures], *, split: bool) -> None:
    """The median over runs of each process's CPU per request and its ratio to bare Bolt's (the ratio is taken
    within each run, then the median of the ratios), with ack p99 beside it."""
    med = statistics.median
    rows = []
    for name in figures[0].cpu_ms:
        rows.append(
            [
                ("web" if split else "serve") if name == "bot" else name,
                f"{med(f.cpu_ms[name] for f in figures):.2f}",
                f"{med(f.bare_cpu_ms for f in figures):.2f}",
                f"{med(f.cpu_ms[name] / f.bare_cpu_ms for f in figures):.2f}x",
                " / ".join(f"{f.cpu_ms[name] / f.bare_cpu_ms:.2f}" for f in figures),
            ]
        )
    print(f"\nmedian of {len(figures)} runs: CPU per request (each run's ratio against the bare app in that run)")
    print(table(["process", "CPU ms/request", "bare Bolt ms/request", "ratio (median)", "ratios per run"], rows))
    p99_rows = [
        [kind, f"{med(f.p99[kind] for f in figures):.1f}", f"{med(f.bare_p99[kind] for f in figures):.1f}"]
        for kind in ("mention", "click")
    ]
    print(table(["request", "bot ack p99 ms (median)", "bare ack p99 ms (median)"], p99_rows))


async def run_cleanly(
    body: Callable[[Path, list[Child]], Awaitable[None]], *, redis_url: str, prefix: str, budget: float, name: str
) -> int:
    """Run ``body(logdir, children)`` within ``budget`` s against the Redis at ``redis_url`` (pinged first: raises
    if it is down), then, also on a timeout, error or Ctrl-C, stop every child it started and delete the keys under
    ``prefix``. Returns the exit status: 0, 1 on the timeout, 130 when interrupted."""
    probe = aioredis.from_url(redis_url)
    try:
        await probe.ping()
    finally:
        await probe.aclose()
    children: list[Child] = []
    main_task = asyncio.current_task()
    assert main_task is not None
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):  # interrupted: still stop the children and delete the keys
        loop.add_signal_handler(sig, main_task.cancel)
    with tempfile.TemporaryDirectory(prefix=f"{name}-") as tmp:
        try:
            async with asyncio.timeout(budget):
                await body(Path(tmp), children)
        except TimeoutError:
            print(f"error: gave up after {budget:.0f} s", file=sys.stderr)
            return 1
        except asyncio.CancelledError:
            print("interrupted", file=sys.stderr)
            return 130
        finally:
            await asyncio.gather(*(child.stop() for child in children))
            deleted = await delete_keys(redis_url, prefix)
            print(f"(stopped {len(children)} subprocesses; deleted {deleted} Redis keys under {prefix!r})")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
