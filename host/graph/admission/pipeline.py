"""`admit`: run the five check groups in order and, when all pass, return the graph with its
topological order and each node's ancestry (what the executor schedules by)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from host.graph.admission.checks.capability import check_capability
from host.graph.admission.checks.cycles import check_acyclic
from host.graph.admission.checks.environment import check_environment
from host.graph.admission.checks.files import check_files
from host.graph.admission.checks.format import check_format, parse_submission
from host.graph.admission.checks.status import check_status, status_problems
from host.graph.admission.checks.structure import check_deps, check_ids, check_references
from host.graph.admission.errors import AdmissionError, ApprovalRequired
from host.graph.admission.result import AdmittedGraph, Ancestry
from host.graph.model import AdmissionContext, GraphSubmission


def admit(
    raw: str | bytes | Mapping[str, Any] | GraphSubmission, ctx: AdmissionContext
) -> AdmittedGraph:
    """Run the five check groups in order; return the admitted graph or raise AdmissionError
    (the first failure, with how many of the later checks fail too)."""
    submission = parse_submission(raw)
    placeholders = check_format(submission)

    ids = {spec.id for spec in submission.nodes}
    orders: list[tuple[str, ...]] = []
    checks: list[Callable[[], object]] = [
        lambda: check_ids(submission, ctx),
        lambda: check_deps(submission, ids, ctx, placeholders),
        lambda: check_references(submission, placeholders, ids, ctx),
        lambda: check_files(submission, placeholders, ctx),
        lambda: orders.append(check_acyclic(submission, ids, placeholders)),
        lambda: check_capability(submission, placeholders, ctx),
        lambda: check_status(submission, ctx),
        lambda: check_environment(submission, ctx),
    ]
    status = len(checks) - 2  # check_status's place
    for position, check in enumerate(checks):
        try:
            check()
        except ApprovalRequired:
            raise
        except AdmissionError as first:
            # Counting, each node's status problem is one (the check stops at the first).
            later = [*checks[position + 1 : status], *_each(status_problems(submission, ctx))]
            later += checks[max(position, status) + 1 :]
            first.more = _later_problems(later, first)
            raise

    return AdmittedGraph(
        submission=submission,
        order=orders[0],
        external_deps=frozenset(d for spec in submission.nodes for d in spec.deps if d not in ids),
        ancestors=Ancestry({spec.id: spec.deps for spec in submission.nodes}),
        placeholders=placeholders,
    )


def _each(problems: Iterable[AdmissionError]) -> list[Callable[[], object]]:
    """One check per problem found (each raises its own)."""

    def raising(problem: AdmissionError) -> Callable[[], object]:
        def check() -> object:
            raise problem

        return check

    return [raising(problem) for problem in problems]


def _later_problems(checks: Sequence[Callable[[], object]], first: AdmissionError) -> int:
    """How many later checks fail at a place other than the first failure (one check stops at
    its own first problem, so this counts at least one per failing group; approval is not a
    problem)."""
    seen = {(first.node, first.field)}
    count = 0
    for check in checks:
        try:
            check()
        except ApprovalRequired:
            continue
        except AdmissionError as later:
            if (later.node, later.field) not in seen:
                seen.add((later.node, later.field))
                count += 1
        except Exception:  # a later check may assume that the failed one passed
            continue
    return count
