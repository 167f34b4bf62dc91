"""The viewer in a real browser: headless Chromium opens a finished run's page and a
campaign's page, served by the real viewer on 127.0.0.1, at a desktop width (1280 px) and a
phone's (390 px). The graph and the chart must be drawn (read from the screenshots' pixels),
the page's script must have run under the page's own Content-Security-Policy without a
violation, and at 390 px nothing may run past the window's right edge.

The screenshots are kept: in $RAVEN_WEB_SCREENSHOTS when set (for people to look at), else
in the test's temporary directory. Skipped where Chromium is absent (nothing is installed).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Final

import pytest
from PIL import Image

from core.store import Store
from host.graph.picture import STATE_COLOURS
from tests.bot.web import browser
from tests.bot.web.seed import CHANNEL, SeedNode, seed_run, serving, token
from tests.bot.web.seed_campaign import SeedDecision, SeedRound, campaign_spec, seed_campaign

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        browser.chromium() is None,
        reason=f"needs headless Chromium (Debian's package): {browser.INSTALL}",
    ),
]

# Read when the module is imported: the tests' own fixtures clear every RAVEN_* variable.
SHOTS_DIR: Final = os.environ.get("RAVEN_WEB_SCREENSHOTS", "")
PHONE: Final = 390
WIDTHS: Final = (1280, PHONE)
# Windows about as tall as the pages (made taller when a page does not fit).
RUN_HEIGHT: Final = {1280: 4400, 390: 6200}
CAMPAIGN_HEIGHT: Final = {1280: 2600, 390: 3700}
# A node's box in the graph is 168 px wide: a run of this many pixels of a state's colour is
# a box (a badge or a legend swatch of that colour is under 100 px wide).
BOX_RUN: Final = 140
# The rightmost columns at 390 px: inside the page's padding (.6rem), so page background.
RIGHT_EDGE: Final = 6
GREEN: Final = browser.rgb(STATE_COLOURS["completed"][0])
RED: Final = browser.rgb(STATE_COLOURS["failed"][0])
LONG_WORD: Final = "x" * 300  # one unbroken word: must wrap, not widen the page

# Four layers, eight nodes: a failed root (its dependants skipped) beside completed ones; a
# completed and the failed node in the first layer, which a phone shows without scrolling.
RUN_NODES: Final = (
    SeedNode(
        "fetch",
        prompt="fetch the three CSV files",
        output="Fetched **3** files:\n\n- `a.csv`\n- `b.csv`\n- `c.csv`",
    ),
    SeedNode("lint", prompt="ruff check .", state="failed", output=None, error="ruff: 12 errors"),
    SeedNode("probe", agent="python", prompt="probe the data", output=f"probe said {LONG_WORD}"),
    SeedNode("build", deps=("fetch",), prompt="make tables of the files", output="built 3 tables"),
    SeedNode("report-lint", deps=("lint",), state="skipped", output=None),
    SeedNode(
        "index",
        agent="python",
        deps=("probe",),
        transcript=(
            {
                "type": "tool",
                "name": "shell",
                "input": {"command": "ls -la /data"},
                "output": "total 3\n-rw-r--r-- a.csv",
            },
            {"type": "answer", "text": "indexed 3 files"},
        ),
    ),
    SeedNode(
        "test",
        deps=("build", "index"),
        output="| check | result |\n|---|---|\n| rows | 300 |\n| nulls | 0 |",
        verdict={"passed": True, "reason": "all three tables have rows and no nulls"},
    ),
    SeedNode("publish", deps=("test", "report-lint"), state="skipped", output=None),
)

# Ten rounds of a falling loss, two values each; round 6 died (no value), decisions cite one.
CAMPAIGN_ROUNDS: Final = tuple(
    SeedRound(values=(), state="failed", wake_reason="died", exit_code=137)
    if n == 6
    else SeedRound(values=(3.0 / n + 0.2, 3.0 / n), others=(("accuracy", 0.5 + n / 25),))
    for n in range(1, 11)
)


def _decisions() -> tuple[SeedDecision, ...]:
    """After each valued round a decision citing its last loss (measurements are numbered
    from #1 in the order they were recorded: each round's losses, then its accuracy)."""
    decisions, number = [], 0
    for n, r in enumerate(CAMPAIGN_ROUNDS, start=1):
        if not r.values:
            continue
        number += len(r.values)
        last = r.values[-1]
        if n < len(CAMPAIGN_ROUNDS):
            decisions.append(SeedDecision(n, "resubmit", f"still falling: {last:.3g}", number))
        else:
            decisions.append(SeedDecision(n, "report", f"{last:.3g}: the goal is met", number))
        number += len(r.others)
    return tuple(decisions)


# A chart's point is a filled circle: even scaled down to a phone it covers this many pixels
# of its colour (each chart draws every point; a legend swatch adds one circle).
POINT_PIXELS: Final = 12


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    """Where screenshots go (printed, so a run with -s says where to look)."""
    folder = Path(SHOTS_DIR) if SHOTS_DIR else tmp_path / "screenshots"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


async def test_a_finished_run_shows_its_graph_at_desktop_and_phone_widths(
    store: Store, isolated_env: Path, shots: Path
) -> None:
    home = isolated_env
    await seed_run(store, home, CHANNEL, RUN_NODES, run_id="r-browser", summary="load the data")
    async with serving(store, home) as base:
        url = f"{base}/v/{token(home, CHANNEL)}/run/r-browser"

        for width in WIDTHS:
            path = shots / f"run-{width}.png"
            shown = await browser.whole_page(url, path, width=width, height=RUN_HEIGHT[width])
            print(f"screenshot: {path}")
            _assert_script_ran_cleanly(shown)
            graph = _one(r'<svg[^>]*class="graph"[^>]*>.*?</svg>', shown.stdout)
            assert graph.count("<rect") == len(RUN_NODES)
            image = Image.open(path)
            assert browser.has_run(image, GREEN, BOX_RUN), f"no completed node drawn at {width}"
            assert browser.has_run(image, RED, BOX_RUN), f"no failed node drawn at {width}"
            if width == PHONE:
                _assert_nothing_past_right_edge(image)


async def test_a_campaign_shows_its_charts_at_desktop_and_phone_widths(
    store: Store, isolated_env: Path, shots: Path
) -> None:
    home = isolated_env
    home.mkdir(parents=True, exist_ok=True)
    await seed_campaign(
        store,
        CHANNEL,
        campaign_spec(goal="get the loss under 0.35", rounds=12),
        CAMPAIGN_ROUNDS,
        _decisions(),
        campaign_id="c-browser",
        report="## Result\n\nThe loss fell from **3.2** to **0.3** in ten rounds.",
        compute_seconds=2400.0,
        model_calls=10,
    )
    async with serving(store, home) as base:
        url = f"{base}/v/{token(home, CHANNEL)}/campaign/c-browser"

        for width in WIDTHS:
            path = shots / f"campaign-{width}.png"
            shown = await browser.whole_page(url, path, width=width, height=CAMPAIGN_HEIGHT[width])
            print(f"screenshot: {path}")
            _assert_script_ran_cleanly(shown)
            charts = re.findall(r'<svg[^>]*class="chart"[^>]*>.*?</svg>', shown.stdout, re.DOTALL)
            assert len(charts) == 2, "a chart over rounds and one over time"
            values = sum(len(r.values) for r in CAMPAIGN_ROUNDS)
            fills = set()
            for chart in charts:
                points = re.findall(r'<circle[^>]*class="point"[^>]*>', chart)
                assert len(points) == values, f"{len(points)} points drawn of {values} values"
                fills |= {_one(r'fill="(#[0-9a-f]{6})"', p) for p in points}
            assert len(fills) == 1, fills
            point = browser.rgb(fills.pop())
            image = Image.open(path)
            drawn = browser.count(image, point)
            assert drawn >= (2 * values + 1) * POINT_PIXELS, (
                f"{drawn} pixels of the points' colour at {width} px: the charts are not drawn"
            )
            if width == PHONE:
                _assert_nothing_past_right_edge(image)


def _one(pattern: str, html: str) -> str:
    found = re.findall(pattern, html, flags=re.DOTALL)
    assert len(found) == 1, f"{len(found)} matches of {pattern!r}"
    return str(found[0])


def _assert_script_ran_cleanly(shown: browser.Visit) -> None:
    """No violation of the page's own policy, no script error, and viewer.js did its work."""
    assert not shown.csp_violations(), shown.csp_violations()
    assert not shown.script_errors(), shown.script_errors()
    _assert_times_rewritten(shown.stdout)


def _assert_times_rewritten(html: str) -> None:
    """viewer.js ran: each `<time>` now reads in the reader's zone, and keeps the server's
    text (the team's zone, `… UTC` here) as its title."""
    times = re.findall(r"<time\b([^>]*)>(.*?)</time>", html, flags=re.DOTALL)
    assert times, "no <time> on the page"
    for attributes, text in times:
        title = re.search(r'title="([^"]*)"', attributes)
        assert title is not None, f"<time{attributes}> was not rewritten by viewer.js"
        assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \w+", title.group(1)), title.group(1)
        assert text != title.group(1), f"<time> still reads {text!r}"


def _assert_nothing_past_right_edge(image: Image.Image) -> None:
    foreign = browser.foreign_in_right_edge(image, RIGHT_EDGE)
    assert not foreign, f"content runs past the right edge at {image.size[0]} px: {foreign}"
