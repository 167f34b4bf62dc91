"""MAOB's four planning metrics (paper §7.1.2, App. C.1), with the conventions of issue 23
where the paper is silent.

Both graphs are folded to the domain level first: a node counts only when its domain is
exactly one of the four; other nodes go with their edges (no bridging through them); an
edge naming an undeclared id is ignored; edges within a domain are dropped and the rest
kept as a set. A node id declared twice keeps its first domain.

A prediction whose raw graph has a cycle (a self-loop included) scores Node F1 = Edge F1 =
0, Exact Match false, POA 0 when two or more domains are shared and undefined otherwise. An
acyclic prediction whose folded graph has a cycle (a projection conflict) has only Node F1.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from host.evaluation.maob.formats import DOMAINS, EvalFileError, EvalTask, PlanGraph, Prediction

Relation = Literal["before", "after", "unordered"]
METRICS = ("node_f1", "edge_f1", "poa", "exact_match")
_RANK = {domain: i for i, domain in enumerate(DOMAINS)}


@dataclass(frozen=True)
class Folded:
    """A graph at the domain level, and whether it (or its raw form) has a cycle."""

    domains: frozenset[str]
    edges: frozenset[tuple[str, str]]
    raw_cyclic: bool
    conflict: bool  # the raw graph is acyclic, the folded one is not

    def reduced(self) -> frozenset[tuple[str, str]]:
        """The edges of the transitive reduction (the folded graph must be acyclic)."""
        import networkx as nx

        return frozenset(nx.transitive_reduction(self._graph()).edges)

    def relation(self, u: str, v: str) -> Relation:
        """u before v, after it, or unordered, by reachability."""
        import networkx as nx

        graph = self._graph()
        if nx.has_path(graph, u, v):
            return "before"
        if nx.has_path(graph, v, u):
            return "after"
        return "unordered"

    def _graph(self) -> Any:
        import networkx as nx

        graph = nx.DiGraph()
        graph.add_nodes_from(self.domains)
        graph.add_edges_from(self.edges)
        return graph


@dataclass(frozen=True)
class Scores:
    """One record's metrics; None where undefined."""

    node_f1: float | None
    edge_f1: float | None
    poa: float | None
    exact_match: bool | None

    def rank(self) -> tuple[float, float, float]:
        """What picks among reference variants: (Node F1, Edge F1, POA), undefined as 0."""
        return (self.node_f1 or 0.0, self.edge_f1 or 0.0, self.poa or 0.0)


def fold(graph: PlanGraph) -> Folded:
    """`graph` at the domain level (see the module docstring)."""
    import networkx as nx

    domain_of: dict[str, str | None] = {}
    for node in graph.nodes:
        domain_of.setdefault(node.id, node.domain)
    raw = nx.DiGraph()
    raw.add_nodes_from(domain_of)
    raw.add_edges_from((s, d) for s, d in graph.edges if s in domain_of and d in domain_of)
    kept = {n: d for n, d in domain_of.items() if d in DOMAINS and d is not None}
    edges = frozenset(
        (kept[s], kept[d]) for s, d in raw.edges if s in kept and d in kept and kept[s] != kept[d]
    )
    domains = frozenset(kept.values())
    folded = nx.DiGraph()
    folded.add_nodes_from(domains)
    folded.add_edges_from(edges)
    raw_cyclic = not nx.is_directed_acyclic_graph(raw)
    conflict = not raw_cyclic and not nx.is_directed_acyclic_graph(folded)
    return Folded(domains, edges, raw_cyclic, conflict)


def reference_problem(graph: PlanGraph) -> str | None:
    """Why `graph` cannot serve as a reference (None when it can)."""
    ids = [node.id for node in graph.nodes]
    repeated = sorted({i for i in ids if ids.count(i) > 1})
    if repeated:
        return f"node id {repeated[0]!r} is declared twice; give each node its own id"
    unknown = sorted({x for edge in graph.edges for x in edge if x not in ids})
    if unknown:
        return f"an edge names {unknown[0]!r}, which is not a node; declare it or drop the edge"
    folded = fold(graph)
    if folded.raw_cyclic:
        return "the graph has a cycle; a reference must be acyclic"
    if folded.conflict:
        return (
            "the graph folds to a cycle between domains; a reference must be acyclic at "
            "the domain level"
        )
    return None


def f1(predicted: frozenset[Any], reference: frozenset[Any]) -> float:
    """2|X∩Y| / (|X|+|Y|); 1 when both are empty."""
    if not predicted and not reference:
        return 1.0
    return 2 * len(predicted & reference) / (len(predicted) + len(reference))


