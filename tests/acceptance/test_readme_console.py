"""The README walked in order on one machine, as a new user would: the piped `hello`, the
console (every in-thread example typed into a real terminal, a chat campaign training the toy
project of the README's machines.toml, then a `kill -9` and a restart), then the command
lines that read what the console left behind (runs, campaigns). One RAVEN_HOME: the flow is
sequential. Everything shown is finally checked for noise."""

from __future__ import annotations

import json
import platform
import re
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.acceptance.harness import (
    WITHIN,
    Commands,
    Console,
    Ran,
    Result,
    noise,
    product_env,
    project_dir,
    running,
    screen_text,
    wait_until,
)
from tests.helpers import db_rows

# Real processes (the raven-bot CLI, a pty, Slurm, ssh, restarts): `-m "not slow"` skips them.
pytestmark = pytest.mark.slow

# The local machine of the README's machines.toml: chat campaigns run in its workdir.
LOCAL_MACHINE = """\
[machines.local]
kind = "local"
workdir = "/srv/projects/toy"   # chat campaigns run here (writable); else the workspace
mounts = ["/data/imagenet"]     # also readable (read-only) by every round on this machine"""

README_EXAMPLES = [
    "printf 'hello\\n' | .venv/bin/raven-bot chat",
    "raven-bot chat | head",
    ".venv/bin/raven-bot chat",
    "raven-bot chat",
    's1: shell: echo "hello from the sandbox" && uname -a',
    's2: shell: echo "hello from the sandbox" && uname -a\nconfirm',
    "[after id]",
    "{{node.output}}",
    "confirm",
    "new",
    "help",
    "status",
    "stop",
    "remember …",
    "what do you remember about me",
    "forget …",
    "campaign: tune the toy model | machine: local | run: python train.py | metric: loss min "
    "| budget: 2h",
    LOCAL_MACHINE,
    "raven-bot runs list",
    "raven-bot runs show RUN",
    "runs show",
    "raven-bot campaigns list\\|show ID [--json]\\|stop ID",
    "campaigns show",
    "campaigns run --goal … --run CMD --metric loss:min --budget 2h",
    "campaigns run",
    "raven-bot campaigns run",
]

SHELL_EXAMPLE = 's1: shell: echo "hello from the sandbox" && uname -a'
SHELL_COMMAND = 'echo "hello from the sandbox" && uname -a'
CAMPAIGN_LINE = (
    "campaign: tune the toy model | machine: local | run: python train.py | metric: loss min "
    "| budget: 2h"
)
# The project's training script: a few epochs' worth of `loss <x>` lines, fast.
TRAIN_PY = """\
for epoch, loss in enumerate([0.9, 0.62, 0.41, 0.3]):
    print(f"epoch {epoch}")
    print(f"loss {loss}", flush=True)
"""
BEST_LOSS = "0.3"
_IDS = re.compile(r"\b(?:run_[0-9a-f]{6,}|cmp_[0-9a-f]{6,}|prompt [0-9a-f]{8,})\b")


@dataclass
class World:
    """The user's machine: RAVEN_HOME, the directory the bot runs in (its shell), the toy
    project the campaigns train, the consoles, what they learned (ids) along the way."""

    home: Path
    toy: Path
    shell: Commands
    consoles: list[Console] = field(default_factory=list)
    facts: dict[str, str] = field(default_factory=dict)

    def start_console(self) -> Console:
        """`.venv/bin/raven-bot chat` in a terminal, from the project directory."""
        console = Console(self.shell.env, self.shell.cwd)
        self.consoles.append(console)
        return console

    @property
    def console(self) -> Console:
        """The console running now (started at first use)."""
        return self.consoles[-1] if self.consoles else self.start_console()


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    root = tmp_path_factory.mktemp("readme-console")
    project = project_dir(root / "project")
    # The README's `/srv/projects/toy` and `/data/imagenet` cannot exist here: directories of
    # this test stand in for them (the bot's working directory may not be a workdir).
    toy, data = root / "toy", root / "imagenet"
    toy.mkdir()
    data.mkdir()
    (toy / "train.py").write_text(TRAIN_PY)
    home = root / "raven-home"
    home.mkdir()
    machine = LOCAL_MACHINE.replace("/srv/projects/toy", str(toy))
    (home / "machines.toml").write_text(machine.replace("/data/imagenet", str(data)) + "\n")
    with ThreadPoolExecutor(max_workers=2) as pool:
        world = World(home=home, toy=toy, shell=Commands(project, product_env(home), pool))
        try:
            yield world
        finally:
            for console in world.consoles:
                console.close()


