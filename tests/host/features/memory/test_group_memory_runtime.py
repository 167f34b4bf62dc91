"""Group memory in the assembled runtime: a finished run deposits its round summary and one
close verdict per agent; a stopped run deposits nothing; the submitter's next turn recalls
the summary, fenced."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bot.app import Runtime, build_runtime, shutdown
from bot.settings import load_settings
from host.runtime.turn import TurnContext
from tests.fakes.chat_adapter import FakeChatAdapter
from tests.helpers import db_rows, eventually, inbound, write_agents
from tests.runtime_kit import chat_runtime

AGENTS = """
[agents.echoer]
backend = "cli"
description = "Prints a fixed line (test agent)."
command = ["sh", "-c", "echo the benchmark table is ready"]

[agents.sleeper]
backend = "cli"
description = "Sleeps (test agent)."
command = ["sh", "-c", "sleep 60"]
"""


@pytest.fixture
async def runtime(isolated_env: Path) -> AsyncIterator[tuple[Runtime, Path]]:
    write_agents(isolated_env, AGENTS)
    async with chat_runtime() as rt:
        yield rt, isolated_env


async def test_a_finished_run_leaves_a_summary_and_verdicts_recalled_by_its_submitter(
    runtime: tuple[Runtime, Path],
) -> None:
    rt, home = runtime
    turn = await rt.service.accept(inbound("b1: echoer: build the benchmark table", "e1"))
    assert turn is not None
    await turn
    await rt.service.quiesce(inbound("x", "x").conversation)
    await eventually(lambda: bool(db_rows(home, "SELECT run_id FROM round_summaries")))
    ((summary, outcome),) = db_rows(home, "SELECT summary, outcome FROM round_summaries")
    assert "b1 → echoer: completed" in summary and '"echoer": "adopted"' in outcome
    ((agent, phase, body),) = db_rows(home, "SELECT subject_agent, phase, body FROM verdicts")
    assert (agent, phase) == ("echoer", "close") and "b1 completed" in body
    group = next(s for s in rt.host.context_sources if type(s).__name__ == "GroupContext")
    conv = inbound("x", "x").conversation
    own = await group.context(TurnContext(conv, "t", "U1", "u", "user", "benchmark table"))
    other = await group.context(TurnContext(conv, "t", "U2", "v", "user", "echoer benchmark"))
    assert "b1 → echoer" in own and "untrusted-data" in own
    assert "b1 → echoer" not in other  # another user's host library stays theirs
    assert "verdict by host on echoer" in other  # verdicts about an agent are shared


async def test_a_stopped_run_deposits_nothing(runtime: tuple[Runtime, Path]) -> None:
    rt, home = runtime
    turn = await rt.service.accept(inbound("s1: sleeper: wait", "e1"))
    assert turn is not None
    await turn
    conv = inbound("x", "x").conversation
    await eventually(lambda: bool(rt.runs.live_runs(conv.id)))
    run = rt.runs.live_runs(conv.id)[0]
    await eventually(lambda: run.state("s1") == "running")
    await rt.service.accept(inbound("stop", "e2"))
    await eventually(run.done.is_set)
    await rt.service.quiesce(conv)
    assert db_rows(home, "SELECT COUNT(*) FROM round_summaries") == [(0,)]


async def test_group_memory_can_be_turned_off(
    isolated_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_agents(isolated_env, AGENTS)
    monkeypatch.setenv("RAVEN_GROUP_MEMORY", "false")
    rt = await build_runtime(load_settings(), [FakeChatAdapter])
    try:
        turn = await rt.service.accept(inbound("b1: echoer: build the table", "e1"))
        assert turn is not None
        await turn
        await rt.service.quiesce(inbound("x", "x").conversation)
        assert db_rows(isolated_env, "SELECT COUNT(*) FROM round_summaries") == [(0,)]
        assert not any(type(s).__name__ == "GroupContext" for s in rt.host.context_sources)
    finally:
        await shutdown(rt)
