"""What people read never tells them to call one of the Host's tools."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from host.graph.admission import GUIDE_PATH, AdmissionError
from tests.bot.cli.test_cli_end_to_end import _env, _run


def test_admission_error_for_people_names_the_guide_file_not_a_tool() -> None:
    exc = AdmissionError("status", "agent `nosuch` is not registered", node="x1")
    assert "load_orchestration_guide" in str(exc)  # the Host still gets the tool
    assert "load_orchestration_guide" not in exc.for_user()
    assert str(GUIDE_PATH) in exc.for_user() and GUIDE_PATH.is_file()


@pytest.mark.slow
async def test_offline_rejection_in_chat_shows_the_guide_path(isolated_env: Path) -> None:
    code, out, err = await _run(
        "chat", stdin=b"x1: nosuch: do it\n", env=_env(isolated_env), within=120
    )
    assert code == 0, err
    assert "Graph rejected" in out
    assert "load_orchestration_guide" not in out
    assert "orchestration.md" in out


@pytest.mark.slow
async def test_graph_validate_shows_the_guide_path(isolated_env: Path, tmp_path: Path) -> None:
    graph = tmp_path / "g.json"
    graph.write_text(
        json.dumps(
            {"task_summary": "t", "nodes": [{"id": "a", "agent": "nosuch", "template": "x"}]}
        )
    )
    code, out, _ = await _run("graph", "validate", str(graph), env=_env(isolated_env))
    assert code == 2
    assert "load_orchestration_guide" not in out and "orchestration.md" in out