def _unfinished(home: Path) -> bool:
    """Whether a prompt waits, or a run or campaign has not ended, in any conversation."""
    return bool(
        db_rows(home, "SELECT 1 FROM prompts WHERE state = 'pending'")
        or db_rows(home, "SELECT 1 FROM graph_runs WHERE finished_at IS NULL")
        or db_rows(home, "SELECT 1 FROM campaigns WHERE closed_at IS NULL")
    )


@pytest.fixture
def console(world: World) -> Iterator[Console]:
    """The running console; unmatched output of an earlier test is not looked at, and what
    a (failed) test left waiting is stopped, so the next example starts clean."""
    session = world.console
    session.skip()
    yield session
    if session.proc.poll() is None and _unfinished(world.home):
        session.type("stop")
        session.expect(r"Stopped:.*\n")
        wait_until(lambda: not _unfinished(world.home), "`stop` to end what the test left")


def flat(text: str) -> str:
    """`text` with every run of whitespace one space (a terminal wraps and indents)."""
    return " ".join(text.split())


def _shown_command(prompt: str, until: str) -> list[str]:
    """The lines an approval prompt shows between its first line and the line containing
    `until`: the command block (fence lines and padding dropped)."""
    lines = prompt.splitlines()
    first = max(
        n for n, line in enumerate(lines) if line.startswith("raven> ") and "this command" in line
    )
    last = next(n for n, line in enumerate(lines) if n > first and until in line)
    return [line.strip() for line in lines[first + 1 : last] if line.strip()]


def _approve_command(console: Console, command: str) -> str:
    """Wait for the approval of a shell command, check it shows exactly `command` (and
    nothing else in its block), approve it with `1`; the prompt."""
    prompt = console.expect(r"raven> [^(\n]*wants to run this command[\s\S]*?Reply with a number")
    assert _shown_command(prompt, "Runs in") == [command], prompt
    assert "1) Approve" in prompt, prompt
    console.type("1")
    return prompt


def _plan(console: Console, *lines: str) -> None:
    """Type a plan line by line, each after the console's `plan>` prompt; the last line
    (`confirm` or a blank one) submits it."""
    for n, line in enumerate(lines):
        console.type(line)
        if n < len(lines) - 1:
            console.expect_text("plan> ")


def _run_id(report: str) -> str:
    found = re.search(r"Run (run_\w+)", report)
    assert found, f"the report names no run:\n{report}"
    return found[1]


# -- Two commands: the piped `hello` ---------------------------------------------------------


def test_piped_hello_answers_offline_and_exits(world: World) -> None:
    result = world.shell.sh("printf 'hello\\n' | .venv/bin/raven-bot chat")
    assert result.code == 0, result.both
    # "it says so honestly and still does everything that needs no model"
    assert "offline mode" in result.out
    assert "ANTHROPIC_API_KEY" in result.out


def test_chat_piped_into_head_stops_quietly(world: World) -> None:
    # `help` alone is longer than `head`'s ten lines: the replies after it have no reader.
    result = world.shell.sh(".venv/bin/raven-bot chat | head", stdin="help\nhello\nstatus\n")
    assert result.code == 0, result.both
    assert "raven>" in result.out
    assert "Traceback" not in result.err and "BrokenPipe" not in result.err, result.err


# -- The console ----------------------------------------------------------------------------


def test_console_names_its_conversation_and_replays_nothing(console: Console) -> None:
    shown = console.expect_text("you> ")
    # "On start it names the active conversation, e.g. `conversation console-2 (type `new`
    # for a fresh one)`"
    assert re.search(r"conversation console-[\w-]+ \(type new for a fresh one\)", shown), shown
    # Replies the piped sessions above could not write (`| head`) are not replayed.
    assert "offline mode" not in shown and "Status" not in shown, shown


