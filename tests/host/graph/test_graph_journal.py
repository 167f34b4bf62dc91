"""The run journal and its group flush: batching, what `sync` guarantees, the readers
(a torn last line, the output file missing), where a run's records land, and fence markers."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agents.backends.base import AgentOutcome
from agents.models.types import Usage
from core.store import Store
from host.graph.executor.journal import RunWriter
from host.graph.records import (
    GroupFlush,
    RunFiles,
    RunJournal,
    journal_records,
    read_journal,
    read_memory,
    read_output,
)
from host.graph.render import Markers
from tests.fakes.graph_kit import guarded, node, open_kit
from tests.helpers import eventually


async def test_group_flush_batches_what_arrives_during_a_flush() -> None:
    batches: list[list[int]] = []
    first_started, release = asyncio.Event(), asyncio.Event()

    async def flush(items: list[int]) -> None:
        batches.append(items)
        first_started.set()
        await release.wait()

    group = GroupFlush[int](flush, name="test")
    group.add(1)
    await guarded(first_started.wait())
    for item in (2, 3, 4):
        group.add(item)
    waiter = asyncio.ensure_future(group.flushed())
    assert not group.idle and not waiter.done()
    release.set()
    await guarded(waiter)
    assert batches == [[1], [2, 3, 4]]
    await guarded(group.drain())
    assert group.idle
    await guarded(group.flushed())  # nothing pending: returns at once


async def test_group_flush_gives_a_failed_batch_to_its_waiters() -> None:
    async def flush(items: list[str]) -> None:
        if "bad" in items:
            raise OSError("disk full")

    group = GroupFlush[str](flush, name="test")
    group.add("bad")
    with pytest.raises(OSError, match="disk full"):
        await guarded(group.flushed())
    group.add("good")
    await guarded(group.flushed())  # the next batch is unaffected


async def test_a_claimed_batch_is_flushed_by_its_claimer_and_keeps_the_order() -> None:
    batches: list[tuple[list[int], bool]] = []  # each flush, and whether a claim was out
    running, release = asyncio.Event(), asyncio.Event()
    claimed = False

    async def flush(items: list[int]) -> None:
        batches.append((items, claimed))
        running.set()
        await release.wait()

    group = GroupFlush[int](flush, name="test", defer=3600)
    group.add(1)
    await guarded(running.wait())
    assert group.claim() is None  # a flush runs: the caller waits for it instead
    release.set()
    await guarded(group.flushed())
    group.defer(2)
    claim = group.claim()
    claimed = True
    assert claim is not None and claim.items == [2] and group.claim() is None
    waiter = asyncio.ensure_future(group.flushed())  # resolved by the claim's release
    group.add(3)  # due meanwhile: flushed once the claim is released, not during it
    draining = asyncio.ensure_future(group.drain())
    await asyncio.sleep(0)  # a flush started now would run its first step here
    claimed = False
    claim.release()
    await guarded(waiter)
    await guarded(draining)
    assert batches == [([1], False), ([3], False)] and group.idle


async def test_a_failed_claim_gives_its_error_to_the_waiters() -> None:
    async def flush(items: list[str]) -> None:
        pass

    group = GroupFlush[str](flush, name="test", defer=3600)
    group.defer("line")
    claim = group.claim()
    assert claim is not None
    waiter = asyncio.ensure_future(group.flushed())
    await asyncio.sleep(0)  # the waiter asks while the claim is out
    claim.release(OSError("disk full"))
    claim.release()  # once only
    with pytest.raises(OSError, match="disk full"):
        await guarded(waiter)
    assert group.idle


async def test_drain_waits_for_an_empty_claim_to_be_released() -> None:
    async def flush(items: list[int]) -> None:
        pass

    group = GroupFlush[int](flush, name="test")
    claim = group.claim()  # nothing queued: a sync of what was written without one
    assert claim is not None and claim.items == [] and not group.idle
    draining = asyncio.ensure_future(group.drain())
    await asyncio.sleep(0)
    assert not draining.done()
    claim.release()
    await guarded(draining)
    assert group.idle


async def test_a_claimed_journal_sync_writes_and_fsyncs_on_the_callers_thread(
    tmp_path: Path,
) -> None:
    journal = RunJournal(tmp_path / "journal.jsonl")
    journal.record("output", "a", 1, text="alpha")
    claimed = journal.claim_sync()
    assert claimed is not None
    await asyncio.to_thread(claimed.write)
    claimed.release()
    assert [r["text"] for r in read_journal(journal.path)] == ["alpha"]
    # Released unwritten (the commit was dropped): the lines are reported lost, not kept.
    journal.record("output", "b", 1, text="beta")
    unwritten = journal.claim_sync()
    assert unwritten is not None
    waiter = asyncio.ensure_future(journal.sync())
    unwritten.release()
    await guarded(waiter)  # the next sync is its own batch
    await journal.close()
    assert [r["text"] for r in read_journal(journal.path)] == ["alpha"]


@pytest.fixture
def journal_fsyncs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The file name of every `os.fdatasync` from now on (a journal's, here)."""
    synced: list[str] = []
    fdatasync = os.fdatasync

    def recording(fd: int) -> None:
        synced.append(Path(os.readlink(f"/proc/self/fd/{fd}")).name)
        fdatasync(fd)

    monkeypatch.setattr(os, "fdatasync", recording)
    return synced


