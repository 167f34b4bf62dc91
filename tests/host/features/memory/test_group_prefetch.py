"""Dispatch prefetch (Eq. 34) and the group records' place in the derived index: the block
merges the host library's closest records with the most recent verdicts about the agent,
stays within its character budget, leaves other users' host libraries out, and a rebuilt
index still holds every group record."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bot.schema import all_migrations
from core.ids import ConversationRef
from core.store import Store
from host.features.memory.group import GroupPrefetch, fenced_block
from host.features.memory.personal import owner_of
from host.graph.run_store import RunRecord
from memory.archive import Archive
from memory.group import RoundNode, Verdict, agent_outcomes, round_summary
from memory.group_store import GroupStore, audience_library, host_library, verdict_doc
from memory.index import Doc, HybridIndex
from memory.service import MemoryService

CONV = ConversationRef("test", "W", "C", "T")


def _run(submitted_by: str = "U1") -> RunRecord:
    return RunRecord(
        id="run_new",
        conversation=CONV,
        task_summary="t",
        background=False,
        state="running",
        submitted_by=submitted_by,
        submission={},
        run_dir=Path("/nonexistent"),
        replaces_run=None,
        status_message=None,
        created_at=0.0,
        finished_at=None,
    )


class Rig:
    def __init__(self, memory: MemoryService, group: GroupStore) -> None:
        self.memory = memory
        self.group = group

    async def finished_round(self, run_id: str, task: str, *, submitted_by: str = "U1") -> None:
        """A round deposited, closed and indexed as the writer would."""
        nodes = [RoundNode(f"{run_id}_n", "research", "completed", task=task)]
        outcomes = agent_outcomes(nodes)
        library = host_library(owner_of(CONV, submitted_by))
        summary = round_summary(run_id, nodes, outcomes)
        summary_id = await self.group.deposit_round(
            run_id, CONV.id, library, nodes, outcomes, summary
        )
        assert summary_id is not None
        verdict = Verdict("research", run_id, "close", "adopted", f"About {task}.", (nodes[0].id,))
        ids = await self.group.close_round(run_id, [verdict])
        assert ids is not None
        await self.memory.index.add(
            [Doc(f"round:{summary_id}", library, "note", summary), verdict_doc(ids[0], verdict)]
        )


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    store = Store(tmp_path / "raven.db", all_migrations())
    await store.open()
    group = GroupStore(store)
    memory = MemoryService(Archive(store), HybridIndex(None, tmp_path / "index"), sources=(group,))
    await memory.load_index()
    yield Rig(memory, group)
    await store.close()


async def test_prefetch_merges_relevant_history_and_recent_verdicts(rig: Rig) -> None:
    await rig.finished_round("run_a", "compare postgres and mysql latency")
    await rig.finished_round("run_b", "draw the office seating chart")
    await rig.finished_round("run_c", "secret merger plans", submitted_by="U2")
    prefetch = GroupPrefetch(rig.memory, rig.group, k_group=1, k_verdict=2, budget_chars=4000)
    block = await prefetch.for_node(_run(), "research", "measure postgres latency again")
    assert "[host] Round run_a:" in block and "Round run_b" not in block  # top-1 by relevance
    # verdicts by recency, whatever their topic (another user's round included: they are
    # about the agent, and carry no user records)
    assert "round run_c, close: adopted" in block and "round run_b, close: adopted" in block
    assert "round run_a, close" not in block
    assert "secret merger plans\n" not in block.split("[verdict]")[0]  # U2's host library stays
    assert "untrusted-data" in block
    assert await prefetch.for_node(_run(), "design", "unrelated") == ""  # nothing about design


async def test_prefetch_stays_within_its_budget(rig: Rig) -> None:
    for i in range(6):
        await rig.finished_round(f"run_{i}", f"benchmark the parser variant {i} " + "x" * 200)
    for budget in (150, 400, 900):
        prefetch = GroupPrefetch(rig.memory, rig.group, k_group=5, k_verdict=5, budget_chars=budget)
        block = await prefetch.for_node(_run(), "research", "benchmark the parser")
        fenced = block.split("\n", 2)[2]  # after the title and the untrusted-data preface
        inner = fenced.split("\n", 1)[1].rsplit("\n", 1)[0]  # inside the fence lines
        assert 0 < len(inner) <= budget


def test_a_long_record_is_cut_to_the_room_left_and_tiny_rooms_are_skipped() -> None:
    # Letters that are not hex digits: the fence's random marker is hex and may hold "bb".
    block = fenced_block("T", ["x" * 50, "y" * 500], 200, "src")
    assert "x" * 50 in block and ("y" * 148 + "…") in block and "y" * 149 not in block
    assert "yy" not in fenced_block("T", ["x" * 150, "y" * 500], 200, "src")
    assert fenced_block("T", [], 200, "src") == ""


async def test_a_rebuilt_index_keeps_every_group_record(rig: Rig) -> None:
    await rig.finished_round("run_a", "compare postgres and mysql latency")
    feedback = Verdict(
        "research", "run_a", "feedback", "rejected", "Outdated versions.", ("run_a_n",)
    )
    assert await rig.group.reassess_round("run_a", [feedback], {"research": "adopted"})
    before = rig.memory.index.count()
    count = await rig.memory.reindex()
    assert count >= before and count == len(await rig.group.documents())
    # The body (the Host's prose) stays with the round's conversation; the agent's library
    # holds the label for everyone.
    hits = await rig.memory.index.search(audience_library(CONV.id), "outdated versions", 5)
    assert any("feedback: rejected" in h.doc.text for h in hits)
    labels = await rig.memory.index.search("agent:research", "research feedback", 5)
    assert any(h.doc.text.endswith("feedback: rejected]") for h in labels)
    outcome = await rig.memory.index.search(host_library(owner_of(CONV, "U1")), "feedback", 5)
    assert any("research rejected (was adopted)" in h.doc.text for h in outcome)


async def test_forget_everything_takes_the_users_host_library_too(rig: Rig) -> None:
    await rig.finished_round("run_a", "compare postgres and mysql latency")
    await rig.finished_round("run_b", "draw the seating chart", submitted_by="U2")
    library = host_library(owner_of(CONV, "U1"))
    assert await rig.memory.index.search(library, "postgres latency", 5)
    await rig.memory.forget(owner_of(CONV, "U1"))
    assert await rig.memory.index.search(library, "postgres latency", 5) == []
    await rig.memory.reindex()
    assert await rig.memory.index.search(library, "postgres latency", 5) == []
    other = host_library(owner_of(CONV, "U2"))
    assert await rig.memory.index.search(other, "seating chart", 5)  # U2's stays
    # verdicts are about the agent and stay
    assert len(await rig.group.recent_verdicts("research", 5)) == 2
