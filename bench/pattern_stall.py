r"""Benchmark: the event loop's longest stall while a person's pattern meets a check's whole
output (issue 38, finding 2: `^(a+)+$` on the event loop stalled it 5-6 s at 27 characters
under Python's `re`, doubling with each more; a check's output may be 16,000).

A ticker task on the loop sleeps 1 ms at a time and records how late each wake-up is (the
loop's lag); its worst lag over `--repeats` (20) runs of each case is the stall. Each case
is the matching path the bot uses:

- check: a standing check's verdict as a firing takes it (`Check.judge`: the verdict in a
  worker thread; RE2 releases the GIL while it matches) on a 16,000-character output
  (`OUTPUT_CAP`), for the finding's pattern, a catastrophic `metric: NAME /REGEX/` and the
  costliest metric pattern the 500-instruction cap accepts (`(\w+\s*){N}`, N as large as it
  allows: reading its group makes RE2 run its NFA over the whole match, linear but slow);
- campaign: a round's watch as the monitor polls it (`RoundWatch.observe` in a worker
  thread, as `oncall/engine/monitoring.py` calls it) fed one 16,000-character line, with a
  catastrophic campaign `pattern` and with the costliest one;
- on the loop: that costliest campaign pattern observed on the loop, as polls did before
  (informational: why the match leaves the loop).

The match time itself (in the worker thread) is printed beside each. It asserts nothing
about time. About 10 s. Run from the repo root:

    .venv/bin/python bench/pattern_stall.py [--repeats 20]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse
import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from bench.lib.figures import goal
from core.patterns import MAX_PROGRAM_SIZE, PatternError, UserPattern
from host.features.schedules.work import Check, parse_check
from oncall.model import Budget, CampaignSpec, JobStatus, MetricSpec
from oncall.monitor import RoundWatch
from oncall.probe import OUTPUT_CAP, ProbeResult

GOAL_MS = 20.0
# The finding's figure: 5-6 s on the loop for 27 characters (16,000 never return under `re`).
BASELINE_MS = 5500.0
TICK = 0.001


@dataclass(frozen=True)
class Case:
    label: str
    run: Callable[[], Awaitable[object]]
    goal: bool = True


async def _stall(run: Callable[[], Awaitable[object]]) -> tuple[float, float]:
    """(the loop's worst lag, the run's own time) in seconds, while `run` is awaited."""
    worst = 0.0
    done = asyncio.Event()

    async def ticker() -> None:
        nonlocal worst
        while not done.is_set():
            due = time.perf_counter() + TICK
            await asyncio.sleep(TICK)
            worst = max(worst, time.perf_counter() - due)

    ticking = asyncio.create_task(ticker())
    await asyncio.sleep(TICK * 5)  # the ticker is running before the work starts
    start = time.perf_counter()
    await run()
    took = time.perf_counter() - start
    done.set()
    await ticking
    return worst, took


def _costliest() -> str:
    r"""The largest `(\w+\s*){N}` the program-size cap accepts."""
    for count in range(MAX_PROGRAM_SIZE, 0, -1):
        pattern = rf"(\w+\s*){{{count}}}"
        try:
            UserPattern(pattern)
        except PatternError:
            continue
        return pattern
    raise AssertionError("no pattern fits the cap")


def _observe(pattern: str, line: bytes) -> Callable[[], None]:
    """A fresh round's watch reading `line` with `pattern` (what one poll does)."""
    spec = CampaignSpec(
        goal="bench",
        command="true",
        metric=MetricSpec(name="loss", pattern=pattern),
        budget=Budget(wall_seconds=3600),
    )

    def observe() -> None:
        RoundWatch(spec, None, 0.0).observe(1.0, line, JobStatus(state="running"))

    return observe


def _check(line: str) -> Check:
    check = parse_check(line)
    assert check is not None
    return check


def cases() -> list[Case]:
    aaa = ProbeResult(0, "a" * (OUTPUT_CAP - 1) + "!")
    finding = _check(r"check: cat log | when: output ~ ^(a+)+$")
    metric = _check(r"check: cat log | metric: m /^(?:a+)+m=(\d+)$/ | when: m > 5")
    costliest = _costliest()
    heavy = _check(f"check: cat log | metric: m /{costliest}/ | when: m > 5")
    words = ProbeResult(0, "a" * OUTPUT_CAP)
    line = b"a" * (OUTPUT_CAP - 1) + b"!\n"
    catastrophic = _observe(r"^(?:a+)+loss=(\S+)$", line)
    costly = _observe(costliest, b"a" * OUTPUT_CAP + b"\n")

    async def on_loop() -> None:
        costly()

    return [
        Case("check `^(a+)+$`, 16,000 chars", lambda: finding.judge(aaa)),
        Case(r"check metric /^(?:a+)+m=(\d+)$/, 16,000 chars", lambda: metric.judge(aaa)),
        Case(f"check metric /{costliest}/, 16,000 chars", lambda: heavy.judge(words)),
        Case(
            r"campaign pattern ^(?:a+)+loss=(\S+)$, 16,000-char line",
            lambda: asyncio.to_thread(catastrophic),
        ),
        Case(f"campaign pattern {costliest}, 16,000-char line", lambda: asyncio.to_thread(costly)),
        Case("the same on the loop (as polls did before)", on_loop, goal=False),
    ]


async def bench(args: argparse.Namespace) -> int:
    print(f"  {'case':<58} {'stall ms':>9} {'match ms':>9}   (worst of {args.repeats})")
    for case in cases():
        stalls, times = [], []
        for _ in range(args.repeats):
            stall, took = await _stall(case.run)
            stalls.append(stall)
            times.append(took)
        worst = max(stalls) * 1000
        line = f"  {case.label:<58} {worst:9.1f} {max(times) * 1000:9.1f}"
        if case.goal:
            said = goal(
                f"loop stall: {case.label}",
                worst,
                GOAL_MS,
                unit="ms",
                baseline=BASELINE_MS if "^(a+)+$" in case.label else None,
            )
            line += f"   goal ≤ {GOAL_MS:g} ms: {said}"
        print(line, flush=True)
    return 0


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--repeats", type=int, default=20, help="runs of each case")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point."""
    sys.exit(asyncio.run(bench(parse_args(argv))))


if __name__ == "__main__":
    main()
