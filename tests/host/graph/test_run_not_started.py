"""A run whose records cannot be written never starts, and nothing says it did: the
submission fails, nothing is recorded, and the next start reports no interrupted run."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.ids import ConversationRef
from host.graph.run_store import INTERRUPTED_BEFORE, UNSTARTED, NodeRecord, RunRecord
from tests.fakes.graph_kit import node, open_kit


async def test_a_run_whose_graph_cannot_be_written_is_never_recorded(tmp_path: Path) -> None:
    async with open_kit(tmp_path) as kit:
        # The runs directory is lost (a file where it was): every run directory fails, as a
        # full or read-only disk makes it fail.
        kit.files.root.mkdir(parents=True, exist_ok=True)
        kit.files.root.rmdir()
        kit.files.root.write_text("not a directory")
        with pytest.raises(OSError):
            await kit.submit(node("a"))
        assert await kit.run_store.runs(kit.conv.id) == []
        assert kit.backend.calls("a") == 0
        # What the next start does: nothing was running, so nothing was interrupted.
        assert await kit.run_store.interrupt_unfinished(kit.files.started) == []
        assert await kit.run_store.unreported_interrupted_runs() == []

        # Once the directory is back, the same node id is free and runs.
        kit.files.root.unlink()
        run = await kit.submit(node("a"))
        await kit.finished(run)
        assert (await kit.node("a")).state == "completed"


async def test_a_recorded_run_no_node_of_which_began_is_said_not_started(
    tmp_path: Path,
) -> None:
    """The bot stopped (a crash, a kill) after recording a run and before any node began:
    the next start says the run did not start and nothing ran, never that a restart
    interrupted it; a run that was under way is still said to be interrupted."""
    async with open_kit(tmp_path) as kit:
        unstarted = _recorded_run(kit.conv, "run_unstarted", ["x", "y"], tmp_path)
        await kit.run_store.create_run(unstarted, _pending(unstarted, ["x", "y"]))
        under_way = _recorded_run(kit.conv, "run_under_way", ["p", "q"], tmp_path)
        await kit.run_store.create_run(under_way, _pending(under_way, ["p", "q"]))
        await kit.run_store.update_node(kit.conv.id, "p", state="running", attempts=1)

        interrupted = await kit.run_store.interrupt_unfinished(kit.files.started)
        assert sorted(r.id for r in interrupted) == ["run_under_way", "run_unstarted"]
        errors = {n.node_id: n.error for n in await kit.run_store.nodes_of_run("run_unstarted")}
        assert errors == {"x": UNSTARTED, "y": UNSTARTED}
        errors = {n.node_id: n.error for n in await kit.run_store.nodes_of_run("run_under_way")}
        assert errors["q"] == INTERRUPTED_BEFORE, errors


def _recorded_run(conv: ConversationRef, run_id: str, ids: list[str], root: Path) -> RunRecord:
    return RunRecord(
        id=run_id,
        conversation=conv,
        task_summary="t",
        background=False,
        state="running",
        submitted_by="U1",
        submission={"nodes": [{"id": i} for i in ids]},
        run_dir=root / run_id,
        replaces_run=None,
        status_message=None,
        created_at=0.0,
        finished_at=None,
    )


def _pending(run: RunRecord, ids: list[str]) -> list[NodeRecord]:
    return [
        NodeRecord(
            conversation_id=run.conversation.id,
            node_id=i,
            run_id=run.id,
            agent="echo",
            instance=None,
            summary="",
            template=i,
            deps=(),
            state="pending",
            attempts=0,
            max_attempts=1,
            continuation=None,
            output_path=None,
            error=None,
            verdict=None,
            deadline=None,
        )
        for i in ids
    ]
