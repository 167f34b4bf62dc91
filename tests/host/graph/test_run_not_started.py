"""A run whose records cannot be written never starts, and nothing says it did: the
submission fails, nothing is recorded, and the next start reports no interrupted run."""

from __future__ import annotations

from pathlib import Path

import pytest

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
