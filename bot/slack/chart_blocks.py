"""A message's chart as Slack's own chart block (`data_visualization`, a line chart), drawn
by Slack beside the message's text, which stays the notification fallback.

Slack's limits (docs.slack.dev/reference/block-kit/blocks/data-visualization-block): a title
of at most 50 characters, 1 to 6 series with unique names, at most 20 categories of at most
20 characters, axis labels of at most 50, finite numbers. A chart with more categories than
that is bucketed to 20 (each point the last value of its bucket, as the x label says); one
that still does not fit gets no block (the PNG attached beside it shows it all).
"""

from __future__ import annotations

import math
from typing import Any

from host.runtime.messages import ChartData, OutboundMessage

TITLE_CHARS = 50
LABEL_CHARS = 50
MAX_SERIES = 6
SERIES_NAME_CHARS = 20
MAX_CATEGORIES = 20
CATEGORY_CHARS = 20
MAX_BLOCKS = 50  # per message
SECTION_CHARS = 3000  # of a section's mrkdwn text


def with_chart(
    message: OutboundMessage, chunk: str, blocks: list[dict[str, Any]] | None, *, last: bool
) -> list[dict[str, Any]] | None:
    """The blocks to post one part (`chunk`, mrkdwn) of `message` with: `blocks` as they
    are, and on the last part its chart after them. Blocks replace a message's text on
    screen, so a part without blocks of its own gets its text as sections first."""
    if message.chart is None or not last:
        return blocks
    chart = chart_blocks(message.chart)
    if chart is None:
        return blocks
    shown = blocks or [
        {"type": "section", "text": {"type": "mrkdwn", "text": chunk[i : i + SECTION_CHARS]}}
        for i in range(0, len(chunk), SECTION_CHARS)
    ]
    if len(shown) + len(chart) > MAX_BLOCKS:
        return blocks
    return [*shown, *chart]


def chart_blocks(chart: ChartData) -> list[dict[str, Any]] | None:
    """The chart's block (a list of one), or None when Slack could not draw it."""
    categories, series, every = _bucketed(chart)
    names = [_short(s_name, SERIES_NAME_CHARS) for s_name, _ in series]
    if not 1 <= len(series) <= MAX_SERIES or len(set(names)) != len(names):
        return None
    drawn = []
    for name, (_, values) in zip(names, series, strict=True):
        data = [
            {"label": category, "value": value}
            for category, value in zip(categories, values, strict=True)
            if value is not None and math.isfinite(value)
        ]
        if data:
            drawn.append({"name": name, "data": data})
    if not drawn:
        return None
    x_label = chart.x_label or "round"
    if every > 1:
        x_label = f"{x_label} (last of every {every})"
    axis: dict[str, Any] = {
        "categories": categories,
        "x_label": _short(x_label, LABEL_CHARS),
    }
    if chart.y_label:
        axis["y_label"] = _short(chart.y_label, LABEL_CHARS)
    return [
        {
            "type": "data_visualization",
            "title": _short(chart.title, TITLE_CHARS),
            "chart": {"type": "line", "series": drawn, "axis_config": axis},
        }
    ]


def _bucketed(
    chart: ChartData,
) -> tuple[list[str], list[tuple[str, list[float | None]]], int]:
    """At most `MAX_CATEGORIES` categories: every `every` consecutive ones become one, named
    by its last and carrying each series' last value in it."""
    count = len(chart.categories)
    every = max(1, math.ceil(count / MAX_CATEGORIES))
    spans = [range(i, min(i + every, count)) for i in range(0, count, every)]
    categories = [_short(chart.categories[span[-1]], CATEGORY_CHARS) for span in spans]
    if len(set(categories)) != len(categories):  # shortened into each other: numbered
        categories = [str(i + 1) for i in range(len(spans))]
    series = []
    for s in chart.series:
        values = list(s.values) + [None] * (count - len(s.values))
        series.append((s.name, [_last(values[j] for j in span) for span in spans]))
    return categories, series, every


def _last(values: Any) -> float | None:
    found = None
    for value in values:
        if value is not None and math.isfinite(value):
            found = float(value)
    return found


def _short(text: str, most: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= most else text[: most - 1] + "…"


__all__ = ["MAX_CATEGORIES", "chart_blocks", "with_chart"]
