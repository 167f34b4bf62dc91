"""The team's tools in a real agent turn, through the assembled bot and a loopback Anthropic
API: the Host delegates, the research agent (given the tracker by mcp.json's `agents`) calls
`mcp__tracker__echo`, the gate decides by the server's approval mode, the server's answer
reaches the agent fenced as untrusted data, and "allow in this conversation" is remembered
per server and tool."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bot.app import build_runtime, shutdown, start_serving
from bot.settings import load_settings
from host.features.mcp.feature import McpFeature
from tests.fakes.chat_adapter import FakeChatAdapter
from tests.helpers import REPO, db_rows, eventually, inbound
from tests.runtime_kit import online

FAKES = REPO / "tests" / "fakes"
SAID = "bug 42 is open"


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    return content if isinstance(content, str) else json.dumps(content)


def _tool(name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {
        "content": [{"type": "tool_use", "id": f"t-{name}", "name": name, "input": args}],
        "stop_reason": "tool_use",
    }


class Models:
    """Scripted Host, research agent and judge, told apart by their system prompts."""

    def __init__(self) -> None:
        self.research_saw: list[str] = []
        self.offered: list[list[str]] = []
        self.host_systems: list[str] = []

    def __call__(self, body: dict[str, Any]) -> dict[str, Any]:
        system = json.dumps(body.get("system"))
        messages = body["messages"]
        if "You judge whether" in system:
            verdict = {"accomplished": True, "category": "other", "missing": "", "evidence": "ok"}
            return _tool("record_verdict", verdict)
        if "You are Raven-Research" in system:
            self.offered.append([t["name"] for t in body.get("tools", [])])
            if not any(m["role"] == "assistant" for m in messages):
                return _tool("mcp__tracker__echo", {"text": SAID})
            self.research_saw.append(_text(messages[-1]))
            return {"content": "The tracker says bug 42 is open."}
        self.host_systems.append(system)
        if "tool_result" in _text(messages[-1]):
            return {"content": "Research checked the tracker: bug 42 is open."}
        return _tool("delegate", {"agent": "research", "task": "Is bug 42 open? Ask the tracker."})


@pytest.fixture
async def online_models(
    monkeypatch: pytest.MonkeyPatch, isolated_env: Path
) -> AsyncIterator[tuple[Models, Path]]:
    models = Models()
    async with online(monkeypatch) as fake:
        fake.responder = models
        yield models, isolated_env


def _tracker(home: Path, approval: str) -> None:
    home.mkdir(parents=True, exist_ok=True)
    entry = {
        "command": sys.executable,
        "args": [str(FAKES / "mcp_server.py")],
        "readonly": [str(FAKES)],
        "approval": approval,
        "agents": ["research"],
    }
    (home / "mcp.json").write_text(json.dumps({"mcpServers": {"tracker": entry}}))


async def test_a_read_only_tool_of_a_smart_server_runs_and_its_answer_reaches_the_agent_fenced(
    online_models: tuple[Models, Path],
) -> None:
    models, home = online_models
    _tracker(home, "smart")
    runtime = await build_runtime(load_settings(), [FakeChatAdapter])
    try:
        await start_serving(runtime)  # the tool servers connect as the bot starts
        (feature,) = [f for f in runtime.features if isinstance(f, McpFeature)]
        assert feature.servers is not None
        assert (await asyncio.wait_for(feature.servers.settled("tracker"), 30)).status == "ready"
        turn = await runtime.service.accept(inbound("is bug 42 open?", "e1"))
        assert turn is not None
        outcome = await turn
        assert outcome.text == "Research checked the tracker: bug 42 is open."
        assert "mcp__tracker__echo" in models.offered[0]
        # The Host was told which agent has the tracker (and its tools by their safe names).
        told = models.host_systems[0]
        assert "Team tool servers (MCP)" in told and "`mcp__tracker__echo`" in told, told
        assert "agents that have it: `research`" in told, told
        (seen,) = models.research_saw
        assert SAID in seen and "untrusted-data" in seen  # fenced for the model
        audit = db_rows(home, "SELECT tool, subject, allowed, tier FROM permission_audit")
        assert audit == [("mcp", "tracker:echo", 1, "mode")]
    finally:
        await shutdown(runtime)


async def test_an_ask_server_asks_and_an_allow_for_the_conversation_is_kept_per_tool(
    online_models: tuple[Models, Path],
) -> None:
    _, home = online_models
    _tracker(home, "ask")
    runtime = await build_runtime(load_settings(), [FakeChatAdapter])
    try:
        await start_serving(runtime)  # the tool servers connect as the bot starts
        turn = await runtime.service.accept(inbound("is bug 42 open?", "e1"))
        assert turn is not None
        conv = inbound("x", "x").conversation

        async def asked() -> bool:
            return bool(await runtime.broker.pending(conv))

        await eventually(asked)
        (prompt,) = await runtime.broker.pending(conv)
        assert "tracker:echo" in prompt.question and SAID in prompt.question
        answered = await runtime.broker.answer(
            prompt.id, prompt.nonce, "U1", "Allow in this conversation"
        )
        assert answered.status == "accepted"
        await turn
        allows = db_rows(home, "SELECT tool, subject FROM permission_allows")
        assert allows == [("mcp", "tracker:echo")]
        again = await runtime.service.accept(inbound("and again?", "e2"))
        assert again is not None
        await again
        assert await runtime.broker.pending(conv) == []
        tiers = [t for (t,) in db_rows(home, "SELECT tier FROM permission_audit ORDER BY id")]
        assert tiers == ["human", "remembered"]
    finally:
        await shutdown(runtime)


async def test_agents_toml_naming_a_configured_server_starts_and_the_agent_gets_it(
    isolated_env: Path,
) -> None:
    """Regression: agents.toml's `mcp` was checked against no servers before mcp.json was
    read, so a valid default stopped the start."""
    _tracker(isolated_env, "smart")
    (isolated_env / "agents.toml").write_text('[agents.code]\nmcp = ["tracker"]\n')
    runtime = await build_runtime(load_settings(), [FakeChatAdapter])
    try:
        code = runtime.registry.get("code")
        assert code is not None and code.mcp == ("tracker",)
    finally:
        await shutdown(runtime)
