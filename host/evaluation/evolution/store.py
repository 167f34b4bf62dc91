"""Evolution's durable record (SQLite): what was created, scored and decided.

Every write is committed before the loop acts on it, so a restart continues a run from its
records: finished attempts are read back, not redone; a round's sample and proposals are
reused, so the proposer is not asked twice for one round.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from core.store import Store
from host.evaluation.evolution.harness import Harness, Proposal


@dataclass(frozen=True)
class AttemptRecord:
    """One scored attempt of a harness on a task in one phase (`train`, `screen:R`, `test`)."""

    harness_id: str
    phase: str
    task_id: str
    attempt: int
    score: float
    valid: bool
    events: frozenset[str]
    trace: str
    tries: int


@dataclass(frozen=True)
class StoredHarness:
    """A harness a run created: h0 (seq 0) or a candidate with its proposal."""

    id: str
    seq: int
    spec: Harness
    parent_id: str | None = None
    round: int | None = None
    proposal: Proposal | None = None
    invalid: str | None = None

    @property
    def cell(self) -> str | None:
        """The gene-bank cell its proposal declared (None for h0)."""
        return self.proposal.cell if self.proposal is not None else None


@dataclass(frozen=True)
class RoundRecord:
    """A round's parent, sample, proposals (candidate ids in order) and decisions."""

    round: int
    parent_id: str
    subset: tuple[str, ...]
    candidates: tuple[str, ...]
    decisions: dict[str, Any] | None


class EvolutionStore:
    """Reads and writes one database's evolution records."""

    def __init__(self, store: Store) -> None:
        self._store = store

    async def start_run(self, run_id: str, agent: str, settings: dict[str, Any]) -> bool:
        """Record a new run; False when it exists (a restart continues it)."""
        row = await self._store.fetchone("SELECT id FROM evo_runs WHERE id = ?", (run_id,))
        if row is not None:
            return False
        await self._store.execute(
            "INSERT INTO evo_runs (id, agent, settings, state, created_at) VALUES (?, ?, ?, ?, ?)",
            (run_id, agent, json.dumps(settings), "running", time.time()),
        )
        return True

    async def finish_run(self, run_id: str, result: dict[str, Any]) -> None:
        """The run ended with `result`."""
        await self._store.execute(
            "UPDATE evo_runs SET state = 'finished', result = ? WHERE id = ?",
            (json.dumps(result), run_id),
        )

    async def result(self, run_id: str) -> dict[str, Any] | None:
        """A finished run's result."""
        row = await self._store.fetchone("SELECT result FROM evo_runs WHERE id = ?", (run_id,))
        return json.loads(row["result"]) if row is not None and row["result"] else None

    async def add_harness(self, run_id: str, harness: StoredHarness) -> None:
        """Record a harness (idempotent by id)."""
        await self._store.execute(*_harness_row(run_id, harness))

    async def harnesses(self, run_id: str) -> dict[str, StoredHarness]:
        """Every harness of a run, by id."""
        rows = await self._store.fetchall(
            "SELECT * FROM evo_harnesses WHERE run_id = ? ORDER BY seq", (run_id,)
        )
        return {
            r["id"]: StoredHarness(
                id=r["id"],
                seq=r["seq"],
                spec=Harness.model_validate_json(r["spec"]),
                parent_id=r["parent_id"],
                round=r["round"],
                proposal=Proposal.model_validate_json(r["proposal"]) if r["proposal"] else None,
                invalid=r["invalid"],
            )
            for r in rows
        }

    async def add_attempt(self, run_id: str, record: AttemptRecord) -> None:
        """Record a scored attempt (committed before the loop uses it)."""
        await self._store.execute(
            "INSERT OR REPLACE INTO evo_attempts (run_id, harness_id, phase, task_id, attempt,"
            " score, valid, events, trace, tries) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                run_id,
                record.harness_id,
                record.phase,
                record.task_id,
                record.attempt,
                record.score,
                int(record.valid),
                json.dumps(sorted(record.events)),
                record.trace,
                record.tries,
            ),
        )

    async def attempts(self, run_id: str) -> list[AttemptRecord]:
        """Every attempt of a run."""
        rows = await self._store.fetchall(
            "SELECT * FROM evo_attempts WHERE run_id = ? ORDER BY rowid", (run_id,)
        )
        return [
            AttemptRecord(
                harness_id=r["harness_id"],
                phase=r["phase"],
                task_id=r["task_id"],
                attempt=r["attempt"],
                score=r["score"],
                valid=bool(r["valid"]),
                events=frozenset(json.loads(r["events"])),
                trace=r["trace"],
                tries=r["tries"],
            )
            for r in rows
        ]

    async def add_round(
        self, run_id: str, record: RoundRecord, candidates: list[StoredHarness]
    ) -> None:
        """Record a round's sample, its proposals and their harnesses in one transaction,
        before any is evaluated (a restart reuses them instead of proposing again)."""
        async with self._store.transaction() as db:
            for harness in candidates:
                await db.execute(*_harness_row(run_id, harness))
            await db.execute(
                "INSERT OR IGNORE INTO evo_rounds (run_id, round, parent_id, subset, proposals)"
                " VALUES (?, ?, ?, ?, ?)",
                (
                    run_id,
                    record.round,
                    record.parent_id,
                    json.dumps(record.subset),
                    json.dumps(record.candidates),
                ),
            )

    async def decide_round(self, run_id: str, round_no: int, decisions: dict[str, Any]) -> None:
        """Record a round's outcome (it is finished from then on)."""
        await self._store.execute(
            "UPDATE evo_rounds SET decisions = ? WHERE run_id = ? AND round = ?",
            (json.dumps(decisions), run_id, round_no),
        )

    async def rounds(self, run_id: str) -> dict[int, RoundRecord]:
        """Every recorded round of a run."""
        rows = await self._store.fetchall(
            "SELECT * FROM evo_rounds WHERE run_id = ? ORDER BY round", (run_id,)
        )
        return {
            r["round"]: RoundRecord(
                round=r["round"],
                parent_id=r["parent_id"],
                subset=tuple(json.loads(r["subset"])),
                candidates=tuple(json.loads(r["proposals"])),
                decisions=json.loads(r["decisions"]) if r["decisions"] else None,
            )
            for r in rows
        }


def _harness_row(run_id: str, harness: StoredHarness) -> tuple[str, tuple[Any, ...]]:
    return (
        "INSERT OR IGNORE INTO evo_harnesses (run_id, id, seq, parent_id, round, cell, spec,"
        " proposal, invalid) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            run_id,
            harness.id,
            harness.seq,
            harness.parent_id,
            harness.round,
            harness.cell,
            harness.spec.model_dump_json(),
            harness.proposal.model_dump_json() if harness.proposal else None,
            harness.invalid,
        ),
    )