async def test_with_a_store_the_journal_is_fsynced_before_its_checkpoints_not_per_sync(
    tmp_path: Path, store: Store, journal_fsyncs: list[str]
) -> None:
    """SQLite syncs its log only at a checkpoint: the journal lines its commits point at are
    fsynced just before, and a sync (a node settling) only writes them."""
    journal = RunJournal(tmp_path / "journal.jsonl", store)
    assert store.checkpoints.registered == 1
    journal.record("output", "a", 1, text="alpha")
    await guarded(journal.sync())
    claimed = journal.claim_sync() or pytest.fail("no batch is being written")
    journal.record("output", "b", 1, text="beta")
    await asyncio.to_thread(claimed.write)
    claimed.release()
    assert journal_fsyncs == []
    await store.checkpoint()
    assert journal_fsyncs == ["journal.jsonl"]
    await store.checkpoint()  # nothing written since: no fsync
    journal.record("output", "c", 1, text="gamma")
    await guarded(journal.close())  # written and fsynced: nothing registered any more
    assert journal_fsyncs == ["journal.jsonl"] * 2 and store.checkpoints.registered == 0
    assert [r["text"] for r in read_journal(journal.path)] == ["alpha", "beta", "gamma"]


async def test_a_graph_runs_journal_is_fsynced_at_its_end_not_per_settled_node(
    tmp_path: Path, journal_fsyncs: list[str]
) -> None:
    async with open_kit(tmp_path) as kit:
        run = await kit.submit(node("a"), node("b", deps=["a"]), node("c", deps=["b"]))
        await kit.finished(run)
        await eventually(lambda: kit.store.checkpoints.registered == 0)
        # One fsync when the journal closed, and one before each checkpoint that ran.
        assert 1 <= journal_fsyncs.count("journal.jsonl") <= 1 + kit.store.stats.checkpoints
        assert kit.files.records(run.id)["c"].latest.output == "output of c"


async def test_deferred_items_share_the_next_flush_somebody_waits_for() -> None:
    batches: list[list[int]] = []

    async def flush(items: list[int]) -> None:
        batches.append(items)

    # Deadline far away: only a waiter (or an urgent item) can flush them.
    group = GroupFlush[int](flush, name="test", defer=3600)
    group.defer(1)
    group.defer(2)
    assert not group.idle
    group.add(3)
    await guarded(group.flushed())
    assert batches == [[1, 2, 3]]
    group.defer(4)
    await guarded(group.flushed())  # waiting for a deferred item flushes it now
    group.defer(5)
    await guarded(group.drain())  # so does draining
    assert batches == [[1, 2, 3], [4], [5]] and group.idle


async def test_a_deferred_item_nobody_waits_for_is_flushed_by_its_deadline() -> None:
    batches: list[list[int]] = []

    async def flush(items: list[int]) -> None:
        batches.append(items)

    group = GroupFlush[int](flush, name="test", defer=0.01)
    group.defer(1)
    await eventually(lambda: batches == [[1]] and group.idle)


async def test_an_item_deferred_during_a_flush_waits_for_its_own_deadline() -> None:
    batches: list[list[int]] = []
    started, release = asyncio.Event(), asyncio.Event()

    async def flush(items: list[int]) -> None:
        batches.append(items)
        started.set()
        await release.wait()

    group = GroupFlush[int](flush, name="test", defer=3600)
    group.add(1)
    first = asyncio.ensure_future(group.flushed())
    await guarded(started.wait())
    group.defer(2)
    release.set()
    await guarded(first)
    # The flush that ran ended without taking the deferred item along.
    assert batches == [[1]] and not group.idle
    await guarded(group.flushed())
    assert batches == [[1], [2]]


