"""Structure, the second group (wiring): ids are unique in the graph and the conversation,
deps resolve, and every placeholder or node input names a dependency. A repair that rewires
is also given as edits, and never adds a dependency that would close a cycle."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

from host.graph.admission.checks.cycles import dependency_graph
from host.graph.admission.checks.uses import Use, listed, unresolved, uses_of
from host.graph.admission.errors import AdmissionError, Edit
from host.graph.admission.grammar import Placeholder, output_targets
from host.graph.model import AdmissionContext, GraphSubmission, NodeInput, NodeSpec


def _fresh_id(base: str, used: set[str]) -> str:
    for n in range(2, 1000):
        candidate = f"{base[:36]}_{n}"
        if candidate not in used:
            return candidate
    return f"{base[:30]}_new"


def check_ids(submission: GraphSubmission, ctx: AdmissionContext) -> None:
    first_index: dict[str, int] = {}
    for index, spec in enumerate(submission.nodes):
        if spec.id in first_index:
            raise AdmissionError(
                "structure",
                f"id `{spec.id}` is used by nodes[{first_index[spec.id]}] and nodes[{index}]",
                node=spec.id,
                field="id",
                repair="give each node its own id",
            )
        first_index[spec.id] = index
    used = set(first_index) | set(ctx.prior_nodes)
    for spec in submission.nodes:
        prior = ctx.prior_nodes.get(spec.id)
        if prior is not None:
            fresh = _fresh_id(spec.id, used)
            repair = f"choose a new id such as `{fresh}`"
            if any(spec.id in _targets(other) for other in submission.nodes):
                repair += " (and use it where this graph refers to the node)"
            if prior.reusable:
                repair += (
                    f"; to reuse its output, add `{spec.id}` to the deps of the node needing it"
                )
            raise AdmissionError(
                "structure",
                f"id `{spec.id}` was already used in this conversation (agent `{prior.agent}`, "
                f"state {prior.state}); node ids are unique per conversation",
                node=spec.id,
                field="id",
                repair=repair,
                edits=[Edit(spec.id, "rename", fresh)],
            )


def _targets(spec: NodeSpec) -> set[str]:
    """The node ids `spec` names: its deps, output placeholders and node inputs."""
    named = set(spec.deps)
    named |= {b.node for b in spec.inputs.values() if isinstance(b, NodeInput)}
    named |= output_targets(spec.template)
    return named


def check_deps(
    submission: GraphSubmission,
    ids: set[str],
    ctx: AdmissionContext,
    placeholders: Mapping[str, list[Placeholder]],
) -> None:
    for spec in submission.nodes:
        for dep in spec.deps:
            failure = unresolved(dep, ids, ctx)
            if failure:
                # Removing the dep alone would leave its uses pointing at nothing.
                uses = uses_of(spec, placeholders[spec.id], dep)
                repair = failure[1] + (f" and {listed(uses)}" if uses else "")
                raise AdmissionError(
                    "structure",
                    failure[0],
                    node=spec.id,
                    field="deps",
                    repair=repair,
                    edits=[Edit(spec.id, "remove_dep", dep), *(use.edit for use in uses)],
                )


def _require_dep(
    spec: NodeSpec,
    target: str,
    use: Use,
    *,
    what: str,
    field: str,
    ids: set[str],
    ctx: AdmissionContext,
    graph: Callable[[], Any],
) -> None:
    import networkx as nx  # imported at the first refusal that needs it, not at start-up

    if target == spec.id:
        raise AdmissionError(
            "structure",
            f"{what} refers to the node's own output",
            node=spec.id,
            field=field,
            repair=f"a node cannot consume its own output; remove {use.label} "
            "(reference an upstream node instead)",
            edits=[use.edit],
        )
    if target in spec.deps:
        return
    failure = unresolved(target, ids, ctx)
    if failure:
        problem, _ = failure
        repair = f"add a node `{target}` (and list it in deps), or remove {use.label}"
        raise AdmissionError(
            "structure",
            f"{what}: {problem}",
            node=spec.id,
            field=field,
            repair=repair,
            edits=[use.edit],
        )
    if target in ids and nx.has_path(graph(), spec.id, target):
        # `target` already waits for this node: as a dep it would close a cycle.
        path = nx.shortest_path(graph(), spec.id, target)
        chain = " → ".join(f"`{n}`" for n in reversed(path))
        raise AdmissionError(
            "structure",
            f"{what} refers to `{target}`, which is not in deps and runs after this node "
            f"({chain}, each depending on the next)",
            node=spec.id,
            field=field,
            repair=f"remove {use.label} (listing `{target}` in deps would make a cycle), or "
            f"move the work that needs `{target}`'s output into a new node that lists "
            f"`{target}` in its deps",
            edits=[use.edit],
        )
    raise AdmissionError(
        "structure",
        f"{what} refers to `{target}`, which is not in deps",
        node=spec.id,
        field=field,
        repair=f"add `{target}` to deps",
        edits=[Edit(spec.id, "add_dep", target)],
    )


def check_references(
    submission: GraphSubmission,
    placeholders: Mapping[str, list[Placeholder]],
    ids: set[str],
    ctx: AdmissionContext,
) -> None:
    # Built only if a reference is refused, to name the path it would close.
    graph = functools.cache(lambda: dependency_graph(submission, ids))
    require = functools.partial(_require_dep, ids=ids, ctx=ctx, graph=graph)
    for spec in submission.nodes:
        deps = set(spec.deps) - {spec.id}  # a listed dep is what a reference must name
        for ph in placeholders[spec.id]:
            if ph.kind in ("output", "output_path"):
                if ph.target in deps:
                    continue  # the usual case, checked before building any message
                use = Use(f"`{ph.raw}` from the template", Edit(spec.id, "unquote", ph.raw))
                require(spec, ph.target, use, what=f"placeholder `{ph.raw}`", field="template")
            elif ph.kind in ("input", "input_path") and ph.target not in spec.inputs:
                declared = ", ".join(f"`{k}`" for k in spec.inputs) or "none"
                raise AdmissionError(
                    "structure",
                    f"placeholder `{ph.raw}` uses input `{ph.target}`, which is not declared "
                    f"(declared inputs: {declared})",
                    node=spec.id,
                    field="template",
                    repair=f"declare `{ph.target}` under inputs or fix the name",
                )
        for name, binding in spec.inputs.items():
            if isinstance(binding, NodeInput):
                what = f'input `{name}` (`{{"node": "{binding.node}"}}`)'
                use = Use(f"input `{name}`", Edit(spec.id, "drop_input", name))
                require(spec, binding.node, use, what=what, field=f"inputs.{name}")
