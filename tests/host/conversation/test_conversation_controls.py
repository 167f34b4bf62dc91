"""What a thread understands (issue 18, finding 5): `help` lists every control word and
syntax, the offline notice is said once per conversation (across a restart), `stop` names
the run and nodes it stopped, and a typed answer that fits several prompts answers none
until one is named."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import get_args

import pytest

from agents.campaign_syntax import EXAMPLE as CAMPAIGN_EXAMPLE
from agents.campaign_syntax import FIELDS, parse_campaign
from agents.models.offline import OFFLINE_NOTICE, OFFLINE_REMINDER
from bot.app import Runtime, build_runtime, shutdown, start_serving
from bot.settings import load_settings
from host.conversation.service import CONTROL_WORDS, ControlWord
from host.features.memory.personal import USAGE as MEMORY_USAGE
from host.prompts.broker import gist
from host.runtime.messages import InboundMessage
from host.runtime.prompt_record import Prompt
from tests.fakes.chat_adapter import FakeChatAdapter
from tests.helpers import eventually, inbound

CONV = inbound("x", "x").conversation
AGENTS = """
[agents.sleeper]
backend = "cli"
description = "Sleeps (test agent)."
command = ["sh", "-c", "sleep 60"]
"""


async def _start(home: Path) -> tuple[Runtime, FakeChatAdapter]:
    await asyncio.to_thread(home.mkdir, parents=True, exist_ok=True)
    await asyncio.to_thread((home / "agents.toml").write_text, AGENTS)
    adapter = FakeChatAdapter()
    rt = await build_runtime(load_settings(), [lambda: adapter])
    await start_serving(rt)
    return rt, adapter


@pytest.fixture
async def bot(
    monkeypatch: pytest.MonkeyPatch, isolated_env: Path
) -> AsyncIterator[tuple[Runtime, FakeChatAdapter]]:
    rt, adapter = await _start(isolated_env)
    yield rt, adapter
    await shutdown(rt)


async def _say(rt: Runtime, msg: InboundMessage | str, event: str = "") -> None:
    """Send a message and wait for what it started (its turn, if any)."""
    turn = await rt.service.accept(msg if isinstance(msg, InboundMessage) else inbound(msg, event))
    if turn is not None:
        await turn


def _new_texts(adapter: FakeChatAdapter, before: int) -> list[str]:
    return adapter.texts[before:]


async def test_help_lists_every_control_word_and_syntax_and_each_works(
    bot: tuple[Runtime, FakeChatAdapter],
) -> None:
    rt, adapter = bot
    await _say(rt, "help", "h1")
    (reply,) = adapter.texts

    # Every control word the dispatcher recognises is listed (the two lists are one).
    assert set(get_args(ControlWord)) == set(CONTROL_WORDS)
    for word in CONTROL_WORDS:
        assert f"`{word}`" in reply, word
    # Typed answers, plans, campaigns with every field, memory commands.
    assert "`1 abc12345`" in reply and "`abc12345 1`" in reply
    for syntax in ("`id: agent: task`", "`[after a, b]`", "`{{id.output}}`", "`confirm`"):
        assert syntax in reply, syntax
    assert CAMPAIGN_EXAMPLE in reply
    # Every campaign field: the required ones in the example, the options by name.
    for field in FIELDS:
        assert f"{field}:" in reply or f"`{field}`" in reply, field
    for usage, _ in MEMORY_USAGE:
        assert f"`{usage}`" in reply, usage
    assert OFFLINE_NOTICE not in adapter.texts

    # What help shows is what the bot understands: each memory command is answered as a
    # command (never the offline notice of a Host turn) ...
    for n, (usage, _) in enumerate(MEMORY_USAGE):
        before = len(adapter.texts)
        await _say(rt, usage.replace("…", "tabs over spaces"), f"m{n}")
        (answer,) = _new_texts(adapter, before)
        assert answer not in (OFFLINE_NOTICE, OFFLINE_REMINDER), usage
    forget_all = [p for p in await rt.broker.pending(CONV) if p.purpose == "memory_forget"]
    assert len(forget_all) == 1
    await rt.broker.cancel_conversation(CONV)
    # ... the campaign example parses, and the plan example becomes a graph to approve.
    assert parse_campaign(CAMPAIGN_EXAMPLE) is not None
    example_plan = reply.split("```")[1].strip()
    await _say(rt, example_plan, "p1")
    (approval,) = await rt.broker.pending(CONV)
    assert approval.purpose == "graph_approval"


async def test_the_offline_notice_is_said_once_per_conversation_even_across_a_restart(
    monkeypatch: pytest.MonkeyPatch, isolated_env: Path
) -> None:
    rt, adapter = await _start(isolated_env)
    try:
        await _say(rt, "hello", "e1")
        await _say(rt, "what can you do?", "e2")
        assert adapter.texts == [OFFLINE_NOTICE, OFFLINE_REMINDER]
        assert "\n" not in OFFLINE_REMINDER and "`help`" in OFFLINE_REMINDER
    finally:
        await shutdown(rt)

    rt, adapter = await _start(isolated_env)  # a new service on the same RAVEN_HOME
    try:
        await _say(rt, "still there?", "e3")
        assert adapter.texts == [OFFLINE_REMINDER]
        # Another thread has not seen it yet.
        other = inbound("hi", "e4").model_copy(update={"thread": "T2"})
        await _say(rt, other)
        assert adapter.texts == [OFFLINE_REMINDER, OFFLINE_NOTICE]
    finally:
        await shutdown(rt)


async def test_stop_while_a_graph_waits_on_a_command_approval_names_the_run_and_nodes(
    bot: tuple[Runtime, FakeChatAdapter],
) -> None:
    rt, adapter = bot
    await _say(rt, "s1: shell: echo one\ns2: shell: echo two [after s1]", "e1")
    await eventually(lambda: bool(rt.runs.live_runs(CONV.id)))
    (run,) = rt.runs.live_runs(CONV.id)

    async def asking() -> bool:
        return any(p.purpose == "command_approval" for p in await rt.broker.pending(CONV))

    await eventually(asking)
    (asked,) = await rt.broker.pending(CONV)

    assert await rt.service.accept(inbound("stop", "e2")) is None

    reply = next(t for t in reversed(adapter.texts) if t.startswith("Stopped"))
    assert f"run `{run.id}` (s1, s2 cancelled)" in reply, reply
    # The question is named as prompts are everywhere: short id and what it asked.
    assert f"question `{asked.id[:8]}` ({gist(asked.question, 60)})" in reply, reply
    await eventually(run.done.is_set)
    assert await rt.broker.pending(CONV) == []


async def _graph_approvals(rt: Runtime) -> list[Prompt]:
    return [p for p in await rt.broker.pending(CONV) if p.purpose == "graph_approval"]


async def test_a_typed_answer_fitting_several_prompts_lists_them_until_one_is_named(
    bot: tuple[Runtime, FakeChatAdapter],
) -> None:
    rt, adapter = bot
    await _say(rt, "b: sleeper: first\nconfirm", "e1")
    await _say(rt, "c: sleeper: second\nconfirm", "e2")
    first, second = await _graph_approvals(rt)
    # `status` lists them by the short ids a typed answer can name.
    await _say(rt, "status", "e0")
    assert f"prompt `{first.id[:8]}` waiting: Run this graph?" in adapter.texts[-1]

    before = len(adapter.texts)
    await _say(rt, "1", "e3")
    (which,) = _new_texts(adapter, before)
    # Nothing was answered; both are listed by short id with the way to pick one.
    assert len(await _graph_approvals(rt)) == 2
    assert f"`{first.id[:8]}`" in which and f"`{second.id[:8]}`" in which
    assert f"`1 {second.id[:8]}`" in which or f"`1 {first.id[:8]}`" in which

    before = len(adapter.texts)
    await _say(rt, f"1 {first.id[:8]}", "e4")
    assert [p.id for p in await _graph_approvals(rt)] == [second.id]
    assert any(f"✔ Answered prompt `{first.id[:8]}`" in t for t in _new_texts(adapter, before))
    await eventually(lambda: bool(rt.runs.live_runs(CONV.id)))

    # With one left, a bare number answers it, and the confirmation names it.
    before = len(adapter.texts)
    await _say(rt, "2", "e5")
    assert await _graph_approvals(rt) == []
    (confirmation,) = [t for t in _new_texts(adapter, before) if t.startswith("✔")]
    assert f"✔ Answered prompt `{second.id[:8]}`" in confirmation and "Deny" in confirmation
    await rt.service.accept(inbound("stop", "e6"))


async def test_status_names_the_running_request_by_its_author_and_shows_no_ids(
    bot: tuple[Runtime, FakeChatAdapter],
) -> None:
    rt, adapter = bot
    turn = await rt.service.accept(inbound("s: sleeper: nap", "r1"))
    assert turn is not None
    await eventually(lambda: rt.lanes.status(CONV.id).running is not None)
    await _say(rt, "status", "s1")
    status = adapter.texts[-1]
    assert status.startswith("**Status**: running a request by user-U1;"), status
    assert "turn" not in status.split(";")[0], status
    await _say(rt, "stop", "s2")
    with pytest.raises(asyncio.CancelledError):
        await turn  # stop cancels the running request
