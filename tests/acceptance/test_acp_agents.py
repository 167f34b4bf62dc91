"""The README's coding agents over ACP, as a person uses them: `agents.toml` as the README
shows it, `doctor` listing each ACP agent found or missing (with the version the agent reports
at `initialize`, or how to install it), then the README's two-node plan sharing one session,
and a permission request shown in the thread and approved: in the console (a real terminal)
and on Slack (the loopback fake, a real button click), each against `raven-bot` itself.

Substituted, because no coding agent is installed here: the `claude-acp` preset's command is
pointed (in agents.toml, as an operator would) at a loopback agent built on the ACP SDK's own
agent side (tests/fakes/acp_agent.py, passed to the interpreter with `-c`, so the sandbox
needs to show it nothing but the interpreter). The README's `opencode` and `my-agent` are not
installed, so `doctor` says they are missing and how to install the preset."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.acceptance.harness import (
    WITHIN,
    Commands,
    Console,
    noise,
    product_env,
    project_dir,
    serving,
    slack_env,
)
from tests.acceptance.test_readme_deployed import CHANNEL, README_SCOPES, SLACK_ALICE, _buttons
from tests.fakes.slack import FakeSlack, payloads
from tests.helpers import eventually

pytestmark = pytest.mark.slow

FAKE_AGENT = Path(__file__).resolve().parents[1] / "fakes" / "acp_agent.py"
README_AGENTS_TOML = """\
[agents.opencode]                 # a preset: tune it
idle_seconds = 900                # keep its process this long after its last turn

[agents.my-agent]
backend = "acp"
description = "Our in-house coding agent over ACP."
command = ["my-agent", "acp"]     # what starts it; `args = [...]` adds arguments
env_allow = ["MY_AGENT_CONFIG"]   # the only extra variables it sees
mode = "code"                     # set on each new session (optional)
model = "large"                   # chosen through the session's model option (optional)
timeout_seconds = 1800            # one turn at most
init_timeout_seconds = 30         # `initialize` and opening a session at most
network = true                    # false: no network at all, its own model API included"""
README_PLAN = (
    "a1: claude-acp: add a --json flag to cli.py [instance work]\n"
    "a2: claude-acp: now write tests for it [after a1] [instance work]"
)
README_EXAMPLES = [README_AGENTS_TOML, README_PLAN]
# A command the agent asks to run: redirected, so smart mode asks before it runs.
WRITE = "echo hi from the agent > hello.txt"


def _agents_toml() -> str:
    """The README's block, and the preset `claude-acp` pointed at the loopback agent."""
    source = FAKE_AGENT.read_text(encoding="utf-8")
    assert "'''" not in source  # it goes into a TOML literal string
    return (
        f"{README_AGENTS_TOML}\n\n[agents.claude-acp]\n"
        f"command = ['{sys.executable}', '-c', '''{source}''']\n"
    )


class SlackThread:
    """Alice's thread with the bot on the Slack fake."""

    def __init__(self, slack: FakeSlack) -> None:
        self.slack = slack
        self.thread = slack.next_ts()

    def posts(self) -> list[dict[str, Any]]:
        return [
            {**c.args, "ts": c.response.get("ts")}
            for c in self.slack.calls_to("chat.postMessage")
            if c.ok and c.args.get("thread_ts") == self.thread
        ]

    async def ask_and_answer(self, plan: str, label: str) -> None:
        """Mention the bot with `plan`; wait for the permission prompt (showing the command
        as Slack shows it) and click `label`."""
        text = f"<@UBOT> {plan}"
        event = payloads.app_mention(CHANNEL, SLACK_ALICE, text, self.thread)
        await self.slack.send_envelope("events_api", payloads.event_callback(event))

        def asking() -> list[dict[str, Any]]:
            return [p for p in self.posts() if any(b["text"]["text"] == label for b in _buttons(p))]

        await eventually(lambda: bool(asking()), within=WITHIN)
        (prompt,) = asking()
        command = plan.split(" run ", 1)[1]
        assert command.replace(">", "&gt;") in str(prompt.get("blocks")), prompt
        button = next(b for b in _buttons(prompt) if b["text"]["text"] == label)
        click = payloads.block_actions(
            button["action_id"],
            button["value"],
            SLACK_ALICE,
            CHANNEL,
            str(prompt["ts"]),
            thread_ts=self.thread,
            response_url=self.slack.response_url("click"),
        )
        await self.slack.send_envelope("interactive", click)

    async def sees(self, text: str) -> None:
        """Wait for a post saying `text` (as mrkdwn escapes it)."""
        said = text.replace(">", "&gt;")
        await eventually(lambda: any(said in str(p.get("text")) for p in self.posts()), WITHIN)


