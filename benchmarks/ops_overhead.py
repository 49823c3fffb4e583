"""What the operations layer (bot/ops) adds per event, in microseconds of CPU, with no tracing SDK configured.

Run: ``.venv/bin/python -m benchmarks.ops_overhead [--n 100000]``

Measured, each ``--n`` times in a loop (median of 3 rounds): a Web API call's counter (``observe.slack_call``), a
model turn's histogram (``observe.model_turn``), a run segment's in-flight gauge (``observe.run_segment``), and one
``/metrics`` exposition (its size in bytes too). None of them touches Redis.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Callable

from bot.ops import metrics, observe


def per_call(n: int, body: Callable[[], object]) -> float:
    start = time.process_time()
    for _ in range(n):
        body()
    return (time.process_time() - start) / n * 1e6


def slack_call() -> None:
    with observe.slack_call("chat.postMessage"):
        pass


def model_turn() -> None:
    with observe.model_turn("run_bench"):
        pass


async def segments(n: int) -> float:
    start = time.process_time()
    for _ in range(n):
        async with observe.run_segment("run_bench"):
            pass
    return (time.process_time() - start) / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--n", type=int, default=100_000)
    n = parser.parse_args().n
    rounds = {
        "Web API call counter (slack_call)": [per_call(n, slack_call) for _ in range(3)],
        "model turn histogram (model_turn)": [per_call(n, model_turn) for _ in range(3)],
        "run in flight gauge (run_segment)": [asyncio.run(segments(n)) for _ in range(3)],
        "/metrics exposition": [per_call(max(1, n // 100), metrics.exposition) for _ in range(3)],
    }
    for name, values in rounds.items():
        print(f"{name:38s} {statistics.median(values):8.1f} us")
    print(f"{'/metrics size':38s} {len(metrics.exposition()):8d} bytes")


if __name__ == "__main__":
    main()
