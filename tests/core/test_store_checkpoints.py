"""The store's writer checkpoints SQLite's log itself, after the fsyncs files registered
(a graph run's journal): whatever a synced log holds, those files hold too."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import sqlite3
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from bot.schema import all_migrations
from core.store import Checkpoints, Store
from tests.core.test_store_writer import insert, keys
from tests.helpers import eventually

NEVER = 3600.0  # seconds: no idle checkpoint during a test


def digest(path: Path) -> str:
    """The main database file's bytes (a checkpoint copies the log into them)."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


class Syncs:
    """A registered fsync that records what the database file held when it ran."""

    def __init__(self, store: Store, *, fail: bool = False) -> None:
        self.store = store
        self.fail = fail
        self.fail_with = "the journal's disk is gone"
        self.seen: list[str] = []  # the main file's digest at each call
        self.threads: list[str] = []
        self.ran = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        self.remove = store.before_checkpoint(self)

    def __call__(self) -> None:
        self.seen.append(digest(self.store.path))
        self.threads.append(threading.current_thread().name)
        self._loop.call_soon_threadsafe(self.ran.set)
        if self.fail:
            raise OSError(self.fail_with)


async def open_store(path: Path, checkpoints: Checkpoints) -> Store:
    store = Store(path, all_migrations(), checkpoints=checkpoints)
    await store.open()
    return store


@pytest.fixture
async def counted(tmp_path: Path) -> AsyncIterator[Store]:
    """A store checkpointing once its log grew by 16 pages, never for a quiet period."""
    store = await open_store(tmp_path / "raven.db", never_quiet(wal_frames=16))
    try:
        yield store
    finally:
        await store.close()


def never_quiet(*, wal_frames: int = 1 << 30) -> Checkpoints:
    return Checkpoints(wal_frames=wal_frames, quiet_seconds=NEVER, max_seconds=NEVER)


async def test_sqlite_never_checkpoints_on_its_own(counted: Store) -> None:
    """Its automatic checkpoint would sync the log without the registered files."""

    def setting(conn: sqlite3.Connection) -> int:
        return int(conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0])

    assert await counted.write(setting) == 0
    row = await counted.fetchone("PRAGMA wal_autocheckpoint")
    assert row is not None and row[0] == 0


async def test_the_registered_fsyncs_run_before_the_log_is_checkpointed(counted: Store) -> None:
    await counted.checkpoint()  # the migrations' commits: start from a checkpointed log
    syncs = Syncs(counted)
    unchanged, before = digest(counted.path), counted.stats.checkpoints
    written = 0
    while not syncs.seen:  # until the log has grown by 16 pages
        await counted.write(insert(f"k{written}"))
        written += 1
        if not syncs.seen:
            assert not syncs.ran.is_set()
    await eventually(lambda: counted.stats.checkpoints == before + 1)
    # The fsync ran on the writer's thread while the file still lacked the commits; the
    # checkpoint copied them in afterwards. One insert is about two pages of the log.
    assert 4 < written < 32
    assert syncs.seen == [unchanged] and syncs.threads != [threading.current_thread().name]
    assert digest(counted.path) != unchanged
    assert len(await keys(counted)) == written


async def test_the_logs_length_is_read_from_its_index(tmp_path: Path) -> None:
    """The frames SQLite itself reports for the log (a checkpoint's result) are what the
    store reads from the log's index, before and after the log restarts."""
    store = await open_store(tmp_path / "raven.db", never_quiet())
    try:
        await store.checkpoint()
        for key in range(5):
            await store.write(insert(f"k{key}"))
        frames = store._wal_frames()
        with contextlib.closing(sqlite3.connect(store.path)) as other:
            busy, log, _ = other.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        assert busy == 0 and log == frames >= 5
        await store.write(insert("restarted"))  # the first commit after it restarts the log
        assert 0 < store._wal_frames() < frames
    finally:
        await store.close()


async def test_after_a_checkpoint_the_log_must_grow_again(counted: Store) -> None:
    await counted.checkpoint()  # the migrations' commits: start from a checkpointed log
    syncs, before = Syncs(counted), counted.stats.checkpoints
    written = 0
    while not syncs.seen:
        await counted.write(insert(f"k{written}"))
        written += 1
    await eventually(lambda: counted.stats.checkpoints == before + 1)
    for key in range(3):  # a checkpoint due after the first two would run before the third
        await counted.write(insert(f"again{key}"))
    assert len(syncs.seen) == 1


async def test_an_idle_writer_checkpoints_soon_after_a_commit(tmp_path: Path) -> None:
    store = await open_store(tmp_path / "raven.db", Checkpoints(quiet_seconds=0.05))
    try:
        syncs = Syncs(store)
        await store.write(insert("alone"))
        await syncs.ran.wait()  # no other write: the idle writer's timer ran it
        await eventually(lambda: not store.checkpoints.owed)
    finally:
        await store.close()


async def test_a_failed_fsync_keeps_the_log_unsynced_and_writes_go_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = await open_store(tmp_path / "raven.db", never_quiet(wal_frames=1))
    try:
        await store.checkpoint()
        syncs = Syncs(store, fail=True)
        unchanged = digest(store.path)
        with caplog.at_level(logging.ERROR, logger="core.store.store"):
            await store.write(insert("first"))
            await syncs.ran.wait()
            await eventually(lambda: "checkpointing" in caplog.text)
        assert digest(store.path) == unchanged  # SQLite did not checkpoint either
        await store.write(insert("second"))  # the writer goes on
        syncs.fail = False
        syncs.ran.clear()
        before = store.stats.checkpoints
        await store.write(insert("third"))
        await eventually(lambda: store.stats.checkpoints > before)
        assert digest(store.path) != unchanged
        assert await keys(store) >= {"first", "second", "third"}
    finally:
        await store.close()


