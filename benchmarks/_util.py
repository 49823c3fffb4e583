"""Small helpers shared by the benchmark scripts: percentiles and a plain-text table."""

from __future__ import annotations

import statistics
from collections.abc import Sequence


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100) by nearest rank; 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(q / 100 * len(ordered) + 0.5) - 1))
    return ordered[rank]


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Right-aligned columns, one header line and a rule."""
    cells = [[str(h) for h in headers]] + [[f"{c:.2f}" if isinstance(c, float) else str(c) for c in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def summary(values: Sequence[float]) -> tuple[float, float, float]:
    """(p50, p99, mean) of ``values``."""
    return percentile(values, 50), percentile(values, 99), statistics.fmean(values) if values else 0.0
