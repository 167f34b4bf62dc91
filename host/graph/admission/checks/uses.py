"""Where one node consumes another's output, and whether a dependency resolves: the facts
the structure checks word their problems and repairs from."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from host.graph.admission.errors import Edit
from host.graph.admission.grammar import Placeholder
from host.graph.model import AdmissionContext, NodeInput, NodeSpec


@dataclass(frozen=True)
class Use:
    """One place where a node consumes another's output, and how a person would say it."""

    label: str
    edit: Edit


def uses_of(spec: NodeSpec, placeholders: Sequence[Placeholder], target: str) -> list[Use]:
    """Where `spec` consumes `target`'s output: output placeholders and node inputs."""
    uses = [
        Use(f"`{ph.raw}` from the template", Edit(spec.id, "unquote", ph.raw))
        for ph in placeholders
        if ph.kind in ("output", "output_path") and ph.target == target
    ]
    uses += [
        Use(f"input `{name}`", Edit(spec.id, "drop_input", name))
        for name, binding in spec.inputs.items()
        if isinstance(binding, NodeInput) and binding.node == target
    ]
    return uses


def listed(uses: Sequence[Use]) -> str:
    labels = list(dict.fromkeys(use.label for use in uses))
    return labels[0] if len(labels) == 1 else ", ".join(labels[:-1]) + f" and {labels[-1]}"


def unresolved(dep: str, ids: set[str], ctx: AdmissionContext) -> tuple[str, str] | None:
    """Problem and repair when `dep` is neither in this graph nor a reusable earlier node."""
    if dep in ids:
        return None
    prior = ctx.prior_nodes.get(dep)
    if prior is None:
        return (
            f"`{dep}` is neither a node of this graph nor a completed earlier node",
            f"add a node `{dep}` or remove it from deps",
        )
    if prior.reusable:
        return None
    if prior.state == "completed":
        why = "completed without a recorded output"
    elif prior.state == "exception":
        why = "is suspended on an exception"
    elif prior.state in ("pending", "queued", "running"):
        why = f"is still {prior.state}"
    else:
        why = f"ended in state `{prior.state}`"
    return (
        f"earlier node `{dep}` {why}; only nodes that completed with a recorded output "
        "can be depended on",
        f"add a new node (with a new id) that redoes `{dep}`'s work, or remove it from deps",
    )
