"""Store: WAL, foreign keys, idempotent migrations, transactions under concurrency."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from memory.migrations import MIGRATIONS
from memory.store import Store


async def test_open_applies_migrations_once(tmp_path: Path) -> None:
    store = Store(tmp_path / "raven.db")
    await store.open()
    assert await store.schema_version() == max(v for v, _, _ in MIGRATIONS)
    mode = await store.fetchone("PRAGMA journal_mode")
    assert mode is not None and mode[0] == "wal"
    assert await store.migrate() == []
    await store.close()
    reopened = Store(tmp_path / "raven.db")
    await reopened.open()
    rows = await reopened.fetchall("SELECT version FROM schema_migrations")
    assert [r["version"] for r in rows] == [v for v, _, _ in MIGRATIONS]
    await reopened.close()


async def test_foreign_keys_enforced(store: Store) -> None:
    with pytest.raises(Exception, match="FOREIGN KEY"):
        await store.execute(
            "INSERT INTO turns (id, conversation_id, kind, author_id, author_name, status,"
            " started_at) VALUES ('t', 'missing', 'user', 'u', 'u', 'running', 0)"
        )


async def test_transaction_rolls_back_on_error(store: Store) -> None:
    with pytest.raises(RuntimeError):
        async with store.transaction() as db:
            await db.execute("INSERT INTO dedup (key, expires_at) VALUES ('a', 1)")
            raise RuntimeError("boom")
    assert await store.fetchone("SELECT * FROM dedup WHERE key = 'a'") is None


async def test_cancelled_transaction_rolls_back_and_store_still_works(store: Store) -> None:
    entered = asyncio.Event()

    async def slow_writer() -> None:
        async with store.transaction() as db:
            await db.execute("INSERT INTO dedup (key, expires_at) VALUES ('x', 1)")
            entered.set()
            await asyncio.sleep(10)

    task = asyncio.create_task(slow_writer())
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await store.fetchone("SELECT * FROM dedup WHERE key = 'x'") is None
    await store.execute("INSERT INTO dedup (key, expires_at) VALUES ('y', 1)")
    assert await store.fetchone("SELECT * FROM dedup WHERE key = 'y'") is not None


async def test_concurrent_writers_are_serialised(store: Store) -> None:
    async def bump(i: int) -> None:
        async with store.transaction() as db:
            cur = await db.execute("SELECT COUNT(*) FROM dedup")
            row = await cur.fetchone()
            assert row is not None
            await asyncio.sleep(0)
            await db.execute(
                "INSERT INTO dedup (key, expires_at) VALUES (?, ?)", (f"k{i}", float(row[0]))
            )

    await asyncio.gather(*(bump(i) for i in range(50)))
    rows = await store.fetchall("SELECT expires_at FROM dedup ORDER BY expires_at")
    # Each writer saw every earlier commit: counts 0..49 with no duplicates.
    assert [int(r["expires_at"]) for r in rows] == list(range(50))


async def test_closed_store_says_so(tmp_path: Path) -> None:
    store = Store(tmp_path / "raven.db")
    with pytest.raises(RuntimeError, match="not open"):
        await store.fetchone("SELECT 1")


async def test_reads_see_commits_while_other_reads_run(store: Store) -> None:
    running = True

    async def reader() -> None:
        while running:
            await store.fetchall("SELECT * FROM dedup")

    readers = [asyncio.create_task(reader()) for _ in range(3)]
    try:
        for i in range(50):
            await store.execute("INSERT INTO dedup (key, expires_at) VALUES (?, 1)", (f"k{i}",))
            # A concurrent reader must never pin an old snapshot for this read.
            assert await store.fetchone("SELECT 1 FROM dedup WHERE key = ?", (f"k{i}",))
    finally:
        running = False
        await asyncio.gather(*readers)
