"""Admission: every check group with a failing and a passing case, and first-failure order."""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

import networkx as nx
import pytest

from host.graph.admission import (
    GUIDE_POINTER,
    AdmissionError,
    AdmittedGraph,
    ApprovalRequired,
    Edit,
    Placeholder,
    PlaceholderSyntaxError,
    admit,
    apply_edits,
    confine_path,
    parse_placeholders,
)
from host.graph.admission.result import Ancestry
from host.graph.model import (
    AdmissionContext,
    GraphSubmission,
    NodeSpec,
    NodeState,
    PriorNode,
)


@dataclass(frozen=True)
class FakeAgent:
    """Capabilities as admission sees them."""

    name: str
    enabled: bool = True
    stateful: bool = False
    file_capable: bool = True


AGENTS: Mapping[str, FakeAgent] = MappingProxyType(
    {
        "research": FakeAgent("research"),
        "coder": FakeAgent("coder", stateful=True),
        "writer": FakeAgent("writer", stateful=True),
        "chat": FakeAgent("chat", file_capable=False),
        "legacy": FakeAgent("legacy", enabled=False),
    }
)


def node(node_id: str, agent: str = "research", template: Any = "Do it.", **extra: Any) -> Any:
    """A raw node dict as the model would send it."""
    return {"id": node_id, "agent": agent, "template": template, **extra}


def graph(*nodes: Any, **extra: Any) -> dict[str, Any]:
    """A raw submission dict."""
    return {"task_summary": "test task", "nodes": list(nodes), **extra}


