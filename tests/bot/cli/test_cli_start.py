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


def test_the_runtime_loads_no_acp_sdk_until_an_acp_agent_runs() -> None:
    # The SDK's models take half a second to import: `chat` would wait for them at start.
    probe = "import sys, bot.app; print('acp' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False", done.stdout