def test_shell_example_with_confirm_asks_for_the_plan_then_the_command(
    console: Console,
) -> None:
    _plan(console, SHELL_EXAMPLE, "confirm")
    plan = console.expect(r"Run this graph\?[\s\S]*?Reply with a number")
    assert SHELL_COMMAND in plan and "1) Approve" in plan, plan
    console.type("1")
    _approve_command(console, SHELL_COMMAND)
    report = console.expect(r"Output of s1:\s*hello from the sandbox\s*\n.*\n")
    # "the report shows the command's output": both commands', uname -a's too
    assert platform.release() in report, report
    assert re.search(r"s1 \(?shell\)? completed", flat(report)), report


def test_new_starts_console_2(console: Console) -> None:
    console.type("new")
    started = console.expect(r"conversation console-\S+ started.*\n")
    assert "console-2" in started, started


def test_intro_example_a_blank_line_submits_and_1_approves(console: Console) -> None:
    # "type `s1: shell: …` and an empty line (which submits the plan), answer `1` (Approve)
    # to the approval prompt that shows the exact command, and the run report prints the
    # command's output." (a fresh conversation: node ids are unique per conversation)
    _plan(console, SHELL_EXAMPLE, "")
    _approve_command(console, SHELL_COMMAND)
    report = console.expect(r"Output of s1:\s*hello from the sandbox\s*\n.*\n")
    assert platform.release() in report, report


def test_a_second_shell_plan_runs_exactly_the_typed_command(world: World, console: Console) -> None:
    # After a first run, memory and skills have something to add to the next node's task:
    # none of it may reach a shell command.
    command = 'echo "second words, other words" && printf "%s\\n" tail'
    _plan(console, f"s2: shell: {command}", "")
    _approve_command(console, command)
    report = console.expect(r"Output of s2:\s*second words, other words\s*\n\s*tail\s*\n")
    output = world.home / "runs" / _run_id(report) / "outputs" / "s2.md"
    assert output.read_text().strip() == "second words, other words\ntail"


def test_three_node_plan_with_dependencies_and_confirm(world: World, console: Console) -> None:
    _plan(
        console,
        "a1: shell: echo alpha",
        'b1: shell: echo "got {{a1.output}}" [after a1]',
        "c1: shell: echo done [after b1]",
        "confirm",
    )
    plan = console.expect(r"Run this graph\?[\s\S]*?Reply with a number")
    assert all(node in plan for node in ("a1", "b1", "c1")), plan
    console.type("1")
    # "You approve the plan, then the command": each command as it will run.
    _approve_command(console, "echo alpha")
    _approve_command(console, 'echo "got alpha"')
    _approve_command(console, "echo done")
    report = console.expect(r"Run run_\w+ completed[\s\S]*?Output of c1:\s*done\s*\n")
    # "Reports show the outputs of the last nodes only (those nothing depends on); every
    # node's output is in `outputs/<node>.md` under the run's records."
    assert "Output of a1" not in report and "Output of b1" not in report, report
    run = _run_id(report)
    outputs = world.home / "runs" / run / "outputs"
    assert {n: (outputs / f"{n}.md").read_text().strip() for n in ("a1", "b1", "c1")} == {
        "a1": "alpha",
        "b1": "got alpha",
        "c1": "done",
    }


def test_help_lists_everything_a_message_can_do(console: Console) -> None:
    console.type("help")
    shown = flat(console.expect(r"raven> [^\n]*raven-bot[\s\S]*?confirm\s*\n[\s\S]*?\bnew\b.*\n"))
    # "`help` lists everything a message can do (control words, typed answers, plans,
    # campaigns, memory commands; `new` in the console)"
    for word in (
        "stop",
        "status",
        "help",
        "number",
        "id: agent: task",
        "[after",
        "{{id.output}}",
        "confirm",
        "campaign:",
        "remember …",
        "what do you remember about me",
        "forget …",
        "forget everything",
        "new",
    ):
        assert word in shown, (word, shown)


