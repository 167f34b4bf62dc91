"""What a graph run looked like when one of its events was published: frozen records.

Run events carry these instead of the live run, so subscribers read a state that cannot
change under them (and the runtime room needs nothing from the graph room above it). States
are the graph runtime's node and run state names, as plain strings.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.ids import ConversationRef


@dataclass(frozen=True)
class NodeSnapshot:
    """One node of a run as committed when the event was published."""

    node_id: str
    agent: str
    state: str
    attempts: int
    summary: str = ""
    template: str = ""
    deps: tuple[str, ...] = ()
    error: str | None = None
    # Failed because its command was not approved (it never ran): shown as such, not failed.
    not_approved: bool = False
    # What the running node's agent says it is doing now (its plan, tool call, last words):
    # live only, never stored; cleared by the node's next commit.
    note: str = ""


@dataclass(frozen=True)
class RunSnapshot:
    """One run as committed when the event was published: its record and its nodes (in
    the order the run lists them)."""

    id: str
    conversation: ConversationRef
    task_summary: str
    background: bool
    state: str
    submitted_by: str
    nodes: tuple[NodeSnapshot, ...]

    def node(self, node_id: str) -> NodeSnapshot:
        """The node `node_id` (KeyError when the run has none)."""
        for node in self.nodes:
            if node.node_id == node_id:
                return node
        raise KeyError(node_id)

    def states(self) -> dict[str, str]:
        """Each node's state, by node id."""
        return {n.node_id: n.state for n in self.nodes}

    def counts(self) -> dict[str, int]:
        """How many nodes are in each state."""
        counts: dict[str, int] = {}
        for node in self.nodes:
            counts[node.state] = counts.get(node.state, 0) + 1
        return counts
