"""A run's picture: its graph as PNG or SVG, nodes coloured by state, dependencies as arrows.

Nodes are laid out left to right by dependency depth (networkx's topological generations;
no graphviz), each labelled with its id and agent. A dependency on a node of an earlier run
of the conversation (a completed node reused) is drawn as a dashed box, so every arrow has
both ends. `picture_of` turns stored records into plain data; `render_run` draws it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import networkx as nx

from core.pictures import PictureFormat, figure_bytes, new_figure
from host.graph.run_store import NodeRecord, RunRecord

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

EARLIER: Final = "earlier run"  # the state shown for a dependency outside the run
# Fill colour of each state, and whether its label is dark (on a light fill).
STATE_COLOURS: Final[dict[str, tuple[str, bool]]] = {
    "completed": ("#2ca02c", False),
    "running": ("#1f77b4", False),
    "queued": ("#f2d94e", True),
    "pending": ("#f7efbe", True),
    "exception": ("#ff7f0e", True),
    "failed": ("#d62728", False),
    "skipped": ("#c4c4c4", True),
    "cancelled": ("#595959", False),
    EARLIER: ("#ffffff", True),
}
_UNKNOWN: Final = ("#e377c2", True)
# Skipped and cancelled are both greys (nothing ran): skipped is hatched as well.
_HATCH: Final = {"skipped": "//"}
_HATCH_COLOUR: Final = "#8c8c8c"  # light enough for the label over it to read

_COLUMN: Final = 2.0  # data units between layers (a box is 1.4 wide)
_ROW: Final = 1.0  # data units between nodes of a layer (a box is 0.6 high)
_BOX_W: Final = 1.4
_BOX_H: Final = 0.6
_MAX_PX: Final = 4000  # a picture never gets larger than this on either side
_TITLE_SHOWN: Final = 70


@dataclass(frozen=True)
class PictureNode:
    """One node as the picture shows it."""

    id: str
    agent: str
    state: str
    deps: tuple[str, ...] = ()


@dataclass(frozen=True)
class RunPicture:
    """What a run's picture shows, as plain data."""

    run_id: str
    state: str
    summary: str
    nodes: tuple[PictureNode, ...]


def picture_of(run: RunRecord, nodes: Sequence[NodeRecord]) -> RunPicture:
    """The picture data of a stored run and its nodes."""
    return RunPicture(
        run_id=run.id,
        state=run.state,
        summary=run.task_summary,
        nodes=tuple(PictureNode(n.node_id, n.agent, n.state, tuple(n.deps)) for n in nodes),
    )


def layers(picture: RunPicture) -> list[list[str]]:
    """Node ids by dependency depth, left to right; earlier runs' nodes in the first layer.
    Within a layer, nodes sit near the nodes they depend on (fewer crossing arrows)."""
    graph: nx.DiGraph = nx.DiGraph()
    graph.add_nodes_from(_all_ids(picture))
    graph.add_edges_from((dep, n.id) for n in picture.nodes for dep in n.deps)
    try:
        generations = [list(g) for g in nx.topological_generations(graph)]
    except nx.NetworkXUnfeasible:  # a cycle: admission refuses them; drawn as one column
        generations = [list(graph.nodes)]
    order = {node: i for i, node in enumerate(graph.nodes)}
    placed: dict[str, float] = {}
    result = []
    for generation in generations:
        ranked = sorted(generation, key=lambda n: (_near(graph, n, placed), order[n]))
        placed.update({n: float(i) for i, n in enumerate(ranked)})
        result.append(ranked)
    return result


def render_run(picture: RunPicture, fmt: PictureFormat = "png") -> bytes:
    """The picture as PNG or SVG bytes (its size grows with the graph, up to 4000 px a side);
    the same run gives the same bytes."""
    columns = layers(picture)
    tallest = max((len(c) for c in columns), default=1)
    width = _clamp(300 + 260 * len(columns), 900, _MAX_PX)
    height = _clamp(260 + 80 * tallest, 500, _MAX_PX)
    figure = new_figure(width, height)
    ax = figure.add_axes((0.02, 0.12, 0.96, 0.74))
    ax.set_axis_off()
    positions = _positions(columns, tallest)
    span_x = max(len(columns) - 1, 0) * _COLUMN
    ax.set_xlim(-_BOX_W, span_x + _BOX_W)
    ax.set_ylim(-(tallest - 1) * _ROW / 2 - _ROW, (tallest - 1) * _ROW / 2 + _ROW)
    row_px = height * 0.74 / (tallest + 1)
    column_px = width * 0.96 * _COLUMN / (span_x + 2 * _BOX_W)
    font = _clamp(min(row_px * 0.22, column_px * 0.055), 4, 14)
    states = {n.id: n.state for n in picture.nodes}
    agents = {n.id: n.agent for n in picture.nodes}
    _arrows(ax, picture, positions)
    for node_id, (x, y) in positions.items():
        _box(ax, x, y, node_id, agents.get(node_id, ""), states.get(node_id, EARLIER), font)
    if not picture.nodes:
        ax.text(0.5, 0.5, "no nodes", transform=ax.transAxes, ha="center", va="center",
                fontsize=16, color="#666666")  # fmt: skip
    _heading(figure, picture)
    _legend(figure, picture, positions)
    return figure_bytes(figure, fmt)


# ------------------------------------------------------------------------------- parts


