"""The campaign page, served by the real viewer on 127.0.0.1: its charts drawn from the
values, each decision beside the value it cites, the budget spent, hostile text kept inert,
other conversations' campaigns not found, and the page kept live while the campaign runs."""

from __future__ import annotations

import asyncio
import math
import re
import xml.etree.ElementTree as ET
from datetime import UTC, datetime
from html.parser import HTMLParser
from pathlib import Path

import aiohttp
import pytest

from bot.web.campaign_view import campaign_signature, load_campaign
from bot.web.chart_svg import HEIGHT, WIDTH, campaign_chart_svgs, rounds_chart
from core.store import Store
from oncall.chart import CampaignChart, ChartPoint
from oncall.store import CampaignStore
from tests.bot.web.seed import CHANNEL, DM, OTHER_THREAD, serving, token
from tests.bot.web.seed_campaign import (
    SeedDecision,
    SeedRound,
    SteppingClock,
    campaign_spec,
    seed_campaign,
)

_SVG = re.compile(r'<svg\b[^>]*\bclass="chart"[^>]*>.*?</svg>', re.DOTALL)
_NS = "{http://www.w3.org/2000/svg}"
HOSTILE = (
    "<script>alert(1)</script> [click](javascript:alert(2)) <svg onload=alert(3)> "
    "<img src=x onerror=alert(4)> \u202egnp.exe"
)


