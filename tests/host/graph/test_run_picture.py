"""A run's picture: layers by dependency depth, each state in its colour with a legend, node
ids and agents as labels, a dependency on an earlier run's node drawn too; PNG that decodes
and SVG that parses, the same bytes for the same run; `picture_of` reads stored records."""

from __future__ import annotations

import io
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from bot.schema import all_migrations
from core.ids import ConversationRef
from core.store import Store
from host.graph.picture import (
    EARLIER,
    STATE_COLOURS,
    PictureNode,
    RunPicture,
    layers,
    picture_of,
    render_run,
)
from host.graph.run_store import NodeRecord, RunRecord, RunStore

SVG = "{http://www.w3.org/2000/svg}"
CONV = ConversationRef("test", "W", "C", "T")


def _run(*nodes: PictureNode, state: str = "running") -> RunPicture:
    return RunPicture("run_0123456789", state, "build and test the page", nodes)


DIAMOND = _run(
    PictureNode("r1", "research", "completed"),
    PictureNode("c1", "code", "failed", ("r1",)),
    PictureNode("d1", "design", "running", ("r1",)),
    PictureNode("t1", "shell", "skipped", ("c1", "d1")),
)


def _image(data: bytes) -> Image.Image:
    image = Image.open(io.BytesIO(data))
    image.load()  # decodes every pixel: a truncated file fails here
    return image.convert("RGB")


def _colours(image: Image.Image) -> int:
    """How many distinct colours (RGB packed into one integer: fast on 16 Mpx)."""
    rgb = np.asarray(image, dtype=np.uint32)
    return len(np.unique((rgb[..., 0] << 16) | (rgb[..., 1] << 8) | rgb[..., 2]))


def _near(image: Image.Image, hex_colour: str, tolerance: int = 6) -> int:
    colour = np.array([int(hex_colour[i : i + 2], 16) for i in (1, 3, 5)])
    pixels = np.asarray(image, dtype=np.int32).reshape(-1, 3)
    return int(np.all(np.abs(pixels - colour) <= tolerance, axis=1).sum())


def _texts(svg: bytes) -> list[str]:
    return [t.text or "" for t in ET.fromstring(svg).iter(f"{SVG}text")]


def test_nodes_are_layered_by_dependency_depth() -> None:
    assert layers(DIAMOND) == [["r1"], ["c1", "d1"], ["t1"]]
    chain = _run(*(PictureNode(f"n{i}", "code", "pending", (f"n{i - 1}",)) for i in range(1, 4)))
    # n0 belongs to an earlier run: it comes first, before the run's own nodes.
    assert layers(chain) == [["n0"], ["n1"], ["n2"], ["n3"]]


def test_a_run_picture_is_a_png_with_each_state_in_its_colour() -> None:
    data = render_run(DIAMOND)
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    image = _image(data)
    assert image.width >= 900 and image.height >= 500
    assert _colours(image) > 50  # not blank
    for state in ("completed", "failed", "running", "skipped"):
        # A box (about 180 x 40 px) and its legend swatch: thousands of pixels.
        assert _near(image, STATE_COLOURS[state][0]) > 2000, state
    for absent in ("queued", "exception"):
        assert _near(image, STATE_COLOURS[absent][0]) < 200, absent


def test_the_svg_names_every_node_agent_and_state_shown() -> None:
    svg = render_run(DIAMOND, "svg")
    assert ET.fromstring(svg).tag == f"{SVG}svg"
    texts = _texts(svg)
    for node in DIAMOND.nodes:
        assert f"{node.id}\n{node.agent}" in texts or (node.id in texts and node.agent in texts)
    # The legend: the states present, not the others.
    assert {"completed", "failed", "running", "skipped"} <= set(texts)
    assert "cancelled" not in texts and EARLIER not in texts


def test_a_dependency_on_an_earlier_run_is_drawn() -> None:
    reused = _run(PictureNode("s2", "shell", "completed", ("s1",)))
    texts = _texts(render_run(reused, "svg"))
    assert EARLIER in texts  # in the legend
    assert any(t.startswith("s1") for t in texts), texts


def test_the_same_run_gives_the_same_bytes() -> None:
    assert render_run(DIAMOND) == render_run(DIAMOND)
    assert render_run(DIAMOND, "svg") == render_run(DIAMOND, "svg")


@pytest.mark.parametrize(
    "picture",
    [
        pytest.param(_run(), id="no nodes"),
        pytest.param(_run(PictureNode("s1", "shell", "queued")), id="one node"),
        pytest.param(_run(PictureNode("x1", "code", "mystery")), id="an unknown state"),
        pytest.param(
            _run(
                *(
                    PictureNode(f"n{i}", "code", "completed", (f"n{i // 2}",) if i else ())
                    for i in range(120)
                )
            ),
            id="120 nodes",
        ),
    ],
)
def test_awkward_runs_are_drawn(picture: RunPicture) -> None:
    image = _image(render_run(picture))
    assert image.width >= 900 and image.height >= 500
    assert image.width <= 4000 and image.height <= 4000
    assert _colours(image) > 20


async def test_picture_of_reads_the_stored_run(tmp_path: Path) -> None:
    store = Store(tmp_path / "raven.db", all_migrations())
    await store.open()
    try:
        runs = RunStore(store)
        run = RunRecord(
            id="run_0123456789",
            conversation=CONV,
            task_summary="research then code",
            background=False,
            state="running",
            submitted_by="U1",
            submission={},
            run_dir=tmp_path / "run",
            replaces_run=None,
            status_message=None,
            created_at=0.0,
            finished_at=None,
        )
        await runs.create_run(run, [_node(run, "r1", "research", ()), _node(run, "c1", "code")])
        await runs.update_node(CONV.id, "r1", state="completed")
        stored = await runs.run(run.id)
        assert stored is not None
        picture = picture_of(stored, await runs.nodes_of_run(run.id))
    finally:
        await store.close()
    assert picture.run_id == "run_0123456789" and picture.state == "running"
    assert [(n.id, n.agent, n.state, n.deps) for n in picture.nodes] == [
        ("r1", "research", "completed", ()),
        ("c1", "code", "pending", ("r1",)),
    ]


def _node(run: RunRecord, node_id: str, agent: str, deps: tuple[str, ...] = ("r1",)) -> NodeRecord:
    return NodeRecord(
        conversation_id=run.conversation.id,
        node_id=node_id,
        run_id=run.id,
        agent=agent,
        instance=None,
        summary="",
        template=node_id,
        deps=deps,
        state="pending",
        attempts=0,
        max_attempts=1,
        continuation=None,
        output_path=None,
        error=None,
        verdict=None,
        deadline=None,
    )
