"""Cost per request of the product against the bot a team would otherwise write (issue 26), measured in one sitting.

Run: ``.venv/bin/python -m benchmarks.cost [--rate 50] [--seconds 10] [--rounds 3] [--model-delay 1.0] [--split]
[--floor]``
and ``.venv/bin/python -m benchmarks.cost --waiting 1000 [--burst-first] [--targets tuned,serve]``

Targets, each a subprocess (or two) served over HTTP like ``benchmarks.ack_latency``'s bot:

- ``naive``: ``python -m benchmarks.handwritten_bot`` (the hand-written bot, library defaults);
- ``tuned``: ``python -m benchmarks.handwritten_bot --tuned`` (uvloop, the openai client's aiohttp transport);
- ``serve``: ``python -m bot serve``, the product as deployed in one process;
- with ``--split``, ``split``: ``python -m bot web`` + ``python -m bot worker``;
- with ``--floor``, ``floor``: ``python -m benchmarks.handwritten_bot --floor``, the tuned bot making the Web API
  call and the Redis round trips and commands ``serve`` makes beyond it, with none of its logic: the cost of those
  calls alone. ``floor / tuned`` is what they add; ``serve / floor`` what the rest of the product adds.

``--rounds`` rounds, each running every target once (the order rotated by one each round, so no target always goes
first or last); each target gets a fresh fake Slack (``Workspace``, subscribed to ``app_mention``), a fresh loopback
model (``ack_latency.Model``: ``--model-delay`` s per turn, an ``ask_user`` call for a mention, a short reply for a
tool result) and its own ``REDIS_PREFIX`` on a redis-server of this benchmark's own (``own_redis``), so the server's
counters are that target's alone. Per target: questions opened (not measured), warm-up requests, then ``--rate``
requests/s for ``--seconds`` s open loop, mentions and clicks alternating (``ack_latency.Load``), and the target left
to finish the runs the window started.

Per target, from the window's start until its work settled, divided by the window's requests that were served (a
mention that got its question, a click that got its reply: every request, on a machine that keeps up; the table's
"served/sent, failed" column says how many, and how many acks failed or timed out):

- CPU ms: user + system of every process of the target (``/proc/<pid>/stat``);
- Web API calls: the fake Slack's log (Bolt's one ``auth.test`` falls before the window);
- Redis round trips: the server's read events (``INFO stats`` ``total_reads_processed``; a pipeline is one),
  less this script's own reads of the counters; Redis commands (``INFO commandstats``) beside them;
- ack p50 / p99 ms of mentions and clicks (the fake Slack's signed sender).

The ratios (product / naive, product / tuned, split / tuned) are taken within each round, then the median of the
rounds is printed beside each round's figure.

``--waiting N``: for ``tuned`` and ``serve``, after a warm-up the process's RSS idle (``VmRSS``), then N mentions
whose questions are left waiting, the bot settled, its RSS again; and the Redis bytes of the waiting questions: the
``MEMORY USAGE`` of every key under the prefix after, less before, over N (and ``used_memory``'s growth over N), by
kind of key. Then N more, and the RSS growth over those: a process's RSS keeps the peak of the first burst (runs in
flight, buffers), so the second growth is nearer what the waiting questions themselves hold. With ``--burst-first``
"idle" is measured after N mentions the model answers in text (the same in-flight peak, nothing left waiting), so
the first growth is what waiting holds; ``--targets`` picks the targets (default ``tuned,serve``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import sys
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import redis.asyncio as aioredis

from benchmarks._redis_stats import RedisTraffic, own_redis, traffic, used_memory
from benchmarks._util import percentile, table
from benchmarks.ack_latency import (
    BOT_TOKEN,
    NO_LIMIT,
    SIGNING_SECRET,
    WARMUP_RATE,
    WARMUP_REQUESTS,
    Child,
    Load,
    Model,
    Outcome,
    open_questions,
    paced,
    question_messages,
    run_cleanly,
    settle,
    spawn,
)
from bot.fakeslack.workspace import Workspace
from bot.testing.openai_server import FakeOpenAI
from bot.testing.ports import free_port

KINDS = ("mention", "click")
# name -> the processes: (process name, module, command)
TARGETS: dict[str, tuple[tuple[str, str, str], ...]] = {
    "naive": (("bot", "benchmarks.handwritten_bot", ""),),
    "tuned": (("bot", "benchmarks.handwritten_bot", "--tuned"),),
    "floor": (("bot", "benchmarks.handwritten_bot", "--floor"),),
    "serve": (("bot", "bot", "serve"),),
    "split": (("web", "bot", "web"), ("worker", "bot", "worker")),
}
PAIRS = (("serve", "naive"), ("serve", "tuned"), ("split", "tuned"), ("floor", "tuned"), ("serve", "floor"))
GATES = {("serve", "naive"): 1.0, ("serve", "tuned"): 1.15, ("split", "tuned"): 1.25}  # issue 26, CPU per request


@dataclass
class Result:
    """One target's figures in one round. Per request: over the requests of the window the target served (mentions
    that got their question + clicks that got their reply; all of them on a machine that keeps up), the work they
    started included."""

    target: str
    n: int
    cpu_total_ms: dict[str, float] = field(default_factory=dict)  # process name -> CPU ms, window + its work
    slack_calls: Counter[str] = field(default_factory=Counter)
    redis: RedisTraffic | None = None
    ack_p50: dict[str, float] = field(default_factory=dict)
    ack_p99: dict[str, float] = field(default_factory=dict)
    failed: int = 0  # acks not 200 + requests that got no answer at all
    questions: int = 0
    replies: int = 0
    settled: bool = True

    @property
    def served(self) -> int:
        return self.questions + self.replies

    @property
    def per(self) -> int:
        """The denominator of the per-request figures: the requests served (``n`` if none were)."""
        return self.served or self.n

    @property
    def cpu_ms(self) -> dict[str, float]:
        return {name: ms / self.per for name, ms in self.cpu_total_ms.items()}

    @property
    def cpu(self) -> float:
        return sum(self.cpu_ms.values())

    @property
    def calls(self) -> float:
        return sum(self.slack_calls.values()) / self.per

    @property
    def round_trips(self) -> float:
        return self.redis.reads / self.per if self.redis else 0.0

    @property
    def commands(self) -> float:
        return self.redis.commands.total() / self.per if self.redis else 0.0


def environment(*, api_url: str, model_url: str, redis_url: str, prefix: str) -> dict[str, str]:
    """The variables every target takes (the product's names), with the product's run limits off (one requester opens
    every run: ``ack_latency``'s reason)."""
    return {
        "SLACK_BOT_TOKEN": BOT_TOKEN,
        "SLACK_SIGNING_SECRET": SIGNING_SECRET,
        "SLACK_API_URL": api_url,
        "OPENAI_API_KEY": "sk-bench",
        "OPENAI_BASE_URL": model_url,
        "REDIS_URL": redis_url,
        "REDIS_PREFIX": prefix,
        "LOG_LEVEL": "WARNING",
        "MAX_RUNS_PER_PERSON": str(NO_LIMIT),
        "MAX_RUNS_PER_PROCESS": str(NO_LIMIT),
        "MAX_WAITING_PER_PERSON": str(NO_LIMIT),  # each mention leaves a question waiting: never refused here
    }


async def read_overhead(url: str) -> RedisTraffic:
    """What one ``traffic`` call adds to the counters it reads (its connection, HELLO, two INFOs, its close)."""
    first = await traffic(url)
    return await traffic(url) - first


class Sitting:
    """The fakes and processes of one target: ``async with Sitting(...) as s`` (fresh fakes, the processes started and
    listening; on exit the processes stopped while the fakes still run)."""

    def __init__(self, target: str, *, args: argparse.Namespace, prefix: str, logdir: Path, children: list[Child]):
        self.target = target
        self.args = args
        self.prefix = prefix
        self.logdir = logdir
        self.children = children
        self.model = Model(delay=args.model_delay)
        self.openai = FakeOpenAI(responder=self.model)
        self.ws = Workspace("http://127.0.0.1:1/unset", SIGNING_SECRET, BOT_TOKEN, subscriptions=("app_mention",))
        self.procs: list[Child] = []

    async def __aenter__(self) -> Sitting:
        await self.openai.__aenter__()
        await self.ws.__aenter__()
        # ack_latency's reason: an open-loop load must not queue behind the client's 100-connection limit
        self.ws.sender._session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=10.0), connector=aiohttp.TCPConnector(limit=0)
        )
        for var in ("SLACK_APP_TOKEN", "OPENAI_MODEL", "ASK_ANSWERERS", "ASK_TTL_SECONDS"):
            os.environ.pop(var, None)  # the children inherit the environment: HTTP mode, defaults
        env = environment(
            api_url=self.ws.api_url,
            model_url=self.openai.base_url,
            redis_url=self.args.redis,
            prefix=self.prefix,
        )
        for name, module, command in TARGETS[self.target]:
            child = spawn(f"{self.target}-{name}", module, env, free_port(), self.logdir, command=command)
            self.procs.append(child)
            self.children.append(child)
        await self.procs[0].wait_listening()  # a worker serves no HTTP
        self.ws.sender.bot_url = self.procs[0].url
        return self

    async def __aexit__(self, *exc: object) -> None:
        try:
            await asyncio.gather(*(c.stop() for c in self.procs))
        finally:
            await self.ws.__aexit__(None, None, None)
            await self.openai.__aexit__(None, None, None)

    @property
    def pids(self) -> dict[str, int]:
        return {c.name.removeprefix(f"{self.target}-"): c.proc.pid for c in self.procs}

    async def settle(self) -> bool:
        return await settle(self.ws, quiet=self.args.model_delay + 1.0, timeout=60 + 3 * self.args.model_delay)


