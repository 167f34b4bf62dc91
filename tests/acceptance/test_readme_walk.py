"""The README walked as written: every example it shows typed into a thread (plans,
`campaign:`, `schedule:` and `watch:` lines), taken from README.md itself, typed IN ORDER into
ONE conversation of the real `raven-bot chat` (a terminal) on a fresh RAVEN_HOME with no
machines.toml (a fresh clone), each prompt answered `1`, and each checked to have done what
the README says: a plan's run completed and its output is shown, the campaign measured the
README's toy script and reported, a scheduled task and a standing check were approved and
fire. Only facts are checked (records, ids, the commands' own output), not the bot's wording.

Substituted, because no coding agent is installed here: the README's ACP plan runs on the
loopback ACP agent (as in test_acp_agents.py), configured in agents.toml as an operator
would; the README's tool servers are the loopback tracker (as in test_readme_mcp.py)."""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.acceptance.harness import (
    WITHIN,
    Commands,
    Console,
    noise,
    product_env,
    project_dir,
    wait_until,
)
from tests.acceptance.readme import chat_examples, inline_spans, readme_text
from tests.acceptance.test_acp_agents import _agents_toml
from tests.acceptance.test_readme_mcp import DOTENV, docs_port, pasted_mcp_json  # noqa: F401
from tests.helpers import db_rows

pytestmark = pytest.mark.slow

RUN_NOW = "schedule: run ID"  # the README's way to fire a task now, from the thread
README_EXAMPLES = [*chat_examples(), RUN_NOW]


@dataclass
class Walk:
    """One conversation in one console on a fresh RAVEN_HOME."""

    home: Path
    console: Console

    def rows(self, sql: str, *params: object) -> list[tuple[object, ...]]:
        """Rows of `sql`; none while the database is not made yet (the console greets first)."""
        try:
            return db_rows(self.home, sql, *params)
        except sqlite3.OperationalError:
            return []

    def answering(self, done: Callable[[], bool], what: str, within: float = WITHIN) -> None:
        """Answer `1` to each prompt that waits, once, until `done`."""
        answered: set[object] = set()

        def step() -> bool:
            if done():
                return True
            for (prompt,) in self.rows("SELECT id FROM prompts WHERE state = 'pending'"):
                if prompt not in answered:
                    answered.add(prompt)
                    self.console.type("1")
            return False

        wait_until(step, what, within)

    def workspace(self) -> Path:
        """The conversation's workspace (the walk has one conversation)."""
        (path,) = (self.home / "workspaces").iterdir()
        return path


@pytest.fixture
def walk(tmp_path: Path, docs_port: int) -> Iterator[Walk]:  # noqa: F811 (the fixture)
    home = tmp_path / "raven-home"
    home.mkdir()
    # The operator's agents.toml: the README's ACP plan needs `claude-acp` installed.
    (home / "agents.toml").write_text(_agents_toml())
    # The README's mcp.json, its servers the loopback tracker; their tokens in `.env`.
    (home / "mcp.json").write_text(pasted_mcp_json(docs_port))
    project = project_dir(tmp_path / "project")
    (project / ".env").write_text(DOTENV)
    with ThreadPoolExecutor(max_workers=1) as pool:
        shell = Commands(project, product_env(home), pool)
        console = Console(shell.env, shell.cwd)
        try:
            console.expect_text("you> ")
            yield Walk(home, console)
        finally:
            console.close()


def _type_plan(walk: Walk, plan: str) -> None:
    """Type a plan line by line; a blank line submits it unless it ends with `confirm`."""
    lines = plan.splitlines()
    if lines[-1] != "confirm":
        lines.append("")
    for n, line in enumerate(lines):
        walk.console.type(line)
        if n < len(lines) - 1:
            walk.console.expect_text("plan> ")


def _plan(walk: Walk, plan: str) -> None:
    before = {run for (run,) in walk.rows("SELECT id FROM graph_runs")}
    _type_plan(walk, plan)

    def new_run() -> str | None:
        runs = [r for (r,) in walk.rows("SELECT id FROM graph_runs WHERE finished_at IS NOT NULL")]
        fresh = [r for r in runs if r not in before]
        return str(fresh[0]) if fresh else None

    walk.answering(lambda: new_run() is not None, f"the run of {plan!r} to end")
    run = new_run()
    nodes = walk.rows("SELECT node_id, state, deps FROM graph_nodes WHERE run_id = ?", run)
    ids = [line.split(":", 1)[0] for line in plan.splitlines() if line != "confirm"]
    assert sorted(str(n) for n, _, _ in nodes) == sorted(ids), (plan, nodes)
    assert all(state == "completed" for _, state, _ in nodes), (plan, nodes)
    ((state,),) = walk.rows("SELECT state FROM graph_runs WHERE id = ?", run)
    assert state == "completed", (plan, state)
    # The report shows the output of the last nodes: their commands' own first line.
    wait_until(
        lambda: bool(walk.rows("SELECT 1 FROM graph_runs WHERE id = ? AND reported = 1", run)),
        "the report",
    )
    needed = {dep for _, _, deps in nodes for dep in json.loads(str(deps))}
    leaves = [n for n, _, _ in nodes if n not in needed]
    for node in leaves:
        output = (walk.home / "runs" / str(run) / "outputs" / f"{node}.md").read_text().strip()
        if output:
            first = output.splitlines()[0].strip()
            walk.console.expect_text(first)


