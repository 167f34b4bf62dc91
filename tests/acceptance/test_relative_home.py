"""A relative `RAVEN_HOME` (`RAVEN_HOME=data` in `.env`, say) means the directory under the one
the bot starts in, for every part: made absolute at start-up, so a chat campaign's round,
which runs in a sandbox from another directory, finds its workspace (it used to fail every
round with "workdir is not absolute"). Through the real `raven-bot chat`."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from tests.acceptance.harness import Console, product_env, project_dir, wait_until
from tests.helpers import db_rows

pytestmark = pytest.mark.slow

LINE = (
    "campaign: relative home | machine: local | run: echo loss 0.25 | metric: loss min "
    "| budget: 1h | rounds: 1"
)


def _has(home: Path, sql: str) -> bool:
    """Whether `sql` finds a row (the database may not be made yet: the console greets first)."""
    try:
        return bool(db_rows(home, sql))
    except sqlite3.OperationalError:
        return False


def test_a_chat_campaign_runs_with_a_relative_raven_home(tmp_path: Path) -> None:
    project = project_dir(tmp_path / "project")
    home = project / "data"
    console = Console(product_env(Path("data")), project)
    try:
        console.expect_text("you> ")
        console.type(LINE)
        wait_until(
            lambda: _has(home, "SELECT 1 FROM prompts WHERE state = 'pending'"),
            "the campaign's approval prompt",
        )
        console.type("1")
        wait_until(
            lambda: _has(home, "SELECT 1 FROM campaigns WHERE closed_at IS NOT NULL"),
            "the campaign to end",
        )
        ((error,),) = db_rows(home, "SELECT error FROM campaigns")
        assert error is None, error
        measured = db_rows(home, "SELECT value FROM campaign_measurements")
        assert measured == [(0.25,)], (measured, console.transcript)
        assert "not absolute" not in console.transcript, console.transcript
    finally:
        console.close()