async def test_sync_writes_the_lines_and_close_writes_the_rest(tmp_path: Path) -> None:
    files = RunFiles(tmp_path / "runs")
    journal = files.open_journal("run_1")
    journal.record("prompt", "a", 1, text="Task <a>.")
    journal.record("transcript", "a", 1, items=[{"type": "assistant", "text": "hi"}])
    await guarded(journal.sync())
    assert [r["kind"] for r in read_journal(files.journal_path("run_1"))] == [
        "prompt",
        "transcript",
    ]
    journal.record("output", "a", 1, text="the output")
    await guarded(journal.close())
    records = files.records("run_1")["a"].attempt(1)
    assert (records.prompt, records.output) == ("Task <a>.", "the output")
    assert records.transcript == [{"type": "assistant", "text": "hi"}]


async def test_owed_view_files_are_written_when_asked_and_a_failed_one_is_read_back(
    tmp_path: Path,
) -> None:
    files = RunFiles(tmp_path / "runs")
    writer = RunWriter("run_1", files)
    writer.answer("a", 1, AgentOutcome("the output", [], Usage(), 1, 0.0, []))
    writer.output(writer.output_path("a"), "the output")
    writer.memory("a", 1, "the memory record")
    await guarded(writer.sync())
    # Journaled and synced; the files are views, owed until asked for.
    assert not files.run_dir("run_1").joinpath("outputs").exists()
    assert read_output(files.output_path("run_1", "a")) == "the output"
    assert read_memory(files.memory_path("run_1", "a")) == "the memory record"
    await guarded(writer.write_views())
    assert files.output_path("run_1", "a").read_text() == "the output"
    assert files.memory_path("run_1", "a").read_text() == "the memory record"
    # A view that cannot be written is logged; the journal still has it.
    writer.answer("b", 1, AgentOutcome("b's output", [], Usage(), 1, 0.0, []))
    files.memory_dir("run_1").joinpath("b.md").mkdir()
    writer.memory("b", 1, "b's record")
    await guarded(writer.close())
    assert read_memory(files.memory_path("run_1", "a")) == "the memory record"
    assert files.records("run_1")["b"].latest.memory == "b's record"


def test_a_torn_last_line_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    good = json.dumps({"kind": "output", "node": "a", "attempt": 1, "text": "kept"})
    path.write_text(good + "\n" + '{"kind": "output", "node": "b", "att')
    records = journal_records(path)
    assert list(records) == ["a"] and records["a"].latest.output == "kept"
    assert journal_records(tmp_path / "missing.jsonl") == {}


async def test_a_missing_output_file_is_read_from_the_journal(tmp_path: Path) -> None:
    files = RunFiles(tmp_path / "runs")
    journal = files.open_journal("run_1")
    journal.record("output", "a", 1, text="first")
    journal.record("output", "a", 2, text="second")
    await guarded(journal.close())
    path = files.output_path("run_1", "a")
    assert not path.exists()
    assert read_output(path) == "second"
    assert not path.exists()
    assert read_output(path, restore=True) == "second"
    assert path.read_text() == "second"
    with pytest.raises(OSError):
        read_output(files.output_path("run_1", "nobody"))


async def test_a_run_writes_one_journal_and_one_file_per_record_read_by_path(
    tmp_path: Path,
) -> None:
    async with open_kit(tmp_path) as kit:
        run = await kit.submit(
            node("a"), node("b", deps=["a"]), node("c", deps=["a"]), node("d", deps=["b", "c"])
        )
        await kit.finished(run)
        run_dir = kit.files.run_dir(run.id)
        names = sorted(str(p.relative_to(run_dir)) for p in run_dir.rglob("*") if p.is_file())
        assert names == [
            "graph.json",
            "journal.jsonl",
            "manifest.json",
            *[f"memory/{n}.md" for n in "abcd"],
            *[f"outputs/{n}.md" for n in "abcd"],
            "started.jsonl",
        ]
        # Eq. 32: `d` is offered the memory records of all three ancestors, in one line.
        prompt = kit.records(run, "d").attempt(1).prompt or ""
        listing = f"{kit.files.memory_dir(run.id)}/<id>.md for each <id> in: a, b, c"
        assert listing in prompt
        # A single ancestor gets its path as is.
        b_prompt = kit.records(run, "b").attempt(1).prompt or ""
        assert str(kit.files.memory_path(run.id, "a")) in b_prompt


