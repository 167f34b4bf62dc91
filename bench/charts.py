"""Picture figures: a campaign chart of 1,000 values (PNG, 1200 x 600) and a run picture of a
20-node graph (PNG and SVG), rendered repeatedly in one process after a first, cold render
(which imports matplotlib and is shown on its own).

Goals: chart p95 ≤ 300 ms for 1,000 points (issue 41); run picture p95 ≤ 500 ms for 20 nodes
(ours: a run report's attachment must not hold the report back noticeably).

Run: `.venv/bin/python bench/charts.py` (or `make bench`)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import math
import random
import time
from collections.abc import Callable

from bench.lib.figures import goal, ms, pct
from host.graph.picture import STATE_COLOURS, PictureNode, RunPicture, render_run
from oncall.chart import CampaignChart, ChartPoint, render_chart

REPEATS = 30
CHART_GOAL_MS = 300.0
PICTURE_GOAL_MS = 500.0


def campaign(points: int, rng: random.Random) -> CampaignChart:
    """A noisy, improving loss over 100 rounds, a few failed rounds and non-finite values."""
    per_round = max(1, points // 100)
    values = []
    for i in range(points):
        value = 1.0 / (1 + i / 50) + rng.gauss(0, 0.03)
        values.append(math.nan if rng.random() < 0.005 else value)
    t0 = 1_765_000_000.0
    return CampaignChart(
        campaign_id="cmp_0123456789",
        goal="tune the toy model until the validation loss is below 0.05",
        metric="loss",
        direction="min",
        points=tuple(ChartPoint(i // per_round + 1, t0 + 30 * i, v) for i, v in enumerate(values)),
        failed_rounds=frozenset(rng.sample(range(1, 101), 5)),
        rounds=100,
        target=0.05,
        baseline=1.0,
        started_at=t0,
        ended_at=t0 + 30 * points,
    )


def run(nodes: int, rng: random.Random) -> RunPicture:
    """A layered graph: each node depends on one or two earlier ones, states mixed."""
    states = [s for s in STATE_COLOURS if s != "earlier run"]
    made: list[PictureNode] = []
    for i in range(nodes):
        deps = (
            tuple(sorted({f"n{rng.randrange(i)}" for _ in range(rng.randint(1, 2))})) if i else ()
        )
        made.append(
            PictureNode(
                f"n{i}", rng.choice(["research", "code", "shell"]), rng.choice(states), deps
            )
        )
    return RunPicture("run_0123456789", "running", "a twenty-step plan", tuple(made))


def timed(render: Callable[[], bytes]) -> tuple[float, list[float], list[float]]:
    """(the first render's seconds, the next REPEATS renders' wall and CPU seconds). CPU
    time shows what the render costs when other processes share the cores (wall grows)."""
    start = time.perf_counter()
    render()
    first = time.perf_counter() - start
    wall, cpu = [], []
    for _ in range(REPEATS):
        start, started_cpu = time.perf_counter(), time.process_time()
        render()
        wall.append(time.perf_counter() - start)
        cpu.append(time.process_time() - started_cpu)
    return first, wall, cpu


def line(label: str, first: float, wall: list[float], cpu: list[float]) -> str:
    return (
        f"  {label:<30} {ms(first)} {ms(pct(wall, 50))} {ms(pct(wall, 95))} "
        f"{ms(max(wall))} {ms(pct(cpu, 95))}"
    )


def main() -> None:
    rng = random.Random(41)
    chart = campaign(1000, rng)
    picture = run(20, rng)
    print(f"  {'picture (ms)':<30} {'first':>8} {'p50':>8} {'p95':>8} {'max':>8} {'cpu p95':>8}")
    cold, chart_times, chart_cpu = timed(lambda: render_chart(chart))  # imports matplotlib
    print(line("chart, 1,000 values, PNG", cold, chart_times, chart_cpu))
    print(line("chart, 1,000 values, SVG", *timed(lambda: render_chart(chart, "svg"))))
    first, picture_times, picture_cpu = timed(lambda: render_run(picture))
    print(line("run picture, 20 nodes, PNG", first, picture_times, picture_cpu))
    print(line("run picture, 20 nodes, SVG", *timed(lambda: render_run(picture, "svg"))))
    p95 = pct(chart_times, 95) * 1000
    said = goal("chart p95, 1,000 points (PNG)", p95, CHART_GOAL_MS, unit="ms")
    print(f"\nchart p95 {p95:.0f} ms (goal ≤ {CHART_GOAL_MS:.0f} ms): {said}")
    p95 = pct(picture_times, 95) * 1000
    said = goal("run picture p95, 20 nodes (PNG)", p95, PICTURE_GOAL_MS, unit="ms")
    print(f"run picture p95 {p95:.0f} ms (goal ≤ {PICTURE_GOAL_MS:.0f} ms): {said}")
    print(f"first render, matplotlib imported: {cold * 1000:.0f} ms")


if __name__ == "__main__":
    main()
