"""A campaign's metric drawn as SVG on the server: one chart over rounds, one over time.

Built as elements from numbers (ElementTree escapes every word), never spliced from text: the
only words are numbers, dates and the metric's name with its bidi controls made visible.
Each finite value is a `circle.point`; the best so far a step line; the baseline dashed; a
target solid; a failed round a red band (with a cross where it has no value). Values that are
not finite have no place on a scale: they are counted in the caption, never drawn.
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

from bot.web.campaign_view import CampaignView, value_text
from bot.web.untrusted import visible_controls
from oncall.chart import CampaignChart, ChartPoint, best_so_far, round_positions
from oncall.model import Direction

# Drawn for about 640 px and scaled to the page: at a phone's 360 px its words are still
# about 9 px high.
WIDTH: Final = 640
HEIGHT: Final = 340
_LEFT: Final = 64
_RIGHT: Final = 14
_TOP: Final = 38
_BOTTOM: Final = 66
_NAME_SHOWN: Final = 48  # characters of the metric's name on an axis
_SVG_NS: Final = "http://www.w3.org/2000/svg"

_POINT: Final = "#1f77b4"
_BEST: Final = "#2ca02c"
_TARGET: Final = "#d62728"
_BASELINE: Final = "#7f7f7f"
_FAILED: Final = "#d62728"
_GRID: Final = "#e3e3e3"
_TEXT: Final = "#333"


@dataclass(frozen=True)
class Scale:
    """A linear map from data to pixels over [lo, hi]."""

    lo: float
    hi: float
    start: float  # pixel of lo
    end: float  # pixel of hi

    def __call__(self, value: float) -> float:
        share = (_bounded(value) - self.lo) / (self.hi - self.lo)
        return self.start + share * (self.end - self.start)


_LARGEST: Final = 1e300  # drawn at most this far out, so a span between two never overflows


def _bounded(value: float) -> float:
    return max(min(value, _LARGEST), -_LARGEST)


def campaign_chart_svgs(view: CampaignView) -> list[str]:
    """The campaign's charts as inline `<svg>` elements (text): over rounds, over time."""
    chart = view.chart_data()
    spans = {
        r.record.round: (r.record.started_at, r.record.ended_at)
        for r in view.rounds
        if r.failed and r.record.started_at is not None
    }
    return [rounds_chart(chart), time_chart(chart, spans)]


def rounds_chart(chart: CampaignChart) -> str:
    """The metric over rounds: several values of one round spread across it, in order."""
    last = max([chart.rounds, *(p.round for p in chart.points), *chart.failed_rounds, 1])
    x = Scale(0.5, last + 0.5, _LEFT, WIDTH - _RIGHT)
    xs = [x(v) for v in round_positions(chart.points)]
    svg, plot = _frame(chart, "over rounds")
    y = _y_scale(chart)
    _grid(plot, y, [(x(t), str(t)) for t in integer_ticks(1, last)], "round")
    valued = {p.round for p in chart.points if math.isfinite(p.value)}
    for r in sorted(chart.failed_rounds):
        _failed_band(plot, x(r - 0.45), x(r + 0.45), with_cross=r not in valued)
    _lines(plot, chart, y)
    _values(plot, chart, xs, y, lambda p: f"round {p.round}")
    return _text(svg, chart)