async def test_a_later_graph_restores_a_missing_output_file_from_the_journal(
    tmp_path: Path,
) -> None:
    async with open_kit(tmp_path) as kit:
        first = await kit.submit(node("a"))
        await kit.finished(first)
        path = kit.output_path(first, "a")
        path.unlink()  # output files are not fsynced (a power cut); the journal is
        second = await kit.submit(node("b", "Review {{a.output}} at {{a.output_path}}", deps=["a"]))
        await kit.finished(second)
        prompt = kit.backend.tasks_for("b")[0].prompt
        assert "output of a" in prompt and str(path) in prompt
        assert path.read_text() == "output of a"
        assert "output of a" in await kit.manager.report(first.id)


def test_run_markers_are_unique_hex_and_differ_between_runs() -> None:
    first, second = Markers(), Markers()
    drawn = [first() for _ in range(1000)]
    assert len(set(drawn)) == 1000
    assert all(len(m) == 12 and int(m, 16) >= 0 for m in drawn)
    assert second() not in drawn


async def test_view_files_follow_the_run_unless_a_cli_agent_reads_them_from_disk(
    tmp_path: Path,
) -> None:
    async with open_kit(tmp_path) as kit:
        in_process = kit.backend.gate("b")
        on_disk = kit.backend.gate("c")
        run = await kit.submit(
            node("a"), node("b", deps=["a"]), node("c", agent="scribe", deps=["a", "b"])
        )
        await guarded(kit.backend.started("b").wait())
        # An in-process agent is served its upstream records: no file is written for it.
        task = kit.backend.tasks_for("b")[0]
        assert task.records is not None and task.readable == ()
        assert await task.records.read(str(kit.files.memory_path(run.id, "a"))) is not None
        assert not kit.files.outputs_dir(run.id).exists()
        in_process.set()
        await guarded(kit.backend.started("c").wait())
        # A CLI agent reads them from disk: the owed files are there before it starts.
        task = kit.backend.tasks_for("c")[0]
        assert set(task.readable) == {kit.files.outputs_dir(run.id), kit.files.memory_dir(run.id)}
        for upstream in "ab":
            assert kit.files.memory_path(run.id, upstream).is_file()
            assert kit.files.output_path(run.id, upstream).is_file()
        on_disk.set()
        await kit.finished(run)
        assert kit.files.output_path(run.id, "c").read_text() == "output of c"


def test_a_view_cut_off_mid_write_leaves_no_torn_file(tmp_path: Path) -> None:
    # Views are written after the node's commit: a crash in the middle of one must not leave
    # a short file that readers take for the record (they fall back to the journal instead).
    files = RunFiles(tmp_path / "runs")
    journal = files.journal_path("run_1")
    journal.parent.mkdir(parents=True)
    journal.write_text(
        json.dumps({"kind": "output", "node": "a", "attempt": 1, "text": "x" * 4096})
    )
    path = files.output_path("run_1", "a")
    # The write stops after 100 bytes (a file size limit), as a kill would cut it off.
    script = (
        "import resource, signal, sys\n"
        "from pathlib import Path\n"
        "from host.graph.records import write_view\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (100, 100))\n"
        "try:\n"
        "    write_view(Path(sys.argv[1]), 'x' * 4096)\n"
        "except OSError as exc:\n"
        "    print('cut off:', exc.strerror)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(path)],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[3],
    )
    assert done.stdout.startswith("cut off:"), done.stderr
    assert not path.exists()
    assert list(path.parent.iterdir()) == []
    assert read_output(path) == "x" * 4096


class UnwritableJournal(RunFiles):
    """Run files whose journal cannot be created: its folder is a file."""

    def journal_path(self, run_id: str) -> Path:
        return self.root / "blocked" / "journal.jsonl"


async def test_a_completion_whose_journal_cannot_be_synced_is_failed_not_committed(
    tmp_path: Path,
) -> None:
    files = UnwritableJournal(tmp_path / "runs")
    files.root.mkdir()
    (files.root / "blocked").write_text("")
    async with open_kit(tmp_path, files=files) as kit:
        run = await kit.submit(node("a"), node("b", deps=["a"]))
        await kit.finished(run)
        a = await kit.node("a")
        assert a.state == "failed"
        assert a.error is not None and "the records could not be written" in a.error
        # SQLite never pointed at an output the journal does not hold.
        assert "completed" not in kit.run_store.committed["a"]
        assert (await kit.node("b")).state == "skipped"