def _campaign(walk: Walk, line: str) -> None:
    walk.console.type(line)
    wait_until(
        lambda: bool(walk.rows("SELECT 1 FROM prompts WHERE purpose = 'campaign_command'")),
        "the campaign's approval prompt",
    )
    ((question,),) = walk.rows("SELECT question FROM prompts WHERE purpose = 'campaign_command'")
    # The README put its script in the workspace first: nothing missing to warn about.
    assert "not in the working directory" not in str(question), question
    walk.answering(
        lambda: bool(walk.rows("SELECT 1 FROM campaigns WHERE closed_at IS NOT NULL")),
        "the campaign to report",
        within=WITHIN * 2,
    )
    ((campaign, state, error, report),) = walk.rows(
        "SELECT id, state, error, report FROM campaigns"
    )
    assert (state, error) == ("closed", None), (state, error, walk.console.transcript[-3000:])
    # It measured what the README's script prints, and the report states the best value.
    script = walk.workspace() / re.findall(r"run: \S+ (\S+)", line)[0]
    printed = subprocess.run(
        [sys.executable, script], capture_output=True, text=True, check=True
    ).stdout
    values = {float(v) for v in re.findall(r"loss ([\d.]+)", printed)}
    measured = {v for (v,) in walk.rows("SELECT value FROM campaign_measurements")}
    assert measured == values, (measured, printed)
    assert f"{min(values):g}" in str(report), report
    walk.console.expect_text(str(campaign))


def _scheduled(walk: Walk, line: str) -> str:
    """Type a `schedule:` or `watch:` line and approve it; the task's id, once it is active."""
    walk.console.type(line)
    walk.answering(
        lambda: bool(
            walk.rows(
                "SELECT 1 FROM scheduled_tasks WHERE state = 'active' AND "
                "id NOT IN (SELECT task_id FROM scheduled_firings)"
            )
        ),
        f"{line!r} to be scheduled",
    )
    tasks = walk.rows("SELECT id FROM scheduled_tasks WHERE state = 'active' ORDER BY created_at")
    task = str(tasks[-1][0])
    walk.console.expect_text(task)
    return task


def _run_now(walk: Walk, task: str) -> None:
    assert RUN_NOW in inline_spans(readme_text())
    walk.console.type(RUN_NOW.replace("ID", task))
    wait_until(
        lambda: bool(walk.rows("SELECT 1 FROM scheduled_firings WHERE task_id = ?", task)),
        f"{task} to fire",
    )


def _schedule(walk: Walk, line: str) -> None:
    task = _scheduled(walk, line)
    _run_now(walk, task)

    def ran() -> bool:
        return bool(walk.rows("SELECT 1 FROM graph_runs WHERE for_task = ? AND finished_at", task))

    # A firing runs in the foreground: its turn says the result, once.
    wait_until(ran, f"{task}'s run to end")
    ((run, state),) = walk.rows("SELECT id, state FROM graph_runs WHERE for_task = ?", task)
    assert state == "completed", state
    # A run ends in SQLite first; its view files (outputs/) follow it, before its report.
    outputs = walk.home / "runs" / str(run) / "outputs"
    wait_until(lambda: any(outputs.glob("*.md")), f"{run}'s output file")
    (output,) = outputs.glob("*.md")
    shown = output.read_text()
    if "shell: df " in line:
        # What the README says it measures: the disk holding RAVEN_HOME, where the workspace
        # is (`df` names the workspace as the mount point), the size the host's df gives it.
        workspace = walk.workspace()
        _device, size, *_, mounted_on = shown.strip().splitlines()[-1].split()
        host = subprocess.run(
            ["df", "-h", str(workspace)], capture_output=True, text=True, check=True
        )
        assert mounted_on == str(workspace), shown
        assert size == host.stdout.splitlines()[-1].split()[1], (shown, host.stdout)
    walk.console.expect_text(shown.strip().splitlines()[-1].split()[-1])


def _watch(walk: Walk, line: str) -> None:
    task = _scheduled(walk, line)
    _run_now(walk, task)
    # Nothing listens on :8080 here: it trips, and says so with curl's own words.
    walk.console.expect(r"curl: \(\d+\)")


def test_the_readme_examples_in_order_in_one_conversation(walk: Walk) -> None:
    examples = chat_examples()
    assert len(examples) >= 7, examples
    for example in examples:
        if example.startswith("campaign:"):
            _campaign(walk, example)
        elif example.startswith("schedule:"):
            _schedule(walk, example)
        elif example.startswith("watch:"):
            _watch(walk, example)
        else:
            _plan(walk, example)
    # All in the console's first conversation.
    assert {c for (c,) in walk.rows("SELECT conversation_id FROM graph_runs")} == {
        c for (c,) in walk.rows("SELECT conversation_id FROM graph_runs LIMIT 1")
    }
    assert "console-2" not in walk.console.transcript
    walk.console.type("stop")
    assert walk.console.end() == 0
    assert not noise(walk.console.transcript), noise(walk.console.transcript)