def test_remember_recall_and_forget(console: Console) -> None:
    console.type("remember I prefer tabs over spaces in Python code")
    console.expect(r"raven> .*tabs over spaces.*\n")
    console.type("what do you remember about me")
    console.expect(r"raven> [^\n]*remember[\s\S]*?tabs over spaces")
    console.type("forget tabs")
    forgot = console.expect(r"raven> .*tabs.*\n")
    assert "orgot" in forgot, forgot
    console.type("what do you remember about me")
    recalled = console.expect(r"raven> [^\n]*remember[^\n]*\n(?:[ \t]*[-•] .*\n|[ \t]{2,}\S.*\n)*")
    assert "tabs" not in recalled, recalled


def test_stop_during_a_running_plan_names_what_it_stopped(console: Console) -> None:
    _plan(console, "w1: shell: sleep 613", "w2: shell: echo after [after w1]", "confirm")
    console.expect(r"Run this graph\?[\s\S]*?Reply with a number")
    console.type("1")
    _approve_command(console, "sleep 613")
    wait_until(lambda: running("sleep", "613"), "the approved command to run")
    console.type("stop")
    stopped = flat(console.expect(r"Stopped:.*\n(?:[ \t]{2,}\S.*\n)*"))
    # "the reply names what it stopped (`run run_… (s1, s2 cancelled)`)"
    assert "nothing" not in stopped, stopped
    named = re.search(r"run (run_\w+) \(w1, w2 cancelled\)", stopped)
    assert named, stopped
    wait_until(lambda: not running("sleep", "613"), "the stopped command to end")
    console.expect(rf"Run {named[1]} cancelled")
    console.type("status")
    status = console.expect(r"Status:.*\n(?:[ \t]+\S.*\n)*")
    assert not re.search(rf"running[^\n]*{named[1]}|{named[1]}[^\n]*: running", status), status


def test_campaign_one_liner_is_approved_then_runs_and_reports(
    world: World, console: Console
) -> None:
    console.type(CAMPAIGN_LINE)
    prompt = console.expect(r"raven> [^\n]*ampaign[\s\S]*?Reply with a number")
    # "shows an approval prompt with the exact command, the machine, where the round runs,
    # the budget and what the command can see"
    assert "python train.py" in [line.strip() for line in prompt.splitlines()], prompt
    assert "local" in prompt and "2h" in prompt, prompt
    assert str(world.toy) in flat(prompt), "the round runs in the machine's workdir"
    found = re.search(r"cmp_[0-9a-f]+", prompt)
    assert found, prompt
    world.facts["chat_campaign"] = found[0]
    console.type("1")  # "a typed `1` works too"
    report = flat(console.expect(rf"{found[0]} report:[\s\S]*?Budget used.*\n", within=WITHIN * 2))
    assert "No loss was measured" not in report, report
    assert "died" not in report and "failed" not in report, report
    assert "Baseline" in report and BEST_LOSS in report, report


def test_restart_continues_the_conversation_and_posts_nothing_twice(
    world: World, console: Console
) -> None:
    _plan(console, "k1: shell: echo survived", "")
    _approve_command(console, "echo survived")
    console.expect(r"Output of k1:\s*survived\s*\n")
    # Killed once what was shown is recorded as sent: a reply shown but not yet marked sent
    # is redelivered after a crash by design ("recorded but not confirmed sent").
    wait_until(
        lambda: (
            not db_rows(
                world.home, "SELECT 1 FROM messages WHERE direction = 'out' AND delivery != 'sent'"
            )
            and not db_rows(world.home, "SELECT 1 FROM graph_runs WHERE reported = 0")
        ),
        "every reply to be recorded as sent",
    )
    before = world.console
    before.kill()
    first = before.transcript
    after = world.start_console()
    banner = after.expect_text("you> ")
    # "a restart continues that conversation (its history, node ids and pending prompts)"
    assert screen_text("conversation console-2 (type `new` for a fresh one)") in banner, banner
    # An earlier node's output, by id, from before the crash.
    _plan(after, 'k2: shell: echo "k1 {{k1.output}}" [after k1]', "")
    _approve_command(after, 'echo "k1 survived"')
    after.expect(r"Output of k2:\s*k1 survived\s*\n")
    # Nothing shown before the crash is shown again (each message names its run or prompt).
    replies = {line.strip() for line in first.splitlines() if _IDS.search(line)}
    repeated = [line for line in after.transcript.splitlines() if line.strip() in replies]
    assert not repeated, f"shown again after the restart: {repeated}"


