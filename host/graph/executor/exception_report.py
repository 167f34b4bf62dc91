"""What the Host is told when a node is suspended: enough to decide, and the calls to do it."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable

from core.fence import fence, untrusted_preface
from host.graph.model import NodeSpec
from host.graph.run_store import NodeRecord


def exception_report(
    run_id: str,
    node: NodeRecord,
    spec: NodeSpec,
    blocked: Iterable[str],
    *,
    marker: str,
    runs_commands: bool,
) -> str:
    """Task, verdict, blocked dependents (`blocked`), attempts left, the deadline, and
    ready-made `resolve_exception` calls; the judge's words and errors fenced."""
    node_id = node.node_id
    verdict = node.verdict or {}
    left = node.max_attempts - node.attempts
    deadline = time.strftime("%H:%M:%S UTC", time.gmtime(node.deadline or 0))
    return "\n".join(
        [
            f"**Exception in run `{run_id}`**: node `{node_id}` ({spec.agent}) was judged "
            "not accomplished.",
            f"- Task: {spec.summary or spec.template[:300]}",
            f"- Category: {verdict.get('category') or 'other'}",
            f"- Blocked dependents: {', '.join(blocked) or 'none'}",
            f"- Attempts left: {left}; decide by {deadline} or the node fails.",
            *_command_note(runs_commands),
            # The judge quotes the agent's output, and errors carry stderr: fenced.
            untrusted_preface(marker),
            fence(
                str(verdict.get("missing") or node.error or "unknown"),
                source=f"judge: what node {node_id} is missing",
                marker=marker,
            ),
            fence(
                str(verdict.get("evidence", ""))[:500],
                source=f"judge: evidence for node {node_id}",
                marker=marker,
            ),
            "Resolve with `resolve_exception`, e.g.:",
            *[f"  `{c}`" for c in _calls(run_id, node_id)],
        ]
    )


def _calls(run_id: str, node_id: str) -> list[str]:
    return [
        json.dumps(
            {
                "run_id": run_id,
                "node_id": node_id,
                "action": "continue",
                "message": "<what to do differently>",
            }
        ),
        json.dumps({"run_id": run_id, "node_id": node_id, "action": "abandon"}),
        json.dumps(
            {
                "run_id": run_id,
                "node_id": node_id,
                "action": "replan",
                "graph": {"task_summary": "...", "nodes": ["..."]},
            }
        ),
    ]


def _command_note(runs_commands: bool) -> list[str]:
    """For a command node: what `continue` can and cannot change."""
    if not runs_commands:
        return []
    return [
        "- This node's task is its command: `continue` runs the same command again (asked "
        "for approval again; your message is not added to it); to change the command, "
        "`replan`."
    ]
