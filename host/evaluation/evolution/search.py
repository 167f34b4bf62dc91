"""The evolution loop, as paper §4 states it (Eqs. 43–56).

- Util(h; D) = mean over tasks of the mean score over K attempts; agent failures stay in the
  denominator; an infrastructure failure (an invalid attempt) is retried, and a log still
  invalid afterwards keeps its harness out of every comparison.
- The gene bank keeps one complete harness per cell (edit kind × failure label).
- Each round: parent = best stored harness on the full training set (ties by creation order,
  h0 first); one uniform sample D_r of n training tasks for every candidate; up to J
  proposals, each patch declaring its cell and activation event before evaluation; screen =
  valid ∧ activated at least once ∧ paired gain γ̄ > 0 with t = γ̄/se ≥ 1.96 and n ≥ 2; the
  first N_keep passers are confirmed on the full training set; a cell's incumbent is replaced
  only by a strictly better full-training Util (earliest proposal on ties).
- Stop after R rounds or P rounds without a bank change; then the selected harness and h0
  are scored once on the sealed test split, which never feeds back.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from host.evaluation.evolution.harness import Harness, InvalidPatch, Proposal, apply
from host.evaluation.evolution.store import (
    AttemptRecord,
    EvolutionStore,
    RoundRecord,
    StoredHarness,
)

H0 = "h0"


@dataclass(frozen=True)
class EvolveSettings:
    """The run settings (names as on the command line)."""

    rounds: int = 5  # R
    candidates: int = 4  # J
    subset: int = 4  # n
    keep: int = 2  # N_keep
    patience: int = 2  # P
    attempts: int = 3  # K
    retries: int = 2  # infrastructure retries per attempt
    screen: float = 1.96  # λ_screen
    seed: int = 0

    def problem(self, train_tasks: int) -> str | None:
        """Why these settings cannot run on `train_tasks` training tasks (None: they can)."""
        if min(self.rounds, self.candidates, self.keep, self.patience, self.attempts) < 1:
            return "--rounds, --candidates, --keep, --patience and --attempts must be ≥ 1"
        if self.keep > self.candidates:
            return "--keep must not exceed --candidates"
        if not 2 <= self.subset <= train_tasks:
            return f"--subset must be between 2 and the {train_tasks} training tasks"
        return None

    def budget(self, train_tasks: int) -> int:
        """The bound on scored development attempts: K[(1+R·N_keep)|D_tr| + R·J·n]."""
        return self.attempts * (
            (1 + self.rounds * self.keep) * train_tasks
            + self.rounds * self.candidates * self.subset
        )


@dataclass(frozen=True)
class AttemptResult:
    """What the evaluator measured for one attempt."""

    score: float
    valid: bool = True  # False: an infrastructure failure (retried)
    events: frozenset[str] = frozenset()
    trace: str = ""


class Evaluator(Protocol):
    """Runs the task agent with a harness on one task and scores it (the fixed protocol)."""

    async def attempt(self, harness: Harness, task_id: str, attempt: int) -> AttemptResult:
        """One scored attempt."""
        ...


class Proposer(Protocol):
    """Diagnoses the parent's failing traces and proposes patches (or recombinations)."""

    async def propose(
        self,
        parent: StoredHarness,
        log: Sequence[AttemptRecord],
        bank: Mapping[str, StoredHarness],
        limit: int,
    ) -> list[Proposal]:
        """Up to `limit` proposals, in the order they are screened."""
        ...


@dataclass(frozen=True)
class EvolutionResult:
    """The selected harness and what it scored, before and after."""

    run_id: str
    selected: str
    selected_cell: str | None
    train_before: float
    train_after: float
    test_before: float | None
    test_after: float | None
    rounds: int
    attempts_used: int
    attempts_bound: int
    test_attempts: int

    def as_json(self) -> dict[str, Any]:
        """For the run record and `--json`."""
        return asdict(self)


Log = dict[str, list[AttemptRecord]]  # task id → its K attempts


