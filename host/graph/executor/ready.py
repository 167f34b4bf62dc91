"""The ready set of one run (paper Eq. 31), kept incrementally, and the run's stop flags."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from host.graph.run_store import NodeRecord


@dataclass
class RunFlags:
    """How far a run is from ending, read by every part of it."""

    # Set once the run is being cancelled: nothing new starts and the canceller finishes it.
    stopping: bool = False
    # Set by `halt()` at shutdown: leave the records as they are (running) so the next
    # start marks them interrupted and reports it, exactly as after a crash.
    halting: bool = False


class ReadySet:
    """Every node keeps a counter of in-graph predecessors not yet completed; a committed
    completion decrements its children's counters, so readiness never needs a scan."""

    def __init__(self, nodes: Mapping[str, NodeRecord], order: Sequence[str]) -> None:
        position = {node_id: i for i, node_id in enumerate(order)}
        self._children: dict[str, list[str]] = {node_id: [] for node_id in nodes}
        self._waiting: dict[str, int] = {}
        for node_id, node in nodes.items():
            inside = [d for d in node.deps if d in nodes]
            for dep in inside:
                self._children[dep].append(node_id)
            self._waiting[node_id] = sum(1 for d in inside if nodes[d].state != "completed")
        for children in self._children.values():
            children.sort(key=lambda n: position.get(n, 0))

    def children(self, node_id: str) -> Sequence[str]:
        """The in-graph nodes that depend on `node_id`, in graph order."""
        return self._children[node_id]

    def blocked(self, node_id: str) -> bool:
        """True while an in-graph predecessor has not completed (committed)."""
        return self._waiting[node_id] > 0

    def completed(self, node_id: str) -> Sequence[str]:
        """`node_id`'s completion is committed: its children wait for one fewer; returns
        them (in graph order) for the caller to submit those now ready."""
        children = self._children[node_id]
        for child in children:
            self._waiting[child] -= 1
        return children
