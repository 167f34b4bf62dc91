"""Figures the benchmarks print: nearest-rank percentiles and millisecond spreads."""

from __future__ import annotations

from collections.abc import Sequence


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