class _Markup(HTMLParser):
    """Every element of a page, with its attributes, and its text."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.elements: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _markup(html: str) -> _Markup:
    parser = _Markup()
    parser.feed(html)
    return parser


def _charts(html: str) -> list[ET.Element]:
    return [ET.fromstring(svg) for svg in _SVG.findall(html)]


def _points(chart: ET.Element) -> list[ET.Element]:
    return [e for e in chart.iter(f"{_NS}circle") if "point" in e.get("class", "").split()]


def _numbers_in(chart: ET.Element) -> list[str]:
    """Every coordinate-like attribute of the chart (where a NaN would show)."""
    names = ("x", "y", "x1", "x2", "y1", "y2", "cx", "cy", "r", "width", "height", "d")
    return [e.get(n, "") for e in chart.iter() for n in names if e.get(n)]


@pytest.fixture
def home(isolated_env: Path) -> Path:
    """The bot's home, where the viewer's link key is kept."""
    isolated_env.mkdir(parents=True, exist_ok=True)
    return isolated_env


async def _get(url: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as http, http.get(url) as response:
        return response.status, await response.text()


async def test_campaign_page_draws_every_value_cites_and_budget(store: Store, home: Path) -> None:
    spec = campaign_spec(rounds=4, wall_seconds=7200, compute_minutes=60, baseline=3.5)
    await seed_campaign(
        store,
        CHANNEL,
        spec,
        [
            SeedRound(values=(3.0, 2.5), others=(("accuracy", 0.61),)),  # #1 #2 #3
            SeedRound(values=(), state="failed", wake_reason="died", exit_code=137),
            SeedRound(values=(math.nan, 1.25)),  # #4 (not finite) #5
        ],
        [
            SeedDecision(1, "resubmit", "the loss still falls", cite=2),
            SeedDecision(3, "report", "under 1.5 now: round 3 reached 1.25", cite=5),
            SeedDecision(3, "wait", "a value the records lost", cite=99),
        ],
        report="## Result\n\nThe loss fell to **1.25**.",
        compute_seconds=1800.0,
        model_calls=7,
    )
    async with serving(store, home) as base:
        status, html = await _get(f"{base}/v/{token(home, CHANNEL)}/campaign/c1")
    assert status == 200
    charts = _charts(html)
    assert len(charts) == 2, "a chart over rounds and one over time"
    for chart in charts:
        assert chart.get("viewBox") == f"0 0 {WIDTH} {HEIGHT}"
        assert len(_points(chart)) == 3, "the metric's three finite values, each a point"
        assert chart.find(f".//{_NS}path[@class='best']") is not None
        assert chart.find(f".//{_NS}line[@class='baseline']").get("stroke-dasharray")  # type: ignore[union-attr]
        assert chart.find(f".//{_NS}g[@class='failed']") is not None
        assert chart.find(f".//{_NS}path[@class='failed-mark']") is not None
        assert "1 not finite" in "".join(chart.itertext())
        assert not any("nan" in v.lower() or "inf" in v.lower() for v in _numbers_in(chart))
    decisions = re.findall(r'<li class="decision".*?</li>', html, re.DOTALL)
    assert len(decisions) == 3
    assert "cites #99, which this campaign has no record of" in decisions[2]
    assert "#2 <code>loss</code> = 2.5 (round 1)" in decisions[0]
    assert "#5 <code>loss</code> = 1.25 (round 3)" in decisions[1]
    assert "under 1.5 now" in decisions[1]
    text = " ".join(" ".join(_markup(html).text).split())
    assert "Rounds 3 of 4" in text
    assert "Compute 30 min 00 s of 1 h 00 min" in text
    assert "Model calls 7 (no limit)" in text
    assert "Wall clock" in text and "of 2 h 00 min" in text
    assert "died" in text and "exit 137" in text and "accuracy" in text
    assert "<h2>Result</h2>" in html and "<strong>1.25</strong>" in html


async def test_hostile_text_is_shown_never_run(store: Store, home: Path) -> None:
    await seed_campaign(
        store,
        CHANNEL,
        campaign_spec(goal=HOSTILE),
        [SeedRound(values=(1.0,), others=((HOSTILE, 2.0),))],
        [SeedDecision(1, "report", HOSTILE, cite=2)],
        report=HOSTILE,
        error=HOSTILE,
    )
    async with serving(store, home) as base:
        status, html = await _get(f"{base}/v/{token(home, CHANNEL)}/campaign/c1")
    assert status == 200
    page = _markup(html)
    scripts = [a for tag, a in page.elements if tag == "script"]
    assert scripts and all(str(a.get("src", "")).endswith("static/viewer.js") for a in scripts)
    assert not any(k.startswith("on") for _, attrs in page.elements for k in attrs)
    hrefs = [str(a.get("href")) for _, a in page.elements if a.get("href")]
    assert not any(h.strip().lower().startswith("javascript:") for h in hrefs)
    assert not [a for tag, a in page.elements if tag == "img"]
    assert "\u202e" not in html
    shown = "".join(page.text)
    assert shown.count("<script>alert(1)</script>") >= 4, "goal, value name, reason, error"
    assert "⟨U+202E⟩gnp.exe" in shown
    # The one SVGs in the page are the charts, their markup from data only.
    assert [a.get("class") for tag, a in page.elements if tag == "svg"] == ["chart", "chart"]


def test_a_hostile_metric_name_is_text_in_the_chart() -> None:
    """Spec validation keeps metric names plain; the chart escapes one anyway."""
    chart = CampaignChart(
        campaign_id="c1",
        goal="g",
        metric="<svg onload=alert(1)>\u202e",
        direction="max",
        points=(ChartPoint(1, 1000.0, 0.5),),
        rounds=1,
    )
    svg = rounds_chart(chart)
    assert "<svg onload" not in svg and "\u202e" not in svg
    root = ET.fromstring(svg)
    assert {e.tag.removeprefix(_NS) for e in root.iter()} <= {
        "svg", "title", "rect", "text", "g", "line", "path", "circle",
    }  # fmt: skip
    assert "<svg onload=alert(1)>⟨U+202E⟩" in "".join(root.itertext())


def test_a_target_is_a_solid_line_at_its_value() -> None:
    chart = CampaignChart(
        campaign_id="c1",
        goal="g",
        metric="loss",
        direction="min",
        points=(ChartPoint(1, 1000.0, 4.0), ChartPoint(2, 1100.0, 2.0)),
        rounds=2,
        target=1.0,
        baseline=5.0,
    )
    root = ET.fromstring(rounds_chart(chart))
    target = root.find(f".//{_NS}line[@class='target']")
    baseline = root.find(f".//{_NS}line[@class='baseline']")
    assert target is not None and baseline is not None
    assert target.get("stroke-dasharray") is None and baseline.get("stroke-dasharray")
    # Lower values sit lower: the target (1) below both points, the baseline (5) above.
    ys = sorted(float(p.get("cy", "0")) for p in _points(root))
    assert float(baseline.get("y1", "0")) < ys[0] < ys[1] < float(target.get("y1", "0"))


@pytest.mark.parametrize(
    "values", [(), (2.0,), (math.inf, math.nan), (1e308, -1e308, 5e-324), (0.1, 0.1 + 1e-17)]
)
async def test_a_chart_of_no_or_one_value_still_draws(
    store: Store, values: tuple[float, ...]
) -> None:
    await seed_campaign(
        store, CHANNEL, campaign_spec(), [SeedRound(values=values)] if values else []
    )
    view = await load_campaign(CampaignStore(store), "c1")
    assert view is not None
    finite = [v for v in values if math.isfinite(v)]
    for svg in campaign_chart_svgs(view):
        chart = ET.fromstring(svg)
        points = _points(chart)
        assert len(points) == len(finite)
        for p in points:
            assert 0 < float(p.get("cx", "-1")) < WIDTH and 0 < float(p.get("cy", "-1")) < HEIGHT
        coords = _numbers_in(chart)
        assert coords and not any("nan" in c.lower() or "inf" in c.lower() for c in coords)
        if not finite:
            assert "no value of loss yet" in "".join(chart.itertext())
        if len(values) - len(finite):
            assert f"{len(values) - len(finite)} not finite" in "".join(chart.itertext())


async def test_other_conversations_campaigns_are_not_found(store: Store, home: Path) -> None:
    await seed_campaign(store, OTHER_THREAD, campaign_spec(goal="the other thread's goal"),
                        campaign_id="other")  # fmt: skip
    await seed_campaign(store, DM, campaign_spec(goal="a private goal"), campaign_id="private")
    await seed_campaign(store, CHANNEL, campaign_spec(goal="this thread's goal"), campaign_id="own")
    link = token(home, CHANNEL)
    async with serving(store, home) as base:
        assert (await _get(f"{base}/v/{link}/campaign/own"))[0] == 200
        for campaign_id, goal in (("other", "other thread"), ("private", "private goal")):
            for tail in ("", "/events"):
                status, html = await _get(f"{base}/v/{link}/campaign/{campaign_id}{tail}")
                assert status == 404, (campaign_id, tail)
                assert goal not in html
        # The DM's own link opens it.
        status, html = await _get(f"{base}/v/{token(home, DM)}/campaign/private")
        assert status == 200 and "a private goal" in html


async def test_the_page_follows_a_running_campaign(store: Store, home: Path) -> None:
    clock = SteppingClock()
    await seed_campaign(
        store, CHANNEL, campaign_spec(), [SeedRound(values=(2.0,), state="running",
                                                    wake_reason=None)],
        closed=False, clock=clock,
    )  # fmt: skip
    campaigns = CampaignStore(store, clock=clock)
    due = clock.now + 300
    await campaigns.schedule_wake("w1", "c1", 1, "scheduled", due)
    before = await campaign_signature(campaigns, "c1")
    link = token(home, CHANNEL)
    async with (
        serving(store, home, poll_seconds=0.05, keepalive_seconds=0.05) as base,
        aiohttp.ClientSession() as http,
    ):
        status, html = await _get(f"{base}/v/{link}/campaign/c1")
        assert status == 200 and 'data-live="c1/events"' in html
        next_look = datetime.fromtimestamp(due, UTC).isoformat(timespec="seconds")
        assert f'<dt>Next look</dt><dd><time datetime="{next_look}">' in html
        assert [len(_points(c)) for c in _charts(html)] == [1, 1]
        async with http.get(f"{base}/v/{link}/campaign/c1/events") as events:
            assert events.status == 200
            assert await _next_event(events, keepalive=True) == "keep-alive"
            await campaigns.record_measurements("c1", 1, [("loss", 1.5, "loss=1.5")], watch={})
            seen = await _next_event(events)
            assert seen == "changed"
            assert await campaign_signature(campaigns, "c1") != before
            status, html = await _get(f"{base}/v/{link}/campaign/c1")
            assert [len(_points(c)) for c in _charts(html)] == [2, 2]
            await campaigns.update("c1", state="closed", closed_at=clock())
            # `changed` first, unless the close fell between the stream's two looks.
            after: list[str] = []
            while "finished" not in after:
                after.append(await _next_event(events))
            assert set(after) <= {"changed", "finished"}
        status, html = await _get(f"{base}/v/{link}/campaign/c1")
        assert "data-live" not in html


async def _next_event(response: aiohttp.ClientResponse, *, keepalive: bool = False) -> str:
    """The next named server-sent event (keep-alives skipped, or returned with `keepalive`:
    one shows the stream has taken its first look at the record)."""
    async with asyncio.timeout(10):
        while True:
            line = (await response.content.readline()).decode()
            if not line:
                raise AssertionError("the event stream closed")
            if line.startswith("event: "):
                return line.removeprefix("event: ").strip()
            if keepalive and line.startswith(": keep-alive"):
                return "keep-alive"
