"""Build a run report from the records alone (SQLite rows + output files)."""

from __future__ import annotations

from host.graph.report import run_report
from host.graph.run_store import RunStore


async def load_report(store: RunStore, run_id: str) -> str:
    """The run report; works for finished runs, after a restart, and from the CLI."""
    record = await store.run(run_id)
    if record is None:
        return f"Unknown run `{run_id}`."
    nodes = await store.nodes_of_run(run_id)
    outputs = {}
    for node in nodes:
        if node.state == "completed" and node.output_path is not None:
            try:
                outputs[node.node_id] = node.output_path.read_text(encoding="utf-8")
            except OSError:
                outputs[node.node_id] = f"(could not read {node.output_path})"
    return run_report(record, nodes, outputs)
