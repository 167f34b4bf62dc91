"""Group memory records in SQLite: round summaries, outcome entries and the verdict ledger
(append-only). The recall index gets the same text under the host's and agents' libraries."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from memory.group import Outcome, Verdict
from memory.store import Store


def host_library(user_owner: str) -> str:
    """The host's shared library for one user (an owner derived from the user's)."""
    return f"host:{user_owner}"


def agent_library(agent: str) -> str:
    """An agent's library (verdicts about it)."""
    return f"agent:{agent}"


@dataclass(frozen=True)
class StoredVerdict:
    """One verdict of the ledger."""

    id: int
    agent: str
    run_id: str
    phase: str
    outcome: str
    body: str
    created_at: float


class GroupStore:
    """Writes round summaries and verdicts; reads the most recent verdicts about an agent."""

    def __init__(self, store: Store, *, clock: Callable[[], float] = time.time) -> None:
        self._store = store
        self._clock = clock

    async def deposit_round(
        self,
        run_id: str,
        conversation_id: str,
        outcomes: Mapping[str, Outcome],
        summary: str,
        verdicts: Sequence[Verdict],
    ) -> tuple[int, list[int]] | None:
        """Record a round's summary and close verdicts once (None when it was recorded)."""
        now = self._clock()

        def insert(db: sqlite3.Connection) -> tuple[int, list[int]] | None:
            cur = db.execute(
                "INSERT OR IGNORE INTO round_summaries (run_id, conversation_id, outcome,"
                " summary, created_at) VALUES (?, ?, ?, ?, ?)",
                (run_id, conversation_id, json.dumps(dict(outcomes)), summary, now),
            )
            if cur.rowcount == 0:
                return None
            summary_id = int(cur.lastrowid or 0)
            ids = []
            for v in verdicts:
                cur = db.execute(
                    "INSERT INTO verdicts (author, subject_agent, run_id, phase, outcome, body,"
                    " covered_nodes, conversation_id, created_at)"
                    " VALUES ('host', ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        v.agent,
                        v.run_id,
                        v.phase,
                        v.outcome,
                        v.body,
                        json.dumps(list(v.covered_nodes)),
                        conversation_id,
                        now,
                    ),
                )
                ids.append(int(cur.lastrowid or 0))
            return summary_id, ids

        result: tuple[int, list[int]] | None = await self._store.write(insert)
        return result

    async def recent_verdicts(self, agent: str, k: int) -> list[StoredVerdict]:
        """The k most recent verdicts about `agent`, newest first (prefetch, Eq. 34)."""
        rows = await self._store.fetchall(
            "SELECT * FROM verdicts WHERE subject_agent = ? ORDER BY id DESC LIMIT ?", (agent, k)
        )
        return [
            StoredVerdict(
                id=int(r["id"]),
                agent=r["subject_agent"],
                run_id=r["run_id"] or "",
                phase=r["phase"],
                outcome=r["outcome"],
                body=r["body"],
                created_at=r["created_at"],
            )
            for r in rows
        ]