def time_chart(chart: CampaignChart, failed_spans: Mapping[int, tuple[float, float | None]]) -> str:
    """The metric over time (UTC), each value at the moment it was read."""
    moments = [p.at for p in chart.points]
    lo = min([*moments, *(s for s, _ in failed_spans.values())], default=None)
    if lo is None:
        lo = chart.started_at if chart.started_at is not None else 0.0
    hi = max([lo, *moments, *(e for _, e in failed_spans.values() if e is not None)])
    if chart.ended_at is not None:
        hi = max(hi, chart.ended_at)
    if hi - lo < 60:  # one moment (or none): a minute either side
        lo, hi = lo - 60, hi + 60
    pad = (hi - lo) * 0.03
    x = Scale(lo - pad, hi + pad, _LEFT, WIDTH - _RIGHT)
    svg, plot = _frame(chart, "over time")
    y = _y_scale(chart)
    ticks = [(x(t), _time_label(t, hi - lo)) for t in time_ticks(lo, hi, 4)]
    _grid(plot, y, ticks, f"time (UTC) from {_day(lo)}")
    valued = {p.round for p in chart.points if math.isfinite(p.value)}
    for r, (start, end) in sorted(failed_spans.items()):
        left, right = x(start), x(end if end is not None else start)
        middle = (left + right) / 2
        _failed_band(
            plot, min(left, middle - 4), max(right, middle + 4), with_cross=r not in valued
        )
    _lines(plot, chart, y)
    _values(plot, chart, [x(p.at) for p in chart.points], y, lambda p: _day_time(p.at))
    return _text(svg, chart)


# ------------------------------------------------------------------------------ scales


