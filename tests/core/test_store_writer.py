"""Store's writer task: batching, per-unit savepoints, ingress priority, cancellation, close
and a SIGKILL in the middle of a stream of writes (real SQLite, no mocks)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import signal
import sqlite3
import sys
import textwrap
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from bot.schema import all_migrations
from core.store import Store, StoreClosed, WritePriority
from tests.helpers import REPO, eventually


def insert(
    key: str, *, then: Callable[[], None] | None = None
) -> Callable[[sqlite3.Connection], int]:
    """A write unit adding one dedup row (and calling `then` on the writer's thread)."""

    def unit(conn: sqlite3.Connection) -> int:
        cur = conn.execute("INSERT INTO dedup (key, expires_at) VALUES (?, 1)", (key,))
        if then is not None:
            then()
        return int(cur.lastrowid or 0)

    return unit


async def keys(store: Store, like: str = "%") -> set[str]:
    rows = await store.fetchall("SELECT key FROM dedup WHERE key LIKE ?", (like,))
    return {str(r["key"]) for r in rows}


@contextlib.asynccontextmanager
async def writer_held(store: Store) -> AsyncIterator[None]:
    """Hold the writer with an open transaction(): units queue up until the block ends."""
    entered = asyncio.Event()
    release = asyncio.Event()

    async def hold() -> None:
        async with store.transaction():
            entered.set()
            await release.wait()

    task = asyncio.create_task(hold())
    await entered.wait()
    try:
        yield
    finally:
        release.set()
        await task


async def count_commits(store: Store) -> list[str]:
    """Every COMMIT the writer connection runs from now on, seen by SQLite's trace hook."""
    commits: list[str] = []

    def trace(statement: str) -> None:
        if statement.strip().upper() == "COMMIT":
            commits.append(statement)

    await store.write(lambda conn: conn.set_trace_callback(trace))
    commits.clear()  # the COMMIT of the unit that installed the hook
    return commits


async def test_concurrent_writes_share_commits(store: Store) -> None:
    commits = await count_commits(store)
    before = store.stats
    results = await asyncio.gather(*(store.write(insert(f"k{i}")) for i in range(50)))
    after = store.stats
    assert len(set(results)) == 50
    assert await keys(store, "k%") == {f"k{i}" for i in range(50)}
    assert 1 <= len(commits) < 50
    assert after.batches - before.batches == len(commits)
    assert after.units - before.units == 50


async def test_units_queued_behind_a_transaction_commit_together(store: Store) -> None:
    commits = await count_commits(store)
    before = store.stats
    async with writer_held(store):
        tasks = [asyncio.create_task(store.write(insert(f"q{i}"))) for i in range(40)]
        await eventually(lambda: store.pending_writes == 40)
    await asyncio.gather(*tasks)
    assert len(commits) == 2  # the held transaction's, then one batch of all 40 units
    assert store.stats.batches - before.batches == 1
    assert store.stats.largest_batch >= 40


async def test_a_failing_unit_rolls_back_alone(store: Store) -> None:
    def half_then_fail(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO dedup (key, expires_at) VALUES ('bad1', 1)")
        raise ValueError("unit failed halfway")

    def foreign_key_violation(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO dedup (key, expires_at) VALUES ('bad2', 1)")
        conn.execute(
            "INSERT INTO turns (id, conversation_id, kind, author_id, author_name, status,"
            " started_at) VALUES ('t', 'missing', 'user', 'u', 'u', 'running', 0)"
        )

    before = store.stats
    async with writer_held(store):
        tasks = [
            asyncio.create_task(store.write(insert("good1"))),
            asyncio.create_task(store.write(half_then_fail)),
            asyncio.create_task(store.write(foreign_key_violation)),
            asyncio.create_task(store.write(insert("good2"))),
        ]
        await eventually(lambda: store.pending_writes == 4)
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert isinstance(results[0], int) and isinstance(results[3], int)
    assert isinstance(results[1], ValueError)
    assert isinstance(results[2], sqlite3.IntegrityError)
    assert await keys(store) == {"good1", "good2"}
    after = store.stats
    assert after.batches - before.batches == 1  # all four were one batch
    assert after.failed_units - before.failed_units == 2


async def test_a_failed_commit_fails_every_unit_of_its_batch(store: Store) -> None:
    # A deferred foreign key fails only at COMMIT: then the batch is lost as a whole, every
    # caller is told, and the store keeps working.
    def deferred_violation(conn: sqlite3.Connection) -> None:
        conn.execute("PRAGMA defer_foreign_keys = ON")
        conn.execute(
            "INSERT INTO turns (id, conversation_id, kind, author_id, author_name, status,"
            " started_at) VALUES ('t', 'missing', 'user', 'u', 'u', 'running', 0)"
        )

    async with writer_held(store):
        tasks = [
            asyncio.create_task(store.write(insert("innocent"))),
            asyncio.create_task(store.write(deferred_violation)),
        ]
        await eventually(lambda: store.pending_writes == 2)
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert all(isinstance(r, sqlite3.IntegrityError) for r in results), results
    assert await keys(store) == set()
    assert await store.fetchone("SELECT 1 FROM turns") is None
    await store.write(insert("next"))
    assert await keys(store) == {"next"}


async def test_an_ingress_unit_goes_into_the_next_batch_first(tmp_path: Path) -> None:
    store = Store(tmp_path / "raven.db", all_migrations(), max_batch=8)
    await store.open()
    try:
        ran: list[str] = []
        before = store.stats
        async with writer_held(store):
            normal = [
                asyncio.create_task(
                    store.write(insert(f"n{i}", then=functools.partial(ran.append, f"n{i}")))
                )
                for i in range(30)
            ]
            await eventually(lambda: store.pending_writes == 30)
            claim = asyncio.create_task(
                store.write(
                    insert("claim", then=lambda: ran.append("claim")),
                    priority=WritePriority.INGRESS,
                )
            )
            await eventually(lambda: store.pending_writes == 31)
        await asyncio.gather(claim, *normal)
        # The claim led the first batch; the normal units kept their order (8 per batch).
        assert ran == ["claim", *(f"n{i}" for i in range(30))]
        after = store.stats
        assert after.batches - before.batches == 4
        assert after.ingress_units - before.ingress_units == 1
    finally:
        await store.close()


async def test_an_ingress_unit_overtakes_units_queued_behind_a_running_batch(
    store: Store,
) -> None:
    in_thread = threading.Event()
    proceed = threading.Event()
    ran: list[str] = []

    def blocking(conn: sqlite3.Connection) -> None:
        in_thread.set()
        proceed.wait(10)
        ran.append("blocking")

    first = asyncio.create_task(store.write(blocking))
    await eventually(in_thread.is_set)
    normal = [
        asyncio.create_task(
            store.write(insert(f"n{i}", then=functools.partial(ran.append, f"n{i}")))
        )
        for i in range(20)
    ]
    claim = asyncio.create_task(
        store.write(
            insert("claim", then=lambda: ran.append("claim")), priority=WritePriority.INGRESS
        )
    )
    await eventually(lambda: store.pending_writes == 21)
    proceed.set()
    await asyncio.gather(first, claim, *normal)
    assert ran[:2] == ["blocking", "claim"]


async def test_batches_and_transactions_alternate(store: Store) -> None:
    # A unit queued while a transaction runs goes before the transactions queued behind it:
    # an ingress claim waits for at most one transaction, not for all of them.
    order: list[str] = []

    async def later_transaction(name: str) -> None:
        async with store.transaction():
            order.append(name)

    async with writer_held(store):
        waiting = [asyncio.create_task(later_transaction(f"txn{i}")) for i in range(3)]
        unit = asyncio.create_task(
            store.write(
                insert("claim", then=lambda: order.append("claim")), priority=WritePriority.INGRESS
            )
        )
        await eventually(lambda: store.pending_writes == 1)
    await asyncio.gather(unit, *waiting)
    assert order[0] == "claim"
    assert sorted(order[1:]) == ["txn0", "txn1", "txn2"]


async def test_cancel_while_queued_writes_nothing(store: Store) -> None:
    ran = threading.Event()
    async with writer_held(store):
        task = asyncio.create_task(store.write(insert("cancelled", then=ran.set)))
        await eventually(lambda: store.pending_writes == 1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert store.pending_writes == 0
    # A later write went through the writer: the cancelled unit was never in a batch.
    await store.write(insert("later"))
    assert not ran.is_set()
    assert await keys(store) == {"later"}


async def test_cancel_after_hand_off_commits_then_raises(store: Store) -> None:
    in_thread = threading.Event()
    proceed = threading.Event()

    def three_rows(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO dedup (key, expires_at) VALUES ('h1', 1)")
        in_thread.set()
        proceed.wait(10)
        conn.execute("INSERT INTO dedup (key, expires_at) VALUES ('h2', 1)")
        conn.execute("INSERT INTO dedup (key, expires_at) VALUES ('h3', 1)")

    task = asyncio.create_task(store.write(three_rows))
    await eventually(in_thread.is_set)
    task.cancel()
    proceed.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    # The caller resumed only once the batch had committed: all three rows are there.
    assert await keys(store, "h_") == {"h1", "h2", "h3"}
    await store.write(insert("after"))


async def test_cancelling_a_write_at_every_step_keeps_it_atomic(store: Store) -> None:
    for k in range(200):

        def three_rows(conn: sqlite3.Connection, k: int = k) -> None:
            for part in ("a", "b", "c"):
                conn.execute("INSERT INTO dedup (key, expires_at) VALUES (?, 1)", (f"{k}{part}",))

        task = asyncio.create_task(store.write(three_rows))
        for _ in range(k):
            await asyncio.sleep(0)
        finished = task.done()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        rows = await keys(store, f"{k}_")
        assert len(rows) in (0, 3), f"cancel after {k} steps left {len(rows)} row(s)"
        await store.write(insert(f"ok{k}"))
        if finished:
            break
    else:
        pytest.fail("the write never completed within 200 loop iterations")


async def test_close_runs_queued_units_then_refuses_new_ones(tmp_path: Path) -> None:
    store = Store(tmp_path / "raven.db", all_migrations())
    await store.open()
    async with writer_held(store):
        tasks = [asyncio.create_task(store.write(insert(f"c{i}"))) for i in range(100)]
        await eventually(lambda: store.pending_writes == 100)
        closing = asyncio.create_task(store.close())
        await eventually(lambda: store.closing)
        with pytest.raises(StoreClosed, match="closing"):
            await store.write(insert("too late"))
    async with asyncio.timeout(10):
        await closing
    assert all(isinstance(r, int) for r in await asyncio.gather(*tasks))
    with pytest.raises(RuntimeError, match="not open"):
        await store.write(insert("closed"))
    reopened = Store(tmp_path / "raven.db", all_migrations())
    await reopened.open()
    try:
        assert await keys(reopened) == {f"c{i}" for i in range(100)}
    finally:
        await reopened.close()


async def test_write_inside_transaction_is_refused_not_deadlocked(store: Store) -> None:
    async with store.transaction():
        with pytest.raises(RuntimeError, match=r"inside Store\.transaction"):
            await store.write(insert("nested"))
    await store.write(insert("outside"))
    assert await keys(store) == {"outside"}


WRITER_SCRIPT = textwrap.dedent(
    """
    import asyncio, sys
    from pathlib import Path
    from bot.schema import all_migrations
    from core.store import Store

    async def writer(store, w):
        i = 0
        while True:
            def unit(conn, key=f"{w}:{i}"):
                for part in ("a", "b", "c"):
                    conn.execute(
                        "INSERT INTO dedup (key, expires_at) VALUES (?, 1)", (f"{key}:{part}",)
                    )
            await store.write(unit)
            print(f"{w}:{i}", flush=True)  # reported only after the commit
            i += 1

    async def main():
        store = Store(Path(sys.argv[1]), all_migrations())
        await store.open()
        print("open", flush=True)
        await asyncio.gather(*(writer(store, w) for w in range(8)))

    asyncio.run(main())
    """
)


@pytest.mark.slow
async def test_sigkill_mid_stream_keeps_every_reported_write_and_no_half_one(
    tmp_path: Path,
) -> None:
    db = tmp_path / "raven.db"
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        WRITER_SCRIPT,
        str(db),
        cwd=REPO,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None
    reported: set[str] = set()
    try:
        async with asyncio.timeout(60):
            first = await proc.stdout.readline()
            assert first == b"open\n", (first, await proc.stderr.read() if proc.stderr else b"")
            while len(reported) < 400:
                line = await proc.stdout.readline()
                assert line, "the writer process ended on its own"
                reported.add(line.decode().strip())
    finally:
        proc.send_signal(signal.SIGKILL)
        await proc.wait()
    # Lines written before the kill but not read yet were committed as well.
    rest = await proc.stdout.read()
    reported.update(line for line in rest.decode().split() if line)

    with contextlib.closing(sqlite3.connect(db)) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        rows = [str(r[0]) for r in conn.execute("SELECT key FROM dedup")]
    units: dict[str, set[str]] = {}
    for key in rows:
        unit, _, part = key.rpartition(":")
        units.setdefault(unit, set()).add(part)
    assert reported <= set(units), f"lost {sorted(reported - set(units))[:5]}"
    half = {u: parts for u, parts in units.items() if parts != {"a", "b", "c"}}
    assert not half, f"half-written units: {half}"


def test_a_store_reopens_under_another_event_loop(tmp_path: Path) -> None:
    # One asyncio.run per CLI command: the writer's primitives must not stay bound to the
    # first loop.
    store = Store(tmp_path / "raven.db", all_migrations())

    async def write_and_close(key: str) -> set[str]:
        await store.open()
        try:
            await store.write(insert(key))
            # The writer went idle in between (it waited for work on this loop).
            await store.write(insert(f"{key} again"))
            return await keys(store)
        finally:
            await store.close()

    assert asyncio.run(write_and_close("first")) == {"first", "first again"}
    assert len(asyncio.run(write_and_close("second"))) == 4


async def test_writes_leave_no_cyclic_garbage(store: Store) -> None:
    # Regression: a unit <-> batch reference cycle per write made every write garbage for
    # the cyclic GC, whose pauses stop the event loop (and every Slack ack with it).
    await store.write(insert("warm-up"))
    gc.collect()
    gc.disable()
    try:
        await asyncio.gather(*(store.write(insert(f"g{i}")) for i in range(500)))
        for i in range(100):
            await store.execute("INSERT INTO dedup (key, expires_at) VALUES (?, 1)", (f"s{i}",))
        garbage = gc.collect()
    finally:
        gc.enable()
    assert garbage < 50, f"{garbage} objects of cyclic garbage after 600 writes"


async def test_a_units_prepare_runs_on_the_writers_thread_before_its_transaction(
    store: Store,
) -> None:
    """`prepare` (an fsync of another file, say) runs first, outside SQLite's write lock."""
    main = threading.current_thread()
    on_main: list[bool] = []
    commits = await count_commits(store)

    def prepare() -> None:
        # Another connection takes the write lock at once: no transaction is open.
        with sqlite3.connect(store.path, timeout=0) as other:
            other.execute("BEGIN IMMEDIATE")
            other.execute("ROLLBACK")
        on_main.append(threading.current_thread() is main)

    await store.write(insert("prepared"), prepare=prepare)
    assert on_main == [False]
    assert await keys(store, "prepared") == {"prepared"} and len(commits) == 1


async def test_a_failed_prepare_skips_its_unit_alone(store: Store) -> None:
    def broken() -> None:
        raise OSError("journal disk full")

    async with writer_held(store):  # both units go into one batch
        failing = asyncio.ensure_future(store.write(insert("skipped"), prepare=broken))
        fine = asyncio.ensure_future(store.write(insert("kept")))
        await eventually(lambda: store.pending_writes == 2)
    with pytest.raises(OSError, match="journal disk full"):
        await failing
    await fine
    assert await keys(store) >= {"kept"} and "skipped" not in await keys(store)
