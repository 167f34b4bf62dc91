"""A plan typed line by line into the real `raven-bot chat` runs whole or not at all (issue 39,
finding 4): a mistyped node line stays in the plan, which is refused naming it; nothing runs,
and the session goes on. A plan that starts is said in a sentence, not a tool dump."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.bot.cli.test_cli_end_to_end import _env, _run
from tests.helpers import db_rows

pytestmark = pytest.mark.slow


async def test_a_plan_with_a_mistyped_line_runs_nothing_and_names_it(isolated_env: Path) -> None:
    typed = b"a1: shell: echo one\na2 shell: echo two [after a1]\n\nstatus\n"
    code, out, err = await _run("chat", stdin=typed, env=_env(isolated_env))
    assert code == 0, err
    assert "Nothing was run: line 2 of this plan is not a node." in out, out
    assert "a `:` is missing after the id; write `a2: shell: echo two [after a1]`" in out, out
    # Before: `a1` ran alone, and the line for `a2` got the offline notice.
    assert "wants to run" not in out and "offline mode" not in out, out
    assert "Status: running nothing" in out, out
    assert db_rows(isolated_env, "SELECT COUNT(*) FROM graph_runs") == [(0,)]


async def test_a_plan_that_starts_is_said_in_a_sentence(isolated_env: Path) -> None:
    code, out, err = await _run("chat", stdin=b"r1: research: find X\n\n", env=_env(isolated_env))
    assert code == 0, err
    ((run_id,),) = db_rows(isolated_env, "SELECT id FROM graph_runs")
    assert f"Started run `{run_id}` with 1 step; I'll post the report here." in out, out
    assert "here is what the tools returned" not in out and "submit_graph" not in out, out
