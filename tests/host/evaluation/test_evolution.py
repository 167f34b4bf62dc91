"""Harness evolution against a deterministic fake model whose success depends on the
harness text: the improving patch is found; a noise patch (t < 1.96), an inert one (never
activated), a kernel edit and a mislabelled edit are rejected; held-out Util is reported
before and after; an interrupted run continues without redoing a finished attempt."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import pytest

from core.store import Store
from host.evaluation.evolution.harness import Edit, Harness, InvalidPatch, Proposal, apply
from host.evaluation.evolution.migrations import MIGRATIONS
from host.evaluation.evolution.search import (
    AttemptResult,
    Evolution,
    EvolveSettings,
)
from host.evaluation.evolution.store import AttemptRecord, EvolutionStore, StoredHarness

CHECK = "Check the result before you answer."
TRAIN = [f"train-{i}" for i in range(8)]
TEST = [f"test-{i}" for i in range(6)]


def _draw(*parts: object) -> float:
    """A deterministic number in [0, 1) from its parts."""
    digest = hashlib.sha256(repr(parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


class FakeModel:
    """Succeeds on an attempt with probability 0.3, or 0.9 when the harness tells it to
    check its result; knowledge notes change its random draws (noise), and a note about
    Kubernetes is only injected on tasks that mention it (none do: inert)."""

    def __init__(self, *, crash_after: int | None = None, flaky: bool = False) -> None:
        self.calls = 0
        self._crash_after = crash_after
        self._flaky = flaky
        self._seen: set[tuple[str, str, int]] = set()

    async def attempt(self, harness: Harness, task_id: str, attempt: int) -> AttemptResult:
        self.calls += 1
        if self._crash_after is not None and self.calls > self._crash_after:
            raise SystemExit("the process died")  # a crash: nothing after it is recorded
        key = (harness.digest(), task_id, attempt)
        if self._flaky and key not in self._seen and _draw("flaky", *key) < 0.1:
            self._seen.add(key)
            return AttemptResult(0.0, valid=False, trace="sandbox did not start")
        events = set()
        success = 0.3
        if CHECK in harness.prompt:
            events.add("prompt:check")
            success = 0.9
        notes = [n for n in harness.knowledge if "Kubernetes" not in n or "k8s" in task_id]
        events.update(f"knowledge:{n}" for n in notes)
        score = 1.0 if _draw(task_id, attempt, notes, success) < success else 0.0
        return AttemptResult(score, events=frozenset(events), trace=f"{task_id}: {score}")


IMPROVING = Proposal(
    kind="prompt",
    failure="answers without checking",
    edits=(Edit(part="prompt", op="append", value=CHECK),),
    activation="prompt:check",
)
NOISE = Proposal(
    kind="knowledge",
    failure="verbose answers",
    edits=(Edit(part="knowledge", op="add", value="Prefer short answers 4."),),
    activation="knowledge:Prefer short answers 4.",
)
INERT = Proposal(
    kind="knowledge",
    failure="cluster tasks",
    edits=(Edit(part="knowledge", op="add", value="Kubernetes pods restart on OOM."),),
    activation="knowledge:Kubernetes pods restart on OOM.",
)
KERNEL = Proposal(
    kind="runtime",
    failure="sandbox too strict",
    edits=(Edit(part="sandbox", op="set", key="network", value=True),),
    activation="runtime:network",
)
MISLABELLED = Proposal(
    kind="runtime",
    failure="gives up early",
    edits=(Edit(part="prompt", op="append", value="Never give up."),),
    activation="prompt:never",
)


class ScriptedProposer:
    """Proposes the five patches in round 0 (the improving one last), nothing after."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    async def propose(
        self,
        parent: StoredHarness,
        log: Sequence[AttemptRecord],
        bank: Mapping[str, StoredHarness],
        limit: int,
    ) -> list[Proposal]:
        self.calls.append(parent.id)
        if len(self.calls) > 1:
            return []
        assert log and all(a.harness_id == "h0" for a in log)  # the parent's full log
        return [NOISE, INERT, KERNEL, MISLABELLED, IMPROVING][:limit]


SETTINGS = EvolveSettings(rounds=3, candidates=5, subset=6, keep=2, patience=2, attempts=3)
H0 = Harness(prompt="You are the code agent.", runtime={"max_iterations": 20})


@pytest.fixture
async def store(tmp_path: Path) -> Iterator[Store]:
    db = Store(tmp_path / "raven.db", MIGRATIONS)
    await db.open()
    yield db
    await db.close()


