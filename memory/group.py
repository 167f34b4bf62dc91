"""Group memory's deterministic parts (paper §3.4): how each node's output was used in its
round (Eq. 35), each agent's outcome (Eq. 36), verdicts from attribution blocks or the
fallback when a block is missing (Eq. 37), and the feedback relabelling (Eq. 38)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

NodeStatus = str  # completed | failed | cancelled | skipped | interrupted | …
Use = Literal["terminal", "consumed", "unused"]
Outcome = Literal["cancelled", "failed", "adopted", "partially_adopted", "rejected"]
LABELS: frozenset[str] = frozenset(
    {"cancelled", "failed", "adopted", "partially_adopted", "rejected"}
)
FALLBACK_HEADER = "[fallback verdict: no usable attribution block]"
_BLOCK = re.compile(
    r"^[ \t]*<attribution\s+agent=\"(?P<agent>[^\"]+)\"(?:\s+outcome=\"(?P<outcome>[^\"]*)\")?\s*>"
    r"(?P<body>.*?)</attribution>[ \t]*\n?",
    re.MULTILINE | re.DOTALL,
)


@dataclass(frozen=True)
class RoundNode:
    """One node of a finished round: its agent, final status and dependencies."""

    id: str
    agent: str
    status: NodeStatus
    deps: tuple[str, ...] = ()
    task: str = ""


def node_use(nodes: Sequence[RoundNode]) -> dict[str, Use]:
    """Eq. 35: terminal (no successor in the round), consumed (a successor executed, even
    if it failed), or unused."""
    successors: dict[str, list[RoundNode]] = {n.id: [] for n in nodes}
    for node in nodes:
        for dep in node.deps:
            if dep in successors:
                successors[dep].append(node)
    use: dict[str, Use] = {}
    for node in nodes:
        after = successors[node.id]
        if not after:
            use[node.id] = "terminal"
        elif any(w.status in ("completed", "failed") for w in after):
            use[node.id] = "consumed"
        else:
            use[node.id] = "unused"
    return use


def agent_outcomes(nodes: Sequence[RoundNode]) -> dict[str, Outcome]:
    """Eq. 36, first matching case per participating agent."""
    use = node_use(nodes)
    by_agent: dict[str, list[RoundNode]] = {}
    for node in nodes:
        by_agent.setdefault(node.agent, []).append(node)
    return {agent: _outcome(own, use) for agent, own in by_agent.items()}


def _outcome(own: Sequence[RoundNode], use: Mapping[str, Use]) -> Outcome:
    statuses = [n.status for n in own]
    if "cancelled" in statuses:
        return "cancelled"
    if "failed" in statuses:
        return "failed"
    if any(s != "completed" for s in statuses):
        return "cancelled"  # skipped (or otherwise unfinished) nodes
    used = [use[n.id] != "unused" for n in own]
    if all(used):
        return "adopted"
    if any(used):
        return "partially_adopted"
    return "rejected"


def round_summary(run_id: str, nodes: Sequence[RoundNode], outcomes: Mapping[str, Outcome]) -> str:
    """The deterministic round summary deposited in the host library: assignments,
    statuses, dependencies, task excerpts and agent outcomes."""
    lines = [f"Round {run_id}:"]
    for node in nodes:
        after = f" after {', '.join(node.deps)}" if node.deps else ""
        lines.append(f"- {node.id} → {node.agent}: {node.status}{after}; task: {node.task[:160]}")
    lines.append(
        "Outcomes: " + ", ".join(f"{agent} {outcome}" for agent, outcome in outcomes.items())
    )
    return "\n".join(lines)


@dataclass(frozen=True)
class Verdict:
    """The host's assessment of one agent for one round and phase."""

    agent: str
    run_id: str
    phase: Literal["close", "feedback"]
    outcome: Outcome
    body: str
    covered_nodes: tuple[str, ...]

    def header(self) -> str:
        """The leading header that encodes author, subject, round and outcome."""
        return (
            f"[verdict by host on {self.agent}, round {self.run_id}, {self.phase}: {self.outcome}]"
        )


def extract_attribution(reply: str) -> tuple[str, dict[str, tuple[str, str | None]]]:
    """Split a Host reply into what users see (attribution blocks removed) and the blocks:
    agent -> (body, proposed outcome label or None)."""
    blocks: dict[str, tuple[str, str | None]] = {}
    for match in _BLOCK.finditer(reply):
        body = match["body"].strip()
        if body:
            blocks[match["agent"].strip()] = (body, match["outcome"])
    visible = _BLOCK.sub("", reply).rstrip()
    return visible, blocks


def close_verdicts(
    run_id: str,
    nodes: Sequence[RoundNode],
    outcomes: Mapping[str, Outcome],
    blocks: Mapping[str, tuple[str, str | None]],
) -> list[Verdict]:
    """One close verdict per participating agent: its block's text, or a deterministic
    fallback (distinct header) when the block is missing or empty. Outcomes stay Eq. 36's."""
    verdicts = []
    for agent, outcome in outcomes.items():
        covered = tuple(n.id for n in nodes if n.agent == agent)
        block = blocks.get(agent)
        body = block[0] if block else fallback_body(agent, nodes, outcome)
        verdicts.append(Verdict(agent, run_id, "close", outcome, body, covered))
    return verdicts


def fallback_body(agent: str, nodes: Sequence[RoundNode], outcome: Outcome) -> str:
    """What can be said without the model: the agent's nodes and their statuses."""
    own = ", ".join(f"{n.id} {n.status}" for n in nodes if n.agent == agent)
    return f"{FALLBACK_HEADER} {agent} ran {own}; outcome {outcome}."


def feedback_outcome(proposed: str | None, close: Outcome) -> Outcome:
    """Eq. 38: the reassessed label when it is one of the five, else the close outcome."""
    if proposed is not None and proposed in LABELS:
        return proposed  # type: ignore[return-value]
    return close
