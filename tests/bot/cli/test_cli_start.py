"""`raven-bot version` and `--help` answer without loading settings, pydantic or the runtime
(they are what a person types first, and they must be instant)."""

from __future__ import annotations

import subprocess
import sys

import pytest

PROBE = """
import contextlib, io, sys
from bot.cli.main import main
with contextlib.redirect_stdout(io.StringIO()) as out:
    try:
        code = main({argv!r})
    except SystemExit as exc:
        code = exc.code
heavy = sorted(m for m in ("pydantic", "bot.settings", "bot.app", "anthropic") if m in sys.modules)
print(code, out.getvalue().splitlines()[0], heavy)
"""


@pytest.mark.parametrize("argv", [["version"], ["--help"]])
def test_version_and_help_load_nothing_heavy(argv: list[str]) -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(argv=argv)],
        capture_output=True,
        text=True,
        check=True,
    )
    said = done.stdout.strip()
    # Exit code 0, then the first line printed, then the heavy modules loaded: none.
    assert said.startswith("0 ") and said.endswith(" []"), said


def test_the_runtime_loads_what_start_up_does_not_need_only_when_used() -> None:
    # The ACP SDK's models (0.5 s), networkx (0.1 s, admission) and faiss (0.1 s, the first
    # vector index) would each delay `chat`'s first prompt.
    probe = (
        "import sys, bot.app; "
        "print(sorted(m for m in ('acp', 'networkx', 'faiss') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout
