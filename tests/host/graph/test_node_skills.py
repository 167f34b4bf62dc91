"""A node's skills override (the paper's Cfg_v, Eq. 29; issue 40 part 2): omitted, the agent's
own skills; `[]`, none; names, exactly those. Explicit plans write `[skills a, b]` or
`[skills none]`, graph files the `skills` field; admission refuses unknown names (and any
when skills are off) with a repair hint; the model-facing schema does not advertise it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agents.plan_syntax import parse_plan
from core.errors import ConfigError
from core.ids import ConversationRef
from host.features.skills.forge import local_catalog
from host.features.skills.prefetch import NodeSkills
from host.graph.model import GraphSubmission
from host.graph.run_store import RunRecord
from tests.bot.cli.test_cli_end_to_end import _env, _run
from tests.fakes.chat_adapter import FakeChatAdapter
from tests.helpers import db_rows, inbound
from tests.runtime_kit import chat_runtime


def test_a_plan_line_names_its_skills_or_none() -> None:
    plan = parse_plan(
        "r0: shell: ls\nr1: research: sum it up [skills research-brief, svg-chart] [after r0]"
        "\nr2: research: plain [skills none]\nr3: research: as configured"
    )
    assert plan is not None
    skills = {n["id"]: n.get("skills") for n in plan["nodes"]}
    assert skills == {
        "r0": None,
        "r1": ["research-brief", "svg-chart"],
        "r2": [],
        "r3": None,
    }
    assert plan["nodes"][1]["deps"] == ["r0"] and plan["nodes"][1]["template"] == "sum it up"
    GraphSubmission.model_validate(plan)  # the fields are the submission's own


def test_the_model_facing_schema_does_not_advertise_the_override() -> None:
    node = GraphSubmission.model_json_schema()["$defs"]["NodeSpec"]
    assert "skills" not in node["properties"]


def _graph(tmp: Path, skills: list[str]) -> Path:
    node = {"id": "n1", "agent": "research", "template": "brief me", "skills": skills}
    path = tmp / "graph.json"
    path.write_text(json.dumps({"task_summary": "one node", "nodes": [node]}))
    return path


async def test_graph_validate_admits_known_skills_and_refuses_unknown_ones(
    isolated_env: Path, tmp_path: Path
) -> None:
    env = _env(isolated_env)
    code, out, _ = await _run(
        "graph", "validate", str(_graph(tmp_path, ["research-brief"])), env=env
    )
    assert (code, out.startswith("admitted")) == (0, True), out

    code, out, _ = await _run("graph", "validate", str(_graph(tmp_path, ["no-such"])), env=env)
    assert code == 2
    assert "no skill named `no-such`" in out and "`research-brief`" in out, out
    assert "raven-bot skills list" in out, out

    off = _env(isolated_env, RAVEN_SKILLS="false")
    code, out, _ = await _run(
        "graph", "validate", str(_graph(tmp_path, ["research-brief"])), env=off
    )
    assert code == 2 and "skills are off" in out, out
    code, out, _ = await _run("graph", "validate", str(_graph(tmp_path, [])), env=off)
    assert code == 0, out  # none asked for: nothing to refuse


@pytest.fixture
def run(tmp_path: Path) -> RunRecord:
    return RunRecord(
        id="run_0000000001",
        conversation=ConversationRef("test", "W", "C", "T"),
        task_summary="t",
        background=True,
        state="running",
        submitted_by="U1",
        submission={},
        run_dir=tmp_path / "run",
        replaces_run=None,
        status_message=None,
        created_at=0.0,
        finished_at=None,
    )


async def test_a_node_gets_exactly_its_skills_none_or_its_agents_defaults(
    isolated_env: Path, run: RunRecord
) -> None:
    skills = NodeSkills(local_catalog(isolated_env), {"research": ["research-brief"]})
    default = await skills.for_node(run, "research", "brief me")
    assert "research-brief" in default and "svg-chart" not in default
    chosen = await skills.for_node(run, "research", "brief me", skills=["svg-chart"])
    assert "svg-chart" in chosen and "research-brief" not in chosen
    assert await skills.for_node(run, "research", "brief me", skills=[]) == ""


async def test_a_plan_in_chat_naming_an_unknown_skill_is_refused_whole(isolated_env: Path) -> None:
    adapter = FakeChatAdapter()
    async with chat_runtime(adapter) as rt:
        turn = await rt.service.accept(inbound("k1: shell: ls [skills no-such]", "e1"))
        assert turn is not None
        await turn
        said = adapter.texts[-1]
        assert "no skill named `no-such`" in said, said
        assert db_rows(rt.settings.home, "SELECT id FROM graph_runs") == []
        # A command agent's task is its command: skills could only be dropped, so refused.
        turn = await rt.service.accept(inbound("k2: shell: ls [skills research-brief]", "e2"))
        assert turn is not None
        await turn
        said = adapter.texts[-1]
        assert "agent `shell` runs commands and takes no skills" in said, said
        assert db_rows(rt.settings.home, "SELECT id FROM graph_runs") == []


def _agents_toml(home: Path, text: str) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "agents.toml").write_text(text)


async def test_agents_toml_gives_an_agent_its_default_skills(
    isolated_env: Path, run: RunRecord
) -> None:
    _agents_toml(isolated_env, '[agents.research]\nskills = ["svg-chart"]\n')
    async with chat_runtime() as rt:
        (skills,) = [
            c for f in rt.features for c in f.dispatch_contexts() if isinstance(c, NodeSkills)
        ]
        block = await skills.for_node(run, "research", "brief me")
        assert "name: svg-chart" in block  # the default from agents.toml (the router may add more)


async def test_a_default_skill_that_does_not_exist_stops_the_start(isolated_env: Path) -> None:
    _agents_toml(isolated_env, '[agents.research]\nskills = ["svg-chrat"]\n')
    with pytest.raises(
        ConfigError, match=r"\[agents\.research\] skills: no skill named `svg-chrat`"
    ):
        async with chat_runtime():
            pass
