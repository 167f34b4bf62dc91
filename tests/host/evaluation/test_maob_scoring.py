"""`eval score`'s metrics on hand-made DAGs, one rule at a time, and randomized cross-checks
against an independent implementation (plain Python, no networkx)."""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path
from typing import Any

import pytest

from host.evaluation.maob.formats import (
    DOMAINS,
    EvalFileError,
    EvalTask,
    PlanGraph,
    Prediction,
    read_predictions,
    read_tasks,
)
from host.evaluation.maob.scoring import score_predictions, score_task

R = DOMAINS[0]


def graph(nodes: str, *edges: str) -> PlanGraph:
    """`graph("a:research b:coding", "a>b")`."""
    declared = [
        {"id": spec.split(":")[0], "domain": spec.split(":", 1)[1] or None}
        for spec in nodes.split()
    ]
    pairs = [edge.split(">") for edge in edges]
    return PlanGraph.model_validate({"nodes": declared, "edges": pairs})


def task(reference: PlanGraph, *accepted: PlanGraph, task_id: str = "t1") -> EvalTask:
    return EvalTask(id=task_id, request="a request", reference=reference, accepted=list(accepted))


CHAIN = graph("r:research k:coding w:content", "r>k", "k>w")


def scores(prediction: PlanGraph, reference: EvalTask) -> tuple[Any, ...]:
    got, variant = score_task(prediction, reference)
    return got.node_f1, got.edge_f1, got.poa, got.exact_match, variant


def test_identical_plans_match_exactly() -> None:
    assert scores(CHAIN, task(CHAIN)) == (1.0, 1.0, 1.0, True, 0)


def test_invocation_names_and_subdivisions_within_a_domain_do_not_count() -> None:
    split = graph(
        "a:research b:research c:coding d:content", "a>c", "b>c", "a>b", "c>d", "a>d"
    )  # within-domain edge dropped, r>w is transitive: reduced away
    assert scores(split, task(CHAIN)) == (1.0, 1.0, 1.0, True, 0)


def test_unrecognized_domains_are_dropped_with_their_edges_without_bridging() -> None:
    bridged = graph("r:research x:Research k:coding w:content y: ", "r>x", "x>k", "k>w", "y>r")
    # r→x→k does not become r→k: research and coding are unordered in the prediction.
    node, edge, poa, exact, _ = scores(bridged, task(CHAIN))
    assert node == 1.0
    assert edge == pytest.approx(2 * 1 / (1 + 2))  # {k>w} against {r>k, k>w}
    assert poa == pytest.approx(1 / 3)  # r?k unordered (want before); r<w lost too; k<w kept
    assert exact is False


def test_domain_names_are_case_sensitive() -> None:
    shouty = graph("r:Research k:coding w:content", "r>k", "k>w")
    node, *_ = scores(shouty, task(CHAIN))
    assert node == pytest.approx(2 * 2 / (2 + 3))


def test_dangling_edges_are_ignored() -> None:
    dangling = graph("r:research k:coding w:content", "r>k", "k>w", "ghost>r", "w>nowhere")
    assert scores(dangling, task(CHAIN)) == (1.0, 1.0, 1.0, True, 0)


def test_a_raw_cycle_scores_zero_and_poa_zero_only_with_two_shared_domains() -> None:
    cyclic = graph("r:research k:coding w:content", "r>k", "k>w", "w>r")
    assert scores(cyclic, task(CHAIN)) == (0.0, 0.0, 0.0, False, 0)
    one_shared = graph("r:research x:other", "r>x", "x>r")
    assert scores(one_shared, task(CHAIN)) == (0.0, 0.0, None, False, 0)


def test_a_self_loop_is_a_cycle_even_on_an_unrecognized_node() -> None:
    looped = graph("r:research k:coding w:content x:helper", "r>k", "k>w", "x>x")
    assert scores(looped, task(CHAIN)) == (0.0, 0.0, 0.0, False, 0)


def test_a_projection_conflict_keeps_only_node_f1() -> None:
    # Acyclic invocations whose domains interleave: research → coding → research.
    interleaved = graph("a:research k:coding b:research", "a>k", "k>b")
    node, edge, poa, exact, _ = scores(interleaved, task(CHAIN))
    assert node == pytest.approx(2 * 2 / (2 + 3))
    assert (edge, poa, exact) == (None, None, None)


def test_f1_of_two_empty_edge_sets_is_one() -> None:
    pair = graph("r:research k:coding")
    assert scores(pair, task(pair)) == (1.0, 1.0, 1.0, True, 0)


def test_poa_counts_before_after_and_unordered_over_shared_pairs() -> None:
    reversed_chain = graph("r:research k:coding w:content", "w>k", "k>r")
    assert scores(reversed_chain, task(CHAIN))[2] == 0.0
    parallel = graph("r:research k:coding w:content", "r>w", "k>w")
    _, edge, poa, exact, _ = scores(parallel, task(CHAIN))
    assert poa == pytest.approx(2 / 3)  # r<w and k<w agree, r?k unordered vs before
    assert edge == pytest.approx(2 * 1 / 4)
    assert exact is False