async def test_evolution_finds_the_improvement_and_rejects_the_rest(store: Store) -> None:
    model, proposer = FakeModel(flaky=True), ScriptedProposer()
    records = EvolutionStore(store)
    result = await Evolution(records, model, proposer, SETTINGS).run(
        "run1", "code", H0, TRAIN, TEST
    )
    harnesses = await records.harnesses("run1")
    improving = next(h for h in harnesses.values() if h.proposal == IMPROVING)
    assert result.selected == improving.id and result.selected_cell == IMPROVING.cell
    assert CHECK in harnesses[result.selected].spec.prompt
    assert result.train_after > result.train_before
    assert result.test_before is not None and result.test_after is not None
    assert result.test_after > result.test_before  # held-out Util, before and after
    rounds = await records.rounds("run1")
    screens = rounds[0].decisions["screens"]  # type: ignore[index]
    by_proposal = {harnesses[h].proposal: v for h, v in screens.items()}
    # The noise patch gains on this sample, but not enough against its spread.
    noise = by_proposal[NOISE]
    assert noise["passed"] is False and noise["gain"] > 0 and noise["t"] < 1.96
    assert "never activated" in by_proposal[INERT]["reason"]
    assert "kernel (sandbox) cannot be edited" in by_proposal[KERNEL]["reason"]
    assert "only the category of the cell" in by_proposal[MISLABELLED]["reason"]
    assert by_proposal[IMPROVING]["passed"] and by_proposal[IMPROVING]["confirmed"]
    # The kernel was never touched: no harness of the run has a sandbox part.
    assert all(h.spec.model_dump().keys() == H0.model_dump().keys() for h in harnesses.values())
    # Stopped by patience: two rounds without a change after the improvement.
    assert len(rounds) == 3 and proposer.calls == ["h0", improving.id, improving.id]
    assert result.attempts_used <= result.attempts_bound
    # Invalid attempts (infrastructure failures) were retried and recorded once.
    attempts = await records.attempts("run1")
    assert any(a.tries == 2 for a in attempts)
    assert all(a.valid for a in attempts)


async def test_an_interrupted_run_continues_without_redoing_attempts(tmp_path: Path) -> None:
    whole = FakeModel()
    async with _store(tmp_path / "whole.db") as db:
        expected = await Evolution(EvolutionStore(db), whole, ScriptedProposer(), SETTINGS).run(
            "run", "code", H0, TRAIN, TEST
        )
    crashing, proposer = FakeModel(crash_after=70), ScriptedProposer()
    async with _store(tmp_path / "raven.db") as db:
        with pytest.raises(SystemExit):
            await Evolution(EvolutionStore(db), crashing, proposer, SETTINGS).run(
                "run", "code", H0, TRAIN, TEST
            )
        recorded = len(await EvolutionStore(db).attempts("run"))
    assert recorded == 70
    resumed = FakeModel()
    async with _store(tmp_path / "raven.db") as db:
        result = await Evolution(EvolutionStore(db), resumed, proposer, SETTINGS).run(
            "run", "code", H0, TRAIN, TEST
        )
        again = await Evolution(EvolutionStore(db), FakeModel(), proposer, SETTINGS).run(
            "run", "code", H0, TRAIN, TEST
        )
    assert result == expected == again
    assert 70 + resumed.calls == whole.calls  # nothing finished was run twice
    assert proposer.calls.count("h0") == 1  # the round's proposals were not asked for again


def test_patches_check_the_kernel_the_category_and_runtime_ranges() -> None:
    with pytest.raises(InvalidPatch, match="kernel"):
        apply(H0, KERNEL)
    bad_range = Proposal(
        kind="runtime",
        failure="x",
        edits=(Edit(part="runtime", op="set", key="max_iterations", value=10_000),),
        activation="a",
    )
    with pytest.raises(InvalidPatch, match="within"):
        apply(H0, bad_range)
    raised = Proposal(
        kind="runtime",
        failure="x",
        edits=(Edit(part="runtime", op="set", key="max_iterations", value=40),),
        activation="a",
    )
    assert apply(H0, raised).runtime == {"max_iterations": 40}
    assert EvolveSettings(subset=1).problem(8) is not None
    assert SETTINGS.budget(8) == 3 * ((1 + 3 * 2) * 8 + 3 * 5 * 6)


class _store:
    """A Store of the evolution tables, opened and closed."""

    def __init__(self, path: Path) -> None:
        self._db = Store(path, MIGRATIONS)

    async def __aenter__(self) -> Store:
        await self._db.open()
        return self._db

    async def __aexit__(self, *exc: object) -> None:
        await self._db.close()
