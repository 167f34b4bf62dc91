"""The run journal and its group flush: batching, what `sync` guarantees, the readers
(a torn last line, the output file missing), where a run's records land, and fence markers."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from host.graph.records import GroupFlush, RunFiles, journal_records, read_journal, read_output
from host.graph.render import Markers
from tests.fakes.graph_kit import guarded, node, open_kit


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


async def test_sync_writes_lines_and_views_and_close_writes_the_rest(tmp_path: Path) -> None:
    files = RunFiles(tmp_path / "runs")
    journal = files.open_journal("run_1")
    output = files.output_path("run_1", "a")
    memory = files.memory_path("run_1", "a")
    journal.record("prompt", "a", 1, text="Task <a>.")
    journal.record("transcript", "a", 1, items=[{"type": "assistant", "text": "hi"}])
    journal.view(output, "the output")
    journal.later(memory, "the memory record")
    await guarded(journal.sync())
    assert output.read_text() == "the output"
    assert [r["kind"] for r in read_journal(files.journal_path("run_1"))] == [
        "prompt",
        "transcript",
    ]
    journal.record("output", "a", 1, text="the output")
    await guarded(journal.close())
    assert memory.read_text() == "the memory record"
    records = files.records("run_1")["a"].attempt(1)
    assert (records.prompt, records.output) == ("Task <a>.", "the output")
    assert records.transcript == [{"type": "assistant", "text": "hi"}]


async def test_a_view_that_cannot_be_written_fails_the_sync_after_the_lines_are_written(
    tmp_path: Path,
) -> None:
    # Views and the journal append run in two threads at once: a failed view must still
    # reach the sync's waiter, and only once the append has finished too.
    files = RunFiles(tmp_path / "runs")
    journal = files.open_journal("run_1")
    blocker = tmp_path / "runs" / "run_1" / "outputs"
    blocker.parent.mkdir(parents=True)
    blocker.write_text("a file where the outputs folder goes")
    journal.record("prompt", "a", 1, text="Task <a>.")
    journal.view(files.output_path("run_1", "a"), "the output")
    with pytest.raises(OSError):
        await guarded(journal.sync())
    assert [r["kind"] for r in read_journal(files.journal_path("run_1"))] == ["prompt"]
    await guarded(journal.close())


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