def test_poa_is_one_with_one_shared_domain_and_zero_with_none() -> None:
    assert scores(graph("k:coding o:oncall", "k>o"), task(CHAIN))[2] == 1.0
    assert scores(graph("o:oncall"), task(CHAIN))[2] == 0.0


def test_an_empty_prediction_scores_zero_against_a_real_reference() -> None:
    assert scores(PlanGraph(), task(CHAIN)) == (0.0, 0.0, 0.0, False, 0)


def test_exact_match_needs_equal_domains_and_every_relation() -> None:
    extra = graph("r:research k:coding w:content o:oncall", "r>k", "k>w", "w>o")
    node, _, poa, exact, _ = scores(extra, task(CHAIN))
    assert (poa, exact) == (1.0, False)
    assert node == pytest.approx(6 / 7)
    redundant = graph("r:research k:coding w:content", "r>k", "k>w", "r>w")
    assert scores(redundant, task(CHAIN)) == (1.0, 1.0, 1.0, True, 0)


def test_the_best_variant_wins_by_node_then_edge_then_poa_ties_keep_the_earliest() -> None:
    parallel = graph("r:research k:coding w:content", "r>w", "k>w")
    other_parallel = graph("r:research k:coding w:content", "k>w", "r>w")
    the_task = task(CHAIN, parallel, other_parallel)
    assert scores(parallel, the_task) == (1.0, 1.0, 1.0, True, 1)
    # Against the chain and the parallel variant alike Node F1 is 1; Edge F1 decides.
    near_chain = graph("r:research k:coding w:content", "r>k", "r>w")
    got = scores(near_chain, the_task)
    assert got[4] in (0, 1)
    chain_scores = score_task(near_chain, task(CHAIN))[0].rank()
    parallel_scores = score_task(near_chain, task(parallel))[0].rank()
    assert got[4] == (1 if parallel_scores > chain_scores else 0)


def test_a_prediction_without_recognized_nodes_meets_the_original_reference_only() -> None:
    small = graph("r:research k:coding", "r>k")
    nothing = graph("x:writer y:reviewer", "x>y")
    assert scores(nothing, task(CHAIN, small))[4] == 0


def test_records_attempts_missing_tasks_and_means(tmp_path: Path) -> None:
    single = graph("r:research")
    tasks = [
        task(CHAIN, task_id="a"),
        task(graph("k:coding o:oncall", "k>o"), task_id="b"),
        task(single, task_id="single"),  # folds to one domain: scored, not counted
    ]
    predictions = [
        Prediction(id="a", **CHAIN.model_dump()),
        Prediction(id="a", nodes=[], edges=[]),
        Prediction(id="single", **single.model_dump()),
        Prediction.model_validate(
            {"id": "a", "nodes": [{"id": "x", "domain": "research"}], "edges": [["x", "x"]]}
        ),
    ]
    report = score_predictions(tasks, predictions)
    rows = [(r.task_id, r.attempt, r.predicted, r.counted) for r in report.records]
    assert rows == [
        ("a", 0, True, True),
        ("a", 1, True, True),
        ("a", 2, True, True),
        ("b", 0, False, True),
        ("single", 0, True, False),
    ]
    # a0 = 1/1/1/T, a1 = 0/0/0/F, a2 cyclic = 0/0/None/F, b (empty) = 0/0/0/F.
    assert report.defined == {"node_f1": 4, "edge_f1": 4, "poa": 3, "exact_match": 4}
    assert report.mean == {"node_f1": 0.25, "edge_f1": 0.25, "poa": 1 / 3, "exact_match": 0.25}
    out = report.as_json()
    assert out["tasks"][2]["poa"] is None and out["tasks"][2]["cyclic"] is True
    json.dumps(out)  # serializable as printed