def test_console_exits_at_end_of_input(world: World) -> None:
    assert world.console.end() == 0


# -- The command line, against what the console left behind ---------------------------------


def _by(results: list[Ran], prefix: str) -> Result:
    return next(result for command, result in results if command.startswith(prefix))


@pytest.fixture(scope="module")
def command_lines(world: World) -> Callable[[str], list[Ran]]:
    """Start the command-line chains (no bot runs any more); get one's results by name."""

    def show_the_three_node_run(done: list[Ran]) -> str:
        listed = re.search(r"^(run_\w+) .*a1 \(shell\); b1", done[-1][1].out, re.MULTILINE)
        return f"raven-bot runs show {listed[1] if listed else 'not-listed'}"

    world.shell.chain("runs", ["raven-bot runs list", show_the_three_node_run])
    campaign = world.facts.get("chat_campaign", "not-started")
    world.shell.chain(
        "campaigns",
        [
            "raven-bot campaigns list",
            f"raven-bot campaigns show {campaign} --json",
            # The operator, in their project: "with `raven-bot campaigns run`, the current
            # directory"
            f"cd {world.toy} && raven-bot campaigns run --goal 'tune the toy model' "
            "--run 'python train.py' --metric loss:min --budget 2h",
        ],
    )
    return world.shell.result


def test_runs_list_and_show(world: World, command_lines: Callable[[str], list[Ran]]) -> None:
    results = command_lines("runs")
    listing = _by(results, "raven-bot runs list")
    assert listing.code == 0, listing.both
    # "recent graph runs, newest first"
    recorded = db_rows(world.home, "SELECT id FROM graph_runs ORDER BY created_at DESC")
    listed = re.findall(r"^run_\w+", listing.out, re.MULTILINE)
    assert listed == [r[0] for r in recorded], listing.out
    show = _by(results, "raven-bot runs show")
    assert show.code == 0, (show.both, listing.out)
    # "one run's report, nodes and record paths"
    run = results[-1][0].split()[-1]
    for node in ("a1", "b1", "c1"):
        assert f"`{node}`" in show.out, show.out
    assert str(world.home / "runs" / run / "outputs" / "c1.md") in show.out, show.out


def test_campaigns_list_and_show(world: World, command_lines: Callable[[str], list[Ran]]) -> None:
    results = command_lines("campaigns")
    campaign = world.facts.get("chat_campaign")
    assert campaign is not None, "the chat campaign was never started"
    for command, result in results[:2]:
        assert result.code == 0, (command, result.both)
    listing = _by(results, "raven-bot campaigns list").out
    assert campaign in listing, listing
    record = json.loads(_by(results, f"raven-bot campaigns show {campaign} --json").out)
    # "Waiting costs no model call: `campaigns show` counts them."
    assert record["id"] == campaign and record["model_calls"] == 0, record
    assert record["state"] == "closed" and BEST_LOSS in str(record["report"]), record


def test_campaigns_run_in_the_foreground_in_the_project(
    world: World, command_lines: Callable[[str], list[Ran]]
) -> None:
    command, foreground = command_lines("campaigns")[-1]
    assert foreground.code == 0, (command, foreground.both)
    # "runs one in the foreground", decided offline by the policy, closed by a report
    assert "report" in foreground.out and BEST_LOSS in foreground.out, foreground.out


# -- What people read is clean --------------------------------------------------------------


def _everything_shown(world: World) -> list[tuple[str, str]]:
    sessions = [(f"console session {n}", c.transcript) for n, c in enumerate(world.consoles, 1)]
    return [*[(what, text) for what, text in world.shell.shown if text], *sessions]


@pytest.mark.parametrize("kind", ["a fence marker", "a log line", "a progress bar", "a traceback"])
def test_what_people_read_has_no(world: World, kind: str) -> None:
    world.shell.settle()  # everything run in the background has shown what it shows
    found = [
        f"[{what}] {line}"
        for what, text in _everything_shown(world)
        for line in noise(text)
        if line.startswith(kind)
    ]
    assert not found, "\n".join(found[:20])