async def test_a_checkpoint_failing_again_the_same_way_is_said_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A full disk fails every retry: one line for it, one for a different failure, and
    one in the log file when checkpoints work again."""
    store = await open_store(tmp_path / "raven.db", never_quiet(wal_frames=1))
    try:
        await store.checkpoint()
        syncs = Syncs(store, fail=True)

        async def attempt(key: str) -> None:
            syncs.ran.clear()
            await store.write(insert(key))
            await syncs.ran.wait()  # the checkpoint that commit made due was tried

        def said() -> list[str]:
            return [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]

        with caplog.at_level(logging.INFO, logger="core.store.store"):
            for key in range(4):
                await attempt(f"full{key}")
            await eventually(lambda: store.checkpoints.owed and len(said()) >= 1)
            syncs.fail_with = "the disk is read-only now"
            before = store.stats.checkpoints
            await attempt("other")
            await eventually(lambda: len(said()) >= 2)
            syncs.fail = False
            await attempt("fine")
            await eventually(lambda: store.stats.checkpoints > before)
        failed = f"checkpointing {store.path} failed; it is tried again later"
        assert said() == [failed, failed, f"checkpointing {store.path} works again"]
        errors = [r for r in caplog.records if r.levelno == logging.ERROR]
        assert [str(r.exc_info[1]) for r in errors if r.exc_info] == [
            "the journal's disk is gone",
            "the disk is read-only now",
        ]
    finally:
        await store.close()


async def test_closing_runs_the_fsyncs_before_sqlite_checkpoints(tmp_path: Path) -> None:
    store = await open_store(tmp_path / "raven.db", never_quiet())
    await store.checkpoint()
    syncs = Syncs(store)
    await store.write(insert("last"))
    assert not syncs.seen
    await store.close()
    assert len(syncs.seen) == 1


async def test_an_erasures_checkpoint_runs_the_fsyncs_too(counted: Store) -> None:
    syncs = Syncs(counted)
    await counted.write(insert("erased"))
    await counted.checkpoint()
    assert len(syncs.seen) == 1 and not counted.checkpoints.owed


async def test_a_removed_fsync_no_longer_runs(counted: Store) -> None:
    kept, removed = Syncs(counted), Syncs(counted)
    removed.remove()
    assert counted.checkpoints.registered == 1
    await counted.checkpoint()
    assert len(kept.seen) == 1 and not removed.seen


@pytest.mark.parametrize(
    "policy",
    [{"wal_frames": 0}, {"quiet_seconds": -1.0}, {"max_seconds": -1.0}],
    ids=["no bytes", "negative quiet", "negative max"],
)
def test_a_bad_policy_is_refused(policy: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="wal_frames must be at least 1"):
        Checkpoints(**policy)  # type: ignore[arg-type]


def test_the_policy_follows_the_logs_size_and_the_quiet_periods() -> None:
    now = [100.0]
    clock: Callable[[], float] = lambda: now[0]  # noqa: E731
    policy = Checkpoints(wal_frames=1000, quiet_seconds=1.0, max_seconds=3.0, clock=clock)
    assert not policy.owed and policy.idle_wait() is None and not policy.due(idle=True)
    policy.committed(400)
    assert policy.idle_wait() == 1.0 and not policy.due(idle=True)
    now[0] += 0.5
    policy.committed(800)  # a commit restarts the quiet period
    now[0] += 0.75
    assert not policy.due(idle=True) and policy.idle_wait() == 0.25
    now[0] += 0.25
    assert policy.due(idle=True) and not policy.due(idle=False)  # busy: only the size
    policy.committed(1000)
    assert policy.due(idle=False)
    policy.done()
    assert not policy.owed
    policy.committed(1500)  # grown by 500 since the checkpoint
    assert not policy.due(idle=False)
    policy.committed(600)  # the log restarted: 600 new bytes
    for _ in range(3):  # commits every 0.9 s: never quiet, but at most 3 s
        now[0] += 0.9
        policy.committed(700)
    assert policy.idle_wait() == pytest.approx(0.3)
    policy.failed()
    assert policy.owed and not policy.due(idle=True)  # tried again after a quiet period


def test_a_store_that_does_not_own_the_log_tries_again_after_the_longest_wait() -> None:
    now = [100.0]
    clock: Callable[[], float] = lambda: now[0]  # noqa: E731
    policy = Checkpoints(wal_frames=10, quiet_seconds=1.0, max_seconds=30.0, clock=clock)
    policy.committed(50)
    assert policy.due(idle=False)
    policy.deferred()  # another process owns the log
    for _ in range(29):  # neither its size nor quiet periods make it due before then
        now[0] += 1.0
        policy.committed(50 + int(now[0]))
        assert not policy.due(idle=False) and not policy.due(idle=True)
    assert policy.idle_wait() == pytest.approx(1.0)
    now[0] += 1.0
    assert policy.due(idle=False) and policy.due(idle=True)
