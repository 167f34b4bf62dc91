"""Store: WAL, foreign keys, idempotent migrations, transactions under concurrency."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
from pathlib import Path

import pytest

from bot.schema import all_migrations
from core.store import Store
from tests.helpers import eventually


async def test_open_applies_migrations_once(tmp_path: Path) -> None:
    migrations = all_migrations()
    store = Store(tmp_path / "raven.db", migrations)
    await store.open()
    highest = {m.package: m.version for m in migrations}
    assert await store.schema_versions() == dict(sorted(highest.items()))
    mode = await store.fetchone("PRAGMA journal_mode")
    assert mode is not None and mode[0] == "wal"
    assert await store.migrate() == []
    await store.close()
    reopened = Store(tmp_path / "raven.db", all_migrations())
    await reopened.open()
    rows = await reopened.fetchall("SELECT package, version FROM schema_ledger")
    assert sorted((r["package"], r["version"]) for r in rows) == sorted(m.key for m in migrations)
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
    store = Store(tmp_path / "raven.db", all_migrations())
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


async def test_cancel_while_begin_waits_for_the_lock_leaves_no_open_transaction(
    tmp_path: Path,
) -> None:
    # Regression: BEGIN IMMEDIATE was awaited unshielded outside the try; a cancel while it
    # waited left the shared writer inside a transaction and every later write failed.
    store = Store(tmp_path / "raven.db", all_migrations())
    await store.open()
    blocker = sqlite3.connect(tmp_path / "raven.db", isolation_level=None, check_same_thread=False)
    blocker.execute("BEGIN IMMEDIATE")
    try:

        async def writer() -> None:
            async with store.transaction() as db:
                await db.execute("INSERT INTO dedup (key, expires_at) VALUES ('w', 1)")

        task = asyncio.create_task(writer())
        for _ in range(8):
            # Let the BEGIN reach the connection's thread, where it waits for `blocker`.
            await asyncio.sleep(0)
        task.cancel()
        await asyncio.to_thread(blocker.execute, "COMMIT")
        with pytest.raises(asyncio.CancelledError):
            await task
        await store.execute("INSERT INTO dedup (key, expires_at) VALUES ('after', 1)")
        assert await store.fetchone("SELECT 1 FROM dedup WHERE key = 'after'") is not None
        assert await store.fetchone("SELECT 1 FROM dedup WHERE key = 'w'") is None
    finally:
        blocker.close()
        await store.close()


async def test_cancelling_at_every_await_keeps_transactions_atomic(store: Store) -> None:
    # Cancel one transaction after k loop iterations, for every k until it completes on its
    # own: whatever point the cancel lands on, all three rows or none exist, and the store
    # keeps working.
    for k in range(200):

        async def three_rows(k: int = k) -> None:
            async with store.transaction() as db:
                for part in ("a", "b", "c"):
                    await db.execute(
                        "INSERT INTO dedup (key, expires_at) VALUES (?, 1)", (f"{k}{part}",)
                    )

        task = asyncio.create_task(three_rows())
        for _ in range(k):
            await asyncio.sleep(0)
        finished = task.done()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        rows = await store.fetchall("SELECT key FROM dedup WHERE key LIKE ?", (f"{k}_",))
        assert len(rows) in (0, 3), f"cancel after {k} steps left {len(rows)} row(s)"
        await store.execute("INSERT INTO dedup (key, expires_at) VALUES (?, 1)", (f"ok{k}",))
        if finished:
            break
    else:
        pytest.fail("the transaction never completed within 200 loop iterations")


async def test_failed_commit_is_rolled_back(store: Store) -> None:
    # A deferred foreign key fails at COMMIT: the transaction must be rolled back, not left
    # open on the shared writer.
    with pytest.raises(sqlite3.IntegrityError):
        async with store.transaction() as db:
            await db.execute("PRAGMA defer_foreign_keys = ON")
            await db.execute(
                "INSERT INTO turns (id, conversation_id, kind, author_id, author_name, status,"
                " started_at) VALUES ('t', 'missing', 'user', 'u', 'u', 'running', 0)"
            )
    await store.execute("INSERT INTO dedup (key, expires_at) VALUES ('next', 1)")
    assert await store.fetchone("SELECT 1 FROM turns WHERE id = 't'") is None


async def test_a_failed_open_leaves_no_connection_thread_behind(tmp_path: Path) -> None:
    # Regression: a PRAGMA or migration failing after connect left the connection (and its
    # non-daemon thread) open, so the CLI hung at exit on a damaged raven.db.
    path = tmp_path / "raven.db"
    path.write_bytes(b"this is not a database" * 100)
    before = set(threading.enumerate())
    store = Store(path, all_migrations())
    with pytest.raises(sqlite3.DatabaseError):
        await store.open()
    # The thread ends just after close() returns: wait for it (bounded), no fixed sleep.
    # Threads are compared by identity, not counted: one an earlier test left may end now.
    await eventually(lambda: not set(threading.enumerate()) - before, within=5)
