"""The assembled runtime offline says what happened in plain words (issue 39, findings 4 and
5): a plan that starts, one that waits for approval, a campaign waiting for approval and a
failed start each read as a sentence, never as "`submit_graph`: …"; a plan with a malformed
line runs nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bot.app import Runtime
from host.agent.tools import shown_id
from tests.fakes.chat_adapter import FakeChatAdapter
from tests.helpers import db_rows, eventually, inbound, write_agents
from tests.runtime_kit import chat_runtime

AGENTS = """
[agents.echo]
backend = "cli"
description = "Echoes its prompt (test agent)."
command = ["cat"]
"""
DUMP = ("here is what the tools returned", "`submit_graph`", "`start_campaign`", "Offline mode")


@pytest.fixture
async def runtime(isolated_env: Path) -> AsyncIterator[tuple[Runtime, FakeChatAdapter]]:
    write_agents(isolated_env, AGENTS)
    adapter = FakeChatAdapter()
    async with chat_runtime(adapter) as rt:
        yield rt, adapter


async def _reply(rt: Runtime, adapter: FakeChatAdapter, text: str, event: str) -> str:
    """The turn's answer to `text` (posted after anything its tools posted)."""
    turn = await rt.service.accept(inbound(text, event))
    assert turn is not None
    await turn
    return adapter.texts[-1]


async def test_what_a_plan_or_a_campaign_started_is_said_in_plain_words(
    runtime: tuple[Runtime, FakeChatAdapter],
) -> None:
    rt, adapter = runtime
    conv = inbound("x", "x").conversation
    said = await _reply(rt, adapter, "a1: echo: one\na2: echo: two [after a1]", "e1")
    ((run_id,),) = db_rows(rt.settings.home, "SELECT id FROM graph_runs")
    assert said == f"Started run `{run_id}` with 2 steps; I'll post the report here."
    await eventually(lambda: not rt.runs.live_runs(conv.id))

    said = await _reply(rt, adapter, "b1: echo: three\nconfirm", "e2")
    (prompt,) = await rt.broker.pending(conv)
    assert said == (
        f"This plan of 1 step waits for approval (prompt `{shown_id(prompt)}`): nothing runs "
        "until it is approved."
    )

    line = (
        "campaign: lower the loss | machine: local | run: echo loss=1 | metric: loss min "
        "| budget: 1h"
    )
    said = await _reply(rt, adapter, line, "e3")
    (campaign,) = await rt.campaigns.store.recent()
    assert said.startswith(
        f"Campaign `{campaign.id}` is waiting for approval: nothing runs until you, an "
        "approver or an admin approve its command."
    ), said
    for text in adapter.texts:
        assert not any(marker in text for marker in DUMP), text


async def test_a_plan_with_a_malformed_line_runs_nothing_and_names_the_line(
    runtime: tuple[Runtime, FakeChatAdapter],
) -> None:
    rt, adapter = runtime
    said = await _reply(rt, adapter, "a1: echo: one\na2 echo: two [after a1]", "e1")
    assert said.startswith("Nothing was run: line 2 of this plan is not a node.\n"), said
    assert "`id: agent: task [after id, id]`" in said
    assert db_rows(rt.settings.home, "SELECT COUNT(*) FROM graph_runs") == [(0,)]
    # A sentence with a colon is not a plan: it gets the offline notice, not a refusal.
    said = await _reply(rt, adapter, "note: the build is red", "e2")
    assert "Nothing was run" not in said and "offline mode" in said
