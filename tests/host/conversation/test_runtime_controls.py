"""The assembled runtime (offline): `stop` cancels a running graph and pending prompts;
`status` lists runs and prompts; a typed answer from a stranger does not approve."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bot.app import Runtime
from tests.fakes.chat_adapter import FakeChatAdapter
from tests.helpers import eventually, inbound, write_agents
from tests.runtime_kit import chat_runtime

AGENTS = """
[agents.sleeper]
backend = "cli"
description = "Sleeps (test agent)."
command = ["sh", "-c", "sleep 60"]
"""


@pytest.fixture
async def runtime(isolated_env: Path) -> AsyncIterator[tuple[Runtime, FakeChatAdapter]]:
    write_agents(isolated_env, AGENTS)
    adapter = FakeChatAdapter()
    async with chat_runtime(adapter) as rt:
        yield rt, adapter


async def test_stop_cancels_running_graph_and_prompts(
    runtime: tuple[Runtime, FakeChatAdapter],
) -> None:
    rt, adapter = runtime
    turn = await rt.service.accept(inbound("a: sleeper: wait a minute", "e1"))
    assert turn is not None
    await turn
    conv = inbound("x", "x").conversation
    await eventually(lambda: bool(rt.runs.live_runs(conv.id)))
    run = rt.runs.live_runs(conv.id)[0]
    await eventually(lambda: run.state("a") == "running")
    prompt_turn = await rt.service.accept(inbound("b: sleeper: later\nconfirm", "e2"))
    assert prompt_turn is not None
    await prompt_turn
    assert len(await rt.broker.pending(conv)) == 1

    assert await rt.service.accept(inbound("status", "e3")) is None
    status = adapter.texts[-1]
    assert f"run `{run.id}` running" in status and "waiting" in status

    assert await rt.service.accept(inbound("stop", "e4")) is None
    await eventually(run.done.is_set)
    node = await rt.runs.store.node(conv.id, "a")
    assert node is not None and node.state == "cancelled"
    assert await rt.broker.pending(conv) == []
    assert any("cancelled" in p.state for p in adapter.closed)


async def test_stranger_cannot_approve_by_typing(runtime: tuple[Runtime, FakeChatAdapter]) -> None:
    rt, adapter = runtime
    turn = await rt.service.accept(inbound("b: sleeper: later\nconfirm", "e1"))
    assert turn is not None
    await turn
    conv = inbound("x", "x").conversation
    assert await rt.service.accept(inbound("Approve", "e2", author="U2")) is None
    assert adapter.private and adapter.private[-1][1] == "U2"
    assert len(await rt.broker.pending(conv)) == 1
    assert await rt.runs.store.runs(conv.id) == []
