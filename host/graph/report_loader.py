"""Build a run report from the records alone (SQLite rows + output files, or the run
journal when an output file is missing)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

from host.graph.records import read_output
from host.graph.report import run_report, terminal_nodes
from host.graph.run_store import NodeRecord, RunStore


async def load_report(store: RunStore, run_id: str, *, for_people: bool = False) -> str:
    """The run report (see `run_report`); works for finished runs, after a restart, and
    from the CLI."""
    record = await store.run(run_id)
    if record is None:
        return f"Unknown run `{run_id}`."
    nodes = await store.nodes_of_run(run_id)
    # Only terminal outputs are quoted: read those, in one trip off the event loop.
    outputs = await asyncio.to_thread(_read_outputs, terminal_nodes(nodes))
    return run_report(record, nodes, outputs, for_people=for_people)


def _read_outputs(nodes: Sequence[NodeRecord]) -> dict[str, str]:
    outputs: dict[str, str] = {}
    for node in nodes:
        path: Path | None = node.output_path
        if path is None:
            continue
        try:
            outputs[node.node_id] = read_output(path)
        except OSError:
            outputs[node.node_id] = f"(could not read {path})"
    return outputs
