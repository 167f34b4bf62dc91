"""Status, the fourth group: each node's agent is registered and enabled."""

from __future__ import annotations

import difflib
from collections.abc import Iterator

from host.graph.admission.errors import AdmissionError
from host.graph.model import AdmissionContext, GraphSubmission


def check_status(submission: GraphSubmission, ctx: AdmissionContext) -> None:
    """Raise the first node's problem, if any."""
    for problem in status_problems(submission, ctx):
        raise problem


def status_problems(submission: GraphSubmission, ctx: AdmissionContext) -> Iterator[AdmissionError]:
    """Every node's agent problem, in node order (nodes are independent here, so a rejection
    can say how many more there are)."""
    enabled = sorted(name for name, agent in ctx.agents.items() if agent.enabled)
    available = ", ".join(f"`{n}`" for n in enabled) or "none (no agent is enabled)"
    for spec in submission.nodes:
        agent = ctx.agents.get(spec.agent)
        if agent is None and ctx.skills is not None and spec.agent in ctx.skills:
            # A weak model's usual slip: the skill that fits the task named as the node's agent.
            yield AdmissionError(
                "status",
                f"`{spec.agent}` is a skill, not an agent; available agents: {available}",
                node=spec.id,
                field="agent",
                repair="run the node on one of those agents and give it the skill with "
                f'`"skills": ["{spec.agent}"]`',
            )
        elif agent is None:
            close = difflib.get_close_matches(spec.agent, enabled, n=1)
            yield AdmissionError(
                "status",
                f"unknown agent `{spec.agent}`; available agents: {available}",
                node=spec.id,
                field="agent",
                repair=f"did you mean `{close[0]}`?"
                if close
                else "use one of the available agents",
            )
        elif not agent.enabled:
            yield AdmissionError(
                "status",
                f"agent `{spec.agent}` is disabled; available agents: {available}",
                node=spec.id,
                field="agent",
                repair="use an enabled agent, or ask the user to enable this one",
            )