def test_files_are_validated_with_the_line_and_the_fix(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.jsonl"
    good = {"id": "t", "request": "r", "reference": {"nodes": [{"id": "a", "domain": R}]}}
    tasks.write_text(json.dumps(good) + "\nnot json\n", encoding="utf-8")
    with pytest.raises(EvalFileError, match=r"tasks.jsonl:2: not JSON"):
        read_tasks(tasks)
    cyclic_ref = {
        "id": "t",
        "request": "r",
        "reference": {"nodes": [{"id": "a", "domain": R}], "edges": [["a", "a"]]},
    }
    tasks.write_text(json.dumps(cyclic_ref) + "\n", encoding="utf-8")
    with pytest.raises(EvalFileError, match=r":1: reference: .*cycle"):
        read_tasks(tasks)
    tasks.write_text(json.dumps(good) + "\n" + json.dumps(good) + "\n", encoding="utf-8")
    with pytest.raises(EvalFileError, match="appears twice"):
        read_tasks(tasks)
    predictions = tmp_path / "pred.jsonl"
    predictions.write_text('{"nodes": []}\n', encoding="utf-8")
    with pytest.raises(EvalFileError, match=r"pred.jsonl:1: id: Field required"):
        read_predictions(predictions)
    with pytest.raises(EvalFileError, match="which the task file does not have"):
        score_predictions([task(CHAIN, task_id="a")], [Prediction(id="zzz")])


# -- randomized cross-check -------------------------------------------------------------


def _reach(nodes: set[str], edges: set[tuple[str, str]]) -> set[tuple[str, str]]:
    """Transitive closure by repeated relaxation (Warshall)."""
    closure = set(edges)
    for k in nodes:
        for i in nodes:
            for j in nodes:
                if (i, k) in closure and (k, j) in closure:
                    closure.add((i, j))
    return closure


def _independent(pred: dict[str, Any], ref: dict[str, Any]) -> tuple[Any, ...]:
    """The conventions re-derived from the issue's text, without networkx."""

    def folded(g: dict[str, Any]) -> tuple[set[str], set[tuple[str, str]], bool, bool]:
        dom: dict[str, str | None] = {}
        for n in g["nodes"]:
            dom.setdefault(n["id"], n["domain"])
        raw = {(s, d) for s, d in g["edges"] if s in dom and d in dom}
        raw_cyclic = any((n, n) in _reach(set(dom), raw) for n in dom)
        keep = {n: d for n, d in dom.items() if d in DOMAINS}
        doms = set(keep.values())
        e = {(keep[s], keep[d]) for s, d in raw if s in keep and d in keep and keep[s] != keep[d]}
        conflict = not raw_cyclic and any((d, d) in _reach(doms, e) for d in doms)
        return doms, e, raw_cyclic, conflict

    def reduced(doms: set[str], e: set[tuple[str, str]]) -> set[tuple[str, str]]:
        c = _reach(doms, e)
        return {(u, v) for u, v in c if not any((u, w) in c and (w, v) in c for w in doms)}

    def rel(c: set[tuple[str, str]], u: str, v: str) -> str:
        return "b" if (u, v) in c else "a" if (v, u) in c else "u"

    def f1(x: set[Any], y: set[Any]) -> float:
        return 1.0 if not x and not y else 2 * len(x & y) / (len(x) + len(y))

    pd, pe, cyc, conflict = folded(pred)
    rd, re_, _, _ = folded(ref)
    shared = [d for d in DOMAINS if d in pd and d in rd]
    if cyc:
        return 0.0, 0.0, (0.0 if len(shared) >= 2 else None), False
    if conflict:
        return f1(pd, rd), None, None, None
    pc, rc = _reach(pd, pe), _reach(rd, re_)
    pairs = list(itertools.combinations(shared, 2))
    agree = [rel(pc, u, v) == rel(rc, u, v) for u, v in pairs]
    poa = 0.0 if not shared else 1.0 if not pairs else sum(agree) / len(pairs)
    return f1(pd, rd), f1(reduced(pd, pe), reduced(rd, re_)), poa, pd == rd and all(agree)


def _random_graph(rng: random.Random, acyclic: bool) -> dict[str, Any]:
    n = rng.randint(0, 6)
    labels = [*DOMAINS, "Research", "writer", None]
    nodes = [{"id": f"n{i}", "domain": rng.choice(labels)} for i in range(n)]
    edges = []
    for _ in range(rng.randint(0, 8)):
        if n == 0:
            break
        a, b = rng.randrange(n), rng.randrange(n)
        if acyclic and a >= b:
            continue
        edges.append([f"n{a}", f"n{b}"])
    if rng.random() < 0.2:
        edges.append(["n0", "ghost"])
    return {"nodes": nodes, "edges": edges}


@pytest.mark.parametrize("seed", range(4))
def test_randomized_cross_check_against_an_independent_scorer(seed: int) -> None:
    rng = random.Random(seed)
    checked = 0
    while checked < 150:
        ref = _random_graph(rng, acyclic=True)
        ref["edges"] = [e for e in ref["edges"] if e[1] != "ghost"]
        if fold_problem(ref):
            continue
        pred = _random_graph(rng, acyclic=rng.random() < 0.7)
        got, variant = score_task(
            PlanGraph.model_validate(pred), task(PlanGraph.model_validate(ref))
        )
        assert variant == 0
        assert (got.node_f1, got.edge_f1, got.poa, got.exact_match) == pytest.approx(
            _independent(pred, ref)
        ), (pred, ref)
        checked += 1


def fold_problem(ref: dict[str, Any]) -> bool:
    from host.evaluation.maob.scoring import reference_problem

    return reference_problem(PlanGraph.model_validate(ref)) is not None
