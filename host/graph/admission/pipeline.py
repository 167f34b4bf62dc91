"""`admit`: run the five check groups in order and, when all pass, return the graph with its
topological order and each node's ancestry (what the executor schedules by)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from host.graph.admission.checks.capability import check_capability
from host.graph.admission.checks.cycles import check_acyclic
from host.graph.admission.checks.environment import check_environment
from host.graph.admission.checks.files import check_files
from host.graph.admission.checks.format import check_format, parse_submission
from host.graph.admission.checks.status import check_status
from host.graph.admission.checks.structure import check_deps, check_ids, check_references
from host.graph.admission.result import AdmittedGraph, Ancestry
from host.graph.model import AdmissionContext, GraphSubmission


def admit(
    raw: str | bytes | Mapping[str, Any] | GraphSubmission, ctx: AdmissionContext
) -> AdmittedGraph:
    """Run the five check groups in order; return the admitted graph or raise AdmissionError."""
    submission = parse_submission(raw)
    placeholders = check_format(submission)

    ids = {spec.id for spec in submission.nodes}
    check_ids(submission, ctx)
    check_deps(submission, ids, ctx, placeholders)
    check_references(submission, placeholders, ids, ctx)
    check_files(submission, placeholders, ctx)
    order = check_acyclic(submission, ids, placeholders)

    check_capability(submission, placeholders, ctx)
    check_status(submission, ctx)
    check_environment(submission, ctx)

    return AdmittedGraph(
        submission=submission,
        order=order,
        external_deps=frozenset(d for spec in submission.nodes for d in spec.deps if d not in ids),
        ancestors=Ancestry({spec.id: spec.deps for spec in submission.nodes}),
        placeholders=placeholders,
    )
