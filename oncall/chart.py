"""A campaign's chart: its metric over rounds, as a PNG or SVG for a thread or a terminal.

`chart_of` turns the stored records into plain data (`CampaignChart`); `render_chart` draws
it. Every value of the metric is a marked point, placed at its round (several values of one
round spread across it, in order); the best so far is a step line; a failed round is a red
band with a cross; a target, when given, is a horizontal line. Values that are not finite
(nan, inf) cannot be placed: they are marked on the top edge and counted in the subtitle.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Final

from core.pictures import PictureFormat, figure_bytes, new_figure
from oncall.model import Direction, Measurement
from oncall.report_gate import format_duration
from oncall.store import CampaignRecord, RoundRecord

if TYPE_CHECKING:
    from matplotlib.axes import Axes

WIDTH_PX: Final = 1200  # readable as a Slack or Discord preview (about 360 px wide)
HEIGHT_PX: Final = 600
FAILED_REASONS: Final = frozenset({"died", "vanished"})
_TITLE_SHOWN: Final = 84  # characters of the title (17 pt bold fills 1,200 px at about 95)

_POINT = "#1f77b4"
_BEST = "#2ca02c"
_TARGET = "#d62728"
_BASELINE = "#7f7f7f"
_FAILED = "#d62728"
_NOT_FINITE = "#9467bd"


@dataclass(frozen=True)
class ChartPoint:
    """One value of the metric: its round, when it was read, the value (maybe not finite)."""

    round: int
    at: float  # unix time
    value: float


@dataclass(frozen=True)
class CampaignChart:
    """What a campaign's chart shows, as plain data."""

    campaign_id: str
    goal: str
    metric: str
    direction: Direction
    points: tuple[ChartPoint, ...] = ()
    failed_rounds: frozenset[int] = frozenset()
    rounds: int = 0  # rounds started so far (a round may have no value yet)
    target: float | None = None
    baseline: float | None = None  # the given baseline, drawn as a dashed line
    started_at: float | None = None
    ended_at: float | None = None


def round_failed(r: RoundRecord) -> bool:
    """A round that could not start, or whose process died or vanished."""
    return r.state == "failed" or r.wake_reason in FAILED_REASONS


def chart_of(
    record: CampaignRecord,
    rounds: Sequence[RoundRecord],
    measurements: Sequence[Measurement],
    *,
    target: float | None = None,
) -> CampaignChart:
    """The chart data of a stored campaign: its metric's values (the other names it
    measured are left out), its failed rounds and its time span."""
    metric = record.spec.metric.name
    points = tuple(ChartPoint(m.round, m.at, m.value) for m in measurements if m.name == metric)
    times = [t for r in rounds for t in (r.started_at, r.ended_at) if t is not None]
    times += [p.at for p in points]
    return CampaignChart(
        campaign_id=record.id,
        goal=record.spec.goal,
        metric=metric,
        direction=record.spec.direction,
        points=points,
        failed_rounds=frozenset(r.round for r in rounds if round_failed(r)),
        rounds=max([record.round, *(r.round for r in rounds)], default=0),
        target=target,
        baseline=record.baseline,
        started_at=min(times, default=record.created_at),
        ended_at=max(times, default=None),
    )


def render_chart(chart: CampaignChart, fmt: PictureFormat = "png") -> bytes:
    """The chart as PNG (1200 x 600 px) or SVG bytes; the same data gives the same bytes."""
    figure = new_figure(WIDTH_PX, HEIGHT_PX)
    ax = figure.add_axes((0.075, 0.12, 0.9, 0.7))
    xs = round_positions(chart.points)
    finite = [(x, p) for x, p in zip(xs, chart.points, strict=True) if _finite(p.value)]
    _failed_rounds(ax, chart)
    if finite:
        _values(ax, chart, finite)
        best_y = best_so_far([p.value for _, p in finite], chart.direction)
        ax.step([x for x, _ in finite], best_y, where="post", color=_BEST, linewidth=2.5,
                zorder=4, label="best so far")  # fmt: skip
    _lines(ax, chart)
    _not_finite(ax, chart, xs)
    _axes(ax, chart)
    figure.text(0.075, 0.93, _title(chart), fontsize=17, fontweight="bold", ha="left")
    figure.text(0.075, 0.875, _subtitle(chart), fontsize=12, color="#444444", ha="left")
    if ax.get_legend_handles_labels()[0]:
        # Where an improving metric's values are not (the best place, searched for, costs
        # a test against every point).
        if chart.direction == "min":
            ax.legend(loc="upper right", fontsize=11, framealpha=0.9)
        else:
            ax.legend(loc="lower right", fontsize=11, framealpha=0.9)
    return figure_bytes(figure, fmt)


# ------------------------------------------------------------------------------- parts


def _finite(value: float) -> bool:
    return math.isfinite(value)


def round_positions(points: Sequence[ChartPoint]) -> list[float]:
    """Each point's x: its round, or spread across its round (r-0.4 .. r+0.4) in order when
    the round has several values."""
    per_round: dict[int, int] = {}
    for p in points:
        per_round[p.round] = per_round.get(p.round, 0) + 1
    seen: dict[int, int] = {}
    xs = []
    for p in points:
        n, i = per_round[p.round], seen.get(p.round, 0)
        seen[p.round] = i + 1
        xs.append(p.round if n == 1 else p.round - 0.4 + 0.8 * i / (n - 1))
    return xs


