"""`status` on the console's terminal: what is live, each section starting at the margin."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.bot.cli.test_cli_end_to_end import _env
from tests.bot.test_console import _STYLE, PtyChat


@pytest.fixture
def chat(isolated_env: Path, tmp_path: Path) -> Iterator[PtyChat]:
    """A console chat on a pty in the isolated RAVEN_HOME."""
    session = PtyChat(_env(isolated_env), tmp_path / "stderr.log")
    yield session
    session.close()


def _indent(raw: str, text: str) -> int:
    """How far the rendered line holding `text` is indented."""
    (line,) = [li for li in _STYLE.sub("", raw).splitlines() if text in li]
    return len(line) - len(line.lstrip())


def test_pty_status_headings_are_not_indented_under_the_last_bullet(chat: PtyChat) -> None:
    chat.expect("you> ")
    chat.type("schedule: every 2h | s1: shell: echo two")
    chat.expect("Reply with a number or an option")
    chat.type("1")
    chat.expect("is scheduled")
    chat.type("mute")
    chat.expect("Muted")
    # Left waiting: its prompt is a bullet right before the scheduled tasks' heading.
    chat.type("schedule: in 20m | s2: shell: echo three")
    chat.expect("Reply with a number or an option")
    chat.type("status")
    shown = chat.expect("Proactive posts:")
    chat.expect("final reports and failures always post.")
    assert re.search(r"• prompt \w{8} waiting: Schedule task t_\w+\?", shown)
    # The tasks are a table: its cells wrap within their columns on a narrow terminal.
    assert re.search(r"\(muted\s+(?:\S+\s+)*?until\s+(?:\S+\s+)*?unmute\)", shown), shown
    # Each paragraph of the reply starts under its first character, after `raven> `.
    margin = len("raven> ")
    assert _indent(chat.raw, "Scheduled tasks:") == margin
    assert _indent(chat.raw, "Proactive posts:") == margin
    assert chat.end() == 0
