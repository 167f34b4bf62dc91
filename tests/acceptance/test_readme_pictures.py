"""The README's picture commands through the real `raven-bot`: a campaign run in the
foreground, then `raven-bot campaigns chart ID --out FILE.png`; a plan piped into
`raven-bot chat` (offline: its research nodes fail, the one after them is skipped), then
`raven-bot runs graph RUN --out FILE.png|FILE.svg`. The files are opened as a person would:
a PNG that decodes at its size with a drawing on it, an SVG naming the nodes and states."""

from __future__ import annotations

import io
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tests.acceptance.harness import noise, product_env, project_dir, sh

# Real processes (the raven-bot CLI, a pty, Slurm, ssh, restarts): `-m "not slow"` skips them.
pytestmark = pytest.mark.slow

README_EXAMPLES = [
    "raven-bot campaigns chart ID --out FILE.png",
    "raven-bot runs graph RUN --out FILE.png\\|FILE.svg",
    "runs graph",
]

CAMPAIGN = (
    "raven-bot campaigns run --goal 'chart the toy loss' "
    "--run 'for v in 0.9 0.6 0.45 0.4; do echo loss=$v; done' "
    "--metric loss:min --budget 10m --poll 0.1s --json"
)
PLAN = (
    "printf 'r1: research: read about charts\\n"
    "r2: research: compare them [after r1]\\n"
    "r3: research: list the libraries\\n\\n' | raven-bot chat"
)


def _png(path: Path) -> Image.Image:
    image = Image.open(io.BytesIO(path.read_bytes()))
    image.load()  # every pixel decoded
    return image.convert("RGB")


def _colours(image: Image.Image) -> int:
    rgb = np.asarray(image, dtype=np.uint32)
    return len(np.unique((rgb[..., 0] << 16) | (rgb[..., 1] << 8) | rgb[..., 2]))


def test_campaigns_chart_draws_the_campaign_just_run(tmp_path: Path) -> None:
    project = project_dir(tmp_path / "project")
    env = product_env(tmp_path / "home")
    ran = sh(CAMPAIGN, env=env, cwd=project)
    assert ran.code == 0, ran.both
    campaign = json.loads(ran.out)["id"]

    chart = sh(f"raven-bot campaigns chart {campaign} --out chart.png", env=env, cwd=project)
    assert chart.code == 0, chart.both
    assert chart.out.startswith(f"Wrote chart.png: campaign {campaign}'s loss"), chart.out
    image = _png(project / "chart.png")
    assert image.size == (1200, 600)
    assert _colours(image) > 50  # title, axes, points, the best-so-far line: not blank
    assert not noise(chart.both)

    unknown = sh("raven-bot campaigns chart cmp_nope --out other.png", env=env, cwd=project)
    assert unknown.code == 2
    assert unknown.err.splitlines() == [
        "raven-bot: no campaign `cmp_nope`; `raven-bot campaigns list` shows them."
    ]
    assert not (project / "other.png").exists()


def test_runs_graph_draws_the_run_a_plan_started(tmp_path: Path) -> None:
    project = project_dir(tmp_path / "project")
    env = product_env(tmp_path / "home")
    chat = sh(PLAN, env=env, cwd=project)
    assert chat.code == 0, chat.both
    listing = sh("raven-bot runs list", env=env, cwd=project)
    (run,) = re.findall(r"^(run_[0-9a-f]+) ", listing.out, re.MULTILINE)

    png = sh(f"raven-bot runs graph {run} --out run.png", env=env, cwd=project)
    assert png.code == 0, png.both
    assert png.out == f"Wrote run.png: run {run} (failed), 3 nodes.\n", png.out
    image = _png(project / "run.png")
    assert image.width >= 900 and image.height >= 500 and _colours(image) > 50

    svg = sh(f"raven-bot runs graph {run} --out run.svg", env=env, cwd=project)
    assert svg.code == 0, svg.both
    texts = [t.text or "" for t in ET.fromstring((project / "run.svg").read_bytes()).iter()]
    # Kept as text (not outlines); a two-line label is one element per line.
    assert {"r1", "r2", "r3", "research"} <= set(texts), texts
    assert {"failed", "skipped"} <= set(texts), texts  # the legend: the states present

    wrong = sh(f"raven-bot runs graph {run} --out run.jpg", env=env, cwd=project)
    assert wrong.code == 2
    assert wrong.err.splitlines() == [
        "raven-bot: run.jpg: `.jpg` is not a picture format; name the file .png or .svg "
        "(e.g. chart.png)"
    ]
    assert not noise(png.both + svg.both + wrong.both)
