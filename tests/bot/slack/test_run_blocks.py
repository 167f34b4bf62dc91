"""A run's status message as Block Kit: one table row per node, read back from the text
`progress_text` writes (so a change of that text fails here, not in Slack)."""

from __future__ import annotations

import json
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from bot.slack.run_blocks import MAX_TABLE_ROWS, run_status_blocks
from core.ids import ConversationRef
from host.graph.report import progress_text
from host.runtime.run_snapshot import NodeSnapshot, RunSnapshot
from tests.fakes.slack import FakeSlack

CONV = ConversationRef("slack", "T1", "C0GENERAL", "1700000000.000100")


def _node(node_id: str, state: str, **kw: Any) -> NodeSnapshot:
    return NodeSnapshot(
        node_id=node_id, agent=kw.pop("agent", "shell"), state=state, attempts=1, **kw
    )


def _run(*nodes: NodeSnapshot) -> RunSnapshot:
    return RunSnapshot(
        id="r1",
        conversation=CONV,
        task_summary="Explicit plan",
        background=True,
        state="running",
        submitted_by="U1",
        nodes=nodes,
    )


def _rows(blocks: list[dict[str, Any]]) -> list[list[str]]:
    (table,) = [b for b in blocks if b["type"] == "table"]
    return [[cell["text"] for cell in row] for row in table["rows"]]


def test_one_row_per_node_with_its_task_and_state() -> None:
    run = _run(
        _node("s1", "completed", summary="uname -a", template="uname -a"),
        _node("s2", "running", summary="echo `date`", template="echo `date`", note="`ls`: 3"),
        _node("s3", "pending", summary="Write the notes", agent="writer"),
        _node("s4", "failed", summary="rm -rf x", template="rm -rf x", not_approved=True),
        _node("s5", "queued", agent="design"),
    )
    text = progress_text(run, run.nodes)
    blocks = run_status_blocks(text)
    assert blocks is not None
    assert blocks[0]["text"]["text"].startswith("*Run `r1`* — Explicit plan")
    assert blocks[1]["elements"][0]["text"] == "2/5 settled"  # completed and failed
    assert _rows(blocks) == [
        ["Node", "Task", "State"],
        ["s1", "uname -a", "✅ completed"],
        ["s2", "echo `date`", "▶️ running — `ls`: 3"],
        ["s3", "Write the notes", "⏳ pending"],
        ["s4", "rm -rf x", "⛔ not approved"],
        ["s5", "design", "🕒 queued"],
    ]


def test_other_messages_and_runs_too_big_for_one_table_keep_their_text_alone() -> None:
    assert run_status_blocks("hello") is None
    assert run_status_blocks("**Run `r1` completed** — Explicit plan\nNodes: 1 completed.") is None
    big = _run(*(_node(f"n{i}", "pending") for i in range(MAX_TABLE_ROWS)))
    assert run_status_blocks(progress_text(big, big.nodes)) is None
    fits = _run(*(_node(f"n{i}", "pending") for i in range(MAX_TABLE_ROWS - 1)))
    blocks = run_status_blocks(progress_text(fits, fits.nodes))
    assert blocks is not None and len(_rows(blocks)) == MAX_TABLE_ROWS


async def test_slack_takes_the_blocks_with_the_text_as_fallback() -> None:
    run = _run(_node("s1", "running", summary="pytest -q", template="pytest -q"))
    text = progress_text(run, run.nodes)
    blocks = run_status_blocks(text)
    async with FakeSlack() as fake:
        client = AsyncWebClient(base_url=fake.api_url, token="xoxb-test")
        await client.chat_postMessage(
            channel=CONV.channel, thread_ts=CONV.thread, text=text, blocks=blocks
        )
        (call,) = fake.calls_to("chat.postMessage")
        assert call.ok and call.args["text"] == text
        sent = call.args["blocks"]
        sent = json.loads(sent) if isinstance(sent, str) else sent
        assert [b["type"] for b in sent] == ["section", "context", "table"]
