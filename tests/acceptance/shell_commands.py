"""The command lines an operator types that need nothing from a running bot: skills, version,
memory and a campaign in the foreground stopped from another shell. They start in the
background as the session starts (conftest.py), each group in a RAVEN_HOME of its own, so
their seconds of imports overlap with the bots the other modules start and wait for;
test_readme_shell_commands.py checks what they did."""

from __future__ import annotations

import getpass
import os
import sqlite3
from pathlib import Path

from tests.acceptance.harness import Commands, Result, running, wait_until
from tests.helpers import db_rows

USER = getpass.getuser()
SKILLS = [
    "raven-bot skills list",
    "raven-bot skills search --json 'run the tests and fix failures'",
    "raven-bot version",
]
MEMORY = [
    f"raven-bot memory add --user {USER} I deploy the service on Fridays",
    f"raven-bot memory search --user {USER} when do I deploy",
    f"raven-bot memory show --user {USER}",
    "raven-bot memory reindex",
    f"raven-bot memory forget --user {USER}",
]
# The round's command, unique to this test process (so another run on the machine, or one a
# failed session left behind, is never mistaken for it).
LONG_SLEEP = ("sleep", f"617.{os.getpid()}")
LONG_RUN = (
    f"raven-bot campaigns run --goal 'a long run' --run '{' '.join(LONG_SLEEP)}' "
    "--metric loss:min --budget 2h"
)


def stop_a_campaign_from_another_shell(commands: Commands, home: Path) -> tuple[Result, Result]:
    """The operator runs a long campaign in the foreground and stops it from another shell;
    (the stop's result, the foreground run's result)."""
    commands.start("long run", lambda: commands.sh(LONG_RUN, home=home))

    def campaign() -> str | None:
        if not (home / "raven.db").exists() or not running(*LONG_SLEEP):
            return None
        try:
            rows = db_rows(home, "SELECT id FROM campaigns WHERE state = 'running'")
        except sqlite3.OperationalError:
            return None  # the database exists, its tables not yet

        return str(rows[0][0]) if rows else None

    wait_until(lambda: campaign() is not None, "the foreground campaign to run its round")
    stopped = commands.sh(f"raven-bot campaigns stop {campaign()}", home=home)
    return stopped, commands.result("long run")


def start(commands: Commands, root: Path) -> None:
    """Start every group in the background."""
    commands.chain("skills", list(SKILLS), home=root / "skills-home")
    commands.chain("memory", list(MEMORY), home=root / "memory-home")
    operator = root / "operator-home"
    commands.start("operator", lambda: stop_a_campaign_from_another_shell(commands, operator))
