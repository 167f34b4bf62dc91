"""Environment, the fifth group: this conversation may dispatch the graph now — not from a
sub-agent, not while delegation is paused, within the dispatch budget, and approved by the
user when the submission asks for approval."""

from __future__ import annotations

from host.graph.admission.errors import AdmissionError, ApprovalRequired
from host.graph.model import AdmissionContext, GraphSubmission


def check_environment(submission: GraphSubmission, ctx: AdmissionContext) -> None:
    if ctx.in_subagent:
        raise AdmissionError(
            "environment",
            "no recursive delegation: a sub-agent run cannot submit graphs",
            repair="do the work in this run, or report back so the Host can plan it",
        )
    if ctx.delegation_paused:
        raise AdmissionError(
            "environment",
            "delegation is paused in this conversation",
            repair="answer directly, or ask the user to resume delegation",
        )
    budget = ctx.dispatch_budget_remaining
    if budget is not None:
        budget = max(budget, 0)
    count = len(submission.nodes)
    if budget is not None and count > budget:
        raise AdmissionError(
            "environment",
            f"the graph has {count} nodes but only {budget} dispatches remain in this "
            "conversation's budget",
            field="nodes",
            repair=f"submit at most {budget} nodes (reuse completed nodes), or wait for the "
            "budget to refill"
            if budget > 0
            else "wait for the budget to refill, or answer directly",
        )
    if submission.confirm and not ctx.approval_collected:
        raise ApprovalRequired(submission)
