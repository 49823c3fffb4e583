"""The request rate at which ack p99 crosses 100 ms, for ``serve`` and for ``web`` + ``worker``.

Run: ``.venv/bin/python -m benchmarks.throughput [--rates 25,50,100,150,200,300] [--seconds 5] [--split-only |
--serve-only]``

Each rate is one :mod:`benchmarks.ack_latency` measurement (its processes, loopback fakes and mix: half mentions,
half clicks, a 1 s model turn) on a Redis of its own, for one deployment; the rates go up until both kinds' ack p99
cross :data:`~benchmarks.ack_latency.TARGET_P99_MS`. Prints a row per rate (ack p99 per kind, CPU per request of
each process) and the first rate over the line per deployment. One shared 2-core machine runs the load generator,
the fakes, Redis and the bot: the knee is where this machine saturates, not where the bot would on its own cores.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import io
import sys
import uuid

from benchmarks._redis_stats import own_redis
from benchmarks._util import table
from benchmarks.ack_latency import TARGET_P99_MS, WARMUP_RATE, Figures, run, run_cleanly


async def one(rate: float, *, split: bool, seconds: float, redis_url: str) -> Figures | None:
    """One measurement at ``rate`` requests/s; None if it failed (its output is printed then)."""
    args = argparse.Namespace(
        rate=rate,
        seconds=seconds,
        model_delay=1.0,
        redis=redis_url,
        split=split,
        worker_nice=0,
        profile="",
        own_redis=False,
        runs=1,
    )
    figures: list[Figures] = []
    out = io.StringIO()
    n = rate * seconds
    with contextlib.redirect_stdout(out):
        status = await run_cleanly(
            functools.partial(run, args, f"bench-tp:{uuid.uuid4().hex[:8]}:", into=figures),
            redis_url=redis_url,
            prefix="bench-tp:",
            budget=120 + 4 * seconds + n / WARMUP_RATE + 10,
            name="throughput",
        )
    if status or not figures:
        print(out.getvalue(), file=sys.stderr)
        return None
    return figures[0]


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="25,50,100,150,200,300", help="requests/s to try, ascending")
    parser.add_argument("--seconds", type=float, default=5.0, help="length of each measured window")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--serve-only", action="store_true")
    which.add_argument("--split-only", action="store_true")
    args = parser.parse_args()
    rates = [float(r) for r in args.rates.split(",")]
    deployments = [d for d in (False, True) if not (d and args.serve_only) and not (not d and args.split_only)]
    rows, knees = [], []
    for split in deployments:
        name = "web + worker" if split else "serve"
        knee = "not reached"
        for rate in rates:
            print(f"{name}: {rate:g} requests/s ...", file=sys.stderr)
            async with own_redis() as url:
                f = await one(rate, split=split, seconds=args.seconds, redis_url=url)
            if f is None:
                rows.append([name, f"{rate:g}", "failed", "", "", ""])
                break
            cpu = " + ".join(f"{ms:.1f}" for ms in f.cpu_ms.values())
            rows.append(
                [name, f"{rate:g}", f"{f.p99['mention']:.1f}", f"{f.p99['click']:.1f}", cpu, f"{f.bare_cpu_ms:.2f}"]
            )
            if max(f.p99.values()) > TARGET_P99_MS:
                if knee == "not reached":  # the first rate over the line (the rates go on until both kinds are)
                    knee = f"{rate:g}"
                if min(f.p99.values()) > TARGET_P99_MS:
                    break
        knees.append([name, knee])
    print(
        table(
            [
                "deployment",
                "requests/s",
                "mention p99 ms",
                "click p99 ms",
                "CPU ms/request (bot [+ worker])",
                "bare Bolt CPU ms/request",
            ],
            rows,
        )
    )
    print()
    print(table(["deployment", f"first rate with an ack p99 over {TARGET_P99_MS:g} ms"], knees))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
