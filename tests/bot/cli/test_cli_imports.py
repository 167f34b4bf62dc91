"""Parsing a command imports nothing heavy: `version`, `--help` and the one-shot tools start
without the runtime, the model SDK or the chat platforms."""

from __future__ import annotations

import subprocess
import sys

from tests.helpers import REPO

_HEAVY = ("bot.app", "bot.channel", "anthropic", "apscheduler", "sqlalchemy", "slack_bolt")


def _imported_by(code: str) -> list[str]:
    probe = f"{code}; import sys; print(' '.join(m for m in {_HEAVY!r} if m in sys.modules))"
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True
    )
    return done.stdout.split()


def test_the_command_line_imports_no_runtime() -> None:
    assert _imported_by("from bot.cli import main") == []


def test_reading_campaigns_imports_no_runtime() -> None:
    assert _imported_by("import bot.cli.campaigns") == []
