"""Skill Forge's SQLite side: experience-derived skills per agent (the `memory` source),
the cases they come from, intent clusters, and which skills were injected into each turn."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from core.store import Row, Store
from skills.catalog import SkillIndex
from skills.evolution import Case, Cluster, SkillRecord
from skills.model import Skill, SkillHit, SourceName


@dataclass(frozen=True)
class StoredSkill:
    """An experience-derived skill of one agent."""

    id: int
    agent: str
    record: SkillRecord
    cluster_id: int | None

    def as_skill(self) -> Skill:
        """As a retrievable skill (no bundled files: it lives in SQLite)."""
        return Skill(
            id=f"{self.agent}/{self.id}",
            name=self.record.name,
            description=self.record.description,
            body=self.record.body,
            metadata={
                "agent": self.agent,
                "confidence": self.record.confidence,
                "lineage": list(self.record.lineage),
            },
            origin="experience",
        )


class ExperienceStore:
    """Cases, clusters and skills per agent, in raven.db."""

    def __init__(self, store: Store, *, clock: Callable[[], float] = time.time) -> None:
        self._store = store
        self._clock = clock

    # -- cases -----------------------------------------------------------------------

    async def add_case(self, agent: str, run_id: str, node_id: str, case: Case) -> Case:
        """Record a case once per (run, node); returns it with its stored id."""
        existing = await self._store.fetchone(
            "SELECT id FROM agent_cases WHERE agent = ? AND run_id = ? AND node_id = ?",
            (agent, run_id, node_id),
        )
        if existing is not None:
            return _with_id(case, str(existing["id"]))
        row_id = await self._insert(
            "INSERT INTO agent_cases (agent, run_id, node_id, intent, approach, insight,"
            " quality, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                agent,
                run_id,
                node_id,
                case.intent,
                case.approach,
                case.insight,
                case.quality,
                case.timestamp,
            ),
        )
        return _with_id(case, str(row_id))

    async def _insert(self, sql: str, params: Sequence[object]) -> int:
        def insert(db: sqlite3.Connection) -> int:
            return int(db.execute(sql, params).lastrowid or 0)

        row_id: int = await self._store.write(insert)
        return row_id

    async def unrevised(self, limit: int = 200) -> list[tuple[str, Case]]:
        """(agent, case) of cases no skill revision has seen yet, oldest first."""
        rows = await self._store.fetchall(
            "SELECT * FROM agent_cases WHERE revised = 0 ORDER BY id LIMIT ?", (limit,)
        )
        return [(str(r["agent"]), _case(r)) for r in rows]

    async def mark_revised(self, case_id: str) -> None:
        """The case went through revision (or cannot: too poor to learn from)."""
        await self._store.execute(
            "UPDATE agent_cases SET revised = 1 WHERE id = ?", (int(case_id),)
        )

    async def cases(self, agent: str, ids: Sequence[str]) -> list[Case]:
        """The agent's cases with these ids (missing ones are left out)."""
        numeric = [int(i) for i in ids if i.isdigit()]
        if not numeric:
            return []
        marks = ",".join("?" * len(numeric))
        rows = await self._store.fetchall(
            f"SELECT * FROM agent_cases WHERE agent = ? AND id IN ({marks})",
            (agent, *numeric),
        )
        return [_case(r) for r in rows]

    # -- clusters --------------------------------------------------------------------

    async def clusters(self, agent: str) -> list[Cluster]:
        """The agent's intent clusters."""
        rows = await self._store.fetchall(
            "SELECT * FROM skill_clusters WHERE agent = ? ORDER BY id", (agent,)
        )
        return [
            Cluster(
                id=str(r["id"]),
                centroid=np.frombuffer(r["centroid"], dtype=np.float64).copy(),
                count=int(r["count"]),
                members=tuple(json.loads(r["members"])),
                timestamp=float(r["updated_at"]),
                previews=tuple(json.loads(r["previews"])),
            )
            for r in rows
        ]

    async def save_cluster(self, agent: str, cluster: Cluster, *, created: bool) -> str:
        """Insert a new cluster or update one; returns its id."""
        values = (
            np.asarray(cluster.centroid, dtype=np.float64).tobytes(),
            cluster.count,
            json.dumps(list(cluster.members)),
            json.dumps(list(cluster.previews)),
            cluster.timestamp,
        )
        if created:
            row_id = await self._insert(
                "INSERT INTO skill_clusters (agent, centroid, count, members, previews,"
                " updated_at) VALUES (?, ?, ?, ?, ?, ?)",
                (agent, *values),
            )
            return str(row_id)
        await self._store.execute(
            "UPDATE skill_clusters SET centroid = ?, count = ?, members = ?, previews = ?,"
            " updated_at = ? WHERE id = ?",
            (*values, int(cluster.id)),
        )
        return cluster.id

    # -- skills ----------------------------------------------------------------------

    async def skills(self, agent: str | None = None) -> list[StoredSkill]:
        """Experience skills of one agent (all agents when None), oldest first."""
        if agent is None:
            rows = await self._store.fetchall("SELECT * FROM experience_skills ORDER BY id")
        else:
            rows = await self._store.fetchall(
                "SELECT * FROM experience_skills WHERE agent = ? ORDER BY id", (agent,)
            )
        return [_stored(r) for r in rows]

    async def write(
        self, agent: str, emitted: Sequence[SkillRecord], *, cluster_id: str | None
    ) -> None:
        """Write emitted records (new or revised, by name) in one transaction."""
        now = self._clock()

        def upsert(db: sqlite3.Connection) -> None:
            for r in emitted:
                db.execute(
                    "INSERT INTO experience_skills (agent, name, description, body, confidence,"
                    " lineage, cluster_id, created_at, updated_at)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
                    " ON CONFLICT (agent, name) DO UPDATE SET description = excluded.description,"
                    " body = excluded.body, confidence = excluded.confidence,"
                    " lineage = excluded.lineage, cluster_id = excluded.cluster_id,"
                    " updated_at = excluded.updated_at",
                    (
                        agent,
                        r.name,
                        r.description,
                        r.body,
                        r.confidence,
                        json.dumps(list(r.lineage)),
                        int(cluster_id) if cluster_id else None,
                        now,
                        now,
                    ),
                )

        await self._store.write(upsert)

    # -- injections ------------------------------------------------------------------

    async def record_injection(
        self, turn_id: str, conversation_id: str, hits: Sequence[SkillHit]
    ) -> None:
        """Which skills entered a turn (selection, not evidence they were used)."""
        now = self._clock()
        await self._store.executemany(
            "INSERT INTO skill_injections (turn_id, conversation_id, position, qid, name,"
            " created_at) VALUES (?, ?, ?, ?, ?, ?)",
            [(turn_id, conversation_id, i, h.qid, h.name, now) for i, h in enumerate(hits)],
        )

    async def injected(self, turn_id: str) -> list[str]:
        """The qualified ids injected into one turn, in order."""
        rows = await self._store.fetchall(
            "SELECT qid FROM skill_injections WHERE turn_id = ? ORDER BY position", (turn_id,)
        )
        return [str(r["qid"]) for r in rows]


