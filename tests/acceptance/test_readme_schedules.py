"""The README's scheduled tasks, as a person uses them: the `schedule:` line typed into the
console (a real terminal), approved with `1`, run now from the thread without another
approval, listed by `status`; then the operator's `raven-bot schedules …` lines against the
running bot, which applies them. What people read stays clean."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.acceptance.harness import Commands, Console, noise, product_env, project_dir
from tests.helpers import db_rows

pytestmark = pytest.mark.slow

EXAMPLE = "schedule: every 2h | s1: shell: df -h ."
WATCH = "watch: every 30m | check: curl -fsS http://localhost:8080/health"
README_EXAMPLES = [
    EXAMPLE,
    WATCH,
    "raven-bot schedules list\\|show ID [--json]\\|pause ID\\|resume ID\\|delete ID\\|run ID",
    "raven-bot schedules list --json",
]


@pytest.fixture
def shell(tmp_path: Path) -> Iterator[Commands]:
    home = tmp_path / "raven-home"
    home.mkdir()
    with ThreadPoolExecutor(max_workers=1) as pool:
        yield Commands(project_dir(tmp_path / "project"), product_env(home), pool)


def _state(home: Path, task: str) -> str:
    return str(db_rows(home, "SELECT state FROM scheduled_tasks WHERE id = ?", task)[0][0])


def test_a_scheduled_task_from_the_console_and_the_command_line(shell: Commands) -> None:
    home = Path(shell.env["RAVEN_HOME"])
    console = Console(shell.env, shell.cwd)
    try:
        console.expect_text("you> ")
        console.type(EXAMPLE)
        # "the prompt shows the schedule, the next three fire times in the task's zone (named)
        # and exactly what each firing runs"
        prompt = console.expect(r"Schedule task t_\w+\?[\s\S]*?Reply with a number")
        (nexts,) = [line for line in prompt.splitlines() if "Next:" in line]
        assert nexts.count(" UTC") == 3, prompt
        assert "s1: shell: df -h ." in prompt, prompt
        console.type("1")
        scheduled = console.expect(r"Task (t_\w+) is scheduled: every 2h\. Next: .* UTC\.")
        task = re.findall(r"Task (t_\w+) is scheduled", scheduled)[-1]

        # Run now: the command approved with the task runs without asking again.
        console.type(f"schedule: run {task}")
        ran = console.expect(r"Output of s1_\d+:\s*Filesystem")
        assert "wants to run this command" not in ran, ran
        console.type("status")
        # A table (task, owner, schedule, next, what): its cells may wrap in their columns.
        status = console.expect(rf"Scheduled tasks:[\s\S]*?Next[\s\S]*?{task}[\s\S]*?UTC")
        assert "every 2h" in status, status

        # The operator's command lines, applied by the running bot.
        listed = shell.sh("raven-bot schedules list --json")
        assert listed.code == 0, listed.both
        (record,) = json.loads(listed.out)
        assert record["id"] == task and record["state"] == "active", listed.out
        shown = shell.sh(f"raven-bot schedules show {task} --json")
        assert shown.code == 0 and json.loads(shown.out)["firings"], shown.both
        for action, says, state in (
            ("pause", "paused", "paused"),
            ("resume", "resumed, next", "active"),
            ("run", "will run once now", "active"),
        ):
            done = shell.sh(f"raven-bot schedules {action} {task}")
            assert done.code == 0 and says in done.out, done.both
            assert _state(home, task) == state
        # The bot picks the `run` up and fires once more, unattended.
        again = console.expect(r"Output of s1_\d+:\s*Filesystem")
        assert "wants to run this command" not in again, again
        deleted = shell.sh(f"raven-bot schedules delete {task}")
        assert deleted.code == 0 and "cancelled" in deleted.out, deleted.both
        console.type(f"schedule: cancel {task}")
        console.expect(rf"Task {task} is already cancelled\.")

        # A standing check: nothing listens on :8080 here, so it trips, and says so once.
        console.type(WATCH)
        prompt = console.expect(r"Schedule task t_\w+\?[\s\S]*?Reply with a number")
        assert "without a model" in prompt and "curl -fsS" in prompt, prompt
        console.type("1")
        scheduled = console.expect(r"Task (t_\w+) is scheduled: every 30m\. Next: .* UTC\.")
        check = re.findall(r"Task (t_\w+) is scheduled", scheduled)[-1]
        console.type(f"schedule: run {check}")
        console.expect(rf"Check {check} tripped: its command exited with \d+")
        console.type(f"schedule: run {check}")
        # "`schedule: run` also obeys … for a check, the minimum interval, and says which".
        ran = console.expect(rf"Check {check} ran now[\s\S]*?RAVEN_SCHEDULE_MIN_INTERVAL")
        assert "did not run now" in ran and "tripped" not in ran, ran
        assert console.end() == 0
    finally:
        console.close()
    shown_to_people = console.transcript + "".join(out for _, out in shell.shown)
    assert not noise(shown_to_people), noise(shown_to_people)