@pytest.fixture
def shell(tmp_path: Path) -> Iterator[Commands]:
    home = tmp_path / "raven-home"
    home.mkdir()
    (home / "agents.toml").write_text(_agents_toml())
    with ThreadPoolExecutor(max_workers=1) as pool:
        yield Commands(project_dir(tmp_path / "project"), product_env(home), pool)


def _plan(console: Console, text: str) -> None:
    """Type a plan line by line; a blank line submits it."""
    for line in text.splitlines():
        console.type(line)
        console.expect_text("plan> ")
    console.type("")


def test_doctor_lists_each_acp_agent_found_or_missing(shell: Commands) -> None:
    result = shell.sh(".venv/bin/raven-bot doctor")
    line = next(x for x in result.out.splitlines() if "acp agents" in x)
    assert "claude-acp: found, fake-acp 1.2.3" in line, line
    assert "my-agent: missing (`my-agent` was not found on PATH)" in line, line
    assert "opencode: missing" in line and "npm install -g opencode-ai" in line, line


def test_an_acp_plan_and_its_permission_request_in_the_console(shell: Commands) -> None:
    home = Path(shell.env["RAVEN_HOME"])
    console = Console(shell.env, shell.cwd)
    try:
        console.expect_text("you> ")
        _plan(console, README_PLAN)
        report = console.expect(r"Output of a2:\s*[^\n]*now write tests for it")
        (run,) = re.findall(r"Run (run_\w+) completed", report)
        first = (home / "runs" / run / "outputs" / "a1.md").read_text()
        assert "echo: add a --json flag to cli.py" in first, first
        # The second node continued the first one's session (one handle, one ACP session).
        journal = (home / "runs" / run / "journal.jsonl").read_text()
        sessions = set(re.findall(r'"session": "(sess-\w+)"', journal))
        assert len(sessions) == 1, sessions
        _plan(console, f"a3: claude-acp: run {WRITE} [instance work]")
        prompt = console.expect(r"Allow run_shell on[\s\S]*?Reply with a number")
        assert WRITE in prompt and "1) Allow once" in prompt and "3) Deny" in prompt, prompt
        assert not list(home.glob("workspaces/*/hello.txt"))  # nothing ran before the yes
        console.type("1")
        console.expect(rf"Output of a3:\s*[^\n]*ran {re.escape(WRITE)}")
        (written,) = home.glob("workspaces/*/hello.txt")
        assert written.read_text() == "hi from the agent\n"
        assert not noise(console.transcript), noise(console.transcript)
    finally:
        console.close()


async def test_an_acp_permission_request_as_buttons_on_slack(tmp_path: Path) -> None:
    home = tmp_path / "raven-home"
    home.mkdir()
    (home / "agents.toml").write_text(_agents_toml())
    project = project_dir(tmp_path / "project")
    async with FakeSlack(scopes=README_SCOPES) as slack:
        slack.add_user(SLACK_ALICE, "alice", real_name="Alice Liddell", display_name="alice")
        env = slack_env(
            home,
            slack.api_url,
        )
        async with serving(env, project, tmp_path / "raven-bot.log"):
            await slack.wait_connected(within=WITHIN)
            alice = SlackThread(slack)
            await alice.ask_and_answer(f"a1: claude-acp: run {WRITE}", "Allow once")
            await alice.sees(f"ran {WRITE}")
            (written,) = home.glob("workspaces/*/hello.txt")
            assert written.read_text() == "hi from the agent\n"

            # Denied by a click: the agent hears no, and nothing runs.
            refused = "echo no > refused.txt"
            again = SlackThread(slack)
            await again.ask_and_answer(f"a2: claude-acp: run {refused}", "Deny")
            await again.sees(f"not allowed to run {refused}")
            assert not list(home.glob("workspaces/*/refused.txt"))
