"""A message's chart as Slack's chart block (`data_visualization`, a line chart) within
Slack's limits: a title of at most 50 characters, at most 6 uniquely named series, at most
20 categories of at most 20 characters (more rounds are bucketed, as the x label says), the
message's text kept in sections before it; posted through the real slack_sdk."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from bot.slack.chart_blocks import MAX_CATEGORIES, chart_blocks, with_chart
from host.runtime.messages import ChartData, ChartSeries, OutboundMessage
from tests.slack_harness import CHANNEL, slack_bot


def _chart(rounds: int, *, title: str = "c1: loss") -> ChartData:
    values = [100.0 - n if n % 3 else 200.0 for n in range(1, rounds + 1)]
    best: list[float] = []
    for v in values:
        best.append(v if not best else min(best[-1], v))
    return ChartData(
        title=title,
        x_label="round",
        y_label="loss (lower is better)",
        categories=tuple(f"r{n}" for n in range(1, rounds + 1)),
        series=(
            ChartSeries(name="best so far", values=tuple(best)),
            ChartSeries(name="loss", values=tuple(values)),
        ),
    )


def assert_valid_chart_block(block: dict[str, Any]) -> None:
    """The data visualization block's documented shape and limits (docs.slack.dev)."""
    assert block["type"] == "data_visualization"
    assert 1 <= len(block["title"]) <= 50
    chart = block["chart"]
    assert chart["type"] == "line" and set(chart) == {"type", "series", "axis_config"}
    axis = chart["axis_config"]
    categories = axis["categories"]
    assert 1 <= len(categories) <= 20 and all(len(c) <= 20 for c in categories)
    assert len(set(categories)) == len(categories)
    assert all(len(axis.get(k, "")) <= 50 for k in ("x_label", "y_label"))
    names = [s["name"] for s in chart["series"]]
    assert 1 <= len(names) <= 6 and len(set(names)) == len(names)
    for series in chart["series"]:
        for point in series["data"]:
            assert set(point) == {"label", "value"} and point["label"] in categories
            assert isinstance(point["value"], float) and math.isfinite(point["value"])


def test_a_short_campaign_is_one_line_chart_with_the_best_so_far() -> None:
    (block,) = chart_blocks(_chart(5)) or []
    assert_valid_chart_block(block)
    best = block["chart"]["series"][0]
    assert best["name"] == "best so far"
    assert [(p["label"], p["value"]) for p in best["data"]] == [
        ("r1", 99.0), ("r2", 98.0), ("r3", 98.0), ("r4", 96.0), ("r5", 95.0)
    ]  # fmt: skip
    assert block["chart"]["axis_config"]["x_label"] == "round"


def test_more_rounds_than_slack_s_categories_are_bucketed_and_the_label_says_so() -> None:
    (block,) = chart_blocks(_chart(47)) or []
    assert_valid_chart_block(block)
    axis = block["chart"]["axis_config"]
    assert len(axis["categories"]) == 16 <= MAX_CATEGORIES  # 47 rounds, 3 per point
    assert axis["x_label"] == "round (last of every 3)"
    assert axis["categories"][0] == "r3" and axis["categories"][-1] == "r47"
    best = block["chart"]["series"][0]["data"]
    assert best[-1] == {"label": "r47", "value": 53.0}  # the best so far at the end


def test_long_titles_are_cut_and_too_many_series_get_no_block() -> None:
    (block,) = chart_blocks(_chart(3, title="x" * 80)) or []
    assert len(block["title"]) == 50
    many = ChartData(
        title="t",
        categories=("r1",),
        series=tuple(ChartSeries(name=f"s{i}", values=(1.0,)) for i in range(7)),
    )
    assert chart_blocks(many) is None
    empty = ChartData(
        title="t", categories=("r1",), series=(ChartSeries(name="s", values=(None,)),)
    )
    assert chart_blocks(empty) is None


def test_the_text_stays_in_a_section_before_the_chart() -> None:
    message = OutboundMessage(text="report", idempotency_key="k", chart=_chart(3))
    blocks = with_chart(message, "*report*", None, last=True) or []
    assert [b["type"] for b in blocks] == ["section", "data_visualization"]
    assert blocks[0]["text"] == {"type": "mrkdwn", "text": "*report*"}
    assert with_chart(message, "*report*", None, last=False) is None
    table = [{"type": "table", "rows": []}]
    assert [b["type"] for b in with_chart(message, "x", table, last=True) or []] == [
        "table", "data_visualization"
    ]  # fmt: skip
    plain = OutboundMessage(text="report", idempotency_key="k")
    assert with_chart(plain, "*report*", None, last=True) is None


async def test_a_report_with_a_chart_reaches_slack_with_the_chart_block(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with slack_bot(monkeypatch) as bot:
        ts, _ = await bot.mention("hello")
        await bot.replies_in(ts)
        await bot.settle(ts)
        message = OutboundMessage(
            text="📋 Campaign `c1` report: loss 95", idempotency_key="campaign:c1:report",
            chart=_chart(5),
        )  # fmt: skip
        await bot.adapter.post(bot.conversation(ts), message)
        (post,) = [p for p in bot.posts(ts) if "Campaign `c1` report" in p.get("text", "")]
        blocks = post["blocks"]
        blocks = json.loads(blocks) if isinstance(blocks, str) else blocks
        assert [b["type"] for b in blocks] == ["section", "data_visualization"]
        assert "Campaign `c1` report" in blocks[0]["text"]["text"]
        assert_valid_chart_block(blocks[1])
        # The text stays as the notification fallback.
        assert post["text"].startswith("📋 Campaign `c1` report")
        assert post["channel"] == CHANNEL
