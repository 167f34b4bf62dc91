"""What admission hands the executor: the submission with its order and ancestry."""

from __future__ import annotations

import functools
import itertools
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from host.graph.admission.grammar import Placeholder
from host.graph.model import GraphSubmission, NodeSpec

# bin() digits as selector bytes for itertools.compress: "0" -> 0, "1" -> 1.
_BIT_SELECTORS = bytes.maketrans(b"01", b"\x00\x01")
_NO_NAMES: frozenset[str] = frozenset()


class Upstream(Collection[str]):
    """One node's ancestors: this graph's as a bit set over its sorted ids (unions and
    membership are integer operations, and the sorted listing is one pass in C), earlier
    runs' nodes by name (`outside`)."""

    __slots__ = ("_ancestry", "bits", "outside")

    def __init__(self, bits: int, outside: frozenset[str], ancestry: Ancestry) -> None:
        self.bits = bits
        self._ancestry = ancestry
        self.outside = outside

    def inside(self) -> list[str]:
        """This graph's ancestors, sorted."""
        selectors = bin(self.bits)[:1:-1].encode().translate(_BIT_SELECTORS)
        return list(itertools.compress(self._ancestry.names, selectors))

    def __contains__(self, node_id: object) -> bool:
        index = self._ancestry.index.get(node_id) if isinstance(node_id, str) else None
        if index is None:
            return node_id in self.outside
        return bool(self.bits >> index & 1)

    def __iter__(self) -> Iterator[str]:
        yield from self.inside()
        yield from self.outside

    def __len__(self) -> int:
        return self.bits.bit_count() + len(self.outside)


class Ancestry(Mapping[str, frozenset[str]]):
    """Each node's ancestors: the nodes of this graph it waits for, directly or not, and the
    earlier nodes any of those depend on (paper Eq. 32 offers their memory records).

    A node's set is built when first read, from its deps' sets. The executor reads it as the
    node starts, after its deps, so each set is built once from sets already there; a node
    that never runs costs nothing. (Building all of them at admission was 30 of its 80 ms
    for 2,000 nodes: in a layered graph the sets hold n²/2 names.) This graph's ancestors are
    bits, not names: a union is one integer `|` instead of a hash per name.
    """

    def __init__(self, deps: Mapping[str, Sequence[str]]) -> None:
        self._deps = deps
        self.names: tuple[str, ...] = tuple(sorted(deps))
        self.index: dict[str, int] = {name: i for i, name in enumerate(self.names)}
        self._known: dict[str, Upstream] = {}

    def upstream(self, node_id: str) -> Upstream:
        """The ancestors of `node_id` (KeyError when it is not a node of this graph)."""
        known = self._known.get(node_id)
        if known is not None:
            return known
        if node_id not in self.index:
            raise KeyError(node_id)
        index, known_map = self.index, self._known
        # Deps first, without recursion (a chain of 2,000 nodes would exceed the stack).
        pending = [node_id]
        while pending:
            top = pending[-1]
            deps = self._deps[top]
            unknown = [d for d in deps if d in index and d not in known_map]
            if unknown:
                pending.extend(unknown)
                continue
            pending.pop()
            if top in known_map:  # pushed twice (two nodes waited for it)
                continue
            bits, outside = 0, _NO_NAMES
            for dep in deps:
                position = index.get(dep)
                if position is None:
                    outside = outside | {dep}
                    continue
                above = known_map[dep]
                bits |= above.bits | 1 << position
                if above.outside:
                    outside = outside | above.outside
            known_map[top] = Upstream(bits, outside, self)
        return known_map[node_id]

    def __getitem__(self, node_id: str) -> frozenset[str]:
        return frozenset(self.upstream(node_id))

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
    ancestors: Ancestry
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