async def measure(args: argparse.Namespace, target: str, prefix: str, logdir: Path, children: list[Child]) -> Result:
    """One target's window (see the module docstring)."""
    n = round(args.rate * args.seconds)
    async with Sitting(target, args=args, prefix=prefix, logdir=logdir, children=children) as s:
        load = Load(s.ws)
        await load.mention()  # Bolt's first request calls auth.test
        await s.settle()
        needed = n // 2 + WARMUP_REQUESTS // 2
        questions = await open_questions(
            load, needed=needed, rate=min(args.rate, WARMUP_RATE), model_delay=args.model_delay, name=target
        )
        await load.warm_up(questions[:WARMUP_REQUESTS])
        await s.settle()
        print(f"{target}: {n} requests at {args.rate:g}/s ...", file=sys.stderr)
        overhead = await read_overhead(args.redis)
        calls_before = len(s.ws.fake.calls)
        redis_before = await traffic(args.redis)
        phase = await load.measure(n=n, rate=args.rate, questions=questions[WARMUP_REQUESTS // 2 :], pids=s.pids)
        finished = await s.settle()
        Load.settled(phase, n=n, pids=s.pids)
        redis_traffic = await traffic(args.redis) - redis_before - overhead
        outcome = Outcome.of(s.ws, calls_before, finished)
        result = Result(
            target=target,
            n=n,
            cpu_total_ms={name: ms * n for name, ms in phase.cpu_ms.items()},
            slack_calls=Counter(call.method for call in s.ws.fake.calls[calls_before:]),
            redis=redis_traffic,
            ack_p50={k: percentile([a.duration_ms for a in phase.acks[k]], 50) for k in KINDS},
            ack_p99={k: percentile([a.duration_ms for a in phase.acks[k]], 99) for k in KINDS},
            failed=sum(1 for k in KINDS for a in phase.acks[k] if not a.ok)
            + sum(len(e) for e in phase.errors.values()),
            questions=outcome.questions,
            replies=outcome.replies,
            settled=finished,
        )
    return result


def print_round(results: list[Result]) -> None:
    rows = [
        [
            r.target,
            f"{r.cpu:.2f}" + (f" ({' + '.join(f'{v:.2f}' for v in r.cpu_ms.values())})" if len(r.cpu_ms) > 1 else ""),
            f"{r.calls:.2f}",
            f"{r.round_trips:.2f}",
            f"{r.commands:.2f}",
            f"{r.ack_p50['mention']:.1f} / {r.ack_p99['mention']:.1f}",
            f"{r.ack_p50['click']:.1f} / {r.ack_p99['click']:.1f}",
            f"{r.served}/{r.n}, {r.failed}" + ("" if r.settled else " BUSY"),
        ]
        for r in results
    ]
    headers = [
        "target",
        "CPU ms/req",
        "Web API calls/req",
        "Redis round trips/req",
        "Redis commands/req",
        "mention ack p50/p99 ms",
        "click ack p50/p99 ms",
        "served/sent, failed",
    ]
    print(table(headers, rows))


def print_details(results: list[Result]) -> None:
    """Which calls and which commands, per request, for each target (from the last round)."""
    for r in results:
        calls = ", ".join(f"{m} {c / r.per:.2f}" for m, c in r.slack_calls.most_common())
        print(f"{r.target}: Web API per request: {calls}")
        if r.redis is not None:
            top = ", ".join(f"{name} {c / r.per:.2f}" for name, c in r.redis.commands.most_common(14))
            print(
                f"{r.target}: Redis commands per request: {top}; "
                f"{r.redis.bytes_in / r.per / 1024:.1f} KB in, {r.redis.bytes_out / r.per / 1024:.1f} KB out"
            )


def print_summary(rounds: list[dict[str, Result]]) -> None:
    med = statistics.median
    targets = list(rounds[0])
    print(f"\nmedian of {len(rounds)} rounds")
    rows = []
    for t in targets:
        rs = [r[t] for r in rounds]
        rows.append(
            [
                t,
                f"{med(r.cpu for r in rs):.2f}",
                f"{med(r.calls for r in rs):.2f}",
                f"{med(r.round_trips for r in rs):.2f}",
                f"{med(r.commands for r in rs):.2f}",
                f"{med(r.ack_p50['mention'] for r in rs):.1f} / {med(r.ack_p99['mention'] for r in rs):.1f}",
                f"{med(r.ack_p50['click'] for r in rs):.1f} / {med(r.ack_p99['click'] for r in rs):.1f}",
                " / ".join(f"{r.cpu:.2f}" for r in rs),
            ]
        )
    headers = [
        "target",
        "CPU ms/req",
        "Web API calls/req",
        "Redis round trips/req",
        "Redis commands/req",
        "mention ack p50/p99 ms",
        "click ack p50/p99 ms",
        "CPU ms/req per round",
    ]
    print(table(headers, rows))
    print("\nratios, each round's own, then their median (CPU per request; gate from issue 26)")
    ratio_rows = []
    for a, b in PAIRS:
        if a not in rounds[0] or b not in rounds[0]:
            continue
        for label, get in (
            ("CPU", lambda r: r.cpu),
            ("Web API calls", lambda r: r.calls),
            ("Redis round trips", lambda r: r.round_trips),
        ):
            ratios = [get(r[a]) / get(r[b]) if get(r[b]) else float("inf") for r in rounds]
            gate = GATES.get((a, b)) if label == "CPU" else None
            ratio_rows.append(
                [
                    f"{a} / {b}",
                    label,
                    f"{med(ratios):.2f}x",
                    " / ".join(f"{x:.2f}" for x in ratios),
                    "" if gate is None else f"<= {gate:.2f}x: {'yes' if med(ratios) <= gate else 'NO'}",
                ]
            )
    print(table(["pair", "per request", "median", "per round", "gate"], ratio_rows))
    p99_rows = []
    for a, b in PAIRS:
        if a not in rounds[0] or b not in rounds[0]:
            continue
        for kind in KINDS:
            ratios = [r[a].ack_p99[kind] / r[b].ack_p99[kind] if r[b].ack_p99[kind] else float("inf") for r in rounds]
            p99_rows.append([f"{a} / {b}", kind, f"{med(ratios):.2f}x", " / ".join(f"{x:.2f}" for x in ratios)])
    print(table(["pair", "ack p99", "median", "per round"], p99_rows))


async def sitting(args: argparse.Namespace) -> int:
    targets = ["naive", "tuned"] + (["floor"] if args.floor else []) + ["serve"] + (["split"] if args.split else [])
    n = args.rate * args.seconds
    budget = 180 + 4 * args.seconds + n / WARMUP_RATE + 10 * args.model_delay
    rounds: list[dict[str, Result]] = []
    for i in range(args.rounds):
        order = targets[i % len(targets) :] + targets[: i % len(targets)]
        print(f"\n=== round {i + 1} of {args.rounds}: {', '.join(order)} ===", file=sys.stderr)
        results: dict[str, Result] = {}
        for target in order:
            prefix = f"bench-cost:{target}:{uuid.uuid4().hex[:8]}:"
            got: list[Result] = []

            async def body(
                logdir: Path, children: list[Child], target: str = target, prefix: str = prefix, got: list[Result] = got
            ) -> None:
                got.append(await measure(args, target, prefix, logdir, children))

            status = await run_cleanly(body, redis_url=args.redis, prefix=prefix, budget=budget, name=f"cost-{target}")
            if status:
                return status
            results[target] = got[0]
        rounds.append({t: results[t] for t in targets})
        print(
            f"\nround {i + 1}: {args.rate:g} requests/s for {args.seconds:g} s, mentions and clicks alternating, "
            f"model turn {args.model_delay:g} s"
        )
        print_round([results[t] for t in targets])
    print()
    print_details(list(rounds[-1].values()))
    print_summary(rounds)
    print(f"load average (1, 5, 15 min): {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


# --- --waiting N ------------------------------------------------------------------------------------


def rss_kib(pid: int) -> int:
    """``VmRSS`` of process ``pid`` (KiB)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def key_kind(key: str, prefix: str) -> str:
    """``key`` less ``prefix`` with its ids blanked (``{run_...}``, numbers, user and channel ids): its kind."""
    kind = re.sub(r"\{[^}]*\}", "{*}", key.removeprefix(prefix))
    kind = re.sub(r"\b[UCDGTW][A-Z0-9_]{2,}\b", "*", kind)
    kind = re.sub(r"\b(?=[A-Za-z0-9_]*\d)[A-Za-z0-9_]{6,}\b", "#", kind)  # event ids, hex ids
    return re.sub(r"\d+(\.\d+)?", "#", kind)


async def key_bytes(url: str, prefix: str) -> Counter[str]:
    """The ``MEMORY USAGE`` (bytes) of the keys under ``prefix`` by kind (:func:`key_kind`), and their number under
    ``"#keys " + kind``."""
    client = aioredis.from_url(url)
    try:
        keys = [k.decode() async for k in client.scan_iter(match=f"{prefix}*", count=1000)]
        sizes: Counter[str] = Counter()
        for i in range(0, len(keys), 500):
            async with client.pipeline(transaction=False) as pipe:
                for key in keys[i : i + 500]:
                    pipe.memory_usage(key, samples=0)
                for key, size in zip(keys[i : i + 500], await pipe.execute(), strict=True):
                    kind = key_kind(key, prefix)
                    sizes[kind] += int(size or 0)
                    sizes["#keys " + kind] += 1
        return sizes
    finally:
        await client.aclose()


@dataclass
class Waiting:
    target: str
    n: int
    rss_cold_kib: int  # after the warm-up (before the text burst of --burst-first)
    rss_idle_kib: int
    rss_after_kib: int
    rss_after_twice_kib: int  # after another N waiting questions (the burst's own peak already reached once)
    keys: int
    key_bytes: int
    kinds: Counter[str]  # key kind -> bytes added; "#keys " + kind -> keys added
    used_memory: int
    questions: int


async def measure_waiting(
    args: argparse.Namespace, target: str, prefix: str, logdir: Path, children: list[Child]
) -> Waiting:
    n = args.waiting
    async with Sitting(target, args=args, prefix=prefix, logdir=logdir, children=children) as s:
        load = Load(s.ws)
        await load.mention()
        await s.settle()
        questions = await open_questions(
            load, needed=WARMUP_REQUESTS, rate=WARMUP_RATE, model_delay=args.model_delay, name=target
        )
        await load.warm_up(questions)  # every path once: imports, pools, scripts
        await s.settle()
        await asyncio.sleep(2.0)
        pid = s.procs[0].proc.pid
        cold = rss_kib(pid)
        if args.burst_first:
            # the same burst answered in text: its runs in flight reach the peak the waiting burst reaches, and
            # leave nothing waiting; idle is measured after it, so the growth is what waiting itself holds
            print(
                f"{target}: {n} mentions at {args.rate:g}/s answered in text (nothing left waiting) ...",
                file=sys.stderr,
            )
            s.model.plain = True
            await paced(n, args.rate, lambda _i: load.mention(), [])
            await s.settle()
            s.model.plain = False
            await asyncio.sleep(2.0)
        idle = rss_kib(pid)
        sizes_before = await key_bytes(args.redis, prefix)
        memory_before = await used_memory(args.redis)
        open_before = len(question_messages(s.ws))
        print(f"{target}: {n} mentions at {args.rate:g}/s, their questions left waiting ...", file=sys.stderr)
        await paced(n, args.rate, lambda _i: load.mention(), [])
        await s.settle()
        await asyncio.sleep(2.0)
        after = rss_kib(pid)
        added = await key_bytes(args.redis, prefix)
        added.subtract(sizes_before)
        memory_after = await used_memory(args.redis)
        waiting_now = len(question_messages(s.ws)) - open_before
        print(f"{target}: {n} more, to tell what is held from the first burst's peak ...", file=sys.stderr)
        await paced(n, args.rate, lambda _i: load.mention(), [])
        await s.settle()
        await asyncio.sleep(2.0)
        twice = rss_kib(pid)
        return Waiting(
            target=target,
            n=n,
            rss_cold_kib=cold,
            rss_idle_kib=idle,
            rss_after_kib=after,
            rss_after_twice_kib=twice,
            keys=sum(v for k, v in added.items() if k.startswith("#keys ")),
            key_bytes=sum(v for k, v in added.items() if not k.startswith("#keys ")),
            kinds=added,
            used_memory=memory_after - memory_before,
            questions=waiting_now,
        )


async def waiting(args: argparse.Namespace) -> int:
    n = args.waiting
    budget = 300 + 2 * n / min(args.rate, WARMUP_RATE) + 10 * args.model_delay
    rows = []
    results: list[Waiting] = []
    for target in args.targets.split(","):
        prefix = f"bench-cost:{target}:{uuid.uuid4().hex[:8]}:"
        got: list[Waiting] = []

        async def body(
            logdir: Path, children: list[Child], target: str = target, prefix: str = prefix, got: list[Waiting] = got
        ) -> None:
            got.append(await measure_waiting(args, target, prefix, logdir, children))

        status = await run_cleanly(body, redis_url=args.redis, prefix=prefix, budget=budget, name=f"cost-{target}")
        if status:
            return status
        w = got[0]
        results.append(w)
        rows.append(
            [
                w.target,
                w.questions,
                f"{w.rss_cold_kib / 1024:.1f}",
                f"{w.rss_idle_kib / 1024:.1f}",
                f"{w.rss_after_kib / 1024:.1f}",
                f"{(w.rss_after_kib - w.rss_idle_kib) / 1024:+.1f}",
                f"{(w.rss_after_twice_kib - w.rss_after_kib) / 1024:+.1f}",
                w.keys,
                f"{w.key_bytes / max(1, w.n):.0f}",
                f"{w.used_memory / max(1, w.n):.0f}",
            ]
        )
    print(f"\n{n} questions left waiting (mentions at {args.rate:g}/s, model turn {args.model_delay:g} s)")
    headers = [
        "target",
        "questions waiting",
        "RSS after warm-up MiB",
        "RSS idle MiB" + (f" (after {n} answered in text)" if args.burst_first else ""),
        "RSS after MiB",
        "growth MiB (gate +3)",
        f"growth MiB, {n} more",
        "new keys",
        "MEMORY USAGE B/question (gate 3000)",
        "used_memory B/question",
    ]
    print(table(headers, rows))
    for w in results:
        kinds = sorted(((k, v) for k, v in w.kinds.items() if not k.startswith("#keys ") and v), key=lambda kv: -kv[1])
        parts = [f"{k} {v / w.n:.0f} B ({w.kinds['#keys ' + k] / w.n:.2f} keys)" for k, v in kinds]
        print(f"{w.target}: Redis per waiting question by key: " + ", ".join(parts))
    print(f"load average (1, 5, 15 min): {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=50.0, help="requests per second (half mentions, half clicks)")
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each measured window")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of every target; medians of the rounds")
    parser.add_argument("--model-delay", type=float, default=1.0, help="seconds per loopback model turn")
    parser.add_argument("--split", action="store_true", help="also the product as `bot web` + `bot worker`")
    parser.add_argument(
        "--floor",
        action="store_true",
        help="also the tuned bot making the calls `serve` makes (handwritten_bot --floor)",
    )
    parser.add_argument(
        "--waiting", type=int, default=0, help="instead: RSS and Redis bytes with N questions left waiting"
    )
    parser.add_argument(
        "--burst-first",
        action="store_true",
        help="with --waiting: idle measured after the same burst answered in text (its in-flight peak reached)",
    )
    parser.add_argument("--targets", default="tuned,serve", help="with --waiting: which targets, comma-separated")
    args = parser.parse_args()
    async with own_redis() as url:
        args.redis = url
        if args.waiting:
            return await waiting(args)
        return await sitting(args)


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