def _all_ids(picture: RunPicture) -> list[str]:
    """Earlier runs' nodes first (they come before everything here), then the run's own."""
    own = [n.id for n in picture.nodes]
    known = set(own)
    earlier = [d for n in picture.nodes for d in n.deps if d not in known]
    return list(dict.fromkeys([*earlier, *own]))


def _near(graph: nx.DiGraph, node: str, placed: dict[str, float]) -> float:
    """The mean row of a node's dependencies already placed (0 when it has none)."""
    rows = [placed[d] for d in graph.predecessors(node) if d in placed]
    return sum(rows) / len(rows) if rows else 0.0


def _clamp(value: float, low: float, high: float) -> int:
    return int(max(low, min(high, value)))


def _positions(columns: Sequence[Sequence[str]], tallest: int) -> dict[str, tuple[float, float]]:
    """Each node's centre: its layer's x, rows centred on 0 from top to bottom."""
    positions = {}
    for i, column in enumerate(columns):
        top = (len(column) - 1) * _ROW / 2
        for j, node in enumerate(column):
            positions[node] = (i * _COLUMN, top - j * _ROW)
    return positions


def _arrows(ax: Axes, picture: RunPicture, positions: dict[str, tuple[float, float]]) -> None:
    from matplotlib.patches import FancyArrowPatch

    for node in picture.nodes:
        x2, y2 = positions[node.id]
        for dep in node.deps:
            x1, y1 = positions[dep]
            bend = _bend(x1, y1, x2, y2)
            ax.add_patch(
                FancyArrowPatch(
                    (x1 + _BOX_W / 2, y1),
                    (x2 - _BOX_W / 2, y2),
                    arrowstyle="-|>",
                    mutation_scale=16,
                    linewidth=1.6,
                    color="#555555",
                    connectionstyle=f"arc3,rad={bend:.3f}",
                    zorder=1,
                )
            )


def _bend(x1: float, y1: float, x2: float, y2: float) -> float:
    """How much an arrow curves: past the layers it skips (over their boxes), by the same
    height whatever its length, towards the middle (so it stays inside the picture)."""
    layers_spanned = round((x2 - x1) / _COLUMN)
    if layers_spanned <= 1:
        return 0.0
    # arc3 bends by rad x length, to the right of the arrow's direction (down, going right).
    towards_middle = 1.0 if (y1 + y2) >= 0 else -1.0
    return towards_middle * 0.35 / layers_spanned


def _box(ax: Axes, x: float, y: float, node_id: str, agent: str, state: str, font: int) -> None:
    from matplotlib.patches import FancyBboxPatch

    fill, dark = STATE_COLOURS.get(state, _UNKNOWN)
    ax.add_patch(
        FancyBboxPatch(
            (x - _BOX_W / 2, y - _BOX_H / 2),
            _BOX_W,
            _BOX_H,
            boxstyle="round,pad=0,rounding_size=0.12",
            facecolor=fill,
            edgecolor="#333333",
            linewidth=1.5,
            linestyle="--" if state == EARLIER else "-",
            hatch=_HATCH.get(state),
            hatchcolor=_HATCH_COLOUR,
            zorder=2,
        )
    )
    colour = "#111111" if dark else "#ffffff"
    label = _short(node_id, 16)
    if agent:
        label += "\n" + _short(agent, 18)
    ax.text(x, y, label, ha="center", va="center", fontsize=font, color=colour, zorder=3,
            linespacing=1.15, fontweight="bold")  # fmt: skip


def _state_rank(state: str) -> tuple[int, str]:
    """States in the legend's order (unknown ones last, by name)."""
    known = list(STATE_COLOURS)
    return (known.index(state), "") if state in known else (len(known), state)


def _short(text: str, most: int) -> str:
    return text if len(text) <= most else text[: most - 1] + "…"


def _heading(figure: Figure, picture: RunPicture) -> None:
    summary = _short(" ".join(picture.summary.split()), _TITLE_SHOWN)
    title = f"Run {picture.run_id} · {picture.state}"
    figure.text(0.02, 0.955, title, fontsize=17, fontweight="bold", ha="left", va="top")
    counts = Counter(n.state for n in picture.nodes)
    noun = "node" if len(picture.nodes) == 1 else "nodes"
    ordered = sorted(counts.items(), key=lambda item: _state_rank(item[0]))
    tally = ", ".join(f"{count} {state}" for state, count in ordered)
    line = f"{len(picture.nodes)} {noun}" + (f": {tally}" if tally else "")
    line = f"{line} · {summary}" if summary else line
    fits = int(figure.get_figwidth() * figure.dpi / 7.5)  # 12 pt characters across
    figure.text(0.02, 0.905, _short(line, fits), fontsize=12, color="#444444", ha="left",
                va="top")  # fmt: skip


def _legend(figure: Figure, picture: RunPicture, positions: dict[str, tuple[float, float]]) -> None:
    """The states present, in a row under the graph."""
    from matplotlib.patches import Patch

    present = {n.state for n in picture.nodes}
    if len(positions) > len(picture.nodes):
        present.add(EARLIER)
    shown = sorted(present, key=_state_rank)
    if not shown:
        return
    handles = [
        Patch(
            facecolor=STATE_COLOURS.get(s, _UNKNOWN)[0],
            edgecolor="#333333",
            linestyle="--" if s == EARLIER else "-",
            hatch=_HATCH.get(s),
            hatchcolor=_HATCH_COLOUR,
            label=s,
        )
        for s in shown
    ]
    figure.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=12,
                  frameon=False, bbox_to_anchor=(0.5, 0.01))  # fmt: skip
