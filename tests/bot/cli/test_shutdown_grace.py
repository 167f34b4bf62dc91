"""Shutdown keeps its promise (issue 38, finding 10): Ctrl-C says what still runs and waits
for it up to RAVEN_SHUTDOWN_GRACE, a second Ctrl-C stops at once, and the next start never
calls a clean stop a crash."""

from __future__ import annotations

import os
import re
import signal
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.acceptance.harness import Console, project_dir, running, wait_until
from tests.bot.cli.test_cli_end_to_end import _env

pytestmark = pytest.mark.slow

# Far longer than any command here runs: the first Ctrl-C never cuts one short.
GRACE = "600"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return project_dir(tmp_path / "project")


@pytest.fixture
def consoles() -> Iterator[list[Console]]:
    started: list[Console] = []
    yield started
    for console in started:
        console.close()


def _start(consoles: list[Console], home: Path, project: Path) -> Console:
    console = Console(_env(home, RAVEN_SHUTDOWN_GRACE=GRACE), project)
    consoles.append(console)
    console.expect_text("you> ")
    return console


def _run_approved(console: Console, command: str) -> None:
    """Type a one-node shell plan and approve its command."""
    console.type(f"g1: shell: {command}")
    console.expect_text("plan> ")
    console.type("")
    console.expect(r"wants to run this command[\s\S]*?Reply with a number")
    console.type("1")


def _ctrl_c(console: Console) -> None:
    """What a terminal does on Ctrl-C: SIGINT to the bot's process group."""
    os.killpg(console.proc.pid, signal.SIGINT)


def _exited(console: Console) -> int:
    wait_until(lambda: console.proc.poll() is not None, "the bot to exit")
    console.drain()
    return console.proc.wait()


def _rows(home: Path, sql: str) -> list[tuple[object, ...]]:
    with sqlite3.connect(home / "raven.db") as conn:
        return conn.execute(sql).fetchall()


def test_ctrl_c_waits_for_the_running_command_and_keeps_its_result(
    isolated_env: Path, project: Path, consoles: list[Console]
) -> None:
    console = _start(consoles, isolated_env, project)
    _run_approved(console, "sleep 3.17 && echo slept-well")
    wait_until(lambda: running("sleep", "3.17"), "the approved command to run")
    _ctrl_c(console)
    said = console.expect(r"stopping: waiting up to 600 s for graph run run_\w+ \(g1\)[^\n]*")
    assert "again stops now" in said, said
    # The command was not cut short: it finished, and its run reported in the thread.
    console.expect(r"Output of g1:\s*slept-well")
    assert _exited(console) == 0
    assert _rows(isolated_env, "SELECT state FROM graph_runs") == [("completed",)]

    again = _start(consoles, isolated_env, project)
    again.type("status")
    again.expect(r"Status:.*\n")
    assert "interrupted" not in again.transcript, again.transcript


def test_a_second_ctrl_c_stops_now_and_the_next_start_calls_it_no_crash(
    isolated_env: Path, project: Path, consoles: list[Console]
) -> None:
    console = _start(consoles, isolated_env, project)
    _run_approved(console, "sleep 617")
    wait_until(lambda: running("sleep", "617"), "the approved command to run")
    _ctrl_c(console)
    console.expect(r"stopping: waiting up to 600 s for graph run run_\w+ \(g1\)")
    _ctrl_c(console)
    console.expect(r"stopping now \(stop asked again\): cancelled graph run run_\w+ \(g1\)")
    assert _exited(console) == 0
    wait_until(lambda: not running("sleep", "617"), "the cancelled command to end")
    assert _rows(isolated_env, "SELECT state FROM graph_runs") == [("cancelled",)]
    assert _rows(isolated_env, "SELECT state, error FROM graph_nodes") == [
        ("cancelled", "stopped when the bot shut down")
    ]
    assert _rows(isolated_env, "SELECT status FROM turns WHERE status = 'running'") == []

    again = _start(consoles, isolated_env, project)
    # The run's report (its turn was refused while stopping) says how it ended, and
    # nothing calls the stop a restart or a crash.
    again.expect(r"Run run_\w+ cancelled")
    again.type("status")
    again.expect(r"Status:.*\n")
    assert re.search(r"interrupted|restart|crash", again.transcript) is None, again.transcript