def score_against(predicted: Folded, reference: Folded) -> Scores:
    """The four metrics of one prediction against one (acyclic) reference."""
    shared = sorted(predicted.domains & reference.domains, key=_RANK.__getitem__)
    if predicted.raw_cyclic:
        return Scores(0.0, 0.0, 0.0 if len(shared) >= 2 else None, False)
    node_f1 = f1(predicted.domains, reference.domains)
    if predicted.conflict:
        return Scores(node_f1, None, None, None)
    edge_f1 = f1(predicted.reduced(), reference.reduced())
    pairs = list(itertools.combinations(shared, 2))
    agree = [predicted.relation(u, v) == reference.relation(u, v) for u, v in pairs]
    if not shared:
        poa = 0.0
    elif not pairs:
        poa = 1.0
    else:
        poa = sum(agree) / len(pairs)
    exact = predicted.domains == reference.domains and all(agree)
    return Scores(node_f1, edge_f1, poa, exact)


def score_task(prediction: PlanGraph, task: EvalTask) -> tuple[Scores, int]:
    """The best-scoring reference variant (0: the reference, k: accepted[k-1]) and the
    scores against it; a prediction with no recognized node meets the reference alone."""
    predicted = fold(prediction)
    candidates = [task.reference, *task.accepted] if predicted.domains else [task.reference]
    best: tuple[Scores, int] | None = None
    for index, candidate in enumerate(candidates):
        scores = score_against(predicted, fold(candidate))
        if best is None or scores.rank() > best[0].rank():
            best = (scores, index)
    assert best is not None
    return best


@dataclass(frozen=True)
class Record:
    """One prediction line (or a task nobody predicted) and its scores."""

    task_id: str
    attempt: int
    scores: Scores
    variant: int
    counted: bool  # the original reference folds to two or more domains
    cyclic: bool
    projection_conflict: bool
    predicted: bool

    def as_json(self) -> dict[str, Any]:
        """The record as `--json` prints it."""
        return {
            "id": self.task_id,
            "attempt": self.attempt,
            "node_f1": self.scores.node_f1,
            "edge_f1": self.scores.edge_f1,
            "poa": self.scores.poa,
            "exact_match": self.scores.exact_match,
            "variant": self.variant,
            "counted": self.counted,
            "cyclic": self.cyclic,
            "projection_conflict": self.projection_conflict,
            "predicted": self.predicted,
        }


@dataclass(frozen=True)
class Report:
    """Every record, the means over counted records and how many defined each mean."""

    records: list[Record]
    mean: dict[str, float | None]
    defined: dict[str, int]

    def as_json(self) -> dict[str, Any]:
        """`{"tasks": [...], "mean": {...}, "defined": {...}}`."""
        return {
            "tasks": [record.as_json() for record in self.records],
            "mean": self.mean,
            "defined": self.defined,
        }


def score_predictions(tasks: Sequence[EvalTask], predictions: Iterable[Prediction]) -> Report:
    """Score prediction lines: a repeated id is the next attempt (in file order); a task
    without a prediction is scored as the empty graph."""
    by_task: dict[str, list[Prediction]] = {task.id: [] for task in tasks}
    for prediction in predictions:
        attempts = by_task.get(prediction.id)
        if attempts is None:
            raise EvalFileError(
                f"a prediction names task {prediction.id!r}, which the task file does not have"
            )
        attempts.append(prediction)
    records: list[Record] = []
    for task in tasks:
        counted = len(fold(task.reference).domains) >= 2
        graphs: list[PlanGraph] = list(by_task[task.id]) or [PlanGraph()]
        for attempt, graph in enumerate(graphs):
            scores, variant = score_task(graph, task)
            folded = fold(graph)
            records.append(
                Record(
                    task.id,
                    attempt,
                    scores,
                    variant,
                    counted,
                    folded.raw_cyclic,
                    folded.conflict,
                    predicted=bool(by_task[task.id]),
                )
            )
    return Report(records, *_means(records))


def _means(records: Sequence[Record]) -> tuple[dict[str, float | None], dict[str, int]]:
    mean: dict[str, float | None] = {}
    defined: dict[str, int] = {}
    for metric in METRICS:
        values = [
            float(value)
            for record in records
            if record.counted and (value := getattr(record.scores, metric)) is not None
        ]
        defined[metric] = len(values)
        mean[metric] = sum(values) / len(values) if values else None
    return mean, defined
