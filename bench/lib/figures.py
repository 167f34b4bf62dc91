"""Figures the benchmarks print: nearest-rank percentiles, millisecond spreads, and goals.

A goal is printed where the bench prints it and, when `bench/run_all.py` runs the bench, also
appended as one JSON line to the file named by RAVEN_BENCH_FIGURES, from which `make bench`
prints one table at the end.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

FIGURES_ENV = "RAVEN_BENCH_FIGURES"


def pct(values: Sequence[float], q: float) -> float:
    """The q-th percentile (nearest rank) of `values`; NaN when empty."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))]


def ms(seconds: float) -> str:
    """Seconds as milliseconds, right-aligned."""
    return f"{seconds * 1000:8.1f}"


def spread_line(label: str, values: Sequence[float], *, width: int = 40) -> str:
    """`label  n  p50  p99  max` in milliseconds."""
    return (
        f"  {label:<{width}} {len(values):>5} {ms(pct(values, 50))} {ms(pct(values, 99))} "
        f"{ms(max(values, default=float('nan')))}"
    )


def goal(
    metric: str,
    value: float,
    limit: float,
    *,
    unit: str,
    at_least: bool = False,
    baseline: float | None = None,
) -> str:
    """`met` or `MISSED` for `value` against `limit` (at most, or `at_least`), recorded for
    `make bench`'s table; `baseline`: the figure before the work that set the goal (issue
    22's table when it was filed), shown as value ÷ baseline."""
    met = value >= limit if at_least else value <= limit
    target = os.environ.get(FIGURES_ENV)
    if target:
        record = {
            "bench": Path(sys.argv[0]).stem,
            "metric": metric,
            "value": value,
            "goal": f"{'≥' if at_least else '≤'} {limit:g} {unit}".strip(),
            "unit": unit,
            "met": met,
            "baseline": baseline,
        }
        with open(target, "a", encoding="utf-8") as out:
            out.write(json.dumps(record) + "\n")
    return "met" if met else "MISSED"
