"""Build a run report from the records alone (SQLite rows + output files, or the run
journal when an output file is missing)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from host.graph.records import read_output
from host.graph.report import people_report, run_report, terminal_nodes
from host.graph.run_store import NodeRecord, RunStore

# Who reads the report: the Host (fenced, capped, with paths), people in chat (outputs as
# head and tail, no paths), or a person on the bot's host through `runs show` (outputs whole).
Audience = Literal["host", "chat", "terminal"]


async def load_report(store: RunStore, run_id: str, *, audience: Audience = "host") -> str:
    """The run report for `audience` (see `run_report`, `people_report`); works for
    finished runs, after a restart, and from the CLI."""
    record = await store.run(run_id)
    if record is None:
        return f"Unknown run `{run_id}`."
    nodes = await store.nodes_of_run(run_id)
    # Only terminal outputs are quoted: read those, in one trip off the event loop.
    outputs = await asyncio.to_thread(_read_outputs, terminal_nodes(nodes))
    if audience == "host":
        return run_report(record, nodes, outputs)
    return people_report(record, nodes, outputs, whole=audience == "terminal")


def _read_outputs(nodes: Sequence[NodeRecord]) -> dict[str, str]:
    outputs: dict[str, str] = {}
    for node in nodes:
        path: Path | None = node.output_path
        if path is None:
            continue
        try:
            outputs[node.node_id] = read_output(path)
        except OSError:
            outputs[node.node_id] = "(the recorded output could not be read)"
    return outputs
