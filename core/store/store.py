"""The SQLite store: one writer task batching write units, one reader, WAL, migrations."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import enum
import logging
import os
import sqlite3
import sys
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, cast

import aiosqlite

from core.store.checkpoints import Checkpoints, Mode
from core.store.log_lock import LogLock
from core.store.migrations import LEDGER_TABLE, Migration, check_order, migrate

log = logging.getLogger(__name__)

Row = aiosqlite.Row
T = TypeVar("T")

# A batch is one BEGIN IMMEDIATE … COMMIT: bounded so one commit never holds the database
# (and the units queued behind it) for long.
DEFAULT_MAX_BATCH = 256


class WritePriority(enum.IntEnum):
    """Which queue a write unit waits in; lower values go into a batch first."""

    INGRESS = 0  # a platform waits for this one before it gets its ack
    NORMAL = 1


class StoreClosed(RuntimeError):
    """A write was refused or dropped because the store is closing or its writer stopped."""


@dataclass
class WriteStats:
    """Counters of the write path since `open()` (for tests and benchmarks)."""

    units: int = 0  # write units run in a batch (committed or failed)
    ingress_units: int = 0  # of those, queued with WritePriority.INGRESS
    failed_units: int = 0  # units whose caller got an exception
    batches: int = 0  # batches committed (one BEGIN IMMEDIATE … COMMIT each)
    checkpoints: int = 0  # checkpoints the writer ran (see `core.store.checkpoints`)
    failed_batches: int = 0  # batches rolled back as a whole (every unit failed)
    largest_batch: int = 0
    transactions: int = 0  # `transaction()` blocks entered


@dataclass(eq=False)
class _Unit:
    """A queued write unit and the future its caller awaits."""

    fn: Callable[[sqlite3.Connection], Any]
    future: asyncio.Future[Any]
    priority: WritePriority
    prepare: Callable[[], None] | None = None
    # Its batch's `done`, set once taken into a batch: from then on it runs whatever its
    # caller does. Not the batch itself: a unit <-> batch cycle per write would be garbage
    # only the cyclic GC frees, and its pauses stop the whole event loop.
    batch_done: asyncio.Future[None] | None = None


@dataclass(eq=False)
class _Batch:
    """Units run in one transaction; `done` resolves once all of them are settled."""

    units: list[_Unit]
    done: asyncio.Future[None]


class Store:
    """Async access to `raven.db`.

    Writes are units (`write(fn)`: a synchronous function of the writer's sqlite3
    connection). One writer task owned by the store runs every batch of queued units in one
    thread hop inside one `BEGIN IMMEDIATE … COMMIT`, each unit in its own SAVEPOINT, and
    resolves the callers only after the COMMIT. `transaction()` still gives multi-statement
    async transactions, run exclusively with respect to batches. Reads use a separate
    connection and see only committed data (WAL).
    """

    def __init__(
        self,
        path: Path,
        migrations: Sequence[Migration],
        *,
        max_batch: int = DEFAULT_MAX_BATCH,
        checkpoints: Checkpoints | None = None,
        log_owner: bool = False,
        sync_files: Callable[[], None] = os.sync,
    ) -> None:
        """`log_owner`: this process registers fsyncs before checkpoints (the bot's run
        journals), and other processes leave the log's checkpoints to it while it runs
        (`core.store.log_lock`). `sync_files` syncs every file (tests count it)."""
        if max_batch < 1:
            raise ValueError("max_batch must be at least 1")
        check_order(migrations)
        self.path = path
        # Every package's tables, collected by whoever assembles the application.
        self.migrations = tuple(migrations)
        self.max_batch = max_batch
        self.checkpoints = checkpoints or Checkpoints()
        self.log_lock = LogLock(path, owner=log_owner, sync_files=sync_files)
        self._shm_path = f"{path}-shm"
        self._shm: int | None = None  # the log index's file, read for its length
        self._checkpoint_timer: asyncio.TimerHandle | None = None
        # The failure the last checkpoint had, said once: a full disk fails every retry.
        self._checkpoint_fault: str | None = None
        self._writer: aiosqlite.Connection | None = None
        self._reader: aiosqlite.Connection | None = None
        # Held by a running batch or a running transaction(): they never overlap.
        self._write_lock = asyncio.Lock()
        # Transactions queue here first, so at most one of them waits on `_write_lock` next
        # to the writer task: batches and transactions then alternate, and a queued ingress
        # claim waits behind at most one transaction.
        self._txn_lock = asyncio.Lock()
        self._queues: tuple[deque[_Unit], deque[_Unit]] = (deque(), deque())
        self._wake = asyncio.Event()
        self._writer_task: asyncio.Task[None] | None = None
        self._closing = False
        self._txn_owner: asyncio.Task[Any] | None = None
        self._stats = WriteStats()

    async def open(self) -> None:
        """Open both connections, enable WAL and foreign keys, apply migrations, start the
        writer task."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # Fresh primitives: an asyncio.Event or Lock stays bound to the loop it first waited
        # on, and a store may be reopened under another loop (one asyncio.run per command).
        self._write_lock = asyncio.Lock()
        self._txn_lock = asyncio.Lock()
        self._wake = asyncio.Event()
        self._closing = False
        self._stats = WriteStats()
        try:
            await self.log_lock.open()
            self._writer = await self._connect()
            await self._writer.execute("PRAGMA journal_mode=WAL")
            await self.migrate()
            self._reader = await self._connect()
        except BaseException:
            # Each open connection owns a non-daemon thread: leaving one behind on a failed
            # open would keep the process from exiting.
            await self.close()
            raise
        self._writer_task = asyncio.create_task(
            self._write_loop(self._writer), name=f"store-writer {self.path.name}"
        )
        self._writer_task.add_done_callback(self._writer_stopped)

    async def _connect(self) -> aiosqlite.Connection:
        # isolation_level=None: we issue BEGIN/COMMIT ourselves.
        conn = await aiosqlite.connect(self.path, isolation_level=None)
        try:
            conn.row_factory = aiosqlite.Row
            await conn.execute("PRAGMA foreign_keys=ON")
            await conn.execute("PRAGMA busy_timeout=5000")
            await conn.execute("PRAGMA synchronous=NORMAL")
            # The writer checkpoints itself, after the fsyncs registered with
            # `before_checkpoint` (see `core.store.checkpoints`).
            await conn.execute("PRAGMA wal_autocheckpoint=0")
        except BaseException:
            await conn.close()
            raise
        return conn

    async def close(self) -> None:
        """Run the write units already queued, let queued transactions finish, then close
        both connections (idempotent). Writes asked for once close() began raise StoreClosed.

        It never waits on anything but those writes (each bounded by SQLite's busy timeout)
        and runs to its end even if its caller is cancelled, so no connection thread is left.
        """
        await run_to_completion(self._close())

    async def _close(self) -> None:
        self._closing = True
        task = self._writer_task
        if task is not None:
            self._wake.set()
            # The writer drains the queue, then returns; wait() never raises its exception
            # (`_writer_stopped` logged it and failed what it left).
            await asyncio.wait([task])
            self._writer_task = None
        if self._checkpoint_timer is not None:
            self._checkpoint_timer.cancel()
            self._checkpoint_timer = None
        async with self._txn_lock, self._write_lock:
            if self._writer is not None and (self.checkpoints.owed or self.log_lock.inherited):
                # SQLite checkpoints as the last connection closes: the syncs owed first.
                await self._checkpoint(self._writer)
            for conn in (self._reader, self._writer):
                if conn is not None:
                    await conn.close()
            self._close_shm()
            self.log_lock.close()
            self._reader = self._writer = None
        # Nothing is left unless the writer died; never leave a caller waiting forever.
        self._fail_queued(StoreClosed("the store closed before this write ran"))

    async def migrate(self) -> list[Migration]:
        """Apply every migration not yet in the ledger; return those applied now."""
        applied = await migrate(self, self.migrations)
        if applied:
            log.info("applied migrations %s to %s", [str(m) for m in applied], self.path)
        return applied

    async def schema_versions(self) -> dict[str, int]:
        """Each package's highest applied migration."""
        rows = await self.fetchall(
            f"SELECT package, MAX(version) AS v FROM {LEDGER_TABLE} GROUP BY package"
            " ORDER BY package"
        )
        return {str(row["package"]): int(row["v"]) for row in rows}

    # ----------------------------------------------------------------------------- writes

    async def write(
        self,
        fn: Callable[[sqlite3.Connection], T],
        *,
        priority: WritePriority = WritePriority.NORMAL,
        prepare: Callable[[], None] | None = None,
    ) -> T:
        """Run `fn(conn)` on the writer's thread in the next batch; return its result once
        that batch COMMITTED. Raises what `fn` raised (only `fn`'s changes are rolled back).

        `prepare()` runs on the same thread first, before the batch's transaction begins
        (slow work such as an fsync does not hold SQLite's write lock, and needs no thread
        hop of its own); when it raises, `fn` does not run and the caller gets its error.

        `fn` must not BEGIN, COMMIT or ROLLBACK (it runs inside the batch's transaction) and
        must return plain values, not cursors. Cancelled while queued, the unit is dropped
        (nothing written); cancelled once its batch started, the caller waits until the
        batch ended (the unit then committed, or the batch failed as a whole) and then
        sees CancelledError.
        """
        self._require(self._writer)
        if self._closing:
            raise StoreClosed("the store is closing; this write was not run")
        if self._writer_task is None or self._writer_task.done():
            raise StoreClosed("the store's writer is not running; this write was not run")
        if self._txn_owner is not None and self._txn_owner is asyncio.current_task():
            raise RuntimeError("Store.write() inside Store.transaction() would wait for itself")
        unit = _Unit(fn, asyncio.get_running_loop().create_future(), priority, prepare)
        queue = self._queues[priority]
        queue.append(unit)
        self._wake.set()
        try:
            # Awaited directly, not shielded: a caller resumes one loop step after the batch
            # committed. A cancellation cancels `unit.future`, which settling then skips.
            return cast(T, await unit.future)
        except asyncio.CancelledError:
            if unit.batch_done is None:
                if unit in queue:  # not already failed by close or a stopped writer
                    queue.remove(unit)
                raise
            # Already on the writer's thread: it commits or fails whatever we do here; tell
            # the caller only once the store is settled.
            await _settled(unit.batch_done)
            if unit.future.done() and not unit.future.cancelled():
                unit.future.exception()  # retrieved: the caller sees its cancellation instead
            raise

    @property
    def stats(self) -> WriteStats:
        """A snapshot of the write-path counters."""
        return dataclasses.replace(self._stats)

    @property
    def closing(self) -> bool:
        """True once close() began (new writes are refused from then on)."""
        return self._closing

    @property
    def pending_writes(self) -> int:
        """Write units queued and not yet taken into a batch."""
        return sum(len(queue) for queue in self._queues)

    async def _write_loop(self, db: aiosqlite.Connection) -> None:
        # The single writer: takes what is queued, runs it as one batch, repeats; on close
        # it drains the queue before returning.
        while True:
            if not self.pending_writes:
                if self._closing:
                    return
                if self.checkpoints.due(idle=True):
                    async with self._write_lock:
                        await self._checkpoint(db)
                    continue
                self._arm_checkpoint_timer()
                self._wake.clear()
                await self._wake.wait()
                continue
            async with self._write_lock:
                if self.checkpoints.due(idle=False):
                    await self._checkpoint(db)
                # Taken only now: units queued while a transaction held the lock (ingress
                # claims first) all go into this batch.
                batch = self._take_batch()
                if batch is not None:
                    await self._run_batch(db, batch)

    def _arm_checkpoint_timer(self) -> None:
        # One timer at a time wakes the idle writer when a checkpoint may be due; one per
        # idle wait (after nearly every commit) cost a tenth of a short write. Fired early
        # (a later commit moved the quiet period on), the writer arms it again.
        if self._checkpoint_timer is None:
            wait = self.checkpoints.idle_wait()
            if wait is not None:
                self._checkpoint_timer = asyncio.get_running_loop().call_later(
                    wait, self._checkpoint_timer_fired
                )

    def _checkpoint_timer_fired(self) -> None:
        self._checkpoint_timer = None
        self._wake.set()

    async def _checkpoint(self, db: aiosqlite.Connection, mode: Mode = "PASSIVE") -> None:
        # Holding the write lock: no commit lands between the registered fsyncs and the
        # log's sync.
        lock = self.log_lock
        claimed = lock.claim()
        if not claimed and mode == "PASSIVE":
            self.checkpoints.deferred()  # the owner's next checkpoint takes these commits
            return
        # An erasure's checkpoint runs in any case (it scrubs the log).
        try:
            job = self.checkpoints.job(mode, first=lock.sync_first(claimed=claimed))
            await run_to_completion(_on_connection_thread(db, job))
        except Exception as exc:
            self.checkpoints.failed()
            if mode != "PASSIVE":
                raise  # asked for (an erasure): its caller reports it
            self._checkpoint_failed(exc)
        else:
            self.checkpoints.done()
            self._stats.checkpoints += 1
            if self._checkpoint_fault is not None:
                self._checkpoint_fault = None
                log.info("checkpointing %s works again", self.path)
        finally:
            lock.release()

    def _checkpoint_failed(self, exc: Exception) -> None:
        """One line per distinct failure: the retries of the same one go to debug."""
        fault = f"{type(exc).__name__}: {exc}"
        if fault == self._checkpoint_fault:
            log.debug("checkpointing %s failed again: %s", self.path, fault)
            return
        self._checkpoint_fault = fault
        log.error("checkpointing %s failed; it is tried again later", self.path, exc_info=exc)

    def _wal_frames(self) -> int:
        """The frames in the write-ahead log: `mxFrame` of its index's header (SQLite's
        documented WAL-index format: native byte order, at byte 16 of the `-shm` file).
        SQLite has no statement that tells it, and the log file's size does not: it is
        reused from its start after a checkpoint (cutting it back instead, with
        journal_size_limit, cost 40 % more per insert). Read on the loop: 4 bytes from
        the page cache cost less than a hop. Only the checkpoints' timing depends on it."""
        try:
            if self._shm is None:
                self._shm = os.open(self._shm_path, os.O_RDONLY)
            return int.from_bytes(os.pread(self._shm, 4, 16), sys.byteorder)
        except OSError:
            return 0

    def _close_shm(self) -> None:
        if self._shm is not None:
            os.close(self._shm)
            self._shm = None

    def before_checkpoint(self, sync: Callable[[], None]) -> Callable[[], None]:
        """Run `sync` (an fsync of a file that commits point at) on the writer's thread
        before every checkpoint, until the returned function is called (see
        `core.store.checkpoints`)."""
        return self.checkpoints.before(sync)

    def _take_batch(self) -> _Batch | None:
        units: list[_Unit] = []
        for queue in self._queues:  # WritePriority order: ingress claims first
            while queue and len(units) < self.max_batch:
                units.append(queue.popleft())
        if not units:
            return None
        batch = _Batch(units, asyncio.get_running_loop().create_future())
        for unit in units:
            unit.batch_done = batch.done
        return batch

    async def _run_batch(self, db: aiosqlite.Connection, batch: _Batch) -> None:
        loop = asyncio.get_running_loop()
        fns = [(unit.prepare, unit.fn) for unit in batch.units]

        def run(conn: sqlite3.Connection) -> None:
            # On the writer's thread. The outcome goes straight to the event loop from
            # here: callers resume without waiting for this task to wake up first.
            try:
                outcomes, committed = _run_units(fns, conn), True
            except BaseException as exc:  # the batch as a whole is lost: tell every unit
                outcomes, committed = [(False, exc)] * len(fns), False
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
                loop.call_soon_threadsafe(self._settle, batch, outcomes, committed)

        # No run_to_completion: the connection's one thread runs everything in order, so a
        # transaction() after an early lock release would still queue behind this batch.
        try:
            await _on_connection_thread(db, run)
        except Exception as exc:  # the batch never ran: the connection is closed
            self._settle(batch, [(False, exc)] * len(fns), committed=False)

    def _settle(self, batch: _Batch, outcomes: list[_Outcome], committed: bool) -> None:
        if batch.done.done():
            return
        stats = self._stats
        stats.units += len(batch.units)
        stats.ingress_units += sum(1 for u in batch.units if u.priority is WritePriority.INGRESS)
        stats.largest_batch = max(stats.largest_batch, len(batch.units))
        stats.batches += committed
        if committed:
            self.checkpoints.committed(self._wal_frames())
        stats.failed_batches += not committed
        for unit, (ok, value) in zip(batch.units, outcomes, strict=True):
            stats.failed_units += not ok
            if unit.future.done():  # its caller was cancelled
                continue
            if ok:
                unit.future.set_result(value)
            else:
                unit.future.set_exception(value)
        batch.done.set_result(None)

    def _writer_stopped(self, task: asyncio.Task[None]) -> None:
        # The loop only returns on close; anything else is a bug or a loop shutting down.
        # Either way nobody may be left waiting for a unit that will never run.
        if not task.cancelled() and (error := task.exception()) is not None:
            log.error("the store's writer task failed", exc_info=error)
        self._fail_queued(StoreClosed("the store's writer stopped before this write ran"))

    def _fail_queued(self, error: StoreClosed) -> None:
        for queue in self._queues:
            while queue:
                unit = queue.popleft()
                if not unit.future.done():
                    unit.future.set_exception(error)

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[aiosqlite.Connection]:
        """Run a multi-statement write transaction; commits on success, rolls back on any
        exception. No batch runs meanwhile.

        Cancellation-safe: BEGIN, COMMIT and ROLLBACK always run to the end once sent, and a
        cancelled or failed transaction is rolled back before the lock is released, so the
        shared writer connection is never left inside an open transaction.
        """
        self._require(self._writer)
        if self._closing:
            raise StoreClosed("the store is closing; this transaction was not run")
        async with self._txn_lock, self._write_lock:
            db = self._require(self._writer)  # close() may have won the lock
            self._txn_owner = asyncio.current_task()
            self._stats.transactions += 1
            try:
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
                self.checkpoints.committed(self._wal_frames())
            finally:
                self._txn_owner = None

    async def checkpoint(self) -> None:
        """Copy the write-ahead log into the database file and truncate it: after an
        erasure, the log's older frames would still hold what was erased."""
        self._require(self._writer)
        async with self._txn_lock, self._write_lock:
            await self._checkpoint(self._require(self._writer), "TRUNCATE")

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Run one write statement as a write unit; return rows changed."""

        def statement(conn: sqlite3.Connection) -> int:
            return conn.execute(sql, params).rowcount

        return await self.write(statement)

    async def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        """Run one write statement for many rows as one write unit."""
        # Materialised here: a lazy iterable would otherwise run on the writer's thread.
        materialised = list(rows)

        def statements(conn: sqlite3.Connection) -> None:
            conn.executemany(sql, materialised)

        await self.write(statements)

    # ------------------------------------------------------------------------------ reads

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


# (ok, result) or (False, the exception to raise in the unit's caller).
_Outcome = tuple[bool, Any]
_SAVEPOINT = "raven_write_unit"


def _run_units(
    fns: Sequence[tuple[Callable[[], None] | None, Callable[[sqlite3.Connection], Any]]],
    conn: sqlite3.Connection,
) -> list[_Outcome]:
    """On the writer's thread: each unit's `prepare` first, then one BEGIN IMMEDIATE …
    COMMIT, each unit in its own SAVEPOINT (a unit whose `prepare` raised is left out).

    A unit that raises is rolled back to its savepoint alone. Raises (after a ROLLBACK) only
    when the transaction as a whole is lost: BEGIN or COMMIT failed, or SQLite itself rolled
    everything back (disk full, I/O error), so then no unit of the batch committed.
    """
    unprepared = _prepare_units([prepare for prepare, _ in fns])
    outcomes: list[_Outcome] = []
    conn.execute("BEGIN IMMEDIATE")
    try:
        for position, (_, fn) in enumerate(fns):
            if position in unprepared:
                outcomes.append((False, unprepared[position]))
                continue
            conn.execute(f"SAVEPOINT {_SAVEPOINT}")
            try:
                value = fn(conn)
            except Exception as exc:
                if not conn.in_transaction:
                    raise  # the earlier units' changes are gone too
                conn.execute(f"ROLLBACK TO {_SAVEPOINT}")
                conn.execute(f"RELEASE {_SAVEPOINT}")
                outcomes.append((False, exc))
            else:
                conn.execute(f"RELEASE {_SAVEPOINT}")
                outcomes.append((True, value))
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return outcomes


def _prepare_units(prepares: Sequence[Callable[[], None] | None]) -> dict[int, Exception]:
    """Run each unit's `prepare`; what raised, by the unit's position."""
    unprepared: dict[int, Exception] = {}
    for position, prepare in enumerate(prepares):
        if prepare is not None:
            try:
                prepare()
            except Exception as exc:
                unprepared[position] = exc
    return unprepared


async def _on_connection_thread(
    db: aiosqlite.Connection, fn: Callable[[sqlite3.Connection], T]
) -> T:
    """Run `fn(conn)` on `db`'s own thread with its sqlite3 connection, in one hop."""
    # aiosqlite (0.22) has no public way to run a function on its connection thread; its
    # own methods all go through `_execute`, and `_conn` is the sqlite3 connection they use.
    # Both private names live only here: an aiosqlite upgrade that renames them breaks this
    # one function, and every store test at once.
    result = await db._execute(lambda: fn(db._conn))  # type: ignore[no-untyped-call]
    return cast(T, result)


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


async def _settled(future: asyncio.Future[None]) -> None:
    # Wait until `future` is done whatever cancellations arrive meanwhile (the caller re-raises
    # its own cancellation afterwards). asyncio.wait never cancels the future it waits on.
    while not future.done():
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait([future])


async def _rollback(db: aiosqlite.Connection) -> None:
    # "no transaction is active": the BEGIN never happened or COMMIT already ended it.
    with contextlib.suppress(sqlite3.OperationalError):
        await run_to_completion(db.execute("ROLLBACK"))
