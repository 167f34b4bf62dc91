"""A campaign's chart: a real PNG of the promised size with something drawn on it, an SVG that
parses, the target line when there is one, the best-so-far respecting the direction, and the
awkward data (no rounds, one value, nan and inf, a thousand values) drawn rather than refused;
`chart_of` reads what the records hold (the metric only, failed rounds, the time span)."""

from __future__ import annotations

import io
import math
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from bot.schema import all_migrations
from core.store import Store
from oncall.chart import (
    HEIGHT_PX,
    WIDTH_PX,
    CampaignChart,
    ChartPoint,
    best_so_far,
    chart_of,
    render_chart,
)
from oncall.store import CampaignStore
from tests.oncall_kit import CONV, spec

T0 = 1_765_000_000.0
TARGET_RED = (214, 39, 40)  # the target line's colour, #d62728


def _chart(values: list[float], **fields: object) -> CampaignChart:
    points = tuple(ChartPoint(i // 3 + 1, T0 + 60 * i, v) for i, v in enumerate(values))
    base: dict[str, object] = {
        "campaign_id": "cmp_0123456789",
        "goal": "tune the toy model",
        "metric": "loss",
        "direction": "min",
        "points": points,
        "rounds": max((p.round for p in points), default=0),
        "started_at": T0,
        "ended_at": T0 + 60 * len(values),
    }
    return CampaignChart(**(base | fields))  # type: ignore[arg-type]


def _image(data: bytes) -> Image.Image:
    image = Image.open(io.BytesIO(data))
    image.load()  # decodes every pixel: a truncated file fails here
    return image.convert("RGB")


def _pixels(image: Image.Image) -> np.ndarray:
    return np.asarray(image, dtype=np.int32).reshape(-1, 3)


def _colours(image: Image.Image) -> int:
    """How many distinct colours (RGB packed into one integer)."""
    rgb = np.asarray(image, dtype=np.uint32)
    return len(np.unique((rgb[..., 0] << 16) | (rgb[..., 1] << 8) | rgb[..., 2]))


def _pixels_near(image: Image.Image, colour: tuple[int, int, int], tolerance: int = 12) -> int:
    near = np.all(np.abs(_pixels(image) - np.array(colour)) <= tolerance, axis=1)
    return int(near.sum())


def test_a_chart_is_a_png_of_the_promised_size_with_a_drawing_on_it() -> None:
    data = render_chart(_chart([0.9, 0.7, 0.75, 0.5, 0.42, 0.45]))
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    image = _image(data)
    assert image.size == (WIDTH_PX, HEIGHT_PX) == (1200, 600)
    # Not blank: text, axes, points and lines make many colours; a white page has one.
    assert _colours(image) > 50
    grey = np.asarray(image.convert("L"), dtype=np.int32)
    assert grey.max() - grey.min() > 200


def test_the_same_data_gives_the_same_bytes() -> None:
    chart = _chart([0.9, 0.7, 0.5], target=0.4)
    assert render_chart(chart) == render_chart(chart)
    assert render_chart(chart, "svg") == render_chart(chart, "svg")


def test_an_svg_chart_parses_and_carries_its_title() -> None:
    data = render_chart(_chart([0.9, 0.7, 0.5]), "svg")
    root = ET.fromstring(data)
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    texts = " ".join(t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}text"))
    assert "cmp_0123456789" in texts and "loss" in texts


def test_the_target_is_drawn_when_the_campaign_has_one() -> None:
    without = render_chart(_chart([0.9, 0.7, 0.5]))
    with_target = render_chart(_chart([0.9, 0.7, 0.5], target=0.6))
    assert without != with_target
    # The target line is red: far more red pixels with it than without.
    red_without = _pixels_near(_image(without), TARGET_RED)
    red_with = _pixels_near(_image(with_target), TARGET_RED)
    assert red_with > red_without + 500, (red_without, red_with)
    svg = ET.fromstring(render_chart(_chart([0.9, 0.7, 0.5], target=0.6), "svg"))
    labels = [t.text or "" for t in svg.iter("{http://www.w3.org/2000/svg}text")]
    assert "target 0.6" in labels, labels


def test_the_best_so_far_follows_the_direction() -> None:
    values = [0.5, 0.7, 0.4, 0.6]
    assert best_so_far(values, "min") == [0.5, 0.5, 0.4, 0.4]
    assert best_so_far(values, "max") == [0.5, 0.7, 0.7, 0.7]
    # The drawing differs too (the step line, the subtitle's best and the axis label).
    assert render_chart(_chart(values)) != render_chart(_chart(values, direction="max"))


@pytest.mark.parametrize(
    "values",
    [
        pytest.param([], id="no values"),
        pytest.param([0.5], id="one value"),
        pytest.param([math.nan, math.inf, -math.inf], id="only non-finite"),
        pytest.param([0.9, math.nan, 0.5, math.inf, 0.4], id="some non-finite"),
        pytest.param([1e-300, 1e300, -1e300], id="huge range"),
        pytest.param([1.0 / (i + 1) for i in range(1500)], id="1,500 values"),
    ],
)
def test_awkward_data_is_drawn_at_full_size(values: list[float]) -> None:
    image = _image(render_chart(_chart(values)))
    assert image.size == (1200, 600)
    assert _colours(image) > 20


def test_no_round_at_all_is_drawn() -> None:
    empty = CampaignChart(campaign_id="cmp_e", goal="g", metric="loss", direction="max")
    image = _image(render_chart(empty))
    assert image.size == (1200, 600) and _colours(image) > 20


def test_failed_rounds_are_marked() -> None:
    plain = _chart([0.9, 0.7, 0.5, 0.4], rounds=3)
    failed = _chart([0.9, 0.7, 0.5, 0.4], rounds=3, failed_rounds=frozenset({2, 3}))
    assert render_chart(plain) != render_chart(failed)
    svg = ET.fromstring(render_chart(failed, "svg"))
    labels = [t.text or "" for t in svg.iter("{http://www.w3.org/2000/svg}text")]
    assert "failed round" in labels, labels


async def test_chart_of_reads_the_metric_failed_rounds_and_time_span(tmp_path: Path) -> None:
    clock = iter(float(T0 + i) for i in range(1000))
    store = Store(tmp_path / "raven.db", all_migrations())
    await store.open()
    try:
        campaigns = CampaignStore(store, clock=lambda: next(clock))
        record = await campaigns.create("cmp_0123456789", "U1", CONV, spec("echo loss=1"))
        await campaigns.start_round(record.id, 1, None, None)
        await campaigns.record_measurements(
            record.id,
            1,
            [("loss", 0.9, "loss=0.9"), ("acc", 0.1, "acc=0.1"), ("loss", math.nan, "nan")],
            watch={},
        )
        await campaigns.set_round(record.id, 1, state="ended", wake_reason="died", exit_code=1)
        await campaigns.start_round(record.id, 2, None, None)
        await campaigns.record_measurements(record.id, 2, [("loss", 0.5, "loss=0.5")], watch={})
        await campaigns.set_round(record.id, 2, state="ended", wake_reason="finished")
        await campaigns.start_round(record.id, 3, None, None)
        await campaigns.set_round(record.id, 3, state="failed", ended_at=T0 + 500)
        fresh = await campaigns.get(record.id)
        assert fresh is not None
        chart = chart_of(
            fresh, await campaigns.rounds(record.id), await campaigns.measurements(record.id)
        )
    finally:
        await store.close()
    assert chart.metric == "loss" and chart.direction == "min"
    assert [(p.round, p.value) for p in chart.points if not math.isnan(p.value)] == [
        (1, 0.9),
        (2, 0.5),
    ]
    assert sum(math.isnan(p.value) for p in chart.points) == 1  # kept, drawn on the edge
    assert chart.failed_rounds == {1, 3}  # died; could not start
    assert chart.rounds == 3
    assert chart.started_at is not None and chart.ended_at == T0 + 500
    assert chart.target is None  # campaigns record no target value
    assert _image(render_chart(chart)).size == (1200, 600)
