"""What admission hands the executor: the submission with its order and ancestry."""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from host.graph.admission.grammar import Placeholder
from host.graph.model import GraphSubmission, NodeSpec


class Ancestry(Mapping[str, frozenset[str]]):
    """Each node's ancestors: the nodes of this graph it waits for, directly or not, and the
    earlier nodes any of those depend on (paper Eq. 32 offers their memory records).

    A node's set is built when first read, from its deps' sets. The executor reads it as the
    node starts, after its deps, so each set is built once from sets already there; a node
    that never runs costs nothing. (Building all of them at admission was 30 of its 80 ms
    for 2,000 nodes: in a layered graph the sets hold n²/2 names.)
    """

    def __init__(self, deps: Mapping[str, Sequence[str]]) -> None:
        self._deps = deps
        self._known: dict[str, frozenset[str]] = {}

    def __getitem__(self, node_id: str) -> frozenset[str]:
        known = self._known.get(node_id)
        if known is not None:
            return known
        if node_id not in self._deps:
            raise KeyError(node_id)
        # Deps first, without recursion (a chain of 2,000 nodes would exceed the stack).
        pending = [node_id]
        while pending:
            top = pending[-1]
            unknown = [d for d in self._deps[top] if d in self._deps and d not in self._known]
            if unknown:
                pending.extend(unknown)
                continue
            pending.pop()
            above = set(self._deps[top])
            for dep in self._deps[top]:
                if dep in self._deps:
                    above |= self._known[dep]
            self._known[top] = frozenset(above)
        return self._known[node_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self._deps)

    def __len__(self) -> int:
        return len(self._deps)


@dataclass(frozen=True)
class AdmittedGraph:
    """A submission that passed admission, with its topological order and ancestry."""

    submission: GraphSubmission
    order: tuple[str, ...]
    external_deps: frozenset[str]
    ancestors: Mapping[str, frozenset[str]]
    # Each template's placeholders, as the format check parsed them (rendering reuses them).
    placeholders: Mapping[str, Sequence[Placeholder]]

    def node(self, node_id: str) -> NodeSpec:
        """The node spec with this id (KeyError when it is not part of this graph)."""
        return self._by_id[node_id]

    def descendants(self, node_id: str) -> frozenset[str]:
        """Every node of this graph that depends on `node_id`, directly or not."""
        found: set[str] = set()
        frontier = [node_id]
        while frontier:
            for child in self._dependents.get(frontier.pop(), ()):
                if child not in found:
                    found.add(child)
                    frontier.append(child)
        return frozenset(found)

    @functools.cached_property
    def _by_id(self) -> Mapping[str, NodeSpec]:
        return MappingProxyType({spec.id: spec for spec in self.submission.nodes})

    @functools.cached_property
    def _dependents(self) -> Mapping[str, list[str]]:
        below: dict[str, list[str]] = {}
        for spec in self.submission.nodes:
            for dep in dict.fromkeys(spec.deps):
                below.setdefault(dep, []).append(spec.id)
        return MappingProxyType(below)
