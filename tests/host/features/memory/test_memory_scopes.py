"""Memory scopes through the assembled runtime and a loopback Anthropic API (issue 17,
finding 7): a round run in a DM stays out of the same person's channel turns; the Host's
verdict quoting a task reaches no other conversation's turn or node (only its label does);
and an approved `forget everything` leaves the person's words in no row of raven.db (every
table, every text column) and no file under RAVEN_HOME but the kept workspaces, and the
rebuilt index no longer recalls them."""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bot.app import Runtime
from host.runtime.messages import InboundMessage
from host.runtime.turn import TurnContext
from tests.fakes.chat_adapter import FakeChatAdapter
from tests.helpers import db_rows, eventually, write_agents
from tests.runtime_kit import chat_runtime, online

AGENTS = """
[agents.echo]
backend = "cli"
description = "Echoes its task (test agent)."
command = ["cat"]
"""
_QUOTE = re.compile(r"zq\d{4}")  # the markers the people in these tests say


class Host:
    """Scripted Host model: delegates `delegate:` requests; closing a round, it writes a
    verdict quoting the task's marker (as a real model may)."""

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
        if '"delegate"' not in json.dumps(body.get("tools")):
            return {"content": "{}"}  # a side call (skills gate, rewriter): nothing to add
        self.systems.append(system)
        last = json.dumps(body["messages"][-1])
        closed = re.search(r"Round `(run_\w+)` has closed", system + last)
        if closed:
            quoted = _QUOTE.search(json.dumps(body["messages"]))
            said = quoted[0] if quoted else "nothing"
            block = (
                f'<attribution run="{closed[1]}" agent="echo">You echoed the {said} memo '
                "well; keep it short.</attribution>"
            )
            return {"content": f"Here it is.\n\n{block}"}
        if "delegate:" in last:
            self.delegations += 1
            task = last.split("delegate:", 1)[1].split('"')[0].split("\\n")[0].strip()
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
        return {"content": "noted"}


def message(text: str, event: str, author: str = "U1", *, dm: bool = False) -> InboundMessage:
    """A message in the shared channel thread C/T, or in the author's DM."""
    channel = f"D{author}" if dm else "C"
    return InboundMessage(
        platform="test",
        workspace="W",
        channel=channel,
        thread=channel if dm else "T",
        message_id=event,
        author_id=author,
        author_name=f"user-{author}",
        text=text,
        event_id=event,
        is_dm=dm,
    )


@pytest.fixture
async def online_bot(
    monkeypatch: pytest.MonkeyPatch, isolated_env: Path
) -> AsyncIterator[tuple[Runtime, FakeChatAdapter, Host, Path]]:
    write_agents(isolated_env, AGENTS)
    monkeypatch.setenv("RAVEN_SKILLS", "true")  # the default (the shared fixture turns it off)
    host = Host()
    async with online(monkeypatch) as fake:
        fake.responder = host
        adapter = FakeChatAdapter()
        async with chat_runtime(adapter) as runtime:
            yield runtime, adapter, host, isolated_env


async def _say(runtime: Runtime, msg: InboundMessage) -> None:
    turn = await runtime.service.accept(msg)
    if turn is not None:
        await turn
    await runtime.service.quiesce(msg.conversation)
    await runtime.memory_writer.idle()
    await runtime.experience_writer.idle()


async def _context(runtime: Runtime, msg: InboundMessage) -> str:
    """Every context block the Host's system prompt would get for this message."""
    ctx = TurnContext(
        msg.conversation, "t", msg.author_id, msg.author_name, "user", msg.text, msg.is_dm
    )
    return "\n".join([await source.context(ctx) for source in runtime.host.context_sources])


async def test_a_round_run_in_a_dm_stays_out_of_the_same_persons_channel_turns(
    online_bot: tuple[Runtime, FakeChatAdapter, Host, Path],
) -> None:
    runtime, _, _, home = online_bot
    await _say(runtime, message("delegate: summarise the zq1111 memo", "e1", dm=True))
    await eventually(lambda: bool(db_rows(home, "SELECT 1 FROM verdicts")))
    asking = "what do we know about the zq1111 memo"
    assert "zq1111" in await _context(runtime, message(asking, "x", dm=True))  # in the DM: yes
    channel = await _context(runtime, message(asking, "x"))
    assert "zq1111" not in channel
    # The same person's channel turn runs, and its prompt carries nothing from the DM round.
    await _say(runtime, message(asking, "e2"))
    assert "zq1111" not in online_bot[2].systems[-1]


