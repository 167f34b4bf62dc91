"""Admission meets a weak model halfway: an empty optional string is absent, a skill named as
an agent is told so, and a rejection says how many more problems follow the first."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from host.graph.admission import AdmissionError, admit
from host.graph.model import AdmissionContext


@dataclass(frozen=True)
class Agent:
    name: str
    enabled: bool = True
    stateful: bool = False
    file_capable: bool = True


def _ctx(tmp_path: Path, skills: frozenset[str] | None = frozenset({"research-brief"})) -> Any:
    agents = {n: Agent(n) for n in ("research", "code")}
    return AdmissionContext(agents=agents, workspace=tmp_path, prior_nodes={}, skills=skills)


def _graph(*nodes: dict[str, Any]) -> dict[str, Any]:
    return {"task_summary": "brief on a topic", "nodes": list(nodes)}


def test_empty_instance_is_absent(tmp_path: Path) -> None:
    """The real model's first graph: `instance: ""` on stateless agents is admitted."""
    admitted = admit(
        _graph(
            {"id": "r1", "agent": "research", "template": "Find A.", "instance": ""},
            {"id": "c1", "agent": "code", "template": "Use {{r1.output}}.", "deps": ["r1"]},
        ),
        _ctx(tmp_path),
    )
    assert admitted.node("r1").instance is None


def test_a_bad_instance_is_still_rejected(tmp_path: Path) -> None:
    with pytest.raises(AdmissionError) as info:
        admit(
            _graph({"id": "r1", "agent": "research", "template": "x", "instance": "Bad!"}),
            _ctx(tmp_path),
        )
    assert info.value.field == "instance"


def test_skill_named_as_agent_is_told_and_agents_named(tmp_path: Path) -> None:
    with pytest.raises(AdmissionError) as info:
        admit(_graph({"id": "r1", "agent": "research-brief", "template": "x"}), _ctx(tmp_path))
    text = str(info.value)
    assert "`research-brief` is a skill, not an agent" in text
    assert "`code`, `research`" in text
    assert '"skills": ["research-brief"]' in text


def test_unknown_agent_that_is_no_skill_keeps_its_message(tmp_path: Path) -> None:
    with pytest.raises(AdmissionError) as info:
        admit(_graph({"id": "r1", "agent": "researcher", "template": "x"}), _ctx(tmp_path))
    assert "unknown agent `researcher`" in str(info.value)
    assert "skill" not in str(info.value)


def test_several_problems_say_how_many_remain(tmp_path: Path) -> None:
    """First error with its repair, then the count of what the later checks found."""
    with pytest.raises(AdmissionError) as info:
        admit(
            _graph(
                {"id": "r1", "agent": "research", "template": "x", "deps": ["ghost"]},
                {"id": "r2", "agent": "research-brief", "template": "y"},
                {"id": "r3", "agent": "nobody", "template": "z"},
            ),
            _ctx(tmp_path),
        )
    err = info.value
    assert err.node == "r1" and err.field == "deps"
    # r2's agent is a skill, r3's unknown: each node's problem counts.
    assert err.more == 2
    assert "(2 more problems after this one;" in str(err)


def test_the_count_starts_after_a_status_problem(tmp_path: Path) -> None:
    with pytest.raises(AdmissionError) as info:
        admit(
            _graph(
                {"id": "r1", "agent": "research-brief", "template": "x"},
                {"id": "r2", "agent": "research", "template": "y"},
                {"id": "r3", "agent": "nobody", "template": "z"},
            ),
            _ctx(tmp_path),
        )
    assert info.value.node == "r1"
    assert info.value.more == 1


def test_a_single_problem_says_no_more(tmp_path: Path) -> None:
    with pytest.raises(AdmissionError) as info:
        admit(_graph({"id": "r1", "agent": "research-brief", "template": "x"}), _ctx(tmp_path))
    assert info.value.more == 0
    assert "more problem" not in str(info.value)
