"""The code specialist end to end through the assembled bot and a loopback Anthropic API: the
Host delegates, the code agent writes a module and its test, runs the test with the
sandboxed shell tool through the permission gate, and the judge finds it accomplished. Smart
mode asks a person before an unlisted command; "allow in this conversation" is remembered."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bot.app import build_runtime, shutdown
from bot.settings import load_settings
from tests.fakes.chat_adapter import FakeChatAdapter
from tests.helpers import db_rows, eventually, inbound
from tests.runtime_kit import online

TEST_COMMAND = "python3 test_mathx.py"
CODE_STEPS: list[tuple[str, dict[str, Any]]] = [
    ("write_file", {"path": "mathx.py", "content": "def add(a, b):\n    return a + b\n"}),
    (
        "write_file",
        {
            "path": "test_mathx.py",
            "content": "from mathx import add\nassert add(2, 3) == 5\nprint('ok: 1 test passed')\n",
        },
    ),
    ("run_shell", {"command": TEST_COMMAND}),
]


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    return content if isinstance(content, str) else json.dumps(content)


class Models:
    """Scripted Host, code agent and judge, told apart by their system prompts."""

    def __init__(self) -> None:
        self.judged: list[str] = []

    def __call__(self, body: dict[str, Any]) -> dict[str, Any]:
        system = json.dumps(body.get("system"))
        messages = body["messages"]
        if "You judge whether" in system:
            evidence = _text(messages[-1])
            self.judged.append(evidence)
            done = "ok: 1 test passed" in evidence and "exit code 0" in evidence
            verdict = {"accomplished": done, "category": "other", "missing": "", "evidence": "ran"}
            return _tool("record_verdict", verdict)
        if "You are Raven-Code" in system:
            step = sum(1 for m in messages if m["role"] == "assistant")
            if step < len(CODE_STEPS):
                return _tool(*CODE_STEPS[step])
            return {"content": f"Wrote mathx.py and test_mathx.py; `{TEST_COMMAND}` passed."}
        last = _text(messages[-1])
        if "tool_result" in last:
            return {"content": "The code agent added `add` and its test passes."}
        return _tool("delegate", {"agent": "code", "task": "Add add(a, b) to mathx.py, test it"})


def _tool(name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {
        "content": [{"type": "tool_use", "id": f"t-{name}", "name": name, "input": args}],
        "stop_reason": "tool_use",
    }


@pytest.fixture
async def online_models(
    monkeypatch: pytest.MonkeyPatch, isolated_env: Path
) -> AsyncIterator[tuple[Models, Path]]:
    models = Models()
    async with online(monkeypatch) as fake:
        fake.responder = models
        yield models, isolated_env


def _allow_tests(home: Path) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "permissions.toml").write_text(
        f'[default]\nmode = "smart"\nallow = ["run_shell:{TEST_COMMAND}"]\n'
    )


async def test_the_code_agent_writes_runs_its_test_and_is_judged_done(
    online_models: tuple[Models, Path],
) -> None:
    models, home = online_models
    _allow_tests(home)
    runtime = await build_runtime(load_settings(), [FakeChatAdapter])
    try:
        turn = await runtime.service.accept(inbound("please add an add function with a test", "e1"))
        assert turn is not None
        outcome = await turn
        assert outcome.text == "The code agent added `add` and its test passes."
        ((state,),) = db_rows(home, "SELECT state FROM graph_nodes")
        assert state == "completed"
        assert models.judged and "ok: 1 test passed" in models.judged[-1]
        (workspace,) = (home / "workspaces").iterdir()
        assert (workspace / "mathx.py").read_text().startswith("def add")
        decisions = db_rows(home, "SELECT tool, allowed, tier FROM permission_audit ORDER BY id")
        assert decisions == [
            ("write_file", 1, "mode"),
            ("write_file", 1, "mode"),
            ("run_shell", 1, "user_allow"),
        ]
    finally:
        await shutdown(runtime)


async def test_smart_mode_asks_and_remembers_an_allow_for_the_conversation(
    online_models: tuple[Models, Path],
) -> None:
    _, home = online_models
    runtime = await build_runtime(load_settings(), [FakeChatAdapter])
    try:
        turn = await runtime.service.accept(inbound("please add an add function with a test", "e1"))
        assert turn is not None
        conv = inbound("x", "x").conversation

        async def asked() -> bool:
            return bool(await runtime.broker.pending(conv))

        await eventually(asked)
        (prompt,) = await runtime.broker.pending(conv)
        assert TEST_COMMAND in prompt.question
        assert prompt.options == ("Allow once", "Allow in this conversation", "Deny")
        outcome = await runtime.broker.answer(
            prompt.id, prompt.nonce, "U1", "Allow in this conversation"
        )
        assert outcome.status == "accepted"
        await turn
        assert db_rows(home, "SELECT tool, subject FROM permission_allows") == [
            ("run_shell", TEST_COMMAND)
        ]
        # The same command again in this conversation runs without a question.
        again = await runtime.service.accept(inbound("do it again please", "e2"))
        assert again is not None
        await again
        assert await runtime.broker.pending(conv) == []
        tiers = [
            t
            for (t,) in db_rows(home, "SELECT tier FROM permission_audit WHERE tool = 'run_shell'")
        ]
        assert tiers == ["human", "remembered"]
    finally:
        await shutdown(runtime)
