"""Issue 17 finding 8: the permission gate in smart mode is not bypassed by code execution
dressed as a read-only command, by quoting, globs or variables around a secret's name, by a
symlink to a secret, or by `read_file` (which passes the gate and is audited like the rest).

The real workspace tools (shell commands in the real bubblewrap sandbox) run through the real
gate; the last test drives the code agent of the assembled bot."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agents.models.types import ToolCall
from agents.more_tools import EDIT_FILE, SEARCH_FILES, python_tool
from agents.permissions import (
    Answer,
    Decision,
    ListAudit,
    MemoryRemembered,
    PermissionGate,
    PermissionRules,
    ToolCallRequest,
)
from agents.tools import ToolRegistry
from agents.workspace_tools import (
    LIST_FILES,
    READ_FILE,
    WRITE_FILE,
    ShellPolicy,
    ToolContext,
    shell_tool,
)
from bot.app import build_runtime, shutdown
from bot.home import workspace_for
from bot.settings import load_settings
from core.secret_names import SecretNames
from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.chat_adapter import FakeChatAdapter
from tests.helpers import db_rows, eventually, inbound
from tests.sandboxing import real_sandbox

SECRET = "SLACK_BOT_TOKEN=xoxb-FAKE-GATE-SECRET"
MARKER = "conftest-ran.txt"
CONFTEST = f"open({MARKER!r}, 'w').write('ran')\n"


class RecordingAsker:
    """Answers every approval prompt with `answer` and keeps the questions."""

    def __init__(self, answer: Answer = "deny") -> None:
        self.answer: Answer = answer
        self.asked: list[tuple[ToolCallRequest, str]] = []

    async def ask(self, call: ToolCallRequest, question: str) -> Answer:
        self.asked.append((call, question))
        return self.answer


class Bench:
    """A workspace, the real tools and a real gate in one mode, with its audit and asker."""

    def __init__(self, workspace: Path, mode: str) -> None:
        self.workspace = workspace
        self.audit = ListAudit()
        self.asker = RecordingAsker()
        rules = PermissionRules.model_validate({"mode": mode})
        self.gate = PermissionGate(
            rules, asker=self.asker, remembered=MemoryRemembered(), audit=self.audit
        )
        policy = ShellPolicy(sandbox=real_sandbox(), timeout_seconds=30, secret_names=SecretNames())
        self.tools = ToolRegistry(
            [
                READ_FILE,
                WRITE_FILE,
                LIST_FILES,
                EDIT_FILE,
                SEARCH_FILES,
                shell_tool(policy),
                python_tool(policy),
            ]
        )

    async def permit(self, tool: str, subject: str) -> Decision:
        return await self.gate.check(ToolCallRequest(tool, subject, "C1:t1", "U1", "T1"))

    async def call(self, name: str, **args: object) -> str:
        ctx = ToolContext(workspace=self.workspace, permit=self.permit)
        result = await self.tools.dispatch(ToolCall(id="t", name=name, input=dict(args)), ctx)
        return result.content

    def decisions(self, tool: str) -> list[tuple[str, bool, str]]:
        return [(c.subject, d.allowed, d.tier) for c, d in self.audit.entries if c.tool == tool]


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    (root / ".env").write_text(SECRET + "\n")
    (root / "README.md").write_text("hello\n")
    return root.resolve()


@pytest.fixture
def smart(workspace: Path) -> Bench:
    return Bench(workspace, "smart")


@pytest.fixture
def full_access(workspace: Path) -> Bench:
    # Only the builtin deny stands between full-access and a secret.
    return Bench(workspace, "full-access")


# -- code execution asks -------------------------------------------------------------------


@pytest.mark.parametrize("command", ["pytest -q", "python3 -m pytest -q"])
async def test_a_test_runner_after_writing_conftest_asks_first(smart: Bench, command: str) -> None:
    wrote = await smart.call("write_file", path="conftest.py", content=CONFTEST)
    assert wrote.startswith("wrote")
    out = await smart.call("run_shell", command=command)
    assert "requester declined" in out
    ((asked, question),) = smart.asker.asked
    assert asked.subject == command
    assert "It runs code: `" in question
    assert not (smart.workspace / MARKER).exists()
    assert smart.decisions("run_shell") == [(command, False, "human")]


@pytest.mark.parametrize(
    ("command", "program"),
    [
        ("python3 x.py", "python3"),
        ("npm test", "npm"),
        ("make", "make"),
        ("env python3 -c 'print(1)'", "python3"),
        ("/usr/bin/python3 x.py", "python3"),
        ("FOO=1 timeout 5 nice -n 3 pytest", "pytest"),
        ("sudo -u someone bash -c 'ls'", "bash"),
        ("ls | xargs -n 1 node", "node"),
    ],
)
async def test_interpreters_runners_and_build_tools_ask_naming_the_program(
    smart: Bench, command: str, program: str
) -> None:
    out = await smart.call("run_shell", command=command)
    assert "requester declined" in out
    ((_, question),) = smart.asker.asked
    assert f"It runs code: `{program}` is" in question


async def test_run_python_always_asks_in_smart_mode(smart: Bench) -> None:
    out = await smart.call("run_python", code="print('hi')")
    assert "requester declined" in out
    assert "It runs code" in smart.asker.asked[0][1]


async def test_a_glob_cannot_spell_a_find_action_from_a_file_name(smart: Bench) -> None:
    # A file called `-exec` makes `-ex?c` expand to it: find would run the program.
    await smart.call("write_file", path="-exec", content="")
    command = f"find . -ex?c touch {MARKER} {{}} +"
    out = await smart.call("run_shell", command=command)
    assert "requester declined" in out
    assert not (smart.workspace / MARKER).exists()


async def test_a_symlink_cannot_make_a_git_hook_look_like_a_workspace_file(smart: Bench) -> None:
    (smart.workspace / ".git" / "hooks").mkdir(parents=True)
    (smart.workspace / "hooks").symlink_to(smart.workspace / ".git" / "hooks")
    out = await smart.call("write_file", path="hooks/pre-commit", content="#!/bin/sh\n")
    assert "requester declined" in out
    assert smart.decisions("write_file") == [(".git/hooks/pre-commit", False, "human")]
    assert not (smart.workspace / ".git" / "hooks" / "pre-commit").exists()


@pytest.mark.parametrize(
    "command",
    [
        "ls",
        "ls -la",
        "cat README.md",
        "head -n 1 README.md",
        "wc -l *.md",
        "grep -rn hello .",
        "git status",
        "git diff",
        "git log --oneline -3",
        "find . -name '*.md'",
    ],
)
async def test_read_only_commands_still_run_without_asking(smart: Bench, command: str) -> None:
    await smart.call("run_shell", command=command)
    assert smart.asker.asked == []
    assert smart.decisions("run_shell") == [(command, True, "mode")]


# -- secrets: decided on what the shell and the file tools will actually reach ---------------


@pytest.mark.parametrize(
    "command",
    [
        "cat .en?",
        'cat ".e"nv',
        "cat .e\\nv",
        "cat .en[v]",
        "cat {.e,x}nv",
        "cat .*",
        "cat /proc/self/envir*",
        "cat /proc/*/*",
        "cat \"$HOME\"/.e''nv",
        "cat ${PWD}/.en?",
        "cat ~/.e*",
        "grep --file=.en? -r .",
    ],
)
async def test_quoting_globs_and_variables_do_not_hide_a_secret(
    full_access: Bench, command: str
) -> None:
    out = await full_access.call("run_shell", command=command)
    assert "xoxb-FAKE" not in out
    assert "secrets" in out and "builtin deny rule" in out
    assert full_access.decisions("run_shell") == [(command, False, "builtin")]


@pytest.mark.parametrize(
    "command", ["ls *", "cat *.md", "cat .env.example", "ls -a", "echo .envrc", "cat README.md"]
)
async def test_lookalikes_and_plain_globs_still_run(full_access: Bench, command: str) -> None:
    (full_access.workspace / ".env.example").write_text("KEY=\n")
    out = await full_access.call("run_shell", command=command)
    assert out.startswith("exit code 0") and "xoxb-FAKE" not in out
    assert full_access.decisions("run_shell") == [(command, True, "mode")]


async def test_a_symlink_to_a_secret_is_refused_to_the_shell(full_access: Bench) -> None:
    (full_access.workspace / "notes.txt").symlink_to(".env")
    out = await full_access.call("run_shell", command="cat notes.txt")
    assert "xoxb-FAKE" not in out
    assert out.startswith("Refused: `notes.txt`") and "builtin deny rule" in out


@pytest.mark.parametrize("tool", ["read_file", "edit_file"])
async def test_file_tools_refuse_a_secret_and_a_symlink_to_one(smart: Bench, tool: str) -> None:
    (smart.workspace / "notes.txt").symlink_to(".env")
    (smart.workspace / "config").mkdir()
    (smart.workspace / "config" / "app.cfg").symlink_to(smart.workspace / ".env")
    extra: dict[str, object] = {"old": "xoxb", "new": "x"} if tool == "edit_file" else {}
    for path in (".env", "notes.txt", "config/app.cfg", "./config/../.env"):
        out = await smart.call(tool, path=path, **extra)
        assert "xoxb-FAKE" not in out
        assert "secrets" in out and "builtin deny rule" in out
    assert smart.decisions(tool) == [(".env", False, "builtin")] * 4
    assert (smart.workspace / ".env").read_text() == SECRET + "\n"


async def test_read_file_refuses_a_symlink_to_a_secret_outside_and_records_it(
    smart: Bench, tmp_path: Path
) -> None:
    home = tmp_path / "raven-home"
    home.mkdir()
    (home / "raven.db").write_text("records")
    (smart.workspace / "data.txt").symlink_to(home / "raven.db")
    (smart.workspace / "env.txt").symlink_to("/proc/self/environ")
    for path in ("data.txt", "env.txt"):
        out = await smart.call("read_file", path=path)
        assert "records" not in out and "secrets" in out
    subjects = [s for s, allowed, tier in smart.decisions("read_file") if tier == "builtin"]
    assert subjects[0] == str((home / "raven.db").resolve())
    assert subjects[1].startswith("/proc/") and subjects[1].endswith("/environ")


async def test_read_file_passes_the_gate_and_is_audited(smart: Bench) -> None:
    out = await smart.call("read_file", path="./docs/../README.md")
    assert out == "hello\n"
    assert smart.decisions("read_file") == [("README.md", True, "mode")]
    ask_everything = Bench(smart.workspace, "ask-everything")
    out = await ask_everything.call("read_file", path="README.md")
    assert "requester declined" in out
    assert ask_everything.decisions("read_file") == [("README.md", False, "human")]


async def test_search_files_never_shows_a_secret_files_lines(smart: Bench) -> None:
    (smart.workspace / "notes.txt").symlink_to(".env")
    out = await smart.call("search_files", pattern="SLACK_BOT_TOKEN")
    assert "xoxb-FAKE" not in out
    assert smart.decisions("search_files") == [(".", True, "mode")]


# -- end to end: the code agent of the assembled bot ---------------------------------------

CODE_STEPS: list[tuple[str, dict[str, Any]]] = [
    ("write_file", {"path": "conftest.py", "content": CONFTEST}),
    ("read_file", {"path": "conftest.py"}),
    ("run_shell", {"command": "pytest -q"}),
]


class Models:
    """Scripted Host, code agent and judge, told apart by their system prompts."""

    def __call__(self, body: dict[str, Any]) -> dict[str, Any]:
        system = json.dumps(body.get("system"))
        messages = body["messages"]
        if "You judge whether" in system:
            verdict = {"accomplished": False, "category": "other", "missing": "", "evidence": "-"}
            return _tool("record_verdict", verdict)
        if "You are Raven-Code" in system:
            step = sum(1 for m in messages if m["role"] == "assistant")
            if step < len(CODE_STEPS):
                return _tool(*CODE_STEPS[step])
            return {"content": "The tests were not run: approval was declined."}
        if "tool_result" in json.dumps(messages[-1].get("content")):
            return {"content": "The code agent could not run the tests."}
        return _tool("delegate", {"agent": "code", "task": "Add a conftest.py and run pytest"})


def _tool(name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {
        "content": [{"type": "tool_use", "id": f"t-{name}", "name": name, "input": args}],
        "stop_reason": "tool_use",
    }


async def test_the_code_agent_cannot_run_its_own_conftest_without_approval(
    monkeypatch: pytest.MonkeyPatch, isolated_env: Path
) -> None:
    home = isolated_env
    # The bot's default settings: Skill Forge on, the default embedder.
    async with FakeAnthropic() as fake:
        fake.responder = Models()
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-0123456789")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.base_url)
        runtime = await build_runtime(load_settings(), [FakeChatAdapter])
        try:
            turn = await runtime.service.accept(inbound("add a conftest and run pytest", "e1"))
            assert turn is not None
            conv = inbound("x", "x").conversation

            async def asked() -> bool:
                return bool(await runtime.broker.pending(conv))

            await eventually(asked)
            (prompt,) = await runtime.broker.pending(conv)
            assert "`pytest -q`" in prompt.question and "test runner" in prompt.question
            outcome = await runtime.broker.answer(prompt.id, prompt.nonce, "U1", "Deny")
            assert outcome.status == "accepted"
            await turn
        finally:
            await shutdown(runtime)
    workspace = workspace_for(home)(conv)
    assert (workspace / "conftest.py").exists()
    assert not (workspace / MARKER).exists()
    audit = "SELECT tool, subject, allowed, tier FROM permission_audit ORDER BY id"
    decisions = db_rows(home, audit)
    assert decisions == [
        ("write_file", "conftest.py", 1, "mode"),
        ("read_file", "conftest.py", 1, "mode"),
        ("run_shell", "pytest -q", 0, "human"),
    ]
