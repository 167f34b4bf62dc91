"""What a run's page shows, read from the records: the run, its graph, and per node the task
as sent, the output, the transcript, timings, attempts and the judge's verdict.

Read-only: the run store's rows and the run's journal (written by the bot itself into the
data directory, which no sandboxed process sees). Nothing here writes anything.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from bot.web.graph_svg import anchor_of
from host.graph.picture import RunPicture, picture_of
from host.graph.records import NodeRecords, RunFiles
from host.graph.run_store import NodeRecord, RunRecord, RunStore

# Record ids as the bot makes them (runs, campaigns): what a page links to, and all a request
# may name (anything else is refused before any query).
RECORD_ID: Final = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
# Up to this many nodes, every node's task, output and transcript is on the run's page; a
# larger run lists its nodes and gives each its own page (a 200-node page of outputs was
# over a megabyte, and its Markdown most of the time it took to serve).
INLINE_NODES = 40


@dataclass(frozen=True)
class TranscriptEntry:
    """One step of an agent's transcript as shown: a heading and its text."""

    heading: str
    text: str
    is_error: bool = False


@dataclass(frozen=True)
class AttemptView:
    """One attempt of a node: what it was sent, what it answered, what it did."""

    number: int
    prompt: str | None
    output: str | None
    transcript: tuple[TranscriptEntry, ...]


@dataclass(frozen=True)
class NodeView:
    """One node with its attempts (the latest first)."""

    index: int  # its place in the run (its page's number)
    anchor: str
    record: NodeRecord
    attempts: tuple[AttemptView, ...]

    @property
    def verdict(self) -> list[tuple[str, str]]:
        """The judge's verdict as (field, value) pairs, in a stable order."""
        verdict = self.record.verdict or {}
        return [(str(k), _text(v)) for k, v in verdict.items()]


@dataclass(frozen=True)
class RunView:
    """A run as its page shows it."""

    run: RunRecord
    picture: RunPicture
    nodes: tuple[NodeView, ...]

    @property
    def inline(self) -> bool:
        """Whether the nodes' details are on the run's page (else each on its own)."""
        return len(self.nodes) <= INLINE_NODES

    def href(self, node: NodeView) -> str:
        """Where a node's details are, from the run's page."""
        if self.inline:
            return f"#{node.anchor}"
        return f"{self.run.id}/node/{node.index}"

    @property
    def hrefs(self) -> dict[str, str]:
        """Each node's details link, by node id (the graph's boxes link there)."""
        return {n.record.node_id: self.href(n) for n in self.nodes}

    @property
    def counts(self) -> list[tuple[str, int]]:
        """How many nodes are in each state, in the order nodes move through them."""
        order = ("completed", "running", "queued", "pending", "exception", "failed")
        tally: dict[str, int] = {}
        for node in self.nodes:
            tally[node.record.state] = tally.get(node.record.state, 0) + 1
        return sorted(tally.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else 9)

    @property
    def finished(self) -> bool:
        return self.run.finished_at is not None


async def load_run(runs: RunStore, files: RunFiles, run_id: str) -> RunView | None:
    """The run's page data (None when there is no such run). The journal is read in full:
    a page is asked for by a person, not on every change of a run."""
    run = await runs.run(run_id)
    if run is None:
        return None
    nodes = await runs.nodes_of_run(run_id)
    journal = await asyncio.to_thread(files.records, run_id)
    return RunView(
        run=run,
        picture=picture_of(run, nodes),
        nodes=tuple(_node(i, node, journal.get(node.node_id)) for i, node in enumerate(nodes)),
    )


async def run_signature(runs: RunStore, run_id: str) -> tuple[object, ...] | None:
    """What changes when the run's page would: its state and each node's state and attempt
    (one query; the live page asks this once a second while someone watches)."""
    run = await runs.run(run_id)
    if run is None:
        return None
    nodes = await runs.nodes_of_run(run_id)
    return (run.state, run.finished_at, *((n.node_id, n.state, n.attempts) for n in nodes))


def _node(index: int, node: NodeRecord, records: NodeRecords | None) -> NodeView:
    attempts = records.attempts if records is not None else {}
    return NodeView(
        index=index,
        anchor=anchor_of(index),
        record=node,
        attempts=tuple(
            AttemptView(
                number=n,
                prompt=a.prompt,
                output=a.output,
                transcript=tuple(_entries(a.transcript or ())),
            )
            for n, a in sorted(attempts.items(), reverse=True)
        ),
    )


def _entries(items: Sequence[Any]) -> list[TranscriptEntry]:
    """A transcript's steps as heading and text: tool calls with their input and output,
    answers and notes as said; anything else as its JSON."""
    entries = []
    for item in items:
        if not isinstance(item, dict):
            entries.append(TranscriptEntry("step", _text(item)))
            continue
        kind = str(item.get("type", "step"))
        if kind == "tool":
            text = f"input: {_text(item.get('input'))}\n\noutput:\n{_text(item.get('output'))}"
            heading = f"tool {_text(item.get('name'))}"
            if item.get("recovered"):
                heading += " (recovered from text)"
            entries.append(TranscriptEntry(heading, text, bool(item.get("is_error"))))
        elif kind in ("answer", "fallback") and "text" in item:
            entries.append(TranscriptEntry(kind, _text(item["text"])))
        else:
            entries.append(TranscriptEntry(kind, _text(item)))
    return entries


def _text(value: object) -> str:
    """A value as text: strings as they are, anything else as indented JSON."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, indent=2, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return repr(value)
