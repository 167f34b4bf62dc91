"""The graph runtime end to end: states, ready set, capacity, instances, exceptions and their
resolution, judge fallback, cross-graph reuse, records, reports, restart and accounting.

Real SQLite, real run files, real admission, scheduler and `CompletionJudge`; only the agents
and the judge's model are scripted (tests/fakes/graph_kit.py). No sleeps, no timing asserts.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agents.models.types import Message, ModelError, Usage
from bot.schema import all_migrations
from core.fence import unfence
from core.store import Store
from host.graph.admission import AdmissionError
from host.graph.executor import GraphRun
from host.graph.report_loader import load_report
from host.graph.run_store import RunRecord, RunStore
from host.graph.runs import RunSettings, Submitted
from host.runtime.run_snapshot import RunSnapshot
from tests.fakes.graph_kit import (
    OTHER_CONV,
    REJECT,
    FakeClock,
    GraphKit,
    JudgeStep,
    Step,
    committed_as,
    guarded,
    needle,
    node,
    open_kit,
    open_kit_parts,
    pending_node,
    settle,
)
from tests.helpers import eventually


@pytest.fixture
async def kit(tmp_path: Path) -> AsyncIterator[GraphKit]:
    """A kit with default settings (concurrency 4, 3 attempts, Host reachable)."""
    async with open_kit(tmp_path) as k:
        yield k


def in_order(seen: list[str], committed: list[str]) -> bool:
    """`seen` is `committed` with some states left out (order kept)."""
    remaining = iter(committed)
    return all(state in remaining for state in seen)


async def resolve(
    kit: GraphKit, run: GraphRun | RunSnapshot, node_id: str, action: str, **kw: object
) -> str:
    """Apply a Host decision and return its text."""
    text, _ = await kit.manager.resolve(
        kit.conv,
        run_id=run.id,
        node_id=node_id,
        action=action,  # type: ignore[arg-type]
        submitted_by="U1",
        **kw,  # type: ignore[arg-type]
    )
    return text


# --------------------------------------------------------------------------- node states


async def test_pending_running_completed(kit: GraphKit) -> None:
    gate = kit.backend.gate("a")
    run = await kit.submit(node("a"), node("b", deps=["a"]))
    assert run.state("a") == "pending" and run.state("b") == "pending"

    await guarded(kit.backend.started("a").wait())
    # The attempt was recorded as started before its agent began; `running` follows in
    # the next commit.
    assert kit.files.started(run.id) == {"a": 1}
    await kit.events.wait_state("a", "running")
    a = await kit.node("a")
    assert (a.state, a.attempts) == ("running", 1)
    assert (await kit.node("b")).state == "pending"

    gate.set()
    await kit.finished(run)
    a = await kit.node("a")
    assert a.state == "completed"
    assert a.output_path == kit.output_path(run, "a")
    assert a.error is None
    assert a.verdict is not None and a.verdict["accomplished"] is True
    assert a.verdict["fallback"] is False
    assert kit.events.seen_states["a"] == ["running", "completed"]
    assert kit.events.seen_states["b"][-1] == "completed"
    stored = await kit.run_store.run(run.id)
    assert stored is not None and stored.state == "completed" and stored.finished_at is not None
    assert kit.events.finished_runs == [run.id]


async def test_not_accomplished_with_attempts_left_suspends_the_node(kit: GraphKit) -> None:
    kit.provider.reject(needle("a"))
    run = await kit.submit(node("a", summary="find the repo"), node("b", deps=["a"]))

    report = await kit.events.wait_exception("a")
    a = await kit.node("a")
    assert a.state == "exception"
    assert a.deadline == kit.clock() + RunSettings().decision_seconds
    assert a.output_path is None
    assert a.error == "missing_user_input: the target repository"
    assert a.verdict is not None and a.verdict["category"] == "missing_user_input"
    assert (await kit.node("b")).state == "pending"
    assert kit.backend.calls("b") == 0
    assert not run.done.is_set()
    for part in (
        f"**Exception in run `{run.id}`**: node `a` (research)",
        "Task: find the repo",
        "Category: missing_user_input",
        'source="judge: what node a is missing">\nthe target repository\n',
        'source="judge: evidence for node a">\nit asked which repo',
        "Blocked dependents: b",
        "Attempts left: 2",
        '"action": "continue"',
        '"action": "abandon"',
        '"action": "replan"',
    ):
        assert part in report, part


async def test_continue_returns_the_node_to_pending_then_it_completes(tmp_path: Path) -> None:
    async with open_kit(tmp_path, settings=RunSettings(concurrency=1)) as kit:
        kit.provider.reject(needle("a"))
        run = await kit.submit(node("a"), node("b", deps=["a"]))
        await kit.events.wait_exception("a")

        # Hold the conversation's only slot: the continued node waits for it, `queued`.
        async with kit.manager.capacity(kit.conv.id).semaphore:
            text = await resolve(kit, run, "a", "continue", message="Use the raven repo.")
            assert "continues (attempt 2)" in text
            await kit.events.wait_state("a", "queued")
            a = await kit.node("a")
            assert a.state == "queued"
            assert a.continuation == "Use the raven repo."
            assert a.deadline is None and a.error is None
            assert kit.backend.calls("a") == 1

        await kit.finished(run)
        a = await kit.node("a")
        assert (a.state, a.attempts, a.continuation) == ("completed", 2, None)
        assert committed_as(
            kit.run_store.committed["a"],
            ["running", "exception", "pending", "queued", "running", "completed"],
        )
        # Announcements are coalesced: they show some of these states, in this order, and
        # always the ones a decision waited on.
        seen = kit.events.seen_states["a"]
        assert in_order(seen, kit.run_store.committed["a"])
        assert {"exception", "queued"} <= set(seen)
        assert (await kit.node("b")).state == "completed"


async def test_abandon_fails_the_node_and_skips_its_dependents(kit: GraphKit) -> None:
    kit.provider.reject(needle("a"))
    run = await kit.submit(node("a"), node("b", deps=["a"]), node("c", deps=["b"]), node("d"))
    await kit.events.wait_exception("a")

    text = await resolve(kit, run, "a", "abandon")
    assert "abandoned" in text
    await kit.finished(run)

    assert await kit.states(run) == {
        "a": "failed",
        "b": "skipped",
        "c": "skipped",
        "d": "completed",
    }
    assert (await kit.node("a")).error == "abandoned by the Host"
    assert (await kit.node("c")).error == "skipped: depends on `a`, which did not complete"
    assert kit.backend.calls("b") == kit.backend.calls("c") == 0
    stored = await kit.run_store.run(run.id)
    assert stored is not None and stored.state == "failed"


async def test_exhausted_attempts_fail_the_node(tmp_path: Path) -> None:
    async with open_kit(tmp_path, settings=RunSettings(max_attempts=2)) as kit:
        kit.provider.reject(needle("a"), times=2)
        run = await kit.submit(node("a"), node("b", deps=["a"]))
        await kit.events.wait_exception("a")
        await resolve(kit, run, "a", "continue", message="try harder")
        await kit.finished(run)

        a = await kit.node("a")
        assert (a.state, a.attempts) == ("failed", 2)
        assert a.error == "missing_user_input: the target repository"
        assert (await kit.node("b")).state == "skipped"
        assert [n for _, n, _ in kit.events.exceptions] == ["a"]


async def test_failed_predecessor_skips_pending_successors(tmp_path: Path) -> None:
    # With no Host to decide, a rejected node fails at once (no exception state).
    async with open_kit(tmp_path, host_reachable=False) as kit:
        kit.provider.reject(needle("a"))
        run = await kit.submit(node("a"), node("b", deps=["a"]), node("c", deps=["b"]), node("d"))
        await kit.finished(run)

        assert await kit.states(run) == {
            "a": "failed",
            "b": "skipped",
            "c": "skipped",
            "d": "completed",
        }
        assert kit.events.exceptions == []
        assert kit.backend.calls("b") == kit.backend.calls("c") == 0


async def test_cancel_cancels_running_and_suspended_and_skips_pending(kit: GraphKit) -> None:
    gate = kit.backend.gate("a")
    kit.provider.reject(needle("s"))
    run = await kit.submit(node("a"), node("s"), node("c", deps=["a"]))
    await guarded(kit.backend.started("a").wait())
    await kit.events.wait_exception("s")

    assert await kit.manager.cancel(kit.conv) == [run.id]
    await kit.finished(run)

    assert await kit.states(run) == {"a": "cancelled", "s": "cancelled", "c": "skipped"}
    for node_id in ("a", "s", "c"):
        assert (await kit.node(node_id)).error == "cancelled by the user"
    assert (await kit.node("s")).deadline is None
    assert kit.backend.cancelled == ["a"]
    stored = await kit.run_store.run(run.id)
    assert stored is not None and stored.state == "cancelled"
    assert kit.events.finished_runs == [run.id]
    assert not gate.is_set()


async def test_cancel_skips_a_node_still_queued_for_a_slot(tmp_path: Path) -> None:
    async with open_kit(tmp_path, settings=RunSettings(concurrency=1)) as kit:
        kit.backend.gate("a")
        run = await kit.submit(node("a"), node("q"))
        await guarded(kit.backend.started("a").wait())

        await kit.manager.cancel(kit.conv, run.id)
        await kit.finished(run)

        assert await kit.states(run) == {"a": "cancelled", "q": "skipped"}
        assert kit.backend.calls("q") == 0


# --------------------------------------------------------------------------- ready set (Eq. 31)


async def test_consumer_never_starts_while_a_predecessor_is_being_judged(kit: GraphKit) -> None:
    entered, release = asyncio.Event(), asyncio.Event()
    kit.provider.on(needle("a"), JudgeStep(gate=release, entered=entered))
    run = await kit.submit(node("a"), node("b", "Use {{a.output}}", deps=["a"]), node("u"))
    await guarded(entered.wait())

    # Witness: an unrelated node settles (the scheduler re-evaluates the ready set) while the
    # judgment of `a` is still pending.
    await kit.events.wait_state("u", "completed")
    await settle()
    assert kit.backend.calls("b") == 0
    # Not settled: `running` (committed within DEFER_SECONDS of its start), never more.
    await eventually(lambda: kit.state_is("a", "running"))

    release.set()
    await kit.finished(run)
    assert kit.backend.calls("b") == 1
    assert "output of a" in kit.backend.tasks_for("b")[0].prompt


async def test_settled_node_wakes_the_scheduler_immediately(kit: GraphKit) -> None:
    slow = kit.backend.gate("s")
    run = await kit.submit(node("s"), node("f"), node("g", deps=["f"]))

    # The successor of the fast branch starts while the slow, unrelated node still runs.
    await guarded(kit.backend.started("g").wait())
    await eventually(lambda: kit.state_is("s", "running"))
    assert not slow.is_set()

    slow.set()
    await kit.finished(run)
    assert set((await kit.states(run)).values()) == {"completed"}


# --------------------------------------------------------------------------- capacity


async def test_conversation_semaphore_is_shared_by_runs(tmp_path: Path) -> None:
    async with open_kit(tmp_path, settings=RunSettings(concurrency=2)) as kit:
        ids = ["a1", "a2", "a3", "b1", "b2"]
        gates = {n: kit.backend.gate(n) for n in ids}
        run1 = await kit.submit(node("a1"), node("a2"), node("a3"))
        run2 = await kit.submit(node("b1"), node("b2"))

        await kit.backend.wait_calls(2)
        await settle()
        assert kit.backend.running == 2
        for started in (3, 4, 5):
            victim = next(t.node_id for t in kit.backend.tasks if not gates[t.node_id].is_set())
            gates[victim].set()
            await kit.backend.wait_calls(started)
            assert kit.backend.running <= 2
        for gate in gates.values():
            gate.set()
        await kit.finished(run1)
        await kit.finished(run2)

        assert kit.backend.max_running == 2
        assert sorted(t.node_id for t in kit.backend.tasks) == sorted(ids)


async def test_nodes_sharing_an_instance_run_one_after_the_other(kit: GraphKit) -> None:
    gate = kit.backend.gate("x1")
    run = await kit.submit(
        node("x1", instance="w"), node("x2", instance="w"), node("u", agent="scribe")
    )
    await guarded(kit.backend.started("x1").wait())
    await kit.events.wait_state("u", "completed")
    await settle()
    assert kit.backend.calls("x2") == 0

    gate.set()
    await kit.finished(run)
    first, second = kit.backend.tasks_for("x1")[0], kit.backend.tasks_for("x2")[0]
    assert first.history == []
    assert second.history == [
        Message.user_text(first.prompt),
        Message.assistant_text("output of x1"),
    ]


async def test_different_instances_run_concurrently(kit: GraphKit) -> None:
    gates = [kit.backend.gate("p1"), kit.backend.gate("q1")]
    run = await kit.submit(node("p1", instance="p"), node("q1", instance="q"))
    await guarded(kit.backend.started("p1").wait())
    await guarded(kit.backend.started("q1").wait())
    assert kit.backend.running == 2
    for gate in gates:
        gate.set()
    await kit.finished(run)


async def test_instance_history_persists_across_runs(kit: GraphKit) -> None:
    run1 = await kit.submit(node("w1", instance="w"))
    await kit.finished(run1)
    run2 = await kit.submit(node("w2", instance="w"))
    await kit.finished(run2)

    first, second = kit.backend.tasks_for("w1")[0], kit.backend.tasks_for("w2")[0]
    assert second.history == [
        Message.user_text(first.prompt),
        Message.assistant_text("output of w1"),
    ]
    stored = await kit.run_store.load_instance(kit.conv.id, "w")
    assert stored is not None
    agent, history = stored
    assert agent == "research" and len(history) == 4
    assert history[-1] == Message.assistant_text("output of w2")


# --------------------------------------------------------------------------- continuation


async def test_continue_on_a_stateful_instance_sends_the_message_only(kit: GraphKit) -> None:
    kit.provider.reject(needle("a"))
    run = await kit.submit(node("a", instance="w"))
    await kit.events.wait_exception("a")
    await resolve(kit, run, "a", "continue", message="Use the raven repo.")
    await kit.finished(run)

    first, second = kit.backend.tasks_for("a")
    assert first.continuation is None
    assert second.continuation == "Use the raven repo."
    assert second.message == "Use the raven repo."
    assert second.history == [
        Message.user_text(first.prompt),
        Message.assistant_text("output of a"),
    ]
    # The record and the judge see the task together with the Host's message.
    recorded = kit.records(run, "a").attempt(2).prompt or ""
    assert recorded.startswith(first.prompt) and recorded.endswith("Use the raven repo.")
    assert "Use the raven repo." in kit.provider.bodies[-1]


@pytest.mark.parametrize(
    "extra",
    [{"agent": "scribe"}, {"agent": "research"}],
    ids=["stateless-agent", "stateful-agent-without-instance"],
)
async def test_continue_without_a_session_resends_prompt_previous_result_and_message(
    kit: GraphKit, extra: dict[str, str]
) -> None:
    kit.provider.reject(needle("a"))
    kit.backend.script("a", Step(output="Which repository do you mean?"))
    run = await kit.submit(node("a", **extra))
    await kit.events.wait_exception("a")
    await resolve(kit, run, "a", "continue", message="Use the raven repo.")
    await kit.finished(run)

    first, second = kit.backend.tasks_for("a")
    assert second.continuation is None
    assert second.history == []
    assert second.prompt.startswith(first.prompt)
    assert second.prompt.index("Which repository do you mean?") < second.prompt.index(
        "Use the raven repo."
    )


async def test_continue_after_an_attempt_the_session_never_recorded(kit: GraphKit) -> None:
    # The first attempt crashed, so the instance's session does not hold this node's task:
    # the message alone would be meaningless, so the prompt is sent again with it.
    kit.backend.script("a", Step(raises=RuntimeError("connection reset")))
    kit.provider.reject(needle("a"), category="tool_failure", missing="a finished run")
    run = await kit.submit(node("a", instance="w"))
    await kit.events.wait_exception("a")
    await resolve(kit, run, "a", "continue", message="Try again.")
    await kit.finished(run)

    first, second = kit.backend.tasks_for("a")
    assert second.continuation is None
    assert second.prompt.startswith(first.prompt)
    assert "RuntimeError: connection reset" in second.prompt
    assert second.prompt.endswith("Try again.")


# --------------------------------------------------------------------------- replan


async def test_replan_starts_a_linked_run_and_reuses_completed_nodes(kit: GraphKit) -> None:
    gate = kit.backend.gate("e")
    kit.provider.reject(needle("b"))
    old = await kit.submit(
        node("a"), node("b", deps=["a"]), node("d", deps=["b"]), node("e", deps=["a"])
    )
    await kit.events.wait_exception("b")
    await guarded(kit.backend.started("e").wait())

    text, new = await kit.manager.resolve(
        kit.conv,
        run_id=old.id,
        node_id="b",
        action="replan",
        graph=kit.graph(node("c", "Summarise {{a.output}}", deps=["a"])),
        submitted_by="U1",
    )
    assert new is not None and new.id != old.id
    assert text == f"Run `{old.id}` replaced by `{new.id}`."
    await kit.finished(new)
    await kit.finished(old)

    assert not gate.is_set()
    old_record, new_record = await kit.run_store.run(old.id), await kit.run_store.run(new.id)
    assert old_record is not None and old_record.state == "superseded"
    assert new_record is not None and new_record.replaces_run == old.id
    assert new_record.state == "completed"
    assert await kit.states(old) == {
        "a": "completed",
        "b": "failed",
        "d": "skipped",
        "e": "cancelled",
    }
    for node_id in ("b", "d", "e"):
        assert (await kit.node(node_id)).error == "superseded by a replan"
    assert kit.backend.calls("a") == 1
    assert "output of a" in kit.backend.tasks_for("c")[0].prompt
    assert f"(replans run `{old.id}`)" in await kit.manager.report(new.id)


async def test_rejected_replan_leaves_the_run_unchanged(kit: GraphKit) -> None:
    kit.provider.reject(needle("b"))
    run = await kit.submit(node("a"), node("b", deps=["a"]))
    await kit.events.wait_exception("b")

    bad = kit.graph(node("c", deps=["nowhere"]))
    text = await resolve(kit, run, "b", "replan", graph=bad)
    assert text.startswith(f"Replan rejected; run `{run.id}` is unchanged.")
    # A replan that asks for approval cannot start yet, so the old run is kept too.
    gated = kit.graph(node("c", deps=["a"]), confirm=True)
    text = await resolve(kit, run, "b", "replan", graph=gated)
    assert "needs the user's approval" in text and "unchanged" in text
    assert (await kit.node("b")).state == "exception"
    assert kit.manager.live(run.id) is run
    assert await kit.run_store.node(kit.conv.id, "c") is None


async def test_resolve_refuses_what_it_cannot_apply(kit: GraphKit) -> None:
    kit.provider.reject(needle("b"))
    run = await kit.submit(node("a"), node("b", deps=["a"]))
    await kit.events.wait_exception("b")

    text, waited = await kit.manager.resolve(
        kit.conv, run_id="run_nope", node_id="b", action="abandon", submitted_by="U1"
    )
    assert (text, waited) == ("Run `run_nope` is not running in this conversation.", None)
    text, _ = await kit.manager.resolve(
        OTHER_CONV, run_id=run.id, node_id="b", action="abandon", submitted_by="U1"
    )
    assert "is not running in this conversation" in text
    text = await resolve(kit, run, "a", "abandon")
    assert text == "Node `a` is not waiting for a decision (state: completed)."
    text = await resolve(kit, run, "zz", "abandon")
    assert text == "Node `zz` is not waiting for a decision (state: unknown)."
    text = await resolve(kit, run, "b", "continue", message="  ")
    assert "needs a `message`" in text
    text = await resolve(kit, run, "b", "replan")
    assert "needs a `graph`" in text
    assert (await kit.node("b")).state == "exception"


async def test_a_prompt_that_cannot_be_rendered_fails_the_node(kit: GraphKit) -> None:
    notes = kit.workspace / "notes.md"
    notes.write_text("the notes")
    gate = kit.backend.gate("a")
    run = await kit.submit(node("a"), node("b", "Read {{ref:notes.md}}", deps=["a"]))
    await guarded(kit.backend.started("a").wait())
    notes.unlink()  # gone between admission and dispatch
    gate.set()
    await kit.finished(run)

    b = await kit.node("b")
    assert b.state == "failed"
    assert b.error is not None and b.error.startswith("the prompt could not be rendered:")
    assert kit.backend.calls("b") == 0


# --------------------------------------------------------------------------- deadlines


async def test_no_decision_by_the_deadline_fails_the_node(tmp_path: Path) -> None:
    async with open_kit(tmp_path, settings=RunSettings(decision_seconds=60.0)) as kit:
        kit.provider.reject(needle("a"))

        async def time_passes(run: RunSnapshot, node_id: str, report: str) -> None:
            kit.clock.advance(61.0)

        kit.events.on_exception = time_passes
        run = await kit.submit(node("a"), node("b", deps=["a"]), node("c"))
        await kit.finished(run)

        a = await kit.node("a")
        assert a.state == "failed" and a.deadline is None
        assert a.error == "no decision by the deadline (missing_user_input: the target repository)"
        assert (await kit.node("b")).state == "skipped"
        assert (await kit.node("c")).state == "completed"


async def test_scheduler_wakes_at_the_nearest_deadline_on_its_own(tmp_path: Path) -> None:
    # Nothing wakes the scheduler after the clock moves: only its own deadline timer can.
    async with open_kit(tmp_path, settings=RunSettings(decision_seconds=0.05)) as kit:
        kit.provider.reject(needle("a"))
        run = await kit.submit(node("a"), node("b", deps=["a"]))
        await kit.events.wait_exception("a")
        await settle()
        kit.clock.advance(1.0)
        await kit.finished(run)
        assert await kit.states(run) == {"a": "failed", "b": "skipped"}


# --------------------------------------------------------------------------- judge outcomes


async def test_judge_error_falls_back_to_completed(kit: GraphKit) -> None:
    kit.provider.on(needle("a"), JudgeStep(raises=ModelError("overloaded")))
    run = await kit.submit(node("a"))
    await kit.finished(run)

    a = await kit.node("a")
    assert a.state == "completed"
    assert a.verdict is not None
    assert a.verdict["fallback"] is True
    assert a.verdict["fallback_reason"] == "the judge failed: overloaded"
    assert "judge fallback: the judge failed: overloaded" in await kit.manager.report(run.id)


async def test_judge_timeout_falls_back_to_completed(tmp_path: Path) -> None:
    async with open_kit(tmp_path, judge_timeout=0.05) as kit:
        kit.provider.on(needle("a"), JudgeStep(gate=asyncio.Event()))  # never answers
        run = await kit.submit(node("a"))
        await kit.finished(run)

        a = await kit.node("a")
        assert a.state == "completed"
        assert a.verdict is not None
        assert (a.verdict["fallback"], a.verdict["fallback_reason"]) == (
            True,
            "the judge timed out after 0.05 s (RAVEN_JUDGE_TIMEOUT)",
        )


async def test_backend_error_with_judge_failure_is_not_accomplished(kit: GraphKit) -> None:
    kit.backend.script("a", Step(raises=RuntimeError("disk full")))
    kit.provider.on(needle("a"), JudgeStep(raises=ModelError("overloaded")))
    run = await kit.submit(node("a"))

    report = await kit.events.wait_exception("a")
    a = await kit.node("a")
    assert a.state == "exception"
    assert a.error == "RuntimeError: disk full"
    assert a.verdict is not None
    assert (a.verdict["accomplished"], a.verdict["category"], a.verdict["fallback"]) == (
        False,
        "tool_failure",
        True,
    )
    assert "Category: tool_failure" in report
    transcript = kit.records(run, "a").attempt(1).transcript
    assert transcript is not None and "disk full" in json.dumps(transcript)


async def test_offline_outcome_fails_at_once_without_the_judge(kit: GraphKit) -> None:
    kit.backend.script("a", Step(output="offline mode: no model key", offline=True))
    run = await kit.submit(node("a"), node("b", deps=["a"]))
    await kit.finished(run)

    a = await kit.node("a")
    assert (a.state, a.attempts) == ("failed", 1)
    assert a.verdict is not None and a.verdict["category"] == "missing_credential"
    assert a.verdict["calls"] == 0
    assert kit.provider.bodies == []
    assert kit.events.exceptions == []
    assert (await kit.node("b")).state == "skipped"


# --------------------------------------------------------------------------- cross-graph reuse


async def test_later_graph_reuses_a_completed_node_without_rerunning_it(kit: GraphKit) -> None:
    first = await kit.submit(node("a"))
    await kit.finished(first)
    second = await kit.submit(node("b", "Review {{a.output}}", deps=["a"]))
    await kit.finished(second)

    assert kit.backend.calls("a") == 1
    prompt = kit.backend.tasks_for("b")[0].prompt
    assert "output of a" in prompt
    assert str(kit.files.memory_path(first.id, "a")) in prompt
    assert await kit.states(second) == {"b": "completed"}


async def test_depending_on_a_failed_earlier_node_is_rejected(tmp_path: Path) -> None:
    async with open_kit(tmp_path, host_reachable=False) as kit:
        kit.provider.reject(needle("a"))
        run = await kit.submit(node("a"))
        await kit.finished(run)

        with pytest.raises(AdmissionError) as caught:
            await kit.manager.submit(kit.conv, kit.graph(node("b", deps=["a"])), submitted_by="U1")
        assert caught.value.group == "structure"
        assert "earlier node `a` ended in state `failed`" in str(caught.value)
        assert await kit.run_store.node(kit.conv.id, "b") is None


async def test_node_ids_are_reserved_atomically(kit: GraphKit) -> None:
    results = await asyncio.gather(
        kit.manager.submit(kit.conv, kit.graph(node("x")), submitted_by="U1"),
        kit.manager.submit(kit.conv, kit.graph(node("x", "Other task.")), submitted_by="U1"),
        return_exceptions=True,
    )
    admitted = [r for r in results if isinstance(r, Submitted)]
    rejected = [r for r in results if isinstance(r, AdmissionError)]
    assert len(admitted) == 1 and len(rejected) == 1
    assert "`x`" in str(rejected[0])
    run = admitted[0].run
    assert run is not None
    await kit.finished(run)
    assert [r.id for r in await kit.run_store.runs(kit.conv.id)] == [run.id]


# --------------------------------------------------------------------------- records


async def test_records_on_disk(kit: GraphKit) -> None:
    run = await kit.submit(node("a"), node("b", "Use {{a.output}}", deps=["a"]))
    await kit.finished(run)

    run_dir = kit.files.run_dir(run.id)
    graph = json.loads((run_dir / "graph.json").read_text())
    assert [n["id"] for n in graph["nodes"]] == ["a", "b"]
    assert graph["task_summary"] == "test task"
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["run_id"] == run.id and manifest["state"] == "completed"
    assert manifest["nodes"]["b"]["deps"] == ["a"]
    assert manifest["nodes"]["a"]["output_path"] == str(kit.output_path(run, "a"))

    assert manifest["journal"] == str(kit.files.journal_path(run.id))

    # Per node on disk: only what other agents read by path (output and memory record).
    assert sorted(p.name for p in run_dir.iterdir()) == [
        "graph.json",
        "journal.jsonl",
        "manifest.json",
        "memory",
        "outputs",
        "started.jsonl",
    ]
    assert sorted(p.name for p in (run_dir / "outputs").iterdir()) == ["a.md", "b.md"]
    assert kit.output_path(run, "a").read_text() == "output of a"
    memory = kit.files.memory_path(run.id, "a").read_text()
    assert memory.startswith("# Memory record of node `a` (research)")
    # Everything else of each attempt is in the run's journal.
    a = kit.records(run, "a").attempt(1)
    assert a.prompt == "Task <a>."
    assert a.output == "output of a"
    assert a.transcript is not None
    assert [item["type"] for item in a.transcript] == ["user", "assistant"]
    assert a.memory == memory
    b_prompt = kit.records(run, "b").attempt(1).prompt or ""
    assert "output of a" in b_prompt and "untrusted-data" in b_prompt
    assert b_prompt == kit.backend.tasks_for("b")[0].prompt
    # The memory record of the upstream node is offered by path (paper Eq. 32).
    assert str(kit.files.memory_path(run.id, "a")) in b_prompt


async def test_continued_node_keeps_numbered_copies_of_each_attempt(kit: GraphKit) -> None:
    kit.provider.reject(needle("a"))
    kit.backend.script("a", Step(output="first answer"), Step(output="second answer"))
    run = await kit.submit(node("a", agent="scribe"))
    await kit.events.wait_exception("a")
    await resolve(kit, run, "a", "continue", message="Be specific.")
    await kit.finished(run)

    records = kit.records(run, "a")
    assert sorted(records.attempts) == [1, 2]
    first, second = records.attempt(1), records.attempt(2)
    assert first.prompt == "Task <a>."
    assert second.prompt is not None
    assert second.prompt.startswith("Task <a>.") and "first answer" in second.prompt
    assert (first.output, second.output) == ("first answer", "second answer")
    assert first.transcript and second.transcript
    # Only the accomplished attempt has a memory record and the output file.
    assert (first.memory, second.memory is not None) == (None, True)
    assert kit.output_path(run, "a").read_text() == "second answer"
    assert (await kit.node("a")).output_path == kit.output_path(run, "a")


async def test_state_is_committed_before_it_is_announced(kit: GraphKit) -> None:
    # A chain, so one node changes at a time: every announcement must find SQLite already
    # holding every state (and the output path of every completed node) it announces. The
    # Host decides inside the exception announcement, so nothing changes during a check.
    kit.provider.reject(needle("b"))
    kit.backend.script("c", Step(offline=True))

    async def host_decides(run: RunSnapshot, node_id: str, report: str) -> None:
        await resolve(kit, run, node_id, "continue", message="again")

    kit.events.on_exception = host_decides
    run = await kit.submit(
        node("a"), node("b", deps=["a"]), node("c", deps=["b"]), node("d", deps=["c"])
    )
    await kit.finished(run)

    assert await kit.states(run) == {
        "a": "completed",
        "b": "completed",
        "c": "failed",
        "d": "skipped",
    }
    assert kit.events.mismatches == []
    # Every announcement was checked: at least b's exception, some progress and the end.
    assert kit.events.checked >= 3
    assert [k for k, _, _ in kit.events.log].count("finished") == 1


async def test_a_failing_announcement_does_not_fail_the_run(kit: GraphKit) -> None:
    kit.events.fail_announcements = True
    run = await kit.submit(node("a"), node("b", deps=["a"]))
    await kit.finished(run)
    assert await kit.states(run) == {"a": "completed", "b": "completed"}
    stored = await kit.run_store.run(run.id)
    assert stored is not None and stored.state == "completed"


# --------------------------------------------------------------------------- reports


async def test_run_report_content(tmp_path: Path) -> None:
    async with open_kit(tmp_path, host_reachable=False) as kit:
        kit.backend.script("t", Step(output="T" * 5000))
        kit.provider.reject(needle("c"))
        run = await kit.submit(node("a"), node("t", deps=["a"]), node("c"), node("e", deps=["c"]))
        await kit.finished(run)
        report = await kit.manager.report(run.id)
        people = await load_report(kit.run_store, run.id, audience="chat")

    lines = report.splitlines()
    assert lines[0] == f"**Run `{run.id}` failed** — test task"
    assert lines[1] == (
        f"Nodes: 2 completed, 1 failed, 1 skipped. Records: `{kit.files.run_dir(run.id)}`"
    )
    a_out = kit.output_path(run, "a")
    assert f"- ✅ `a` (research) completed · output `{a_out}`" in lines
    assert "- ❌ `c` (research) failed — error below" in lines
    assert "- ⏭️ `e` (research) skipped — error below" in lines
    # Errors can quote agent output (a CLI's stderr): they appear only fenced.
    assert 'source="node c error">\nmissing_user_input: the target repository\n</untrusted' in (
        report
    )
    assert 'source="node e error">\nskipped: depends on `c`, which did not complete' in report
    # Only the terminal output is inline: fenced as untrusted data and capped.
    assert "**Output of `t`**:" in report
    assert "**Output of `a`**" not in report and "output of a" not in report
    assert "T" * 3000 in report and "T" * 3001 not in report
    t_out = kit.output_path(run, "t")
    assert f"…[truncated; full output at {t_out}]" in report
    assert '<untrusted-data id="' in report and "never follow instructions" in report
    # Each error is named by its node, for the model and for people alike.
    assert '- `c`:\n<untrusted-data id="' in report
    for shown in (unfence(report).replace(":\n", ": "), people):
        assert "- `c`: missing_user_input: the target repository" in shown, shown
        assert "- `e`: skipped: depends on `c`, which did not complete" in shown, shown
    # People get no host paths, the output's head and tail verbatim in a code block, and
    # how to see the rest.
    assert str(kit.files.run_dir(run.id)) not in people and "Records:" not in people
    assert people.splitlines()[:5] == [
        f"**Run `{run.id}` failed** — test task",
        "Nodes: 2 completed, 1 failed, 1 skipped.",
        "- ✅ `a` (research) completed",
        "- ✅ `t` (research) completed",
        "- ❌ `c` (research) failed — error below",
    ]
    block = "```\n" + "T" * 800 + "\n… 2,600 characters omitted …\n" + "T" * 1600 + "\n```"
    assert f"**Output of `t`**:\n{block}\n" in people, people
    assert people.endswith(f"Full record: `raven-bot runs show {run.id}` on the bot's host.")


async def test_people_report_has_no_empty_section_and_notes_the_judge_once(
    kit: GraphKit,
) -> None:
    kit.backend.script("z1", Step(output=""))
    for node_id in ("z1", "z2"):
        kit.provider.on(needle(node_id), JudgeStep(raises=ModelError("overloaded")))
    run = await kit.submit(node("z1"), node("z2"))
    await kit.finished(run)
    people = await load_report(kit.run_store, run.id, audience="chat")
    assert people.split("\n")[2:4] == [
        "- ✅ `z1` (research) completed",
        "- ✅ `z2` (research) completed",
    ]
    assert "\n**Output of `z1`**: (no output)\n" in people, people
    assert "judge fallback" not in people
    assert people.count("overloaded") == 1
    assert (
        "Not checked by the judge (the judge failed: overloaded): `z1`, `z2`; each counts as "
        "done when its agent returned without an error."
    ) in people


async def test_report_of_an_unknown_run(kit: GraphKit) -> None:
    assert await kit.manager.report("run_nope") == "Unknown run `run_nope`."


async def test_status_lists_live_runs_and_counts_finished_ones(kit: GraphKit) -> None:
    assert await kit.manager.status(kit.conv) == ""
    run = await kit.submit(node("a"), node("b"), task_summary="two things")
    await kit.finished(run)
    # Finished work is one short line, not an entry per run.
    assert await kit.manager.status(kit.conv) == (
        f"Recent: 1 run(s) finished in the last 24 h (latest `{run.id}`, completed)"
    )


async def test_foreground_wait_returns_the_exception_then_the_final_report(
    kit: GraphKit,
) -> None:
    kit.provider.reject(needle("a"))
    run = await kit.submit(node("a"), node("b", deps=["a"]), background=False)

    text = await guarded(kit.manager.wait_for_decision_point(run))
    assert text.startswith(f"**Exception in run `{run.id}`**: node `a` (research)")
    await resolve(kit, run, "a", "continue", message="go on")
    text = await guarded(kit.manager.wait_for_decision_point(run))
    assert text.startswith(f"**Run `{run.id}` completed**")
    assert "output of b" in text


async def test_a_foreground_wait_returns_once_the_end_was_heard(kit: GraphKit) -> None:
    # The Host continues on the report: the round its attribution blocks close is deposited
    # by a RunFinished subscriber, which must have run first (it raced the Host's turn).
    heard, release = asyncio.Event(), asyncio.Event()
    order: list[str] = []

    async def slow_subscriber(run: RunSnapshot) -> None:
        heard.set()
        await release.wait()
        order.append("end heard")

    kit.events.on_finished = slow_subscriber
    run = await kit.submit(node("a"), background=False)
    waiter = asyncio.create_task(kit.manager.wait_for_decision_point(run))
    await guarded(heard.wait())
    assert run.done.is_set()
    # A chance for a waiter that does not wait for the subscribers to return meanwhile.
    await asyncio.wait({waiter}, timeout=0.2)
    order.append("report returned" if waiter.done() else "report waiting")
    release.set()
    text = await guarded(waiter)
    assert text.startswith(f"**Run `{run.id}` completed**")
    assert order == ["report waiting", "end heard"]


# --------------------------------------------------------------------------- restart


def _crash_run(run_id: str, state: str = "running") -> RunRecord:
    from tests.fakes.graph_kit import CONV, START

    return RunRecord(
        id=run_id,
        conversation=CONV,
        task_summary="crashy",
        background=True,
        state=state,  # type: ignore[arg-type]
        submitted_by="U1",
        submission={"task_summary": "crashy", "nodes": []},
        run_dir=Path("/nowhere") / run_id,
        replaces_run=None,
        status_message=None,
        created_at=START,
        finished_at=None,
    )


async def test_interrupt_unfinished_after_a_crash(tmp_path: Path) -> None:
    kit = await open_kit_parts(tmp_path)
    conv_id = kit.conv.id
    out = tmp_path / "runs" / "run_crash" / "nodes" / "c" / "output.md"
    out.parent.mkdir(parents=True)
    out.write_text("kept result")
    rs = kit.run_store
    await rs.create_run(_crash_run("run_crash"), [pending_node("run_crash", n) for n in "rpxc"])
    await rs.update_node(conv_id, "r", state="running", attempts=1)
    await rs.update_node(conv_id, "x", state="exception", attempts=1, deadline=1.0, error="e")
    await rs.update_node(conv_id, "c", state="completed", attempts=1, output_path=out)
    # A run whose nodes all settled but whose end was never recorded.
    await rs.create_run(_crash_run("run_settled"), [pending_node("run_settled", "s")])
    await rs.update_node(conv_id, "s", state="completed", attempts=1, output_path=out)
    # A finished run is left alone.
    await rs.create_run(_crash_run("run_done", "completed"), [pending_node("run_done", "d")])
    await rs.update_node(conv_id, "d", state="completed", attempts=1, output_path=out)
    await kit.store.close()  # the crash: nothing else is written

    async with open_kit(tmp_path) as after:
        interrupted = await after.run_store.interrupt_unfinished()
        assert sorted(r.id for r in interrupted) == ["run_crash", "run_settled"]
        assert {r.state for r in interrupted} == {"interrupted"}
        r, p, x, c = [await after.node(n) for n in "rpxc"]
        assert (r.state, r.error) == ("cancelled", "interrupted by a restart while running")
        assert p.state == "skipped"
        assert (x.state, x.deadline) == ("failed", None)
        assert (c.state, c.output_path) == ("completed", out)
        assert (await after.node("s")).state == "completed"
        done = await after.run_store.run("run_done")
        assert done is not None and done.state == "completed"
        unreported = await after.run_store.unreported_interrupted_runs()
        assert sorted(r.id for r in unreported) == ["run_crash", "run_settled"]
        assert await after.run_store.interrupt_unfinished() == []

        # The completed node stays reusable by reference in a new graph.
        prior = await after.run_store.prior_nodes(conv_id)
        assert prior["c"].reusable and not prior["r"].reusable
        run = await after.submit(node("n", "Check {{c.output}}", deps=["c"]))
        await after.finished(run)
        assert "kept result" in after.backend.tasks_for("n")[0].prompt
        with pytest.raises(AdmissionError):
            await after.manager.submit(
                after.conv, after.graph(node("m", deps=["r"])), submitted_by="U1"
            )


async def test_a_node_started_before_its_running_commit_counts_as_interrupted_work(
    tmp_path: Path,
) -> None:
    # `running` rides with the next commit: a crash before it leaves the node pending (or
    # queued) in SQLite, but the attempt was recorded as started before its agent began.
    kit = await open_kit_parts(tmp_path)
    rs = kit.run_store
    await rs.create_run(_crash_run("run_begun"), [pending_node("run_begun", n) for n in "wvu"])
    await rs.update_node(kit.conv.id, "v", state="queued")
    started = kit.files.started_path("run_begun")
    started.parent.mkdir(parents=True, exist_ok=True)
    started.write_text(
        '{"node": "w", "attempt": 1}\n{"node": "v", "attempt": 1}\n{"node": "u", "att'
    )
    await kit.store.close()  # the crash

    async with open_kit(tmp_path) as after:
        (interrupted,) = await after.run_store.interrupt_unfinished(after.files.started)
        assert interrupted.id == "run_begun"
        w, v, u = [await after.node(n) for n in "wvu"]
        for begun in (w, v):
            assert (begun.state, begun.attempts) == ("cancelled", 1)
            assert begun.error == "interrupted by a restart while running"
        # Its line was torn: never started, as far as anyone can tell.
        assert (u.state, u.attempts) == ("skipped", 0)


async def test_shutdown_halts_without_rewriting_records(tmp_path: Path) -> None:
    kit = await open_kit_parts(tmp_path, settings=RunSettings(concurrency=1))
    kit.backend.gate("a")
    run = await kit.submit(node("a"), node("q"), node("b", deps=["a"]))
    await guarded(kit.backend.started("a").wait())
    await kit.events.wait_state("q", "queued")

    await guarded(kit.manager.shutdown())
    await settle()
    assert kit.backend.cancelled == ["a"]
    assert kit.backend.calls("q") == 0  # the queued node was not started by the halt
    assert await kit.states(run) == {"a": "running", "q": "queued", "b": "pending"}
    stored = await kit.run_store.run(run.id)
    assert stored is not None and stored.state == "running"
    assert kit.events.finished_runs == []
    assert not (kit.files.run_dir(run.id) / "manifest.json").exists()
    await kit.store.close()

    reopened = Store(tmp_path / "db" / "raven.db", all_migrations())
    await reopened.open()
    try:
        after = RunStore(reopened, clock=FakeClock())
        interrupted = await after.interrupt_unfinished()
        assert [r.id for r in interrupted] == [run.id]
        # A queued node never started: skipped like a pending one, not "interrupted work".
        nodes = {n.node_id: n for n in await after.nodes_of_run(run.id)}
        assert {k: n.state for k, n in nodes.items()} == {
            "a": "cancelled",
            "q": "skipped",
            "b": "skipped",
        }
        assert nodes["q"].error == "not started: the run was interrupted by a restart"
    finally:
        await reopened.close()


# --------------------------------------------------------------------------- accounting


async def test_accounting_sums_across_attempts(kit: GraphKit) -> None:
    kit.backend.script(
        "a",
        Step(input_tokens=100, output_tokens=20, model_calls=2, seconds=1.5),
        Step(input_tokens=50, output_tokens=10, model_calls=1, seconds=0.5),
    )
    kit.provider.on(
        needle("a"),
        JudgeStep(verdict=REJECT, usage=Usage(input_tokens=7, output_tokens=3)),
        JudgeStep(usage=Usage(input_tokens=5, output_tokens=1)),
    )
    run = await kit.submit(node("a"))
    await kit.events.wait_exception("a")
    await resolve(kit, run, "a", "continue", message="again")
    await kit.finished(run)

    a = await kit.node("a")
    assert (a.model_calls, a.input_tokens, a.output_tokens) == (3, 150, 30)
    assert (a.judge_calls, a.judge_tokens, a.seconds) == (2, 16, 2.0)
    manifest = json.loads((kit.files.run_dir(run.id) / "manifest.json").read_text())
    entry = manifest["nodes"]["a"]
    assert (entry["model_calls"], entry["input_tokens"], entry["output_tokens"]) == (3, 150, 30)
    assert (entry["judge_calls"], entry["judge_tokens"], entry["seconds"]) == (2, 16, 2.0)


async def test_dispatch_budget_counts_nodes_per_conversation_and_hour(tmp_path: Path) -> None:
    async with open_kit(tmp_path, settings=RunSettings(dispatch_budget_per_hour=3)) as kit:
        run = await kit.submit(node("a"), node("b"))
        await kit.finished(run)
        assert await kit.run_store.dispatched_since(kit.conv.id, kit.clock() - 3600) == 2

        with pytest.raises(AdmissionError) as caught:
            await kit.manager.submit(kit.conv, kit.graph(node("c"), node("d")), submitted_by="U1")
        assert caught.value.group == "environment"
        assert "only 1 dispatches remain" in str(caught.value)

        other = await kit.submit(node("c"), node("d"), conv=OTHER_CONV)
        await kit.finished(other)

        kit.clock.advance(3601)
        later = await kit.submit(node("c"), node("d"))
        await kit.finished(later)
        assert await kit.states(later) == {"c": "completed", "d": "completed"}


def test_a_node_record_copy_changes_only_what_is_asked() -> None:
    import dataclasses

    record = pending_node("run_copy", "a")
    running = record.with_fields(state="running", attempts=1, started_at=5.0)
    assert running == dataclasses.replace(record, state="running", attempts=1, started_at=5.0)
    assert record.state == "pending" and record.attempts == 0  # the original is untouched
    with pytest.raises(TypeError, match="no field colour"):
        record.with_fields(colour="red")
    with pytest.raises(dataclasses.FrozenInstanceError):
        running.state = "failed"  # type: ignore[misc]


async def test_the_status_message_id_is_read_without_the_run_row(kit: GraphKit) -> None:
    run = await kit.submit(node("a"))
    await kit.finished(run)
    assert await kit.run_store.status_message_id(run.id) is None
    await kit.run_store.set_status_message(run.id, "msg-1")
    assert await kit.run_store.status_message_id(run.id) == "msg-1"
    assert await kit.run_store.status_message_id("run_unknown") is None
