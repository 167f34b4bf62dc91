"""Two-phase assessment through the assembled runtime and a loopback Anthropic API: the
Host's reply after a delegation carries attribution blocks (hidden from users and the log)
that become close verdicts; the next user turn reassesses the round (Eq. 38); the next
node dispatched to that agent gets the verdict by prefetch (Eq. 34)."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bot.app import Runtime
from tests.fakes.chat_adapter import FakeChatAdapter
from tests.helpers import db_rows, inbound, write_agents
from tests.runtime_kit import chat_runtime, online

AGENTS = """
[agents.echo]
backend = "cli"
description = "Echoes its task (test agent)."
command = ["cat"]
"""
CLOSE_BODY = "You echoed the table; next time state the units."
FEEDBACK_BODY = "The table used the 2023 benchmark; check versions before reporting."


def _text_of(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    return json.dumps(content)


class Host:
    """Scripted Host model: delegates on `delegate:` requests, appends blocks on request."""

    def __init__(self) -> None:
        self.systems: list[str] = []
        self.delegations = 0

    def __call__(self, body: dict[str, Any]) -> dict[str, Any]:
        system = json.dumps(body.get("system"))
        if "You judge whether" in system:
            verdict = {"accomplished": True, "category": "other", "missing": "", "evidence": "ok"}
            return {
                "content": [
                    {"type": "tool_use", "id": "v", "name": "record_verdict", "input": verdict}
                ]
            }
        self.systems.append(system)
        last = _text_of(body["messages"][-1])
        closed = re.search(r"Round `(run_\w+)` has closed", last)
        if closed:  # the delegation's report asks for the blocks
            block = f'<attribution run="{closed[1]}" agent="echo">{CLOSE_BODY}</attribution>'
            return {"content": f"The table is ready.\n\n{block}"}
        if "delegate:" in last:
            self.delegations += 1
            task = last.split("delegate:", 1)[1].split('"')[0].strip()
            return {
                "content": [
                    {
                        "type": "tool_use",
                        "id": f"d{self.delegations}",
                        "name": "delegate",
                        "input": {"agent": "echo", "task": task},
                    }
                ],
                "stop_reason": "tool_use",
            }
        pending = re.search(r"- `(run_\w+)`: echo adopted", system)
        if "Reassessment:" in system and pending and "wrong" in last:
            block = (
                f'<attribution run="{pending[1]}" agent="echo" outcome="rejected">'
                f"{FEEDBACK_BODY}</attribution>"
            )
            return {"content": f"Sorry about that.\n{block}"}
        return {"content": "noted"}


@pytest.fixture
async def online_bot(
    monkeypatch: pytest.MonkeyPatch, isolated_env: Path
) -> AsyncIterator[tuple[Runtime, FakeChatAdapter, Host, Path]]:
    write_agents(isolated_env, AGENTS)
    host = Host()
    async with online(monkeypatch) as fake:
        fake.responder = host
        adapter = FakeChatAdapter()
        async with chat_runtime(adapter) as runtime:
            yield runtime, adapter, host, isolated_env


async def _say(runtime: Runtime, text: str, event: str, author: str = "U1") -> None:
    turn = await runtime.service.accept(inbound(text, event, author))
    assert turn is not None
    await turn


async def test_close_then_feedback_verdicts_then_prefetch(
    online_bot: tuple[Runtime, FakeChatAdapter, Host, Path],
) -> None:
    runtime, adapter, host, home = online_bot
    await _say(runtime, "delegate: build the benchmark table", "e1")
    assert adapter.texts[-1] == "The table is ready."  # the block never reaches the thread
    ((run_id, phase),) = db_rows(home, "SELECT run_id, phase FROM round_summaries")
    assert phase == "awaiting_feedback"
    ((verdict_phase, outcome, body),) = db_rows(home, "SELECT phase, outcome, body FROM verdicts")
    assert (verdict_phase, outcome, body) == ("close", "adopted", CLOSE_BODY)
    logged = db_rows(home, "SELECT text FROM messages") + db_rows(
        home, "SELECT transcript FROM turns WHERE transcript IS NOT NULL"
    )
    assert logged and not any(CLOSE_BODY in str(row[0]) for row in logged)

    # Another person's turn in the thread is not the requester's feedback… but any user
    # turn is the round's one reassessment; here the requester says it was wrong.
    await _say(runtime, "that table was wrong", "e2")
    assert "Reassessment:" in host.systems[-1] and run_id in host.systems[-1]
    assert adapter.texts[-1] == "Sorry about that."
    assert db_rows(home, "SELECT phase FROM round_summaries") == [("released",)]
    assert db_rows(home, "SELECT phase, outcome, body FROM verdicts ORDER BY id") == [
        ("close", "adopted", CLOSE_BODY),
        ("feedback", "rejected", FEEDBACK_BODY),
    ]
    assert db_rows(home, "SELECT agent, outcome, detail FROM outcome_entries") == [
        ("echo", "rejected", "adopted")
    ]

    # Released: the next turn asks for no reassessment; a new node gets the verdicts.
    await _say(runtime, "delegate: build the latency table", "e3")
    assert "Reassessment:" not in host.systems[-2]
    prompts = [
        json.loads(line)
        for path in (home / "runs").glob("*/journal.jsonl")
        for line in path.read_text().splitlines()
    ]
    latest = [p["text"] for p in prompts if p.get("kind") == "prompt" and "latency" in p["text"]]
    assert latest, prompts
    (prompt,) = latest
    assert prompt.index("build the latency table") < prompt.index("Experience from earlier")
    assert f"[verdict] [verdict by host on echo, round {run_id}, feedback: rejected]" in prompt
    assert FEEDBACK_BODY in prompt and "untrusted-data" in prompt
