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
FALLBACK_PREFIX = "[fallback verdict:"  # then the reason: no, empty or unterminated block
# An unterminated block runs to the end of the reply: it is removed all the same.
_BLOCK = re.compile(
    r"^[ \t]*<attribution\b(?P<attrs>[^>]*)>(?P<body>.*?)(?P<end></attribution>|\Z)[ \t]*\n?",
    re.MULTILINE | re.DOTALL,
)
_ATTR = re.compile(r'(\w+)\s*=\s*"([^"]*)"')


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
        return verdict_header(self.agent, self.run_id, self.phase, self.outcome)


def verdict_header(agent: str, run_id: str, phase: str, outcome: str) -> str:
    """A verdict's leading header: author, subject, round, phase and outcome."""
    return f"[verdict by host on {agent}, round {run_id}, {phase}: {outcome}]"


@dataclass(frozen=True)
class Attribution:
    """One attribution block of a Host reply: an assessment of one agent for one round."""

    agent: str
    body: str
    outcome: str | None = None  # a proposed label (feedback phase); checked by Eq. 38
    run_id: str | None = None
    problem: str | None = None  # why the block is unusable ("empty", "unterminated")


def extract_attribution(reply: str) -> tuple[str, tuple[Attribution, ...]]:
    """Split a Host reply into what users see (attribution blocks removed) and the blocks
    that name an agent (each with its problem, if it is unusable)."""
    blocks: list[Attribution] = []
    for match in _BLOCK.finditer(reply):
        attrs = dict(_ATTR.findall(match["attrs"]))
        agent, body = attrs.get("agent", "").strip(), match["body"].strip()
        if not agent:
            continue
        problem = None if match["end"] else "unterminated"
        problem = problem or (None if body else "empty")
        run_id = attrs.get("run", "").strip() or None
        blocks.append(Attribution(agent, body, attrs.get("outcome"), run_id, problem))
    visible = _BLOCK.sub("", reply).rstrip()
    return visible, tuple(blocks)


def blocks_for_round(
    blocks: Sequence[Attribution], run_id: str, *, sole_round: bool
) -> dict[str, Attribution]:
    """The blocks about round `run_id`: those naming it, and unnamed ones when it is the only
    round being assessed. Later blocks about one agent replace earlier ones."""
    return {b.agent: b for b in blocks if b.run_id == run_id or (b.run_id is None and sole_round)}


def close_verdicts(
    run_id: str,
    nodes: Sequence[RoundNode],
    outcomes: Mapping[str, Outcome],
    blocks: Mapping[str, Attribution],
) -> list[Verdict]:
    """One close verdict per participating agent: its block's text, or a deterministic
    fallback (distinct header) when the block is missing or empty. Outcomes stay Eq. 36's."""
    verdicts = []
    for agent, outcome in outcomes.items():
        covered = tuple(n.id for n in nodes if n.agent == agent)
        block = blocks.get(agent)
        if block is not None and block.problem is None:
            body = block.body
        else:
            reason = f"{block.problem} attribution block" if block else "no attribution block"
            body = fallback_body(agent, nodes, outcome, reason)
        verdicts.append(Verdict(agent, run_id, "close", outcome, body, covered))
    return verdicts


def fallback_body(agent: str, nodes: Sequence[RoundNode], outcome: Outcome, reason: str) -> str:
    """What can be said without the model: the agent's nodes, their statuses and how their
    outputs were used, under a header naming why there is no assessment."""
    use = node_use(nodes)
    own = ", ".join(f"{n.id} {n.status} ({use[n.id]})" for n in nodes if n.agent == agent)
    return f"{FALLBACK_PREFIX} {reason}] {agent} ran {own}; outcome {outcome}."


def feedback_outcome(proposed: str | None, close: Outcome) -> Outcome:
    """Eq. 38: the reassessed label when it is one of the five, else the close outcome."""
    if proposed is not None and proposed in LABELS:
        return proposed  # type: ignore[return-value]
    return close


def feedback_verdicts(
    run_id: str,
    nodes: Sequence[RoundNode],
    close: Mapping[str, Outcome],
    blocks: Mapping[str, Attribution],
) -> list[Verdict]:
    """One feedback verdict per reassessed participating agent (a block names it); other
    agents keep only their close verdict. Targets outside the round are ignored."""
    return [
        Verdict(
            agent,
            run_id,
            "feedback",
            feedback_outcome(blocks[agent].outcome, outcome),
            blocks[agent].body,
            tuple(n.id for n in nodes if n.agent == agent),
        )
        for agent, outcome in close.items()
        if agent in blocks and blocks[agent].problem is None
    ]


def outcome_entry(run_id: str, labels: Sequence[tuple[str, str, str]]) -> str:
    """The host library's outcome entry: (agent, reassessed label, initial label) each, the
    initial one shown when it changed."""
    parts = [
        f"{agent} {label}" + (" (unchanged)" if label == before else f" (was {before})")
        for agent, label, before in labels
    ]
    return f"Feedback on round {run_id}: " + ", ".join(parts)
