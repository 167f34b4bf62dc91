"""Schema migrations each package registers for its own tables, and the runner applying them.

A migration is named by its owner (a stable name such as "memory", not a module path: code
moves, the ledger stays) and a version counted from 1 within that owner. The ledger table
`schema_ledger` records every (package, version) applied. Databases made before the ledger
(74ad39f and earlier) recorded one global number per migration in `schema_migrations`; each
migration that came out of one of those says so (`legacy`), and the first open maps the old
numbers onto the ledger once and drops the old table.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Protocol

import aiosqlite

log = logging.getLogger(__name__)

LEDGER_TABLE = "schema_ledger"
LEGACY_TABLE = "schema_migrations"

_LEDGER_DDL = (
    f"CREATE TABLE IF NOT EXISTS {LEDGER_TABLE} ("
    " package TEXT NOT NULL, version INTEGER NOT NULL, name TEXT NOT NULL,"
    " applied_at REAL NOT NULL, PRIMARY KEY (package, version))"
)


@dataclass(frozen=True)
class Migration:
    """One schema change of one package's tables, applied once, in version order."""

    package: str
    version: int
    name: str
    sql: str
    # The global migration number that created this change before the ledger existed (None
    # for migrations written since).
    legacy: int | None = None

    @property
    def key(self) -> tuple[str, int]:
        """Its row in the ledger."""
        return (self.package, self.version)

    def __str__(self) -> str:
        return f"{self.package} {self.version}"


class MigrationError(RuntimeError, sqlite3.DatabaseError):
    """The database's schema history is one this code cannot upgrade.

    A DatabaseError to the callers that report a database that will not open, a RuntimeError
    to the CLI's last-resort handler: either way one clear line, no traceback.
    """


class Transactional(Protocol):
    """What the runner needs of a store: exclusive write transactions."""

    def transaction(self) -> AbstractAsyncContextManager[aiosqlite.Connection]: ...


def check_order(migrations: Sequence[Migration]) -> None:
    """Raise ValueError unless each package's migrations are numbered 1, 2, … in list order."""
    last: dict[str, int] = {}
    for migration in migrations:
        expected = last.get(migration.package, 0) + 1
        if migration.version != expected:
            raise ValueError(
                f"migration {migration} ({migration.name!r}) is out of order: "
                f"{migration.package} {expected} comes next"
            )
        last[migration.package] = migration.version


async def migrate(
    store: Transactional,
    migrations: Sequence[Migration],
    *,
    clock: Callable[[], float] = time.time,
) -> list[Migration]:
    """Apply every migration not yet in the ledger, in list order; return those applied now.

    Packages run in the order the caller lists them (a migration may read another package's
    tables: list that package first). Each migration commits on its own, with its ledger row.
    Ledger rows this code does not know (a newer release wrote them) are left alone, as the
    numbered migrations before the ledger left unknown numbers alone.
    """
    check_order(migrations)
    async with store.transaction() as db:
        await db.execute(_LEDGER_DDL)
        await _adopt_legacy(db, migrations)
        known = {m.key for m in migrations}
        unknown = [key for key in await _recorded(db) if key not in known]
    if unknown:
        log.warning("the database records migrations this code does not know: %s", unknown)
    applied: list[Migration] = []
    for migration in migrations:
        async with store.transaction() as db:
            # Checked inside the transaction: another process may have applied it meanwhile.
            if migration.key in await _recorded(db):
                continue
            for statement in _split_sql(migration.sql):
                await db.execute(statement)
            await _record(db, [migration], clock())
            applied.append(migration)
    return applied


async def _adopt_legacy(db: aiosqlite.Connection, migrations: Iterable[Migration]) -> None:
    """Carry a pre-ledger database's global numbers over to the ledger, once."""
    found = await db.execute_fetchall(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (LEGACY_TABLE,)
    )
    if not list(found):
        return
    claimed: dict[int, list[Migration]] = {}
    for migration in migrations:
        if migration.legacy is not None:
            claimed.setdefault(migration.legacy, []).append(migration)
    rows = list(
        await db.execute_fetchall(
            f"SELECT version, applied_at FROM {LEGACY_TABLE} ORDER BY version"
        )
    )
    for version, applied_at in rows:
        if version not in claimed:
            raise MigrationError(
                f"the database records schema version {version}, which this release cannot "
                "upgrade (a newer release made it); use that release or a fresh RAVEN_HOME"
            )
        await _record(db, claimed[version], applied_at)
    await db.execute(f"DROP TABLE {LEGACY_TABLE}")
    log.info("moved %d numbered migrations to the per-package ledger", len(rows))


async def _recorded(db: aiosqlite.Connection) -> set[tuple[str, int]]:
    rows = await db.execute_fetchall(f"SELECT package, version FROM {LEDGER_TABLE}")
    return {(str(package), int(version)) for package, version in rows}


async def _record(db: aiosqlite.Connection, migrations: Iterable[Migration], at: float) -> None:
    await db.executemany(
        f"INSERT INTO {LEDGER_TABLE} (package, version, name, applied_at) VALUES (?, ?, ?, ?)",
        [(m.package, m.version, m.name, at) for m in migrations],
    )


def _split_sql(script: str) -> list[str]:
    # Migrations hold plain DDL without semicolons inside literals, so a split is safe.
    return [part.strip() for part in script.split(";") if part.strip()]
