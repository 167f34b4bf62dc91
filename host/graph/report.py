"""Run reports: counts, run dir, one line per node, terminal outputs inline (capped).

The Host gets node outputs and errors fenced as untrusted data; a report for people (`runs
show`) quotes the same raw values without fence markers.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import Protocol

from core.fence import fence, new_marker, untrusted_preface
from host.graph.run_store import NodeRecord, RunRecord

TERMINAL_OUTPUT_CAP = 3000
STATUS_ICONS = {
    "pending": "⏳",
    "queued": "🕒",
    "running": "▶️",
    "completed": "✅",
    "exception": "⚠️",
    "failed": "❌",
    "skipped": "⏭️",
    "cancelled": "⏹️",
}


def node_line(node: NodeRecord) -> str:
    """One node as a report line: status, agent, handle, output path, error."""
    icon = STATUS_ICONS.get(node.state, "•")
    parts = [f"{icon} `{node.node_id}` ({node.agent}) {node.state}"]
    if node.instance:
        parts.append(f"handle `{node.instance}`")
    if node.attempts > 1:
        parts.append(f"{node.attempts} attempts")
    if node.output_path is not None and node.state == "completed":
        parts.append(f"output `{node.output_path}`")
    if node.verdict and node.verdict.get("fallback"):
        parts.append(f"judge fallback: {node.verdict.get('fallback_reason', '')}")
    if node.error and node.state != "completed":
        # The text itself may carry agent output (a CLI's stderr): it is listed fenced below.
        parts.append("— error below")
    return " · ".join(parts)


def _errors(nodes: Sequence[NodeRecord], quote: Callable[[str, str], str] | None) -> list[str]:
    """Each unfinished node's error as a list item naming the node: fenced below its name
    (errors can quote agent and tool output), or without `quote` (for people) as written,
    further lines indented under it."""
    items = []
    for node in nodes:
        if not node.error or node.state == "completed":
            continue
        name = f"- `{node.node_id}`:"
        if quote is None:
            items.append(f"{name} " + "\n  ".join(node.error.splitlines() or [""]))
        else:
            items.append(f"{name}\n" + quote(node.error, f"node {node.node_id} error"))
    return items


class _Titled(Protocol):
    """A run as its status message names it (a record or an event's snapshot)."""

    @property
    def id(self) -> str: ...

    @property
    def task_summary(self) -> str: ...


class _Line(Protocol):
    """A node as its status line shows it (an event's snapshot)."""

    @property
    def node_id(self) -> str: ...

    @property
    def agent(self) -> str: ...

    @property
    def summary(self) -> str: ...

    @property
    def state(self) -> str: ...

    @property
    def note(self) -> str: ...


def progress_text(run: _Titled, nodes: Sequence[_Line]) -> str:
    """The single status message of a background run (edited in place)."""
    counts = Counter(n.state for n in nodes)
    done = sum(counts[s] for s in ("completed", "failed", "skipped", "cancelled"))
    lines = [f"**Run `{run.id}`** — {run.task_summary}", f"{done}/{len(nodes)} settled"]
    lines += [
        f"- {STATUS_ICONS.get(n.state, '•')} `{n.node_id}` {n.summary or n.agent}: {n.state}"
        + (f" — {n.note}" if n.state == "running" and n.note else "")
        for n in nodes
    ]
    return "\n".join(lines)


def terminal_nodes(nodes: Sequence[NodeRecord]) -> list[NodeRecord]:
    """Completed nodes no other node of the run depends on: their outputs go inline."""
    depended = {dep for n in nodes for dep in n.deps}
    return [n for n in nodes if n.state == "completed" and n.node_id not in depended]


def run_report(
    run: RunRecord,
    nodes: Sequence[NodeRecord],
    outputs: dict[str, str],
    *,
    cap: int = TERMINAL_OUTPUT_CAP,
    for_people: bool = False,
) -> str:
    """The compact report the Host receives when a run ends (outputs and errors fenced), or
    with `for_people` the same report with them quoted as they are."""
    counts = Counter(n.state for n in nodes)
    summary = ", ".join(
        f"{counts[s]} {s}"
        for s in (
            "completed",
            "failed",
            "cancelled",
            "skipped",
            "exception",
            "running",
            "queued",
            "pending",
        )
        if counts[s]
    )
    lines = [
        f"**Run `{run.id}` {run.state}** — {run.task_summary}",
        f"Nodes: {summary or 'none'}. Records: `{run.run_dir}`",
    ]
    if run.replaces_run:
        lines.append(f"(replans run `{run.replaces_run}`)")
    lines += [f"- {node_line(n)}" for n in nodes]
    terminal = terminal_nodes(nodes)
    marker = new_marker()

    def quote(text: str, source: str) -> str:
        return text if for_people else fence(text, source=source, marker=marker)

    errors = _errors(nodes, None if for_people else quote)
    if (terminal or errors) and not for_people:
        lines.append(f"\n{untrusted_preface(marker)}")
    if errors:
        lines.append("\n**Errors**:")
        lines += errors
    for node in terminal:
        text = outputs.get(node.node_id, "")
        if len(text) > cap:
            text = text[:cap] + f"\n…[truncated; full output at {node.output_path}]"
        lines.append(f"\n**Output of `{node.node_id}`**:")
        lines.append(quote(text, f"node {node.node_id} output"))
    return "\n".join(lines)
