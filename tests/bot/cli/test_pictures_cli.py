"""`raven-bot campaigns chart ID --out FILE` and `raven-bot runs graph RUN --out FILE` on stored
records: PNG or SVG by the suffix, and one clear line with exit code 2 for another suffix,
an unknown id, a missing directory or a place that cannot be written (nothing left behind).
Reading records and parsing commands never import matplotlib: only drawing does."""

from __future__ import annotations

import asyncio
import io
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from PIL import Image

from bot.cli.campaigns import campaigns_command
from bot.cli.parsers import parser
from bot.cli.records import runs_command
from bot.schema import all_migrations
from bot.settings import load_settings
from core.ids import ConversationRef
from core.store import Store
from host.graph.run_store import NodeRecord, RunRecord, RunStore
from oncall.store import CampaignStore
from tests.helpers import REPO
from tests.oncall_kit import spec

CAMPAIGN = "cmp_0123456789"
RUN = "run_0123456789"
CONV = ConversationRef("console", "local", "console", "console-1")


async def _seed(home: Path) -> None:
    """One campaign with two rounds of values, one run of three nodes."""
    store = Store(home / "raven.db", all_migrations())
    await store.open()
    try:
        campaigns = CampaignStore(store)
        await campaigns.create(CAMPAIGN, "U1", CONV, spec("echo loss=1"))
        for round_no, values in ((1, (0.9, 0.7)), (2, (0.6, 0.5))):
            await campaigns.start_round(CAMPAIGN, round_no, None, None)
            measured = [("loss", v, f"loss={v}") for v in values]
            await campaigns.record_measurements(CAMPAIGN, round_no, measured, watch={})
        runs = RunStore(store)
        run = RunRecord(
            id=RUN,
            conversation=CONV,
            task_summary="research, then code and design",
            background=False,
            state="completed",
            submitted_by="U1",
            submission={},
            run_dir=home / "runs" / RUN,
            replaces_run=None,
            status_message=None,
            created_at=0.0,
            finished_at=None,
        )
        nodes = [_node("r1", "research", ()), _node("c1", "code"), _node("d1", "design")]
        await runs.create_run(run, nodes)
    finally:
        await store.close()


def _node(node_id: str, agent: str, deps: tuple[str, ...] = ("r1",)) -> NodeRecord:
    return NodeRecord(
        conversation_id=CONV.id,
        node_id=node_id,
        run_id=RUN,
        agent=agent,
        instance=None,
        summary="",
        template=node_id,
        deps=deps,
        state="completed",
        attempts=1,
        max_attempts=1,
        continuation=None,
        output_path=None,
        error=None,
        verdict=None,
        deadline=None,
    )


@pytest.fixture
def home(isolated_env: Path) -> Path:
    isolated_env.mkdir(parents=True, exist_ok=True)
    asyncio.run(_seed(isolated_env))
    return isolated_env


def _chart(*argv: str) -> int:
    args = parser().parse_args(["campaigns", "chart", *argv])
    return campaigns_command(args, load_settings())


def _graph(run_id: str, out: Path) -> int:
    return runs_command(load_settings(), "graph", run_id, out=out)


def _png_size(path: Path) -> tuple[int, int]:
    image = Image.open(io.BytesIO(path.read_bytes()))
    image.load()
    return image.size


def test_campaigns_chart_writes_a_png(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "chart.png"
    assert _chart(CAMPAIGN, "--out", str(out)) == 0
    assert _png_size(out) == (1200, 600)
    said = capsys.readouterr().out
    assert f"Wrote {out}" in said and "loss over 2 round(s), 4 values" in said, said


def test_campaigns_chart_writes_an_svg_by_its_suffix(home: Path, tmp_path: Path) -> None:
    out = tmp_path / "chart.SVG"
    assert _chart(CAMPAIGN, "--out", str(out)) == 0
    assert ET.fromstring(out.read_bytes()).tag == "{http://www.w3.org/2000/svg}svg"


@pytest.mark.parametrize(
    ("name", "said"),
    [
        pytest.param("chart.jpg", "`.jpg` is not a picture format; name the file .png or .svg"),
        pytest.param("chart", "no suffix is not a picture format"),
        pytest.param("missing/chart.png", "does not exist; create it first"),
    ],
)
def test_campaigns_chart_refuses_a_file_it_cannot_make(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, said: str
) -> None:
    assert _chart(CAMPAIGN, "--out", str(tmp_path / name)) == 2
    err = capsys.readouterr().err
    assert err.startswith("raven-bot: ") and said in err, err
    assert len(err.splitlines()) == 1, err
    assert not list(tmp_path.glob("chart*"))


def test_campaigns_chart_of_an_unknown_campaign(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _chart("cmp_nope", "--out", str(tmp_path / "chart.png")) == 2
    err = capsys.readouterr().err
    assert "no campaign `cmp_nope`; `raven-bot campaigns list` shows them" in err, err
    assert not (tmp_path / "chart.png").exists()


def test_a_place_that_cannot_be_written_is_said_in_one_line(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # /proc takes no new files, whoever runs the test (root ignores file modes).
    assert _chart(CAMPAIGN, "--out", "/proc/chart.png") == 2
    err = capsys.readouterr().err
    assert err.startswith("raven-bot: cannot write /proc/chart.png: "), err
    assert "Traceback" not in err and len(err.splitlines()) == 1


def test_runs_graph_writes_png_and_svg(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    png, svg = tmp_path / "run.png", tmp_path / "run.svg"
    assert _graph(RUN, png) == 0
    width, height = _png_size(png)
    assert width >= 900 and height >= 500
    assert f"Wrote {png}: run {RUN} (completed), 3 nodes." in capsys.readouterr().out
    assert _graph(RUN, svg) == 0
    texts = [t.text or "" for t in ET.fromstring(svg.read_bytes()).iter()]
    assert any(t.startswith("r1") for t in texts) and "completed" in texts


def test_runs_graph_errors(home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _graph("run_nope", tmp_path / "run.png") == 2
    assert "No run `run_nope`; `raven-bot runs list`" in capsys.readouterr().err
    assert _graph(RUN, tmp_path / "run.gif") == 2
    assert "`.gif` is not a picture format" in capsys.readouterr().err
    assert _graph(RUN, tmp_path) == 2
    assert "it is a directory" in capsys.readouterr().err
    assert not list(tmp_path.glob("run*"))


def test_the_graph_action_needs_out() -> None:
    with pytest.raises(SystemExit) as exited:
        parser().parse_args(["runs", "graph", RUN])
    assert exited.value.code == 2
    args = parser().parse_args(["runs", "graph", RUN, "--out", "x.svg"])
    assert (args.runs_command, args.run, args.out) == ("graph", RUN, Path("x.svg"))


def test_reading_records_and_starting_a_chat_import_no_matplotlib() -> None:
    probe = (
        "import bot.app, bot.cli.campaigns, bot.cli.records, oncall.chart, host.graph.picture;"
        " import sys; print([m for m in sys.modules if m.split('.')[0] in "
        "('matplotlib', 'PIL')])"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "[]", done.stdout