class ExperienceSkillSource:
    """The `memory` skill source: experience-derived skills (one agent's, or all)."""

    def __init__(self, store: ExperienceStore, agent: str | None = None) -> None:
        self._store = store
        self._agent = agent

    @property
    def name(self) -> SourceName:
        """The memory source."""
        return "memory"

    async def search(self, query: str, k: int, history: Sequence[str] = ()) -> list[SkillHit]:
        """BM25 over the stored skills, best first."""
        skills = [s.as_skill() for s in await self._store.skills(self._agent)]
        return SkillIndex(skills, "memory").search(query, k)


def _with_id(case: Case, case_id: str) -> Case:
    return Case(case_id, case.timestamp, case.intent, case.approach, case.insight, case.quality)


def _case(r: Row) -> Case:
    return Case(
        str(r["id"]),
        float(r["created_at"]),
        r["intent"],
        r["approach"],
        r["insight"],
        float(r["quality"] if r["quality"] is not None else 0.0),
    )


def _stored(r: Row) -> StoredSkill:
    record = SkillRecord(
        r["name"],
        r["description"],
        r["body"],
        float(r["confidence"]),
        tuple(json.loads(r["lineage"])),
    )
    return StoredSkill(int(r["id"]), r["agent"], record, r["cluster_id"])