class Evolution:
    """One evolution run over a store (see the module docstring)."""

    def __init__(
        self,
        store: EvolutionStore,
        evaluator: Evaluator,
        proposer: Proposer,
        settings: EvolveSettings,
        *,
        progress: Callable[[str], Awaitable[None]] | None = None,
    ) -> None:
        self._store = store
        self._evaluator = evaluator
        self._proposer = proposer
        self._settings = settings
        self._progress = progress
        self._run_id = ""
        self._done: dict[tuple[str, str, str, int], AttemptRecord] = {}
        self._harnesses: dict[str, StoredHarness] = {}

    async def run(
        self,
        run_id: str,
        agent: str,
        h0: Harness,
        train: Sequence[str],
        test: Sequence[str],
    ) -> EvolutionResult:
        """Run (or continue) `run_id` to its end."""
        s = self._settings
        self._run_id = run_id
        await self._store.start_run(run_id, agent, asdict(s))
        finished = await self._store.result(run_id)
        if finished is not None:
            return EvolutionResult(**finished)
        self._done = {
            (a.harness_id, a.phase, a.task_id, a.attempt): a
            for a in await self._store.attempts(run_id)
        }
        await self._store.add_harness(run_id, StoredHarness(H0, 0, h0))
        self._harnesses = await self._store.harnesses(run_id)
        train_logs: dict[str, Log] = {H0: await self._log(H0, "train", train)}
        if not _valid(train_logs[H0]):
            raise RuntimeError("the starting harness h0 has no valid training log")
        bank: dict[str, str] = {}
        stale = 0
        done_rounds = 0
        recorded = await self._store.rounds(run_id)
        for r in range(s.rounds):
            record = recorded.get(r)
            if record is not None and record.decisions is not None:
                bank, stale = dict(record.decisions["bank"]), int(record.decisions["stale"])
                done_rounds = r + 1
                if stale >= s.patience:
                    break
                continue
            for harness_id in bank.values():
                train_logs.setdefault(harness_id, await self._log(harness_id, "train", train))
            parent = self._best([H0, *bank.values()], train_logs)
            if record is None:
                record = await self._new_round(r, parent, train, train_logs[parent], bank)
            bank, changed, screens = await self._round(record, train, train_logs, bank)
            stale = 0 if changed else stale + 1
            await self._store.decide_round(
                run_id, r, {"bank": bank, "stale": stale, "screens": screens}
            )
            done_rounds = r + 1
            await self._say(r, parent, screens, changed)
            if stale >= s.patience:
                break
        for harness_id in bank.values():
            train_logs.setdefault(harness_id, await self._log(harness_id, "train", train))
        selected = self._best([H0, *bank.values()], train_logs)
        result = await self._finish(selected, train_logs, train, test, done_rounds)
        await self._store.finish_run(run_id, result.as_json())
        return result

    async def _say(
        self, r: int, parent: str, screens: dict[str, dict[str, Any]], changed: bool
    ) -> None:
        if self._progress is None:
            return
        passed = sum(v["passed"] for v in screens.values())
        await self._progress(
            f"round {r + 1}: parent {parent}, {passed} of {len(screens)} passed screening, bank "
            f"{'changed' if changed else 'unchanged'}"
        )

    async def _new_round(
        self, r: int, parent: str, train: Sequence[str], parent_log: Log, bank: dict[str, str]
    ) -> RoundRecord:
        s = self._settings
        rng = random.Random(f"{s.seed}:{r}")
        subset = tuple(rng.sample(list(train), s.subset))
        log = [a for attempts in parent_log.values() for a in attempts]
        stored = {cell: self._harnesses[h] for cell, h in bank.items()}
        proposals = await self._proposer.propose(self._harnesses[parent], log, stored, s.candidates)
        candidates: list[StoredHarness] = []
        for proposal in proposals[: s.candidates]:
            seq = len(self._harnesses) + len(candidates)
            base = self._harnesses[parent].spec
            try:
                spec, invalid = apply(base, proposal), None
            except InvalidPatch as exc:
                spec, invalid = base, str(exc)
            candidates.append(StoredHarness(f"h{seq}", seq, spec, parent, r, proposal, invalid))
        record = RoundRecord(r, parent, subset, tuple(c.id for c in candidates), None)
        await self._store.add_round(self._run_id, record, candidates)
        self._harnesses.update({c.id: c for c in candidates})
        return record

    async def _round(
        self,
        record: RoundRecord,
        train: Sequence[str],
        train_logs: dict[str, Log],
        bank: dict[str, str],
    ) -> tuple[dict[str, str], bool, dict[str, dict[str, Any]]]:
        s = self._settings
        parent_log = train_logs[record.parent_id]
        survivors: list[str] = []
        screens: dict[str, dict[str, Any]] = {}
        for candidate_id in record.candidates:
            if len(survivors) >= s.keep:
                break
            verdict = await self._screen(candidate_id, record, parent_log)
            screens[candidate_id] = verdict
            if verdict["passed"]:
                survivors.append(candidate_id)
        bank = dict(bank)
        changed = False
        for candidate_id in survivors:
            log = await self._log(candidate_id, "train", train)
            if not _valid(log):
                screens[candidate_id]["confirmed"] = False
                continue
            train_logs[candidate_id] = log
            screens[candidate_id]["confirmed"] = True
            screens[candidate_id]["train_util"] = _util(log)
            cell = self._harnesses[candidate_id].cell
            assert cell is not None
            incumbent = bank.get(cell)
            if incumbent is None or _util(log) > _util(train_logs[incumbent]):
                bank[cell] = candidate_id
                changed = True
        return bank, changed, screens

    async def _screen(
        self, candidate_id: str, record: RoundRecord, parent_log: Log
    ) -> dict[str, Any]:
        """Eq. 56: invalid or inactive candidates are rejected before the paired gain."""
        harness = self._harnesses[candidate_id]
        if harness.invalid is not None:
            return {"passed": False, "reason": f"invalid patch: {harness.invalid}"}
        log = await self._log(candidate_id, f"screen:{record.round}", record.subset)
        parent = {task: parent_log[task] for task in record.subset}
        if not _valid(log) or not _valid(parent):
            return {"passed": False, "reason": "invalid log (infrastructure failures)"}
        assert harness.proposal is not None
        event = harness.proposal.activation
        if not any(event in a.events for attempts in log.values() for a in attempts):
            return {"passed": False, "reason": f"never activated ({event!r} not recorded)"}
        gains = [_mean(log[task]) - _mean(parent[task]) for task in record.subset]
        gain = statistics.fmean(gains)
        t = _t_statistic(gains)
        passed = len(gains) >= 2 and gain > 0 and t >= self._settings.screen
        return {
            "passed": passed,
            "gain": gain,
            "t": None if math.isinf(t) else t,
            "t_infinite": math.isinf(t),
            "reason": "passed" if passed else f"paired gain {gain:+.3f}, t {t:.2f} < threshold",
        }

    async def _log(self, harness_id: str, phase: str, tasks: Sequence[str]) -> Log:
        """K attempts per task, read back when recorded, else run (invalid ones retried)."""
        spec = self._harnesses[harness_id].spec
        log: Log = {}
        for task in tasks:
            log[task] = []
            for k in range(self._settings.attempts):
                key = (harness_id, phase, task, k)
                record = self._done.get(key)
                if record is None:
                    record = await self._attempt(harness_id, spec, phase, task, k)
                    await self._store.add_attempt(self._run_id, record)
                    self._done[key] = record
                log[task].append(record)
        return log

    async def _attempt(
        self, harness_id: str, spec: Harness, phase: str, task: str, k: int
    ) -> AttemptRecord:
        tries = 0
        while True:
            tries += 1
            result = await self._evaluator.attempt(spec, task, k)
            if result.valid or tries > self._settings.retries:
                return AttemptRecord(
                    harness_id,
                    phase,
                    task,
                    k,
                    min(1.0, max(0.0, result.score)),
                    result.valid,
                    result.events,
                    result.trace,
                    tries,
                )

    def _best(self, candidates: Sequence[str], logs: Mapping[str, Log]) -> str:
        """Eq. 46: the highest full-training Util; ties by creation order (h0 first)."""
        valid = [h for h in candidates if h in logs and _valid(logs[h])]
        ordered = sorted(dict.fromkeys(valid), key=lambda h: self._harnesses[h].seq)
        return max(ordered, key=lambda h: _util(logs[h]))

    async def _finish(
        self,
        selected: str,
        train_logs: Mapping[str, Log],
        train: Sequence[str],
        test: Sequence[str],
        rounds: int,
    ) -> EvolutionResult:
        s = self._settings
        development = sum(1 for key in self._done if key[1] != "test")
        test_before = test_after = None
        if test:
            test_before = _util(await self._log(H0, "test", test))
            test_after = (
                test_before if selected == H0 else _util(await self._log(selected, "test", test))
            )
        return EvolutionResult(
            run_id=self._run_id,
            selected=selected,
            selected_cell=self._harnesses[selected].cell,
            train_before=_util(train_logs[H0]),
            train_after=_util(train_logs[selected]),
            test_before=test_before,
            test_after=test_after,
            rounds=rounds,
            attempts_used=development,
            attempts_bound=s.budget(len(train)),
            test_attempts=sum(1 for key in self._done if key[1] == "test"),
        )


def _mean(attempts: Sequence[AttemptRecord]) -> float:
    return statistics.fmean(a.score for a in attempts)


def _util(log: Log) -> float:
    """Eq. 43."""
    return statistics.fmean(_mean(attempts) for attempts in log.values())


def _valid(log: Log) -> bool:
    return all(a.valid for attempts in log.values() for a in attempts)


def _t_statistic(gains: Sequence[float]) -> float:
    """Eq. 54, with its zero-variance conventions."""
    mean = statistics.fmean(gains)
    se = statistics.stdev(gains) / math.sqrt(len(gains)) if len(gains) >= 2 else 0.0
    if se > 0:
        return mean / se
    if mean > 0:
        return math.inf
    return -math.inf if mean < 0 else 0.0
