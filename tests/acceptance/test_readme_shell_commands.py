"""The operator's command lines that need no running bot (started in the background as the
session starts, see shell_commands.py): skills, version, memory, and a foreground campaign
stopped from another shell."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.acceptance.harness import Commands, Ran, Result, noise, running, wait_until
from tests.acceptance.shell_commands import LONG_SLEEP
from tests.helpers import db_rows

# Real processes (the raven-bot CLI, a pty, Slurm, ssh, restarts): `-m "not slow"` skips them.
pytestmark = pytest.mark.slow

README_EXAMPLES = [
    "raven-bot skills list [--json]",
    "skills list",
    "raven-bot skills search QUERY [--json]",
    "raven-bot version",
    "raven-bot memory add\\|search\\|show\\|forget\\|reindex",
    "raven-bot memory add --user ID TEXT…",
    "memory search --user ID [--json] QUERY…",
    "memory show --user ID",
    "memory forget --user ID",
    "raven-bot memory forget --user ID",
    "memory reindex",
    "raven-bot memory reindex",
    "raven-bot campaigns list\\|show ID [--json]\\|stop ID",
    "raven-bot campaigns stop",
    "raven-bot campaigns run",
]


@pytest.fixture
def shell(shell_commands_started: Commands) -> Commands:
    return shell_commands_started


def _by(results: list[Ran], prefix: str) -> Result:
    return next(result for command, result in results if command.startswith(prefix))


def _anywhere(home: Path, text: str) -> list[str]:
    """The tables of raven.db with a row containing `text`."""
    names = db_rows(home, "SELECT name FROM sqlite_master WHERE type = 'table'")
    return [
        table
        for (table,) in names
        if any(text in repr(row) for row in db_rows(home, f"SELECT * FROM {table}"))
    ]


def test_skills_list_and_search(shell: Commands) -> None:
    results = shell.result("skills")
    for command, result in results:
        assert result.code == 0, (command, result.both)
    # "every skill the bot can select: name, source, description"; "Nine ship in
    # `skills/bundled/`"
    listing = _by(results, "raven-bot skills list").out
    assert len(re.findall(r"^\S+ +bundled +\S", listing, re.MULTILINE)) == 9, listing
    # "the fused ranking before the gate, with per-source ranks and the RRF score"
    ranking = json.loads(_by(results, "raven-bot skills search --json").out)
    assert "run-test-suite" in [hit["name"] for hit in ranking[:3]], ranking
    assert all("rrf" in hit and hit["ranks"] for hit in ranking), ranking
    assert re.search(r"\d+\.\d+", _by(results, "raven-bot version").out)


def test_memory_from_the_shell(shell: Commands) -> None:
    results = shell.result("memory")
    for command, result in results:
        assert result.code == 0, (command, result.both)
    # "the rest of the line, quoted or not"
    assert "Fridays" in _by(results, "raven-bot memory search").out
    assert "Fridays" in _by(results, "raven-bot memory show").out
    # "`memory forget --user ID`": everything derived from the person is erased.
    home = shell.cwd.parent / "memory-home"
    assert not _anywhere(home, "Fridays"), _anywhere(home, "Fridays")


def test_campaigns_stop_from_another_shell(shell: Commands) -> None:
    stopped, ended = shell.result("operator")
    assert stopped.code == 0, stopped.both
    assert "cancelled" in stopped.out, stopped.out
    # The foreground run ends, saying so, and its round is gone.
    assert "cancelled" in ended.out, ended.out
    wait_until(lambda: not running(*LONG_SLEEP), "the stopped round to end")


@pytest.mark.parametrize("kind", ["a fence marker", "a log line", "a progress bar", "a traceback"])
def test_what_people_read_has_no(shell: Commands, kind: str) -> None:
    shell.settle()
    found = [
        f"[{what}] {line}"
        for what, text in shell.shown
        for line in noise(text)
        if line.startswith(kind)
    ]
    assert not found, "\n".join(found[:20])
