"""Harness evolution from chat: only an admin's `evolve AGENT TASKS` starts a run; its
progress and a promotion question come to the thread; only an admin's approval makes the
evolved harness the agent's; a run a restart interrupted resumes and asks once."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.bot.cli.test_cli_evolve import PROPOSALS, TERSE, _tasks
from tests.fakes.chat_adapter import FakeChatAdapter
from tests.helpers import db_rows, eventually, inbound
from tests.runtime_kit import chat_runtime, online

ADMIN, BOB = "UADMIN", "UBOB"
CONV = inbound("x", "x").conversation


def _respond(body: dict[str, Any]) -> dict[str, Any]:
    """The task model answers tersely only when told to; the Evolver proposes PROPOSALS;
    anything else (the Host, memory) gets a plain answer."""
    system = body.get("system")
    text = system if isinstance(system, str) else json.dumps(system)
    asked = json.dumps(body["messages"][-1]["content"])
    if "You improve an agent's harness" in text:
        answer = json.dumps(PROPOSALS)
    elif match := re.search(r"What is (\d+)\+(\d+)", asked):
        total = int(match.group(1)) + int(match.group(2))
        answer = str(total) if TERSE in text else f"The answer is {total}."
    else:
        answer = "ok"
    return {"content": [{"type": "text", "text": answer}], "stop_reason": "end_turn"}


def _write_tasks(home: Path) -> None:
    folder = home / "evolve" / "tasks"
    folder.mkdir(parents=True)
    _tasks(folder / "sums.jsonl")


async def test_an_admin_evolves_from_chat_and_only_an_admin_promotes(
    isolated_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAVEN_ADMINS", ADMIN)
    _write_tasks(isolated_env)
    chat = FakeChatAdapter()
    async with online(monkeypatch) as fake:
        fake.responder = _respond
        async with chat_runtime(chat, serving=True) as runtime:
            # A command's reply is posted directly (no turn): read what the thread shows.
            await runtime.service.accept(inbound("evolve code sums", "e1", author=BOB))
            await eventually(lambda: any("Only admins" in t for t in chat.texts))
            await runtime.service.accept(inbound("evolve code nope", "e2", author=ADMIN))
            await eventually(lambda: any("no task file" in t for t in chat.texts))
            await runtime.service.accept(inbound("evolve code sums", "e3", author=ADMIN))
            started = "Evolving `code` on 5 training and 2 held-out tasks"
            await eventually(lambda: any(started in t for t in chat.texts))

            async def asked() -> bool:
                return bool(await runtime.broker.pending(CONV))

            await eventually(asked, within=120)
            (prompt,) = await runtime.broker.pending(CONV)
            assert (
                "harness v1" in prompt.question and "held-out Util 0.000 → 1.000" in prompt.question
            )
            refused = await runtime.broker.answer(prompt.id, prompt.nonce, BOB, "approve")
            assert refused.status != "accepted"
            approved = await runtime.broker.answer(prompt.id, prompt.nonce, ADMIN, "approve")
            assert approved.status == "accepted"

            async def promoted() -> bool:
                return bool(
                    db_rows(isolated_env, "SELECT 1 FROM harness_versions WHERE state = 'active'")
                )

            await eventually(promoted)
            await eventually(lambda: any("runs harness v1" in t for t in chat.texts))
            await eventually(
                lambda: db_rows(isolated_env, "SELECT state FROM evo_chat_runs") == [("finished",)]
            )
        assert "round 1:" in "\n".join(chat.texts)


async def test_a_run_a_restart_interrupted_resumes_and_asks_once(
    isolated_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAVEN_ADMINS", ADMIN)
    _write_tasks(isolated_env)

    def attempts() -> int:
        return int(db_rows(isolated_env, "SELECT COUNT(*) FROM evo_attempts")[0][0])

    async with online(monkeypatch) as fake:
        fake.responder = _respond
        first = FakeChatAdapter()
        async with chat_runtime(first, serving=True) as runtime:
            await runtime.service.accept(inbound("evolve code sums", "e1", author=ADMIN))
            await eventually(lambda: attempts() >= 6, within=60)
        interrupted = attempts()
        assert db_rows(isolated_env, "SELECT state FROM evo_chat_runs") == [("running",)]
        second = FakeChatAdapter()
        async with chat_runtime(second, serving=True) as runtime:

            async def asked() -> bool:
                return bool(await runtime.broker.pending(CONV))

            await eventually(asked, within=120)
            assert len(await runtime.broker.pending(CONV)) == 1
            # The run is marked finished right after it asks (not before: a stop in between
            # resumes it, and it does not ask twice).
            await eventually(
                lambda: db_rows(isolated_env, "SELECT state FROM evo_chat_runs") == [("finished",)]
            )
        assert any("Resuming evolution run" in t for t in second.texts)
        # Every attempt is recorded once: the restart went on from what was recorded.
        keys = db_rows(
            isolated_env,
            "SELECT COUNT(*), COUNT(DISTINCT harness_id || phase || task_id || attempt)"
            " FROM evo_attempts",
        )[0]
        assert keys[0] == keys[1] and keys[0] > interrupted
