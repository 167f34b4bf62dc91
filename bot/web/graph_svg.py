"""A run's graph drawn as SVG on the server: layered left to right by dependency depth
(the same layers as `runs graph`), nodes coloured by state, dependencies as arrows.

Built as elements from data (ElementTree escapes every label), never spliced from text:
a node's id, agent and state are the only words in it. Each node links to its detail
further down the page.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Mapping
from typing import Final

from bot.web.untrusted import visible_controls
from host.graph.picture import EARLIER, STATE_COLOURS, RunPicture, layers

_BOX_W: Final = 168
_BOX_H: Final = 46
_COLUMN: Final = 220  # x between layers
_ROW: Final = 62  # y between nodes of a layer
_PAD: Final = 16
_LABEL: Final = 22  # characters of an id or agent shown in a box
_UNKNOWN: Final = ("#e377c2", True)
_SVG_NS: Final = "http://www.w3.org/2000/svg"


def anchor_of(index: int) -> str:
    """The page anchor of the node listed `index`-th (ids are data: never used as anchors)."""
    return f"node-{index}"


def graph_svg(picture: RunPicture, hrefs: Mapping[str, str]) -> str:
    """The run's graph as an inline `<svg>` element (text); `hrefs`: where each node's box
    links to (its details), by node id."""
    columns = layers(picture)
    tallest = max((len(c) for c in columns), default=1)
    width = max(len(columns), 1) * _COLUMN - (_COLUMN - _BOX_W) + 2 * _PAD
    height = tallest * _ROW - (_ROW - _BOX_H) + 2 * _PAD
    svg = ET.Element(
        "svg",
        {
            "xmlns": _SVG_NS,
            "class": "graph",
            "viewBox": f"0 0 {width} {height}",
            "width": str(width),
            "height": str(height),
            "role": "img",
            "aria-label": f"graph of run {visible_controls(picture.run_id)}",
        },
    )
    defs = ET.SubElement(svg, "defs")
    marker = ET.SubElement(
        defs,
        "marker",
        {
            "id": "arrow",
            "viewBox": "0 0 10 10",
            "refX": "10",
            "refY": "5",
            "markerWidth": "7",
            "markerHeight": "7",
            "orient": "auto-start-reverse",
        },
    )
    ET.SubElement(marker, "path", {"d": "M 0 0 L 10 5 L 0 10 z", "fill": "#555"})
    centres = _centres(columns, tallest)
    edges = ET.SubElement(svg, "g", {"class": "edges"})
    for node in picture.nodes:
        x2, y2 = centres[node.id]
        for dep in node.deps:
            x1, y1 = centres[dep]
            ET.SubElement(edges, "path", {"d": _edge(x1, y1, x2, y2), "class": "edge"})
    states = {n.id: n.state for n in picture.nodes}
    agents = {n.id: n.agent for n in picture.nodes}
    boxes = ET.SubElement(svg, "g", {"class": "nodes"})
    for node_id, (x, y) in centres.items():
        state = states.get(node_id, EARLIER)
        parent = boxes
        if node_id in hrefs:
            parent = ET.SubElement(boxes, "a", {"href": hrefs[node_id]})
        _box(parent, x, y, node_id, agents.get(node_id, ""), state)
    return ET.tostring(svg, encoding="unicode", short_empty_elements=True)


def _centres(columns: list[list[str]], tallest: int) -> dict[str, tuple[float, float]]:
    """Each box's centre: layers left to right, each layer centred vertically."""
    centres = {}
    for i, column in enumerate(columns):
        top = _PAD + (tallest - len(column)) * _ROW / 2
        for j, node in enumerate(column):
            centres[node] = (_PAD + i * _COLUMN + _BOX_W / 2, top + j * _ROW + _BOX_H / 2)
    return centres


def _edge(x1: float, y1: float, x2: float, y2: float) -> str:
    """From the right side of the dependency to the left side of the dependant; a smooth
    curve, bowed further when it skips layers (so it passes between their boxes)."""
    sx, ex = x1 + _BOX_W / 2, x2 - _BOX_W / 2
    bend = (ex - sx) / 2
    return (
        f"M {sx:.1f} {y1:.1f} C {sx + bend:.1f} {y1:.1f} {ex - bend:.1f} {y2:.1f} {ex:.1f} {y2:.1f}"
    )


def _box(parent: ET.Element, x: float, y: float, node_id: str, agent: str, state: str) -> None:
    fill, dark = STATE_COLOURS.get(state, _UNKNOWN)
    group = ET.SubElement(parent, "g", {"class": f"node state-{_css_word(state)}"})
    ET.SubElement(group, "title").text = f"{visible_controls(node_id)}: {state}"
    ET.SubElement(
        group,
        "rect",
        {
            "x": f"{x - _BOX_W / 2:.1f}",
            "y": f"{y - _BOX_H / 2:.1f}",
            "width": str(_BOX_W),
            "height": str(_BOX_H),
            "rx": "7",
            "fill": fill,
            "stroke": "#333" if state != EARLIER else "#888",
            "stroke-dasharray": "4 3" if state == EARLIER else "none",
        },
    )
    colour = "#111" if dark else "#fff"
    for dy, text, weight in ((-5, node_id, "bold"), (13, agent or state, "normal")):
        label = ET.SubElement(
            group,
            "text",
            {
                "x": f"{x:.1f}",
                "y": f"{y + dy:.1f}",
                "fill": colour,
                "font-weight": weight,
                "text-anchor": "middle",
            },
        )
        label.text = _label(text)


def _label(text: str) -> str:
    text = visible_controls(text)
    return text if len(text) <= _LABEL else text[: _LABEL - 1] + "…"


def _css_word(state: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in state.lower())
