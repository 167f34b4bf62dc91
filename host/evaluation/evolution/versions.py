"""Harness versions of each agent: what evolution produced (with its lineage and test-split
result), and which one is active. A version becomes active only when an admin promotes it;
`rollback` returns to the version it replaced (or to the built-in harness)."""

from __future__ import annotations

import difflib
import json
import time
from dataclasses import dataclass
from typing import Any, Literal

from core.store import Store
from host.evaluation.evolution.harness import Harness
from host.evaluation.evolution.search import H0, EvolutionResult
from host.evaluation.evolution.store import EvolutionStore

VersionState = Literal["proposed", "active", "retired"]


class VersionError(ValueError):
    """A version that does not exist or cannot take that action; the message says which."""


@dataclass(frozen=True)
class HarnessVersion:
    """One stored harness of an agent."""

    agent: str
    version: int
    spec: Harness
    lineage: list[str]
    result: dict[str, Any]
    state: VersionState
    replaced: int | None
    created_at: float
    decided_by: str | None


class HarnessVersions:
    """Reads and changes the harness versions in raven.db."""

    def __init__(self, store: Store) -> None:
        self._store = store

    async def add(
        self, agent: str, spec: Harness, lineage: list[str], result: dict[str, Any]
    ) -> int:
        """Store an evolved harness as the agent's next version, not active."""
        async with self._store.transaction() as db:
            cur = await db.execute(
                "SELECT COALESCE(MAX(version), 0) + 1 FROM harness_versions WHERE agent = ?",
                (agent,),
            )
            row = await cur.fetchone()
            version = int(row[0]) if row else 1
            await db.execute(
                "INSERT INTO harness_versions (agent, version, spec, lineage, result, state,"
                " created_at) VALUES (?, ?, ?, ?, ?, 'proposed', ?)",
                (
                    agent,
                    version,
                    spec.model_dump_json(),
                    json.dumps(lineage),
                    json.dumps(result),
                    time.time(),
                ),
            )
        return version

    async def list(self, agent: str | None = None) -> list[HarnessVersion]:
        """Every version (of one agent), oldest first."""
        where, params = ("WHERE agent = ?", (agent,)) if agent else ("", ())
        rows = await self._store.fetchall(
            f"SELECT * FROM harness_versions {where} ORDER BY agent, version", params
        )
        return [_version(r) for r in rows]

    async def get(self, agent: str, version: int) -> HarnessVersion:
        """One version (VersionError when there is none)."""
        row = await self._store.fetchone(
            "SELECT * FROM harness_versions WHERE agent = ? AND version = ?", (agent, version)
        )
        if row is None:
            raise VersionError(
                f"{agent} has no harness version {version}; `raven-bot harness list` shows them"
            )
        return _version(row)

    async def active(self) -> dict[str, Harness]:
        """Each agent's active harness (agents using the built-in one are absent)."""
        rows = await self._store.fetchall(
            "SELECT agent, spec FROM harness_versions WHERE state = 'active'"
        )
        return {r["agent"]: Harness.model_validate_json(r["spec"]) for r in rows}

    async def promote(self, agent: str, version: int, by: str) -> HarnessVersion | None:
        """Make `version` active; returns the version it replaced (None: the built-in)."""
        target = await self.get(agent, version)
        if target.state == "active":
            raise VersionError(f"{agent} version {version} is already active")
        current = await self._current(agent)
        async with self._store.transaction() as db:
            await db.execute(
                "UPDATE harness_versions SET state = 'retired' WHERE agent = ? AND state ="
                " 'active'",
                (agent,),
            )
            await db.execute(
                "UPDATE harness_versions SET state = 'active', replaced = ?, decided_by = ?,"
                " decided_at = ? WHERE agent = ? AND version = ?",
                (current.version if current else None, by, time.time(), agent, version),
            )
        return current

    async def rollback(self, agent: str, by: str) -> int | None:
        """Deactivate the active version and reactivate the one it replaced; returns that
        version (None: the built-in harness)."""
        current = await self._current(agent)
        if current is None:
            raise VersionError(f"{agent} runs its built-in harness; there is nothing to undo")
        async with self._store.transaction() as db:
            await db.execute(
                "UPDATE harness_versions SET state = 'retired', decided_by = ?, decided_at = ?"
                " WHERE agent = ? AND version = ?",
                (by, time.time(), agent, current.version),
            )
            if current.replaced is not None:
                await db.execute(
                    "UPDATE harness_versions SET state = 'active' WHERE agent = ? AND version = ?",
                    (agent, current.replaced),
                )
        return current.replaced

    async def _current(self, agent: str) -> HarnessVersion | None:
        row = await self._store.fetchone(
            "SELECT * FROM harness_versions WHERE agent = ? AND state = 'active'", (agent,)
        )
        return _version(row) if row is not None else None


async def store_selected(
    store: Store, records: EvolutionStore, agent: str, result: EvolutionResult
) -> int | None:
    """A finished run's selected harness as the agent's next version (once per run, with
    its lineage back to h0); None when h0 stayed the best."""
    if result.selected == H0:
        return None
    versions = HarnessVersions(store)
    for existing in await versions.list(agent):
        if existing.result.get("run_id") == result.run_id:
            return existing.version
    harnesses = await records.harnesses(result.run_id)
    lineage, at = [], harnesses[result.selected]
    while True:
        lineage.append(f"{result.run_id}/{at.id}" + (f" ({at.cell})" if at.cell else ""))
        if at.parent_id is None:
            break
        at = harnesses[at.parent_id]
    return await versions.add(agent, harnesses[result.selected].spec, lineage, result.as_json())


def diff(old: Harness, new: Harness, old_name: str, new_name: str) -> str:
    """A unified diff of two harnesses (prompt line by line, the rest as JSON)."""

    def lines(h: Harness) -> list[str]:
        rest = h.model_dump(mode="json", exclude={"prompt"})
        return [*h.prompt.splitlines(), "---", *json.dumps(rest, indent=1).splitlines()]

    return "\n".join(difflib.unified_diff(lines(old), lines(new), old_name, new_name, lineterm=""))


def _version(row: Any) -> HarnessVersion:
    return HarnessVersion(
        agent=row["agent"],
        version=row["version"],
        spec=Harness.model_validate_json(row["spec"]),
        lineage=json.loads(row["lineage"]),
        result=json.loads(row["result"]),
        state=row["state"],
        replaced=row["replaced"],
        created_at=row["created_at"],
        decided_by=row["decided_by"],
    )
