"""The concurrency slot covers the agent call only: a node waiting for it is `queued` (not
`running`), and the slot is free again while a finished node is judged and committed.

Real SQLite, run files, scheduler and `CompletionJudge`; scripted agents and judge model
(tests/fakes/graph_kit.py). Every wait is on a real condition, never a sleep.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from host.graph.report import progress_text
from host.graph.runs import RunSettings
from tests.fakes.graph_kit import JudgeStep, committed_as, guarded, needle, node, open_kit
from tests.helpers import eventually


async def test_a_node_waiting_for_the_slot_is_queued_not_running(tmp_path: Path) -> None:
    async with open_kit(tmp_path, settings=RunSettings(concurrency=1)) as kit:
        gate = kit.backend.gate("a")
        run = await kit.submit(node("a"), node("b"))
        await guarded(kit.backend.started("a").wait())
        await kit.events.wait_state("b", "queued")

        assert (await kit.node("a")).state == "running"
        b = await kit.node("b")
        assert (b.state, b.attempts, b.started_at) == ("queued", 0, None)
        assert kit.backend.calls("b") == 0
        assert run.state("b") == "queued"
        assert "🕒 `b` research: queued" in progress_text(run.record, run.snapshot().nodes)

        gate.set()
        await kit.finished(run)
        # `running` only once it held the slot, after `a` gave it back.
        assert committed_as(kit.run_store.committed["b"], ["queued", "running", "completed"])
        # `a` was running (committed) while `b` waited.
        assert kit.run_store.committed["a"] == ["running", "completed"]
        assert kit.backend.max_running == 1
        assert kit.events.mismatches == []


async def test_a_node_waiting_for_its_instance_is_queued(tmp_path: Path) -> None:
    async with open_kit(tmp_path) as kit:
        gate = kit.backend.gate("x1")
        run = await kit.submit(node("x1", instance="w"), node("x2", instance="w"))
        await guarded(kit.backend.started("x1").wait())
        await kit.events.wait_state("x2", "queued")
        assert (await kit.node("x2")).state == "queued"
        assert kit.backend.calls("x2") == 0

        gate.set()
        await kit.finished(run)
        assert committed_as(kit.run_store.committed["x2"], ["queued", "running", "completed"])


async def test_the_slot_is_free_while_a_finished_node_is_judged(tmp_path: Path) -> None:
    async with open_kit(tmp_path, settings=RunSettings(concurrency=1)) as kit:
        entered, release = asyncio.Event(), asyncio.Event()
        kit.provider.on(needle("a"), JudgeStep(gate=release, entered=entered))
        run = await kit.submit(node("a"), node("b"))
        await guarded(entered.wait())

        # The only slot went to `b` while the judge of `a` is still held.
        await guarded(kit.backend.started("b").wait())
        await kit.events.wait_state("b", "completed")
        await eventually(lambda: kit.state_is("a", "running"))  # not settled yet
        assert (await kit.node("a")).output_path is None
        assert kit.backend.max_running == 1

        release.set()
        await kit.finished(run)
        assert await kit.states(run) == {"a": "completed", "b": "completed"}
        assert kit.events.mismatches == []


async def test_the_slot_is_free_while_a_finished_node_waits_for_its_decision(
    tmp_path: Path,
) -> None:
    # A suspended node holds no slot either: the independent node runs meanwhile.
    async with open_kit(tmp_path, settings=RunSettings(concurrency=1)) as kit:
        kit.provider.reject(needle("a"))
        run = await kit.submit(node("a"), node("b"))
        await kit.events.wait_exception("a")
        await kit.events.wait_state("b", "completed")
        assert (await kit.node("a")).state == "exception"
        await kit.manager.cancel(kit.conv, run.id)
        await kit.finished(run)
        assert await kit.states(run) == {"a": "cancelled", "b": "completed"}


async def test_what_a_running_agent_reports_shows_in_the_status_until_it_commits(
    tmp_path: Path,
) -> None:
    async with open_kit(tmp_path) as kit:
        gate = kit.backend.gate("a", notes=("plan 1/2: editing cli.py", "edit: Write cli.py"))
        run = await kit.submit(node("a"))

        def shown() -> str:
            last = kit.events.last_progress
            return "" if last is None else progress_text(last, last.nodes)

        # Verbatim: what the agent's tools and words say is never read as Markdown.
        await eventually(lambda: "running — `edit: Write cli.py`" in shown())
        gate.set()
        await guarded(kit.events.finished_event(run.id).wait())
        final = progress_text(run.snapshot(), run.snapshot().nodes)
        assert "`a` research: completed" in final and "cli.py" not in final, final
