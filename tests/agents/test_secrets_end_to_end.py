"""Secrets stay with the bot: after a real end-to-end run in which the code agent's shell
command hunts for them, no file under RAVEN_HOME, no request to the model and no log line
holds the model key or the Slack token."""

from __future__ import annotations

import json
import logging
import shutil
import uuid
from pathlib import Path
from typing import Any

import pytest

from bot.app import build_runtime, shutdown
from bot.settings import load_settings
from host.runtime.messages import InboundMessage
from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.chat_adapter import FakeChatAdapter
from tests.helpers import eventually

MODEL_KEY = "sk-ant-api03-FAKESECRETMODELKEY-" + "k" * 24
SLACK_TOKEN = "xoxb-111-222-FAKESECRETSLACKTOKEN"
SECRETS = (MODEL_KEY, SLACK_TOKEN)

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")


def _text_of(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    return json.dumps(content)


class Script:
    """Host delegates to `code`; `code` runs the hunting command once; the judge accepts."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __call__(self, body: dict[str, Any]) -> dict[str, Any]:
        system = json.dumps(body.get("system"))
        last = _text_of(body["messages"][-1])
        if "You judge whether an agent accomplished" in system:
            return _tool("record_verdict", {"accomplished": True, "evidence": "ran it"})
        if "You are Raven, the Host Agent" in system:
            if "tool_result" in last:
                return {"content": "The code agent reported back."}
            return _tool("delegate", {"agent": "code", "task": "Look around the machine."})
        if "tool_result" in last:
            return {"content": "Done looking: " + last[-2000:]}
        return _tool("run_shell", {"command": self.command})


def _tool(name: str, payload: dict[str, Any]) -> dict[str, Any]:
    return {
        "content": [
            {
                "type": "tool_use",
                "id": f"toolu_{uuid.uuid4().hex[:12]}",
                "name": name,
                "input": payload,
            }
        ]
    }


def _files_holding(root: Path, secrets: tuple[str, ...]) -> list[str]:
    found = []
    for path in root.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            found += [f"{path}: {s[:12]}…" for s in secrets if s.encode() in data]
    return found


@pytest.fixture
def env_file(isolated_env: Path) -> Path:
    """The bot's working directory holds a .env with the secrets, as in production."""
    path = Path(".env").resolve()
    path.write_text(f"ANTHROPIC_API_KEY={MODEL_KEY}\nSLACK_BOT_TOKEN={SLACK_TOKEN}\n")
    return path


async def test_no_secret_reaches_files_models_or_logs(
    monkeypatch: pytest.MonkeyPatch,
    isolated_env: Path,
    env_file: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    outside = Path("/tmp") / f"raven-outside-{uuid.uuid4().hex}"
    command = (
        "cat /proc/$PPID/environ; cat /proc/1/environ; cat /proc/*/environ; env; "
        f"cat ../../.env; cat {env_file}; cat {isolated_env}/raven.db; "
        f"ls {isolated_env}; echo hi > {outside}; echo done"
    )
    async with FakeAnthropic() as fake:
        fake.responder = Script(command)
        monkeypatch.setenv("ANTHROPIC_API_KEY", MODEL_KEY)
        monkeypatch.setenv("SLACK_BOT_TOKEN", SLACK_TOKEN)
        monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.base_url)
        monkeypatch.setenv("RAVEN_MODEL_MAX_RETRIES", "0")
        adapter = FakeChatAdapter()
        runtime = await build_runtime(load_settings(), [lambda: adapter])
        try:
            msg = InboundMessage(
                platform="test",
                workspace="W",
                channel="C",
                thread="T1",
                message_id="m1",
                author_id="U1",
                author_name="alice",
                text="Please look around.",
                event_id="e1",
            )
            turn = await runtime.service.accept(msg)
            assert turn is not None
            await turn
            await runtime.service.quiesce(msg.conversation)
            await eventually(lambda: any("reported back" in t for t in adapter.texts))
        finally:
            await shutdown(runtime)
        bodies = [json.dumps(r["json"]) for r in fake.requests]

    shell_results = [b for b in bodies if "done" in b and "tool_result" in b]
    assert shell_results, "the shell command never ran"
    assert not outside.exists(), "the command wrote outside its workspace"
    for secret in SECRETS:
        assert not any(secret in b for b in bodies), "a request to the model holds a secret"
        assert not any(secret in r.getMessage() for r in caplog.records), "a log line holds it"
    assert _files_holding(isolated_env, SECRETS) == []
