#!/usr/bin/env python3
"""Render a CSV file as a standalone SVG bar or line chart (standard library only).

Usage:
    python csv_to_svg.py data.csv -o chart.svg [--kind bar|line] [--x COL] [--y COL ...]
                         [--title TEXT] [--x-label TEXT] [--y-label TEXT]

The x column defaults to the first column and the y column to the second. Every y value must
be a number; an empty cell is skipped (a gap in a line, no bar). The SVG has a viewBox, a
<title>, labelled axes with round tick values and a legend when there are several series. It
is parsed back with xml.etree before it is written, so a written file always parses.
Exit status: 0 written, 2 bad input (the message names the row and column).
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import escape, quoteattr

PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b")
LEFT, RIGHT, TOP, BOTTOM = 70, 20, 40, 60  # margins around the plot area, px
LEGEND_W = 120  # extra right margin for the legend, so it never covers data
Series = list[float | None]


class ChartError(Exception):
    """Bad input, with a message for the person who ran the script."""


@dataclass(frozen=True)
class Table:
    """The columns read from the CSV."""

    x_col: str
    y_cols: list[str]
    labels: list[str]
    series: list[Series]


@dataclass(frozen=True)
class Plot:
    """Geometry: maps a row index and a value to pixel coordinates."""

    width: int
    height: int
    rows: int
    y_min: float
    y_max: float
    right: int = RIGHT

    @property
    def plot_w(self) -> float:
        return self.width - LEFT - self.right

    @property
    def plot_h(self) -> float:
        return self.height - TOP - BOTTOM

    @property
    def slot(self) -> float:
        return self.plot_w / self.rows

    def x(self, row: int) -> float:
        return LEFT + self.slot * (row + 0.5)

    def y(self, value: float) -> float:
        return TOP + self.plot_h * (1 - (value - self.y_min) / (self.y_max - self.y_min))


def read_table(path: Path, x_col: str | None, y_cols: list[str]) -> Table:
    """Read the x labels and one value list per y column."""
    with path.open(newline="", encoding="utf-8-sig") as handle:
        reader = csv.DictReader(handle)
        header = list(reader.fieldnames or [])
        if len(header) < 2:
            raise ChartError(f"{path}: need a header row with at least two columns, got {header}")
        x_col = x_col or header[0]
        y_cols = y_cols or [header[1]]
        for col in (x_col, *y_cols):
            if col not in header:
                raise ChartError(f"{path}: no column {col!r}; the columns are {header}")
        labels: list[str] = []
        series: list[Series] = [[] for _ in y_cols]
        for row_no, row in enumerate(reader, start=2):
            labels.append((row.get(x_col) or "").strip())
            for values, col in zip(series, y_cols, strict=True):
                values.append(parse_number(row.get(col), f"{path}: row {row_no}, column {col!r}"))
    if not labels:
        raise ChartError(f"{path}: no data rows after the header")
    if all(v is None for values in series for v in values):
        raise ChartError(f"{path}: every y value is empty")
    return Table(x_col, y_cols, labels, series)


def parse_number(cell: str | None, where: str) -> float | None:
    """A finite float, or None for an empty cell; anything else is a ChartError."""
    text = (cell or "").strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        raise ChartError(f"{where}: {text!r} is not a number") from None
    if not math.isfinite(value):
        raise ChartError(f"{where}: {text!r} is not a finite number")
    return value


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """Round tick values (steps of 1, 2, 2.5 or 5 × 10^n) covering [low, high]."""
    if high == low:
        high = low + 1.0
    raw = (high - low) / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    first = math.floor(low / step)
    last = math.ceil(high / step)
    return [round(i * step, 10) for i in range(first, last + 1)]


def fmt(value: float) -> str:
    """Tick label: no trailing zeros; thousands separators for large numbers."""
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.6g}"


def axes(plot: Plot, table: Table, ticks: list[float]) -> Iterator[str]:
    """Grid lines, tick labels, x labels and both axis lines."""
    right = LEFT + plot.plot_w
    for tick in ticks:
        y = plot.y(tick)
        yield f'<line x1="{LEFT}" y1="{y:.1f}" x2="{right:.1f}" y2="{y:.1f}" stroke="#e0e0e0"/>'
        yield f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{escape(fmt(tick))}</text>'
    # Thin out x labels so they never overlap: at most one label per 40 px.
    every = max(1, math.ceil(len(table.labels) * 40 / plot.plot_w))
    bottom = TOP + plot.plot_h
    for i, label in enumerate(table.labels):
        if i % every == 0:
            yield (
                f'<text x="{plot.x(i):.1f}" y="{bottom + 16:.1f}" text-anchor="middle">'
                f"{escape(label)}</text>"
            )
    yield f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{bottom:.1f}" stroke="#333333"/>'
    # The x axis sits at zero when zero is in range, else at the bottom.
    axis_y = plot.y(min(max(0.0, plot.y_min), plot.y_max))
    yield f'<line x1="{LEFT}" y1="{axis_y:.1f}" x2="{right:.1f}" y2="{axis_y:.1f}" stroke="#333"/>'


def bars(plot: Plot, series: list[Series]) -> Iterator[str]:
    """Grouped bars: one per series inside each x slot, growing from zero."""
    group = plot.slot * 0.8
    bar_w = group / len(series)
    zero = plot.y(0.0)
    for s, values in enumerate(series):
        for i, value in enumerate(values):
            if value is None:
                continue
            x = plot.x(i) - group / 2 + s * bar_w
            top, bottom = sorted((plot.y(value), zero))
            yield (
                f'<rect x="{x:.1f}" y="{top:.1f}" width="{bar_w:.1f}" '
                f'height="{bottom - top:.1f}" fill="{PALETTE[s % len(PALETTE)]}">'
                f"<title>{escape(fmt(value))}</title></rect>"
            )


def lines(plot: Plot, series: list[Series]) -> Iterator[str]:
    """One polyline per series with a dot per point; an empty cell breaks the line."""
    for s, values in enumerate(series):
        colour = PALETTE[s % len(PALETTE)]
        points: list[tuple[float, float]] = []
        for i, value in enumerate([*values, None]):
            if value is not None:
                points.append((plot.x(i), plot.y(value)))
                continue
            if len(points) > 1:
                path = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
                yield (
                    f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>'
                )
            # Dots after the line so they stay visible on top of it.
            for x, y in points:
                yield f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{colour}"/>'
            points = []


def labels(plot: Plot, title: str, x_label: str, y_label: str) -> Iterator[str]:
    """Chart title and axis titles."""
    yield (
        f'<text x="{plot.width / 2:.1f}" y="{TOP / 2 + 4:.1f}" text-anchor="middle" '
        f'font-size="15" font-weight="bold">{escape(title)}</text>'
    )
    yield (
        f'<text x="{LEFT + plot.plot_w / 2:.1f}" y="{plot.height - 14}" text-anchor="middle">'
        f"{escape(x_label)}</text>"
    )
    mid = TOP + plot.plot_h / 2
    yield (
        f'<text x="16" y="{mid:.1f}" text-anchor="middle" transform="rotate(-90 16 {mid:.1f})">'
        f"{escape(y_label)}</text>"
    )


def legend(plot: Plot, names: list[str]) -> Iterator[str]:
    """Colour key right of the plot (only drawn for several series)."""
    if len(names) < 2:
        return
    x = plot.width - LEGEND_W + 10
    for s, name in enumerate(names):
        y = TOP + 4 + s * 16
        yield f'<rect x="{x}" y="{y}" width="10" height="10" fill="{PALETTE[s % len(PALETTE)]}"/>'
        yield f'<text x="{x + 14}" y="{y + 9}">{escape(name)}</text>'


def render(args: argparse.Namespace) -> str:
    """The SVG document for the parsed command line."""
    table = read_table(Path(args.csv), args.x, args.y)
    values = [v for series in table.series for v in series if v is not None]
    # Bars grow from zero, so zero is always in range for them; lines use the data range.
    extra = [] if args.kind == "line" else [0.0]
    ticks = nice_ticks(min(*values, *extra), max(*values, *extra))
    right = RIGHT + LEGEND_W if len(table.y_cols) > 1 else RIGHT
    plot = Plot(args.width, args.height, len(table.labels), ticks[0], ticks[-1], right)
    title = args.title or f"{', '.join(table.y_cols)} by {table.x_col}"
    marks = bars(plot, table.series) if args.kind == "bar" else lines(plot, table.series)
    y_label = args.y_label or ", ".join(table.y_cols)
    # <title> comes first: screen readers and browsers take the first one as the name.
    body = [
        f"<title>{escape(title)}</title>",
        f'<rect x="0" y="0" width="{plot.width}" height="{plot.height}" fill="#ffffff"/>',
        *labels(plot, title, args.x_label or table.x_col, y_label),
        *axes(plot, table, ticks),
        *marks,
        *legend(plot, table.y_cols),
    ]
    head = (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {plot.width} {plot.height}" '
        f'width="{plot.width}" height="{plot.height}" font-family="sans-serif" font-size="12" '
        f'role="img" aria-label={quoteattr(title)}>'
    )
    return "\n".join([head, *body, "</svg>"]) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, render, check that the SVG parses, write it."""
    parser = argparse.ArgumentParser(description="Render a CSV file as an SVG chart.")
    parser.add_argument("csv", help="input CSV file with a header row")
    parser.add_argument("-o", "--out", required=True, help="output .svg path")
    parser.add_argument("--kind", choices=("bar", "line"), default="bar")
    parser.add_argument("--x", help="x (category) column; default: the first column")
    parser.add_argument("--y", action="append", default=[], help="y column; repeat for more")
    parser.add_argument("--title")
    parser.add_argument("--x-label")
    parser.add_argument("--y-label")
    parser.add_argument("--width", type=int, default=640)
    parser.add_argument("--height", type=int, default=400)
    args = parser.parse_args(argv)
    if args.width < LEFT + RIGHT + LEGEND_W + 100 or args.height < TOP + BOTTOM + 100:
        parser.error("--width and --height leave no room for the plot (try 640 x 400)")
    try:
        svg = render(args)
        ET.fromstring(svg)  # never write a file that does not parse
    except (ChartError, OSError, csv.Error, ET.ParseError) as exc:
        print(f"csv_to_svg: {exc}", file=sys.stderr)
        return 2
    Path(args.out).write_text(svg, encoding="utf-8")
    print(f"wrote {args.out} ({args.kind} chart, {len(svg):,} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