async def test_a_verdict_quoting_a_task_reaches_no_other_conversations_turn_or_node(
    online_bot: tuple[Runtime, FakeChatAdapter, Host, Path],
) -> None:
    runtime, _, host, home = online_bot
    await _say(runtime, message("delegate: summarise the zq2222 memo", "e1", dm=True))
    await eventually(lambda: bool(db_rows(home, "SELECT 1 FROM verdicts")))
    ((body,),) = db_rows(home, "SELECT body FROM verdicts")
    assert "zq2222" in body  # the Host's verdict quotes the DM's task
    # Another person's turn in a channel: the agent's verdict label only.
    other = await _context(runtime, message("echo the zq2222 memo please", "x", "U2"))
    assert "zq2222" not in other and "verdict by host on echo" in other
    # A node dispatched to the same agent for that person gets the label, not the body.
    await _say(runtime, message("delegate: list the open tickets", "e2", "U2"))
    prompts = [
        json.loads(line)["text"]
        for path in (home / "runs").glob("*/journal.jsonl")
        for line in path.read_text().splitlines()
        if json.loads(line).get("kind") == "prompt"
    ]
    (ticket_prompt,) = [p for p in prompts if "open tickets" in p]
    assert "[verdict by host on echo" in ticket_prompt
    assert "zq2222" not in ticket_prompt
    assert not any("zq2222" in s for s in host.systems[-2:])


async def test_forget_everything_leaves_the_persons_words_nowhere(
    online_bot: tuple[Runtime, FakeChatAdapter, Host, Path],
) -> None:
    runtime, adapter, _, home = online_bot
    said = "zq3333"
    await _say(runtime, message(f"remember my locker code is {said}", "e1"))
    await _say(runtime, message(f"I keep the {said} ledger in the blue drawer", "e2"))
    await _say(runtime, message(f"delegate: summarise the {said} memo", "e3"))
    await _say(runtime, message(f"delegate: file the {said} report", "e4", dm=True))
    await _say(runtime, message("what is on the agenda today", "e5", "U2"))  # U1's words as context
    await eventually(lambda: len(db_rows(home, "SELECT 1 FROM round_summaries")) == 2)
    before = _rows_with(home, said)
    assert {"messages", "turns", "graph_runs", "graph_nodes", "verdicts"} <= set(before)
    assert {"round_summaries", "agent_cases", "memory_notes"} <= set(before)
    assert _files_with(home, said)

    await _say(runtime, message("forget everything", "e6"))
    (prompt,) = await runtime.broker.pending(message("x", "x").conversation)
    outcome = await runtime.broker.answer(prompt.id, prompt.nonce, "U1", "approve")
    assert outcome.status == "accepted"
    await eventually(lambda: any("forgot everything" in t for t in adapter.texts))

    assert _rows_with(home, said) == {}
    assert _files_with(home, said) == []
    index = runtime.memory.index
    for owner in index.owners():
        assert not any(said in h.doc.text for h in await index.search(owner, said, 20)), owner
    # Kept, without text: the run ledger and the agents' outcome labels.
    assert db_rows(home, "SELECT COUNT(*) FROM graph_runs") == [(2,)]
    assert {r[0] for r in db_rows(home, "SELECT outcome FROM verdicts")} == {"adopted"}
    # A second erasure (as after a crash mid-way) finds nothing more to do and succeeds.
    assert await runtime.memory.forget(prompt.payload["owner"]) == 0
    assert db_rows(home, "SELECT finished_at IS NOT NULL FROM memory_erasures") == [(1,)]


def _rows_with(home: Path, needle: str) -> dict[str, int]:
    """Per table, how many rows hold `needle` in any text column."""
    found: dict[str, int] = {}
    with sqlite3.connect(home / "raven.db") as db:
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        for table in tables:
            columns = [r[1] for r in db.execute(f"PRAGMA table_info({table})")]
            where = " OR ".join(f"instr(CAST({c} AS TEXT), ?) > 0" for c in columns)
            (count,) = db.execute(
                f"SELECT COUNT(*) FROM {table} WHERE {where}", [needle] * len(columns)
            ).fetchone()
            if count:
                found[table] = count
    return found


def _files_with(home: Path, needle: str) -> list[str]:
    """Files under RAVEN_HOME holding `needle` (workspaces/ are kept: the agents' work)."""
    return sorted(
        str(path.relative_to(home))
        for path in home.rglob("*")
        if path.is_file()
        and "workspaces" not in path.relative_to(home).parts
        and needle.encode() in path.read_bytes()
    )
