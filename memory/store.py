"""The SQLite store: one writer connection behind a lock, one reader, WAL, migrations."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
import time
from collections.abc import AsyncIterator, Awaitable, Iterable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import aiosqlite

from memory.migrations import MIGRATIONS

log = logging.getLogger(__name__)

Row = aiosqlite.Row
T = TypeVar("T")


class Store:
    """Async access to `raven.db`.

    Writes go through `transaction()`, which serialises writers with a lock and runs
    `BEGIN IMMEDIATE … COMMIT`, so concurrent tasks never interleave inside a transaction.
    Reads use a separate connection and see only committed data (WAL).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._writer: aiosqlite.Connection | None = None
        self._reader: aiosqlite.Connection | None = None
        self._write_lock = asyncio.Lock()

    async def open(self) -> None:
        """Open both connections, enable WAL and foreign keys, and apply migrations."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._writer = await self._connect()
            await self._writer.execute("PRAGMA journal_mode=WAL")
            await self.migrate()
            self._reader = await self._connect()
        except BaseException:
            # Each open connection owns a non-daemon thread: leaving one behind on a failed
            # open would keep the process from exiting.
            await self.close()
            raise

    async def _connect(self) -> aiosqlite.Connection:
        # isolation_level=None: we issue BEGIN/COMMIT ourselves.
        conn = await aiosqlite.connect(self.path, isolation_level=None)
        try:
            conn.row_factory = aiosqlite.Row
            await conn.execute("PRAGMA foreign_keys=ON")
            await conn.execute("PRAGMA busy_timeout=5000")
            await conn.execute("PRAGMA synchronous=NORMAL")
        except BaseException:
            await conn.close()
            raise
        return conn

    async def close(self) -> None:
        """Close both connections (idempotent)."""
        for conn in (self._reader, self._writer):
            if conn is not None:
                await conn.close()
        self._reader = self._writer = None

    async def migrate(self) -> list[int]:
        """Apply every migration not yet recorded; return the versions applied now."""
        applied: list[int] = []
        async with self.transaction() as db:
            await db.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations ("
                " version INTEGER PRIMARY KEY, description TEXT NOT NULL,"
                " applied_at REAL NOT NULL)"
            )
        for version, description, script in MIGRATIONS:
            async with self.transaction() as db:
                cur = await db.execute(
                    "SELECT 1 FROM schema_migrations WHERE version = ?", (version,)
                )
                if await cur.fetchone() is not None:
                    continue
                for statement in _split_sql(script):
                    await db.execute(statement)
                await db.execute(
                    "INSERT INTO schema_migrations (version, description, applied_at)"
                    " VALUES (?, ?, ?)",
                    (version, description, time.time()),
                )
                applied.append(version)
        if applied:
            log.info("applied migrations %s to %s", applied, self.path)
        return applied

    async def schema_version(self) -> int:
        """The highest applied migration number."""
        row = await self.fetchone("SELECT MAX(version) AS v FROM schema_migrations")
        return int(row["v"]) if row is not None and row["v"] is not None else 0

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[aiosqlite.Connection]:
        """Run a write transaction; commits on success, rolls back on any exception.

        Cancellation-safe: BEGIN, COMMIT and ROLLBACK always run to the end once sent, and a
        cancelled or failed transaction is rolled back before the lock is released, so the
        shared writer connection is never left inside an open transaction.
        """
        db = self._require(self._writer)
        async with self._write_lock:
            try:
                await run_to_completion(db.execute("BEGIN IMMEDIATE"))
            except BaseException:
                # The BEGIN may have gone through before the cancellation was noticed.
                await _rollback(db)
                raise
            try:
                yield db
                await run_to_completion(db.execute("COMMIT"))
            except BaseException:
                await _rollback(db)
                raise

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Run one write statement in its own transaction; return rows changed."""
        async with self.transaction() as db:
            cur = await db.execute(sql, params)
            return cur.rowcount

    async def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        """Run one write statement for many rows in one transaction."""
        async with self.transaction() as db:
            await db.executemany(sql, rows)

    async def fetchone(self, sql: str, params: Sequence[Any] = ()) -> Row | None:
        """Read one row of committed data."""
        rows = await self.fetchall(sql, params)
        return rows[0] if rows else None

    async def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        """Read all rows of committed data."""
        db = self._require(self._reader or self._writer)
        # One call on the connection's thread: execute, fetch and finalize together. Separate
        # execute/fetch steps from concurrent tasks would interleave on the shared reader and
        # keep an old read snapshot open, so a read could miss a just-committed write.
        rows = await db.execute_fetchall(sql, params)
        return list(rows)

    @staticmethod
    def _require(conn: aiosqlite.Connection | None) -> aiosqlite.Connection:
        if conn is None:
            raise RuntimeError("the store is not open; call Store.open() first")
        return conn


async def run_to_completion(awaitable: Awaitable[T]) -> T:
    """Await `awaitable` to its end even if the caller is cancelled meanwhile.

    A statement handed to the connection's thread runs whatever the caller does; abandoning
    the await would only hide its effect. The cancellation is re-raised once it finished.
    """
    future = asyncio.ensure_future(awaitable)
    cancelled = False
    while True:
        try:
            result = await asyncio.shield(future)
        except asyncio.CancelledError:
            if future.done():
                raise
            cancelled = True
            continue
        except BaseException:
            if cancelled:
                raise asyncio.CancelledError() from None
            raise
        break
    if cancelled:
        raise asyncio.CancelledError()
    return result


async def _rollback(db: aiosqlite.Connection) -> None:
    # "no transaction is active": the BEGIN never happened or COMMIT already ended it.
    with contextlib.suppress(sqlite3.OperationalError):
        await run_to_completion(db.execute("ROLLBACK"))


def _split_sql(script: str) -> list[str]:
    # Migrations hold plain DDL without semicolons inside literals, so a split is safe.
    return [part.strip() for part in script.split(";") if part.strip()]