def prior(node_id: str, state: NodeState = "completed", **extra: Any) -> PriorNode:
    """An earlier node; completed ones get an output path unless told otherwise."""
    extra.setdefault("agent", "research")
    if state == "completed":
        extra.setdefault("output_path", Path(f"/runs/r0/nodes/{node_id}/output.md"))
    return PriorNode(id=node_id, state=state, **extra)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A conversation workspace with a couple of files."""
    ws = tmp_path / "ws"
    (ws / "docs").mkdir(parents=True)
    (ws / "docs" / "spec.md").write_text("the spec")
    (ws / "notes.txt").write_text("notes")
    return ws


@pytest.fixture
def ctx(workspace: Path) -> AdmissionContext:
    """A context with the fake agents, the workspace and a few earlier nodes."""
    return AdmissionContext(
        agents=AGENTS,
        workspace=workspace,
        prior_nodes={
            "old": prior("old"),
            "old_coder": prior("old_coder", agent="coder", instance="cx"),
            "broken": prior("broken", "failed"),
            "busy": prior("busy", "running"),
            "waiting": prior("waiting", "queued"),
            "stuck": prior("stuck", "exception"),
            "nooutput": prior("nooutput", output_path=None),
        },
    )


def reject(raw: Any, ctx: AdmissionContext) -> AdmissionError:
    """Admit and return the error, failing the test when the graph is admitted."""
    with pytest.raises(AdmissionError) as info:
        admit(raw, ctx)
    err = info.value
    assert str(err).endswith(GUIDE_POINTER)
    return err


# --------------------------------------------------------------------------- format


def test_unknown_field_names_node_and_field(ctx: AdmissionContext) -> None:
    err = reject(graph(node("r1"), node("c1", dep=["r1"])), ctx)
    assert (err.group, err.node, err.index, err.field) == ("format", "c1", 1, "dep")
    assert err.problem == "unknown field `dep`"
    assert err.repair is not None and "`deps`" in err.repair
    assert "`nodes[1] (c1)`" in str(err)


def test_unknown_top_level_field(ctx: AdmissionContext) -> None:
    err = reject(graph(node("r1"), priority="high"), ctx)
    assert (err.group, err.node, err.field) == ("format", None, "priority")
    assert "unknown field `priority`" in str(err)


@pytest.mark.parametrize(
    ("raw", "field", "fragment"),
    [
        (graph(node("r1", deps="r0")), "deps", "must be a list, got a string"),
        (graph(node("r1"), background="yes"), "background", "must be true or false"),
        (graph(node("r1", template=5)), "template", "must be a string, got a number"),
        (graph(node("r1", inputs={"k": {"text": 5}})), "inputs.k.text", "must be a string"),
        (graph(node("r1", inputs={"k": "plain"})), "inputs.k", "must be one of"),
        (
            graph(node("r1", inputs={"k": {"file": "a", "node": "b"}})),
            "inputs.k",
            "exactly one of the keys",
        ),
        (graph(node("r1", template="")), "template", "must not be empty"),
        ({"nodes": [node("r1")]}, "task_summary", "missing required field `task_summary`"),
    ],
)
def test_wrong_types_and_values(
    ctx: AdmissionContext, raw: dict[str, Any], field: str, fragment: str
) -> None:
    err = reject(raw, ctx)
    assert err.group == "format"
    assert err.field == field
    assert fragment in err.problem


def test_strict_types_accept_real_values(ctx: AdmissionContext) -> None:
    raw = graph(node("r1", inputs={"k": {"text": "x"}}), background=False)
    assert admit(raw, ctx).submission.background is False


@pytest.mark.parametrize(
    ("bad", "field", "subject"),
    [
        (node("Bad-Id"), "id", "id `Bad-Id`"),
        (node("r1", deps=["R0"]), "deps[0]", "dependency `R0`"),
        (node("r1", inputs={"Key": {"text": "x"}}), "inputs.Key", "input name `Key`"),
    ],
)
def test_bad_id_pattern(ctx: AdmissionContext, bad: Any, field: str, subject: str) -> None:
    err = reject(graph(node("ok"), bad), ctx)
    assert (err.group, err.index, err.field) == ("format", 1, field)
    assert err.problem.startswith(subject)
    assert "^[a-z][a-z0-9_]{0,39}$ (lowercase letter, then letters, digits, _)" in err.problem


def test_bad_id_message_suggests_valid_id(ctx: AdmissionContext) -> None:
    err = reject(graph(node("Bad-Id")), ctx)
    assert err.node is None  # an invalid id is not used to name the node
    assert "`nodes[0]`" in str(err)
    assert err.repair is not None and "`bad_id`" in err.repair


def test_bad_instance_pattern(ctx: AdmissionContext) -> None:
    err = reject(graph(node("c1", agent="coder", instance="Main")), ctx)
    assert err.field == "instance"
    assert "letters, digits, _ or -" in err.problem


def test_reserved_id(ctx: AdmissionContext) -> None:
    err = reject(graph(node("inputs")), ctx)
    assert (err.group, err.field) == ("format", "id")
    assert "reserved" in err.problem


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ('{"task_summary": "t", "nodes": [', "truncated"),
        ('{"task_summary": "t", "nodes": [}', "line 1, column"),
        ('{"task_summary": "t",\n "nodes": [1 2]}', "line 2, column"),
        ("   ", "empty"),
        (b"\xff\xfe{", "UTF-8"),
    ],
)
def test_invalid_json_says_where(ctx: AdmissionContext, text: str | bytes, fragment: str) -> None:
    err = reject(text, ctx)
    assert err.group == "format"
    assert fragment in err.problem


def test_valid_json_text_and_bytes_accepted(ctx: AdmissionContext) -> None:
    text = json.dumps(graph(node("r1")))
    assert admit(text, ctx).order == ("r1",)
    assert admit(text.encode(), ctx).order == ("r1",)


@pytest.mark.parametrize("raw", ["[1, 2]", "5", '"text"'])
def test_non_object_json(ctx: AdmissionContext, raw: str) -> None:
    err = reject(raw, ctx)
    assert err.group == "format"
    assert "must be a JSON object" in err.problem


def test_empty_nodes(ctx: AdmissionContext) -> None:
    err = reject(graph(), ctx)
    assert (err.group, err.field) == ("format", "nodes")
    assert "at least one node" in err.problem


@pytest.mark.parametrize(
    ("template", "fragment", "suggestion"),
    [
        ("Use {{foo}}.", "unknown placeholder `{{foo}}`", "`{{foo.output}}`"),
        ("Use {{ r1.outputs }}.", "unknown placeholder `{{ r1.outputs }}`", "`{{r1.output}}`"),
        ("Use {{R1.output}}.", "unknown placeholder", "`{{r1.output}}`"),
        ("Use {{inputs.k.content}}.", "unknown placeholder", "`{{inputs.k}}`"),
        ("Use {{ref:my file.md}}.", "contains spaces", '{"file": "my file.md"}'),
        ("Use {{ref:}}.", "has no path", "{{ref:relative/path}}"),
        ("Use {{ r1.output }", "unclosed `{{`", "close it"),
    ],
)
def test_bad_placeholder_syntax_is_format_error(
    ctx: AdmissionContext, template: str, fragment: str, suggestion: str
) -> None:
    err = reject(graph(node("w1", template=template)), ctx)
    assert (err.group, err.node, err.field) == ("format", "w1", "template")
    assert fragment in err.problem
    assert err.repair is not None and suggestion in err.repair


def test_placeholders_are_checked_before_structure(ctx: AdmissionContext) -> None:
    # Structure would also fail (unknown dep), but format comes first.
    err = reject(graph(node("w1", deps=["zz"], template="{{bad form}}")), ctx)
    assert err.group == "format"


# --------------------------------------------------------------------------- structure


def test_duplicate_id_in_graph(ctx: AdmissionContext) -> None:
    err = reject(graph(node("r1"), node("r1")), ctx)
    assert (err.group, err.node, err.field) == ("structure", "r1", "id")
    assert "nodes[0] and nodes[1]" in err.problem


@pytest.mark.parametrize("used", ["old", "broken", "busy"])
def test_id_used_earlier_in_conversation(ctx: AdmissionContext, used: str) -> None:
    err = reject(graph(node(used)), ctx)
    assert (err.group, err.node, err.field) == ("structure", used, "id")
    assert "already used in this conversation" in err.problem
    assert err.repair is not None and f"`{used}_2`" in err.repair


def test_new_ids_accepted(ctx: AdmissionContext) -> None:
    assert admit(graph(node("r1"), node("r2")), ctx).order == ("r1", "r2")


def test_unresolvable_dep(ctx: AdmissionContext) -> None:
    err = reject(graph(node("c1", deps=["r9"])), ctx)
    assert (err.group, err.node, err.field) == ("structure", "c1", "deps")
    assert err.problem == "`r9` is neither a node of this graph nor a completed earlier node"
    assert str(err) == (
        "Graph rejected (structure) at node `c1`, field `deps`: `r9` is neither a node of this "
        "graph nor a completed earlier node. Repair: add a node `r9` or remove it from deps. "
        "See the orchestration guide (call `load_orchestration_guide`)."
    )


@pytest.mark.parametrize(
    ("dep", "fragment"),
    [
        ("broken", "ended in state `failed`"),
        ("busy", "is still running"),
        ("waiting", "is still queued"),
        ("stuck", "suspended on an exception"),
        ("nooutput", "without a recorded output"),
    ],
)
def test_dep_on_earlier_unusable_node_rejected(
    ctx: AdmissionContext, dep: str, fragment: str
) -> None:
    err = reject(graph(node("c1", deps=[dep])), ctx)
    assert (err.group, err.node, err.field) == ("structure", "c1", "deps")
    assert fragment in err.problem


def test_dep_on_earlier_completed_node_accepted(ctx: AdmissionContext) -> None:
    admitted = admit(graph(node("c1", deps=["old"], template="Use {{old.output}}.")), ctx)
    assert admitted.external_deps == frozenset({"old"})
    assert admitted.ancestors["c1"] == frozenset({"old"})


@pytest.mark.parametrize(
    "template", ["Use {{r1.output}}.", "Read {{ r1.output_path }}.", "Both {{r1.output}}"]
)
def test_output_placeholder_without_dep(ctx: AdmissionContext, template: str) -> None:
    err = reject(graph(node("r1"), node("c1", template=template)), ctx)
    assert (err.group, err.node, err.field) == ("structure", "c1", "template")
    assert "not in deps" in err.problem
    assert err.repair == "add `r1` to deps"


def test_output_placeholder_with_dep_accepted(ctx: AdmissionContext) -> None:
    admit(graph(node("r1"), node("c1", deps=["r1"], template="Use {{r1.output}}.")), ctx)


def test_placeholder_to_unknown_node(ctx: AdmissionContext) -> None:
    err = reject(graph(node("c1", template="Use {{zz.output}}.")), ctx)
    assert err.group == "structure"
    assert "neither a node of this graph" in err.problem


def test_placeholder_to_own_output(ctx: AdmissionContext) -> None:
    err = reject(graph(node("c1", template="Use {{c1.output}}.")), ctx)
    assert "own output" in err.problem


def test_node_input_without_dep(ctx: AdmissionContext) -> None:
    spec = node("c1", inputs={"survey": {"node": "r1"}})
    err = reject(graph(node("r1"), spec), ctx)
    assert (err.group, err.node, err.field) == ("structure", "c1", "inputs.survey")
    assert err.repair == "add `r1` to deps"


def test_node_input_with_dep_accepted(ctx: AdmissionContext) -> None:
    spec = node("c1", deps=["r1"], inputs={"survey": {"node": "r1"}})
    admit(graph(node("r1"), spec), ctx)


def test_input_placeholder_without_input(ctx: AdmissionContext) -> None:
    spec = node("c1", template="Use {{inputs.brief}}.", inputs={"other": {"text": "x"}})
    err = reject(graph(spec), ctx)
    assert (err.group, err.node, err.field) == ("structure", "c1", "template")
    assert "`brief`, which is not declared (declared inputs: `other`)" in err.problem


def test_input_placeholder_with_input_accepted(ctx: AdmissionContext) -> None:
    admit(graph(node("c1", template="Use {{inputs.brief}}.", inputs={"brief": {"text": "x"}})), ctx)


@pytest.mark.parametrize(
    ("spec", "field", "fragment"),
    [
        (node("c1", template="{{ref:../secret.txt}}"), "template", "through `..`"),
        (node("c1", template="{{ref_path:docs/../../x}}"), "template", "through `..`"),
        (node("c1", inputs={"f": {"file": "../secret.txt"}}), "inputs.f", "through `..`"),
        (node("c1", template="{{ref:/etc/hostname}}"), "template", "absolute path outside"),
        (node("c1", inputs={"f": {"file": "/etc/hostname"}}), "inputs.f", "absolute path outside"),
        (node("c1", template="{{ref:link.txt}}"), "template", "symlink"),
        (node("c1", inputs={"f": {"file": "linkdir/secret.txt"}}), "inputs.f", "symlink"),
    ],
)
def test_file_path_escape(
    ctx: AdmissionContext, workspace: Path, spec: Any, field: str, fragment: str
) -> None:
    outside = workspace.parent / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("secret")
    (workspace.parent / "secret.txt").write_text("secret")
    (workspace / "link.txt").symlink_to(outside / "secret.txt")
    (workspace / "linkdir").symlink_to(outside)
    err = reject(graph(spec), ctx)
    assert (err.group, err.node, err.field) == ("structure", "c1", field)
    assert fragment in err.problem


def test_confined_paths_accepted(ctx: AdmissionContext, workspace: Path) -> None:
    (workspace / "inner_link.md").symlink_to(workspace / "docs" / "spec.md")
    spec = node(
        "c1",
        template="{{ref:docs/spec.md}} {{ref:./docs/../notes.txt}} {{ref:inner_link.md}} "
        f"{{{{ref_path:{workspace / 'docs'}}}}}",
        inputs={"f": {"file": str(workspace / "notes.txt")}},
    )
    admit(graph(spec), ctx)


@pytest.mark.parametrize(
    "spec",
    [
        node("c1", template="{{ref:docs/spek.md}}"),
        node("c1", inputs={"f": {"file": "missing.txt"}}),
    ],
)
def test_missing_file(ctx: AdmissionContext, spec: Any) -> None:
    err = reject(graph(spec), ctx)
    assert err.group == "structure"
    assert "does not exist" in err.problem


def test_missing_file_suggests_close_name(ctx: AdmissionContext) -> None:
    err = reject(graph(node("c1", template="{{ref:docs/spek.md}}")), ctx)
    assert err.repair is not None and "`docs/spec.md`" in err.repair


def test_directory_only_by_path(ctx: AdmissionContext) -> None:
    err = reject(graph(node("c1", template="{{ref:docs}}")), ctx)
    assert "not a regular file" in err.problem
    admit(graph(node("c1", template="{{ref_path:docs}}")), ctx)
    admit(graph(node("c2", template="{{inputs.d.path}}", inputs={"d": {"file": "docs"}})), ctx)


def test_cycle_is_named(ctx: AdmissionContext) -> None:
    raw = graph(
        node("a", deps=["c"]),
        node("b", deps=["a"]),
        node("c", deps=["b"]),
        node("d", deps=["a"]),
    )
    err = reject(raw, ctx)
    assert (err.group, err.node, err.field) == ("structure", "a", "deps")
    assert "cycle: `a` → `c` → `b` → `a`" in err.problem


def test_self_dep_is_a_cycle(ctx: AdmissionContext) -> None:
    err = reject(graph(node("a", deps=["a"])), ctx)
    assert (err.group, err.node, err.field) == ("structure", "a", "deps")
    assert "depends on itself" in err.problem


def test_diamond_is_acyclic(ctx: AdmissionContext) -> None:
    raw = graph(
        node("d", deps=["b", "c"]),
        node("b", deps=["a"]),
        node("c", deps=["a"]),
        node("a"),
    )
    admitted = admit(raw, ctx)
    assert admitted.order == ("a", "b", "c", "d")


# --------------------------------------------------------------------------- capability


def test_instance_on_stateless_agent(ctx: AdmissionContext) -> None:
    err = reject(graph(node("r1", agent="research", instance="h1")), ctx)
    assert (err.group, err.node, err.field) == ("capability", "r1", "instance")
    assert "stateless" in err.problem
    assert err.repair is not None and "`coder`" in err.repair


def test_instance_on_stateful_agent_accepted(ctx: AdmissionContext) -> None:
    raw = graph(
        node("c1", agent="coder", instance="h1"),
        node("c2", agent="coder", instance="h1", deps=["c1"]),
        node("c3", agent="coder", instance="cx"),  # continues an earlier coder instance
    )
    admit(raw, ctx)


def test_one_instance_two_agents_in_graph(ctx: AdmissionContext) -> None:
    raw = graph(node("c1", agent="coder", instance="h1"), node("w1", agent="writer", instance="h1"))
    err = reject(raw, ctx)
    assert (err.group, err.node, err.field) == ("capability", "w1", "instance")
    assert "belongs to agent `coder` (node `c1`)" in err.problem


def test_one_instance_two_agents_across_conversation(ctx: AdmissionContext) -> None:
    err = reject(graph(node("w1", agent="writer", instance="cx")), ctx)
    assert err.group == "capability"
    assert "earlier node `old_coder`" in err.problem


@pytest.mark.parametrize(
    ("template", "deps", "inputs", "content_form"),
    [
        ("{{old.output_path}}", ["old"], {}, "`{{old.output}}`"),
        ("{{ref_path:docs/spec.md}}", [], {}, "`{{ref:docs/spec.md}}`"),
        ("{{inputs.f.path}}", [], {"f": {"file": "notes.txt"}}, "`{{inputs.f}}`"),
        ("{{inputs.n.path}}", ["old"], {"n": {"node": "old"}}, "`{{inputs.n}}`"),
    ],
)
def test_path_placeholder_to_non_file_capable(
    ctx: AdmissionContext, template: str, deps: list[str], inputs: Any, content_form: str
) -> None:
    spec = node("t1", agent="chat", template=template, deps=deps, inputs=inputs)
    err = reject(graph(spec), ctx)
    assert (err.group, err.node, err.field) == ("capability", "t1", "template")
    assert "no local-file access" in err.problem
    assert err.repair is not None and f"use the content form {content_form}" in err.repair
    # The same wiring is fine for a file-capable agent.
    admit(graph({**spec, "agent": "research"}), ctx)


def test_content_forms_to_non_file_capable_accepted(ctx: AdmissionContext) -> None:
    spec = node(
        "t1",
        agent="chat",
        deps=["old"],
        template="{{old.output}} {{ref:docs/spec.md}} {{inputs.f}}",
        inputs={"f": {"file": "notes.txt"}},
    )
    admit(graph(spec), ctx)


def test_input_path_on_text_input(ctx: AdmissionContext) -> None:
    spec = node("t1", template="Read {{inputs.k.path}}", inputs={"k": {"text": "hello"}})
    err = reject(graph(spec), ctx)
    assert (err.group, err.node, err.field) == ("capability", "t1", "template")
    assert "a text input has no path" in err.problem
    assert err.repair is not None and "`{{inputs.k}}`" in err.repair


# --------------------------------------------------------------------------- status


def test_unknown_agent_lists_available(ctx: AdmissionContext) -> None:
    err = reject(graph(node("r1", agent="reserch")), ctx)
    assert (err.group, err.node, err.field) == ("status", "r1", "agent")
    assert "unknown agent `reserch`" in err.problem
    assert "`chat`, `coder`, `research`, `writer`" in err.problem
    assert "legacy" not in err.problem  # disabled agents are not offered
    assert err.repair is not None and "`research`" in err.repair


def test_disabled_agent(ctx: AdmissionContext) -> None:
    err = reject(graph(node("r1", agent="legacy")), ctx)
    assert (err.group, err.node, err.field) == ("status", "r1", "agent")
    assert "disabled" in err.problem


def test_registered_enabled_agents_accepted(ctx: AdmissionContext) -> None:
    raw = graph(*(node(f"n_{name}", agent=name) for name in ("research", "coder", "chat")))
    admit(raw, ctx)


# --------------------------------------------------------------------------- environment


def test_recursive_delegation(ctx: AdmissionContext) -> None:
    err = reject(graph(node("r1")), replace(ctx, in_subagent=True))
    assert err.group == "environment"
    assert "no recursive delegation" in err.problem


def test_delegation_paused(ctx: AdmissionContext) -> None:
    err = reject(graph(node("r1")), replace(ctx, delegation_paused=True))
    assert err.group == "environment"
    assert "paused" in err.problem


@pytest.mark.parametrize(("budget", "admitted"), [(0, False), (1, False), (2, True), (None, True)])
def test_dispatch_budget(ctx: AdmissionContext, budget: int | None, admitted: bool) -> None:
    raw = graph(node("r1"), node("r2"))
    limited = replace(ctx, dispatch_budget_remaining=budget)
    if admitted:
        admit(raw, limited)
    else:
        err = reject(raw, limited)
        assert err.group == "environment"
        assert f"only {budget} dispatches remain" in err.problem


def test_confirm_without_approval(ctx: AdmissionContext) -> None:
    with pytest.raises(ApprovalRequired) as info:
        admit(graph(node("r1"), confirm=True), ctx)
    assert isinstance(info.value, AdmissionError)
    assert info.value.group == "environment"
    assert info.value.submission.nodes[0].id == "r1"


def test_confirm_with_approval(ctx: AdmissionContext) -> None:
    admitted = admit(graph(node("r1"), confirm=True), replace(ctx, approval_collected=True))
    assert admitted.submission.confirm


# --------------------------------------------------------------------------- order & result


def test_first_failure_wins_format_before_status(ctx: AdmissionContext) -> None:
    raw = graph(node("r1", agent="nobody"), node("r2", dep=["r1"]))
    assert reject(raw, ctx).group == "format"


@pytest.mark.parametrize(
    ("raw", "override", "group"),
    [
        # structure (unknown dep) before capability (instance on stateless)
        (graph(node("r1", instance="h", deps=["zz"])), {}, "structure"),
        # capability before status (the second node's agent is unknown)
        (graph(node("r1", instance="h"), node("r2", agent="nobody")), {}, "capability"),
        # status before environment
        (graph(node("r1", agent="nobody")), {"in_subagent": True}, "status"),
        # recursion before budget and approval
        (
            graph(node("r1"), confirm=True),
            {"in_subagent": True, "dispatch_budget_remaining": 0},
            "environment",
        ),
    ],
)
def test_groups_run_in_order(
    ctx: AdmissionContext, raw: Any, override: dict[str, Any], group: str
) -> None:
    err = reject(raw, replace(ctx, **override))
    assert err.group == group
    if override.get("in_subagent") and group == "environment":
        assert "recursive" in err.problem


def test_budget_checked_before_approval(ctx: AdmissionContext) -> None:
    err = reject(graph(node("r1"), confirm=True), replace(ctx, dispatch_budget_remaining=0))
    assert not isinstance(err, ApprovalRequired)


def test_order_is_topological_and_ancestors_transitive(ctx: AdmissionContext) -> None:
    raw = graph(
        node("report", deps=["code", "r2"]),
        node("code", deps=["r1", "old"], template="{{old.output}}"),
        node("r1"),
        node("r2"),
        node("solo"),
    )
    admitted = admit(raw, ctx)
    assert isinstance(admitted, AdmittedGraph)
    position = {n: i for i, n in enumerate(admitted.order)}
    assert sorted(admitted.order) == ["code", "r1", "r2", "report", "solo"]
    for spec in admitted.submission.nodes:
        for dep in spec.deps:
            if dep in position:
                assert position[dep] < position[spec.id]
    assert admitted.ancestors["report"] == frozenset({"code", "r1", "r2", "old"})
    assert admitted.ancestors["code"] == frozenset({"r1", "old"})
    assert admitted.ancestors["r1"] == frozenset()
    assert admitted.external_deps == frozenset({"old"})
    assert admitted.node("code").deps == ["r1", "old"]
    with pytest.raises(KeyError):
        admitted.node("nope")
    # The templates' placeholders, parsed once here, are what rendering uses.
    assert [(p.kind, p.target) for p in admitted.placeholders["code"]] == [("output", "old")]
    assert admitted.placeholders["r1"] == []


@pytest.mark.parametrize("seed", range(20))
def test_ancestors_match_a_traversal_per_node(ctx: AdmissionContext, seed: int) -> None:
    """The one-pass ancestry equals its definition: every node reachable backwards, plus the
    earlier nodes any of them depends on (random DAGs, shuffled, with earlier deps mixed in)."""
    rnd = random.Random(seed)
    size = rnd.randrange(1, 40)
    nodes = []
    for i in range(size):
        deps = {f"n{rnd.randrange(i)}" for _ in range(rnd.randrange(min(i, 4) + 1))} if i else set()
        if rnd.random() < 0.2:
            deps.add(rnd.choice(["old", "old_coder"]))
        nodes.append(node(f"n{i}", deps=sorted(deps)))
    rnd.shuffle(nodes)
    admitted = admit(graph(*nodes), ctx)
    dag = nx.DiGraph()
    dag.add_nodes_from(n["id"] for n in nodes)
    dag.add_edges_from((d, n["id"]) for n in nodes for d in n["deps"] if d.startswith("n"))
    external = {n["id"]: {d for d in n["deps"] if not d.startswith("n")} for n in nodes}
    for node_id in dag:
        inner = nx.ancestors(dag, node_id)
        expected = inner | external[node_id] | set().union(*(external[a] for a in inner))
        assert admitted.ancestors[node_id] == expected
        # What the executor reads: this graph's ancestors sorted (the Eq. 32 listing),
        # earlier runs' nodes apart, and membership for both kinds.
        upstream = admitted.ancestors.upstream(node_id)
        assert upstream.inside() == sorted(inner)
        assert upstream.outside == expected - inner
        assert len(upstream) == len(expected)
        for other in [*dag, "old", "old_coder", "absent"]:
            assert (other in upstream) == (other in expected)


def test_ancestry_is_built_as_it_is_read_and_a_long_chain_read_backwards_works(
    ctx: AdmissionContext,
) -> None:
    """Admission builds no ancestor set (in a layered graph they hold n²/2 names); the
    executor reads a node's as it starts. Read out of order, deps are built first, without
    recursion: a 3,000-node chain read from its end."""
    size = 3000
    nodes = [NodeSpec(id="n0", agent="research", template="start")]
    nodes += [
        NodeSpec(id=f"n{i}", agent="research", template=f"{{{{{d}.output}}}}", deps=[d])
        for i, d in ((i, f"n{i - 1}") for i in range(1, size))
    ]
    # model_construct: the cap on nodes is not what this is about.
    submission = GraphSubmission.model_construct(
        task_summary="chain", background=True, confirm=False, nodes=nodes
    )
    admitted = admit(submission, ctx)
    ancestry = admitted.ancestors
    assert isinstance(ancestry, Ancestry) and not ancestry._known  # none built at admission
    assert admitted.ancestors[f"n{size - 1}"] == {f"n{i}" for i in range(size - 1)}
    assert admitted.ancestors["n1"] == {"n0"} and len(admitted.ancestors) == size
    assert admitted.descendants("n2995") == {"n2996", "n2997", "n2998", "n2999"}
    with pytest.raises(KeyError):
        admitted.ancestors["nope"]


def test_accepts_model_and_mapping(ctx: AdmissionContext) -> None:
    raw = graph(node("r1"))
    model = GraphSubmission.model_validate(raw)
    assert admit(model, ctx).submission is model
    assert admit(raw, ctx).submission == model


# --------------------------------------------------------------------------- helpers


def test_parse_placeholders_forms_and_spans() -> None:
    template = (
        "A {{r1.output}} B {{ r1.output_path }} C {{inputs.k}} D {{inputs.k.path}} "
        "E {{ref:docs/a-b.v2.md}} F {{ ref_path: src/app.py }}"
    )
    found = parse_placeholders(template)
    assert [(p.kind, p.target) for p in found] == [
        ("output", "r1"),
        ("output_path", "r1"),
        ("input", "k"),
        ("input_path", "k"),
        ("ref", "docs/a-b.v2.md"),
        ("ref_path", "src/app.py"),
    ]
    for ph in found:
        assert template[ph.span[0] : ph.span[1]] == ph.raw
    assert found[1] == Placeholder("output_path", "r1", "{{ r1.output_path }}", (18, 38))
    assert parse_placeholders("no placeholders, {single} braces") == []


@pytest.mark.parametrize("template", ["{{foo}}", "{{x.outputs}}", "{{inputs.K}}", "{{ a b }}"])
def test_parse_placeholders_rejects(template: str) -> None:
    with pytest.raises(PlaceholderSyntaxError):
        parse_placeholders(template)


def test_confine_path(workspace: Path) -> None:
    assert confine_path(workspace, "docs/spec.md") == (workspace / "docs/spec.md").resolve()
    assert confine_path(workspace, "not/yet.md") == (workspace / "not/yet.md").resolve()
    for bad in ("../x", "/etc/passwd", "", "a\x00b"):
        with pytest.raises(ValueError):
            confine_path(workspace, bad)


def test_descendants_and_node_lookup_come_from_the_admitted_ancestry(
    ctx: AdmissionContext,
) -> None:
    raw = graph(
        node("a"),
        node("b", deps=["a"]),
        node("c", deps=["b"]),
        node("d", deps=["a", "c"]),
        node("e"),
    )
    admitted = admit(raw, ctx)
    assert admitted.descendants("a") == {"b", "c", "d"}
    assert admitted.descendants("c") == {"d"}
    assert admitted.descendants("d") == frozenset()
    assert admitted.descendants("e") == frozenset()
    assert admitted.node("d").deps == ["a", "c"]
    with pytest.raises(KeyError):
        admitted.node("zzz")


# --------------------------------------------------------------------------- repairs


def test_a_reference_to_a_later_node_is_not_repaired_into_a_cycle(ctx: AdmissionContext) -> None:
    # `b` waits for `a`; `a` wants `b`'s output. "add `b` to deps" would close a cycle.
    raw = graph(node("a", template="Summarise {{b.output}}."), node("b", deps=["a"]))
    err = reject(raw, ctx)
    assert (err.group, err.node, err.field) == ("structure", "a", "template")
    assert "runs after this node (`b` → `a`" in err.problem
    assert err.repair is not None and "add `b` to deps" not in err.repair
    assert "`{{b.output}}`" in err.repair and "new node that lists `b` in its deps" in err.repair
    admit(apply_edits(raw, err.edits), ctx)
    # What the old hint said to do, refused by admission.
    with pytest.raises(AdmissionError, match="cycle"):
        admit(apply_edits(raw, [Edit("a", "add_dep", "b")]), ctx)


# Every rejection whose repair changes the wiring, each graph with that one problem.
REPAIRABLE: list[tuple[str, dict[str, Any]]] = [
    ("unknown dep", graph(node("c1", deps=["r9"]))),
    ("unknown dep in use", graph(node("c1", deps=["r9"], template="Use {{r9.output}}."))),
    (
        "unknown dep as an input",
        graph(node("c1", deps=["r9"], inputs={"k": {"node": "r9"}}, template="Read {{inputs.k}}")),
    ),
    *(
        (f"dep on {dep}", graph(node("c1", deps=[dep], template=f"Use {{{{{dep}.output}}}}.")))
        for dep in ("broken", "busy", "waiting", "stuck", "nooutput")
    ),
    *(
        (f"no dep for {template}", graph(node("r1"), node("c1", template=template)))
        for template in ("Use {{r1.output}}.", "Read {{ r1.output_path }}.", "{{r1.output}}")
    ),
    ("no dep for an input", graph(node("r1"), node("c1", inputs={"s": {"node": "r1"}}))),
    ("unknown node in a placeholder", graph(node("c1", template="Use {{zz.output}}."))),
    ("own output", graph(node("c1", template="{{c1.output}}"))),
    ("later node", graph(node("a", template="Summarise {{b.output}}."), node("b", deps=["a"]))),
    (
        "later node, two steps on",
        graph(node("a", template="{{c.output}}"), node("b", deps=["a"]), node("c", deps=["b"])),
    ),
    (
        "later node as an input",
        graph(node("a", inputs={"x": {"node": "b"}}), node("b", deps=["a"])),
    ),
    ("id used earlier", graph(node("old"))),
    (
        "id used earlier, referred to here",
        graph(node("broken"), node("c1", deps=["broken"], template="Use {{broken.output}}.")),
    ),
    ("self dep", graph(node("a", deps=["a"]))),
    (
        "cycle",
        graph(node("a", deps=["c"]), node("b", deps=["a"]), node("c", deps=["b"]), node("d")),
    ),
    (
        "cycle whose every dep is used",
        graph(
            node("a", deps=["b"], template="{{b.output}}"),
            node("b", deps=["a"], template="Check {{a.output}}", inputs={"x": {"node": "a"}}),
        ),
    ),
    (
        "cycle with one bare ordering",
        graph(node("a", deps=["b"], template="{{b.output}}"), node("b", deps=["a"])),
    ),
]


@pytest.mark.parametrize(("case", "raw"), REPAIRABLE, ids=[case for case, _ in REPAIRABLE])
def test_every_suggested_repair_is_admitted_once_applied(
    ctx: AdmissionContext, case: str, raw: dict[str, Any]
) -> None:
    err = reject(raw, ctx)
    assert err.group == "structure" and err.edits, (case, str(err))
    repaired = apply_edits(raw, err.edits)
    admitted = admit(repaired, ctx)  # the repair never leads to a refusal (a cycle above all)
    assert admitted.order


def test_a_cycle_is_cut_where_no_placeholder_needs_the_dep(ctx: AdmissionContext) -> None:
    raw = graph(node("a", deps=["b"], template="{{b.output}}"), node("b", deps=["a"]))
    err = reject(raw, ctx)
    assert err.repair == "remove `a` from the deps of `b` so the work flows one way"
    used = graph(
        node("a", deps=["b"], template="{{b.output}}"),
        node("b", deps=["a"], template="{{a.output}}"),
    )
    err = reject(used, ctx)
    assert err.repair is not None and "with `{{b.output}}` from the template of `a`" in err.repair


@pytest.mark.slow
async def test_graph_validate_never_suggests_a_cycle(isolated_env: Path, tmp_path: Path) -> None:
    from tests.bot.cli.test_cli_end_to_end import _env, _run

    path = tmp_path / "graph.json"
    raw = graph(node("a", "raven", "Summarise {{b.output}}."), node("b", "raven", deps=["a"]))
    path.write_text(json.dumps(raw))
    code, out, _ = await _run("graph", "validate", str(path), env=_env(isolated_env))
    assert code == 2
    assert "would make a cycle" in out and "add `b` to deps" not in out
    fixed = tmp_path / "fixed.json"
    fixed.write_text(json.dumps(apply_edits(raw, reject(raw, _cli_ctx(tmp_path)).edits)))
    code, out, _ = await _run("graph", "validate", str(fixed), env=_env(isolated_env))
    assert code == 0 and out.startswith("admitted"), out


def _cli_ctx(workspace: Path) -> AdmissionContext:
    return AdmissionContext(agents={"raven": FakeAgent("raven")}, workspace=workspace)
