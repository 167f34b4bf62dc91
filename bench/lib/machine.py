"""How fast this machine runs Python right now: printed with `make bench`'s figures.

The 2-core VMs the benchmarks run on change speed by about 2× within minutes (other tenants),
which moves every absolute figure (milliseconds, CPU per node) with it. One fixed loop timed
before each bench tells a reader which rows ran in a slow phase; ratios measured within one
bench are not affected.
"""

from __future__ import annotations

import statistics
import time

ADDITIONS = 1_000_000


def python_speed_ms(repeats: int = 5) -> float:
    """Milliseconds for 10⁶ Python additions in a loop (median of `repeats`): lower is faster."""
    times: list[float] = []
    for _ in range(repeats):
        started = time.perf_counter()
        total = 0
        for number in range(ADDITIONS):
            total += number
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)