def nice_ticks(lo: float, hi: float, count: int) -> list[float]:
    """About `count` round numbers between lo and hi (1, 2 or 5 times a power of ten)."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return [lo] if math.isfinite(lo) else []
    raw = (hi - lo) / max(count, 1)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.ceil(lo / step) * step
    return [first + i * step for i in range(int((hi - first) / step + 1e-9) + 1)]


_TIME_STEPS: Final = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800,
                      21600, 43200, 86400, 172800, 604800)  # fmt: skip


def time_ticks(lo: float, hi: float, count: int) -> list[float]:
    """About `count` whole moments (seconds, minutes, hours, days) between lo and hi."""
    raw = (hi - lo) / max(count, 1)
    step = next((s for s in _TIME_STEPS if s >= raw), None)
    if step is None:
        return nice_ticks(lo, hi, count)  # weeks and longer: round numbers of seconds do
    first = math.ceil(lo / step) * step
    return [float(first + i * step) for i in range(int((hi - first) // step) + 1)]


def integer_ticks(first: int, last: int) -> list[int]:
    """Whole rounds, at most about ten."""
    step = max(1, math.ceil((last - first + 1) / 10))
    return list(range(first, last + 1, step))


def _y_scale(chart: CampaignChart) -> Scale:
    values = [_bounded(p.value) for p in chart.points if math.isfinite(p.value)]
    values += [
        _bounded(v) for v in (chart.target, chart.baseline) if v is not None and math.isfinite(v)
    ]
    if not values:
        lo, hi = 0.0, 1.0
    else:
        lo, hi = min(values), max(values)
        if hi - lo < 1e-12 * max(abs(lo), abs(hi), 1e-300):  # one value: a band around it
            half = abs(lo) * 0.1 or 1.0
            lo, hi = lo - half, hi + half
        else:
            pad = (hi - lo) * 0.08
            lo, hi = lo - pad, hi + pad
    return Scale(lo, hi, HEIGHT - _BOTTOM, _TOP)


# ------------------------------------------------------------------------------ drawing


def _frame(chart: CampaignChart, what: str) -> tuple[ET.Element, ET.Element]:
    name = _name(chart.metric)
    svg = ET.Element(
        "svg",
        {
            "xmlns": _SVG_NS,
            "class": "chart",
            "viewBox": f"0 0 {WIDTH} {HEIGHT}",
            "width": str(WIDTH),
            "height": str(HEIGHT),
            "role": "img",
            "aria-label": f"{name} {what}",
            "preserveAspectRatio": "xMidYMid meet",
        },
    )
    ET.SubElement(svg, "title").text = f"{name} {what}"
    ET.SubElement(
        svg,
        "rect",
        {"x": "0", "y": "0", "width": str(WIDTH), "height": str(HEIGHT), "fill": "#fff"},
    )
    better = "lower is better" if chart.direction == "min" else "higher is better"
    heading = ET.SubElement(
        svg,
        "text",
        {"x": str(_LEFT), "y": "24", "font-weight": "bold", "font-size": "17", "fill": _TEXT},
    )
    heading.text = f"{name} {what} ({better})"
    plot = ET.SubElement(svg, "g", {"class": "plot"})
    return svg, plot


def _grid(plot: ET.Element, y: Scale, xticks: Sequence[tuple[float, str]], xlabel: str) -> None:
    grid = ET.SubElement(plot, "g", {"class": "grid", "stroke": _GRID, "stroke-width": "1"})
    labels = ET.SubElement(plot, "g", {"class": "ticks", "fill": _TEXT, "font-size": "15"})
    bottom, top = HEIGHT - _BOTTOM, _TOP
    for value in nice_ticks(y.lo, y.hi, 4):
        py = _n(y(value))
        ET.SubElement(
            grid, "line", {"x1": str(_LEFT), "x2": str(WIDTH - _RIGHT), "y1": py, "y2": py}
        )
        label = ET.SubElement(labels, "text", {"x": str(_LEFT - 6), "y": py, "text-anchor": "end",
                                               "dominant-baseline": "middle"})  # fmt: skip
        label.text = f"{value:.4g}"
    for px, text in xticks:
        ET.SubElement(grid, "line", {"x1": _n(px), "x2": _n(px), "y1": str(top), "y2": str(bottom)})
        label = ET.SubElement(
            labels, "text", {"x": _n(px), "y": str(bottom + 19), "text-anchor": "middle"}
        )
        label.text = text
    ET.SubElement(
        plot,
        "rect",
        {
            "class": "frame",
            "x": str(_LEFT),
            "y": str(top),
            "width": str(WIDTH - _LEFT - _RIGHT),
            "height": str(bottom - top),
            "fill": "none",
            "stroke": "#999",
        },
    )
    axis = ET.SubElement(
        plot,
        "text",
        {"x": _n((_LEFT + WIDTH - _RIGHT) / 2), "y": str(bottom + 39), "text-anchor": "middle",
         "fill": _TEXT, "font-size": "15"},
    )  # fmt: skip
    axis.text = xlabel


def _failed_band(plot: ET.Element, left: float, right: float, *, with_cross: bool) -> None:
    band = ET.SubElement(plot, "g", {"class": "failed"})
    ET.SubElement(band, "title").text = "failed round"
    ET.SubElement(
        band,
        "rect",
        {"x": _n(left), "y": str(_TOP), "width": _n(max(right - left, 1.0)),
         "height": str(HEIGHT - _BOTTOM - _TOP), "fill": _FAILED, "fill-opacity": "0.12"},
    )  # fmt: skip
    if with_cross:
        cx, cy, r = (left + right) / 2, HEIGHT - _BOTTOM - 8, 5
        ET.SubElement(
            band,
            "path",
            {"class": "failed-mark", "d": f"M{_n(cx - r)} {_n(cy - r)} L{_n(cx + r)} {_n(cy + r)} "
             f"M{_n(cx - r)} {_n(cy + r)} L{_n(cx + r)} {_n(cy - r)}",
             "stroke": _FAILED, "stroke-width": "2.5"},
        )  # fmt: skip


def _lines(plot: ET.Element, chart: CampaignChart, y: Scale) -> None:
    for value, kind, colour, dash in (
        (chart.baseline, "baseline", _BASELINE, "6 4"),
        (chart.target, "target", _TARGET, None),
    ):
        if value is None or not math.isfinite(value):
            continue
        attrs = {"class": kind, "x1": str(_LEFT), "x2": str(WIDTH - _RIGHT), "y1": _n(y(value)),
                 "y2": _n(y(value)), "stroke": colour, "stroke-width": "1.5"}  # fmt: skip
        if dash:
            attrs["stroke-dasharray"] = dash
        line = ET.SubElement(plot, "line", attrs)
        ET.SubElement(line, "title").text = f"{kind} {value_text(value)}"


def _values(
    plot: ET.Element,
    chart: CampaignChart,
    xs: Sequence[float],
    y: Scale,
    where: Callable[[ChartPoint], str],
) -> None:
    finite = [(px, p) for px, p in zip(xs, chart.points, strict=True) if math.isfinite(p.value)]
    if not finite:
        note = ET.SubElement(
            plot,
            "text",
            {"class": "empty", "x": _n((_LEFT + WIDTH - _RIGHT) / 2),
             "y": _n((HEIGHT - _BOTTOM + _TOP) / 2), "text-anchor": "middle", "fill": "#666",
             "font-size": "15"},
        )  # fmt: skip
        note.text = f"no value of {_name(chart.metric)} yet"
        return
    ordered = sorted(finite, key=lambda item: item[0])
    best = best_so_far([p.value for _, p in ordered], chart.direction)
    ET.SubElement(
        plot,
        "path",
        {"class": "best", "d": _steps([px for px, _ in ordered], [y(b) for b in best]),
         "fill": "none", "stroke": _BEST, "stroke-width": "2.5"},
    )  # fmt: skip
    radius = _n(max(2.0, min(5.0, 40 / math.sqrt(len(finite)))))
    dots = ET.SubElement(plot, "g", {"class": "points"})
    name = _name(chart.metric)
    for px, p in finite:
        failed = p.round in chart.failed_rounds
        dot = ET.SubElement(
            dots,
            "circle",
            {"class": "point failed" if failed else "point", "cx": _n(px), "cy": _n(y(p.value)),
             "r": radius, "fill": "#fff" if failed else _POINT,
             "stroke": _FAILED if failed else _POINT, "stroke-width": "1.5"},
        )  # fmt: skip
        ET.SubElement(dot, "title").text = f"{where(p)}: {name} {value_text(p.value)}"


def _steps(xs: Sequence[float], ys: Sequence[float]) -> str:
    """A step line (each best holds until the next value)."""
    parts = [f"M{_n(xs[0])} {_n(ys[0])}"]
    for i in range(1, len(xs)):
        parts.append(f"H{_n(xs[i])} V{_n(ys[i])}")
    return " ".join(parts)


def _text(svg: ET.Element, chart: CampaignChart) -> str:
    odd = sum(1 for p in chart.points if not math.isfinite(p.value))
    parts = [f"{len(chart.points)} value{'s' if len(chart.points) != 1 else ''}"]
    if odd:
        parts.append(f"{odd} not finite (not drawn)")
    if chart.failed_rounds:
        n = len(chart.failed_rounds)
        parts.append(f"{n} failed round{'s' if n != 1 else ''}")
    best = _best(chart.points, chart.direction)
    if best is not None:
        parts.append(f"best {value_text(best.value)} (round {best.round})")
    caption = ET.SubElement(
        svg,
        "text",
        {"class": "caption", "x": str(_LEFT), "y": str(HEIGHT - 5), "fill": "#555",
         "font-size": "14"},
    )  # fmt: skip
    caption.text = " · ".join(parts)
    return ET.tostring(svg, encoding="unicode", short_empty_elements=True)


def _best(points: Sequence[ChartPoint], direction: Direction) -> ChartPoint | None:
    finite = [p for p in points if math.isfinite(p.value)]
    if not finite:
        return None
    pick = min if direction == "min" else max
    return pick(finite, key=lambda p: p.value)


def _name(metric: str) -> str:
    name = visible_controls(" ".join(metric.split()))
    return name if len(name) <= _NAME_SHOWN else name[: _NAME_SHOWN - 1] + "…"


def _n(value: float) -> str:
    """A coordinate as written: two decimals at most."""
    return f"{value:.2f}".rstrip("0").rstrip(".")


def _time_label(at: float, span: float) -> str:
    moment = datetime.fromtimestamp(at, UTC)
    if span < 120:
        return moment.strftime("%H:%M:%S")
    if span < 2 * 86400:
        return moment.strftime("%H:%M")
    return moment.strftime("%m-%d %H:%M")


def _day(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d")


def _day_time(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
