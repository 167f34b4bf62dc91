"""What admission hands the executor: the submission with its order and ancestry."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from host.graph.model import GraphSubmission, NodeSpec


@dataclass(frozen=True)
class AdmittedGraph:
    """A submission that passed admission, with its topological order and ancestry."""

    submission: GraphSubmission
    order: tuple[str, ...]
    external_deps: frozenset[str]
    ancestors: Mapping[str, frozenset[str]]

    def node(self, node_id: str) -> NodeSpec:
        """The node spec with this id (KeyError when it is not part of this graph)."""
        return self._by_id[node_id]

    def descendants(self, node_id: str) -> frozenset[str]:
        """Every node of this graph that depends on `node_id`, directly or not."""
        return self._descendants.get(node_id, frozenset())

    @functools.cached_property
    def _by_id(self) -> Mapping[str, NodeSpec]:
        return MappingProxyType({spec.id: spec for spec in self.submission.nodes})

    @functools.cached_property
    def _descendants(self) -> Mapping[str, frozenset[str]]:
        below: dict[str, set[str]] = {}
        for node_id, above in self.ancestors.items():
            for ancestor in above:
                below.setdefault(ancestor, set()).add(node_id)
        return MappingProxyType({k: frozenset(v) for k, v in below.items()})
