"""Run reports: counts, one line per node, terminal outputs inline, errors.

The Host's report (`run_report`) carries node outputs and errors fenced as untrusted data,
outputs capped, and where the records are on the bot's host. The report for people
(`people_report`) shows each output verbatim in a code block (a chat report: its head and
tail with the omitted line count; `runs show`: whole), no host paths (chat readers cannot
open them: the `runs show` command instead), a command nobody approved as ⛔ not approved,
and what offline mode skipped in one line at the end. Both say, one line per node, when a
fallback model answered a node instead of its configured model, and why.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Protocol

from core.fence import fence, new_marker, untrusted_preface
from core.markdown import code_block
from host.graph.excerpt import excerpt
from host.graph.judge import NOT_APPROVED, OFFLINE_REASON
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


NOT_APPROVED_ICON = "⛔"
# Node states in the order a report counts them.
_COUNTED = (
    "completed",
    "failed",
    "cancelled",
    "skipped",
    "exception",
    "running",
    "queued",
    "pending",
)


def not_approved(node: NodeRecord) -> bool:
    """True when the node failed because its command was not approved (never ran)."""
    verdict = node.verdict or {}
    return node.state == "failed" and verdict.get("category") == NOT_APPROVED


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
        return " · ".join(parts) + " — error below"
    return " · ".join(parts)


def fallback_lines(nodes: Sequence[NodeRecord]) -> list[str]:
    """One line per node a fallback model answered: "`s2` was answered by the fallback model
    anthropic:b: anthropic:a was overloaded" (model names come from the settings, not from
    an agent, so they are shown as written)."""
    return [f"`{node.node_id}` was {node.fallback}" for node in nodes if node.fallback]


def _errors(nodes: Sequence[NodeRecord], quote: Callable[[str, str], str]) -> list[str]:
    """Each unfinished node's error as a list item naming the node, fenced below its name
    (errors can quote agent and tool output)."""
    return [
        f"- `{node.node_id}`:\n" + quote(node.error, f"node {node.node_id} error")
        for node in nodes
        if node.error and node.state != "completed"
    ]


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

    @property
    def template(self) -> str: ...

    @property
    def not_approved(self) -> bool: ...


def progress_text(run: _Titled, nodes: Sequence[_Line]) -> str:
    """The single status message of a background run (edited in place)."""
    counts = Counter(n.state for n in nodes)
    done = sum(counts[s] for s in ("completed", "failed", "skipped", "cancelled"))
    lines = [f"**Run `{run.id}`** — {run.task_summary}", f"{done}/{len(nodes)} settled"]
    for n in nodes:
        if n.not_approved:
            icon, state = NOT_APPROVED_ICON, "*not approved*"
        else:
            icon, state = STATUS_ICONS.get(n.state, "•"), n.state
        # What the agent says it is doing quotes its tools and words: shown as written.
        note = f" — {inline_code(n.note)}" if n.state == "running" and n.note else ""
        lines.append(f"- {icon} `{n.node_id}` {_shown_summary(n)}: {state}{note}")
    return "\n".join(lines)


def _shown_summary(node: _Line) -> str:
    """A node's summary; one that is its task as written (a plan line's command) is shown
    as code, so that a command reads as typed."""
    summary = node.summary
    if not summary:
        return node.agent
    if node.template.startswith(summary):
        return inline_code(summary)
    return summary


def inline_code(text: str) -> str:
    """`text` as a Markdown code span on one line: its backtick fence is longer than any
    run inside (padded with a space where the text starts or ends with a backtick)."""
    text = " ".join(text.split("\n"))
    longest = max((len(run) for run in re.findall("`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def terminal_nodes(nodes: Sequence[NodeRecord]) -> list[NodeRecord]:
    """Completed nodes no other node of the run depends on: their outputs go inline."""
    depended = {dep for n in nodes for dep in n.deps}
    return [n for n in nodes if n.state == "completed" and n.node_id not in depended]


def _counts(nodes: Sequence[NodeRecord]) -> str:
    counts = Counter[str](n.state for n in nodes)
    return ", ".join(f"{counts[s]} {s}" for s in _COUNTED if counts[s]) or "none"


def run_report(
    run: RunRecord,
    nodes: Sequence[NodeRecord],
    outputs: dict[str, str],
    *,
    cap: int = TERMINAL_OUTPUT_CAP,
) -> str:
    """The compact report the Host receives when a run ends: outputs (capped) and errors
    fenced as untrusted data, and where the records are."""
    lines = [
        f"**Run `{run.id}` {run.state}** — {run.task_summary}",
        f"Nodes: {_counts(nodes)}. Records: `{run.run_dir}`",
    ]
    if run.replaces_run:
        lines.append(f"(replans run `{run.replaces_run}`)")
    lines += [f"- {node_line(n)}" for n in nodes]
    lines += fallback_lines(nodes)
    terminal = terminal_nodes(nodes)
    marker = new_marker()

    def quote(text: str, source: str) -> str:
        return fence(text, source=source, marker=marker)

    errors = _errors(nodes, quote)
    if terminal or errors:
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


def people_report(
    run: RunRecord,
    nodes: Sequence[NodeRecord],
    outputs: dict[str, str],
    *,
    whole: bool = False,
) -> str:
    """The report people read (see the module doc): in chat (`whole` False) each output's
    head and tail and how to see the full record; for `runs show` (`whole`) every output
    whole. No host paths either way: `runs show` lists them apart."""
    lines = [
        f"**Run `{run.id}` {_run_state(run, nodes)}** — {run.task_summary}",
        f"Nodes: {_counts(nodes)}.",
    ]
    if run.replaces_run:
        lines.append(f"(replans run `{run.replaces_run}`)")
    lines += [f"- {_people_line(n)}" for n in nodes]
    errors = [item for n in nodes for item in _people_error(n, whole=whole)]
    if errors:
        lines += ["", "**Errors**:", *errors]
    for node in terminal_nodes(nodes):
        text = outputs.get(node.node_id, "").rstrip("\n")
        title = f"**Output of `{node.node_id}`**:"
        if not text.strip():
            lines += ["", f"{title} (no output)"]
            continue
        lines += ["", title, code_block(text if whole else excerpt(text))]
    notes = [*fallback_lines(nodes), *_not_judged(nodes)]
    if not whole:
        notes.append(f"Full record: `raven-bot runs show {run.id}` on the bot's host.")
    if notes:
        lines += ["", *notes]
    return "\n".join(lines)


def _run_state(run: RunRecord, nodes: Sequence[NodeRecord]) -> str:
    """The run's state as people read it: a run that failed only because commands were not
    approved says so."""
    failed = [n for n in nodes if n.state == "failed"]
    if run.state == "failed" and failed and all(not_approved(n) for n in failed):
        return "not approved"
    return run.state


def _people_line(node: NodeRecord) -> str:
    """One node for people: status, agent, handle, attempts (no paths, no judge notes)."""
    if not_approved(node):
        parts = [f"{NOT_APPROVED_ICON} `{node.node_id}` ({node.agent}) *not approved*"]
    else:
        icon = STATUS_ICONS.get(node.state, "•")
        parts = [f"{icon} `{node.node_id}` ({node.agent}) {node.state}"]
    if node.instance:
        parts.append(f"handle `{node.instance}`")
    if node.attempts > 1:
        parts.append(f"{node.attempts} attempts")
    if node.error and node.state != "completed":
        return " · ".join(parts) + " — error below"
    return " · ".join(parts)


def _people_error(node: NodeRecord, *, whole: bool) -> list[str]:
    """A node's error as a list item naming the node: its first line (the bot's own
    sentence) as written, the lines after it (a command's stderr) verbatim in a code block
    (in chat, its head and tail when long)."""
    if not node.error or node.state == "completed":
        return []
    first, _, rest = node.error.strip("\n").partition("\n")
    item = [f"- `{node.node_id}`: {first}"]
    if not rest.strip():
        return item
    return [*item, code_block(rest if whole else excerpt(rest))]


def _not_judged(nodes: Sequence[NodeRecord]) -> list[str]:
    """One line for the nodes no judge checked (offline mode, or the judge failed)."""
    reasons: dict[str, list[str]] = {}
    for node in nodes:
        verdict = node.verdict or {}
        if verdict.get("fallback"):
            reason = str(verdict.get("fallback_reason") or "")
            reasons.setdefault(reason, []).append(f"`{node.node_id}`")
    lines = []
    for reason, ids in reasons.items():
        if reason == OFFLINE_REASON:
            lines.append(
                "No model checked these results (offline mode): a node counts as done when "
                "its agent returned without an error."
            )
        else:
            lines.append(
                f"Not checked by the judge ({reason}): {', '.join(ids)}; each counts as done "
                "when its agent returned without an error."
            )
    return lines