def _marker_size(count: int) -> float:
    """Large dots for a few values (seen in a thumbnail), small ones for a thousand (points
    across)."""
    return max(2.5, min(9.0, 63.0 / math.sqrt(max(count, 1))))


def best_so_far(values: Sequence[float], direction: Direction) -> list[float]:
    """The best value up to each one (the lowest for `min`, the highest for `max`)."""
    pick = min if direction == "min" else max
    best: list[float] = []
    for value in values:
        best.append(value if not best else pick(best[-1], value))
    return best


def _values(ax: Axes, chart: CampaignChart, finite: Sequence[tuple[float, ChartPoint]]) -> None:
    """Each value a dot; a failed round's values hollow and red-rimmed."""
    size = _marker_size(len(finite))
    for failed in (False, True):
        mine = [(x, p.value) for x, p in finite if (p.round in chart.failed_rounds) == failed]
        if not mine:
            continue
        label = "value of a failed round" if failed else f"{chart.metric} (each value)"
        # A line of markers, not a scatter: one marker drawn once, stamped (faster by far).
        ax.plot([x for x, _ in mine], [v for _, v in mine], linestyle="none", marker="o",
                markersize=size, zorder=3, label=label,
                markerfacecolor="white" if failed else _POINT,
                markeredgecolor=_FAILED if failed else _POINT)  # fmt: skip


def _failed_rounds(ax: Axes, chart: CampaignChart) -> None:
    """A red band over each failed round, and a cross on the axis where it has no value."""
    valued = {p.round for p in chart.points if _finite(p.value)}
    for n, r in enumerate(sorted(chart.failed_rounds)):
        ax.axvspan(r - 0.45, r + 0.45, color=_FAILED, alpha=0.12, zorder=1, linewidth=0,
                   label="failed round" if n == 0 else None)  # fmt: skip
        if r not in valued:
            ax.plot([r], [0.03], marker="X", markersize=13, color=_FAILED, zorder=5,
                    transform=ax.get_xaxis_transform(), clip_on=False)  # fmt: skip


def _lines(ax: Axes, chart: CampaignChart) -> None:
    if chart.target is not None and _finite(chart.target):
        ax.axhline(chart.target, color=_TARGET, linewidth=2, linestyle="--", zorder=2,
                   label=f"target {chart.target:.4g}")  # fmt: skip
    if chart.baseline is not None and _finite(chart.baseline):
        ax.axhline(chart.baseline, color=_BASELINE, linewidth=1.5, linestyle=":", zorder=2,
                   label=f"baseline {chart.baseline:.4g}")  # fmt: skip


def _not_finite(ax: Axes, chart: CampaignChart, xs: Sequence[float]) -> None:
    """Non-finite values on the top edge: they happened, they have no place on the scale."""
    odd = [x for x, p in zip(xs, chart.points, strict=True) if not _finite(p.value)]
    if odd:
        ax.scatter(odd, [0.97] * len(odd), marker="^", s=60, color=_NOT_FINITE, zorder=5,
                   transform=ax.get_xaxis_transform(), clip_on=False,
                   label="not a number / infinite")  # fmt: skip


def _axes(ax: Axes, chart: CampaignChart) -> None:
    from matplotlib.ticker import MaxNLocator

    last = max([chart.rounds, *(p.round for p in chart.points), *chart.failed_rounds, 1])
    ax.set_xlim(0.5, last + 0.5)
    if last <= 12:
        ax.set_xticks(range(1, last + 1))
    else:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True, nbins=12))
    better = "lower is better" if chart.direction == "min" else "higher is better"
    ax.set_xlabel("round", fontsize=14)
    ax.set_ylabel(f"{chart.metric} ({better})", fontsize=14)
    ax.tick_params(labelsize=12)
    ax.grid(True, color="#dddddd", linewidth=0.8, zorder=0)
    ax.set_axisbelow(True)
    if not any(_finite(p.value) for p in chart.points) and chart.target is None:
        ax.set_yticks([])
        ax.text(0.5, 0.5, f"no value of {chart.metric} yet", transform=ax.transAxes,
                ha="center", va="center", fontsize=16, color="#666666")  # fmt: skip


def _title(chart: CampaignChart) -> str:
    title = f"Campaign {chart.campaign_id} · {chart.metric}: {' '.join(chart.goal.split())}"
    return title if len(title) <= _TITLE_SHOWN else title[: _TITLE_SHOWN - 1] + "…"


def _subtitle(chart: CampaignChart) -> str:
    values = [p for p in chart.points if _finite(p.value)]
    parts = [f"{chart.rounds} round{'s' if chart.rounds != 1 else ''}"]
    parts.append(f"{len(chart.points)} value{'s' if len(chart.points) != 1 else ''}")
    if values:
        pick = min if chart.direction == "min" else max
        best = pick(values, key=lambda p: p.value)
        parts.append(f"best {chart.metric} {best.value:.4g} (round {best.round})")
    odd = len(chart.points) - len(values)
    if odd:
        parts.append(f"{odd} not finite")
    if chart.failed_rounds:
        failed = len(chart.failed_rounds)
        parts.append(f"{failed} failed round{'s' if failed != 1 else ''}")
    if chart.started_at is not None:
        start = datetime.fromtimestamp(chart.started_at, UTC).strftime("%Y-%m-%d %H:%M UTC")
        span = f"from {start}"
        if chart.ended_at is not None and chart.ended_at > chart.started_at:
            span += f" over {format_duration(chart.ended_at - chart.started_at)}"
        parts.append(span)
    return " · ".join(parts)
