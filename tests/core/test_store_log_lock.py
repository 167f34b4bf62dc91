"""Only the log's owner (the bot, which fsyncs its journals first) checkpoints raven.db while
it runs; a log left by a process that died is synced with every file first."""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
import os
import sqlite3
import sys
from pathlib import Path

import pytest

from bot.app import build_runtime, shutdown
from bot.home import check_database
from bot.schema import all_migrations
from bot.settings import load_settings
from core.store import Checkpoints, Store
from core.store.log_lock import LogBusy, LogLock
from tests.bot.cli.test_cli_end_to_end import _env, _run
from tests.core.test_store_checkpoints import Syncs, digest, never_quiet
from tests.core.test_store_writer import insert, keys
from tests.fakes.chat_adapter import FakeChatAdapter
from tests.helpers import eventually


class FileSyncs:
    """Counts the syncs of every file, and what the database file held at each."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.seen: list[str] = []

    def __call__(self) -> None:
        self.seen.append(digest(self.path))


def wal_size(path: Path) -> int:
    """The log's size in bytes (-1 when there is none)."""
    wal = Path(f"{path}-wal")
    return wal.stat().st_size if wal.exists() else -1


def held_digest(fd: int) -> str:
    return hashlib.sha256(os.pread(fd, os.fstat(fd).st_size, 0)).hexdigest()


def store(path: Path, *, owner: bool = False, syncs: FileSyncs | None = None) -> Store:
    return Store(
        path,
        all_migrations(),
        checkpoints=never_quiet(),
        log_owner=owner,
        sync_files=syncs or FileSyncs(path),
    )


async def died_writing(path: Path, *keys: str) -> None:
    """A real process commits `keys` to the log (no checkpoint) and is killed."""
    code = (
        "import os, signal, sqlite3, sys\n"
        "db = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
        "db.execute('PRAGMA wal_autocheckpoint=0')\n"
        "for key in sys.argv[2:]:\n"
        "    db.execute('INSERT INTO dedup (key, expires_at) VALUES (?, 1)', (key,))\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    child = await asyncio.create_subprocess_exec(sys.executable, "-c", code, str(path), *keys)
    assert await child.wait() == -9
    assert wal_size(path) > 0


@pytest.fixture
async def database(tmp_path: Path) -> Path:
    """A database with the schema and a checkpointed log."""
    path = tmp_path / "raven.db"
    created = store(path)
    await created.open()
    await created.checkpoint()
    await created.close()
    return path


async def test_another_process_leaves_checkpoints_to_the_running_owner(database: Path) -> None:
    owner = store(database, owner=True)
    await owner.open()
    try:
        journal = Syncs(owner)
        one_shot = store(database)
        await one_shot.open()
        before = digest(database)
        await one_shot.write(insert("from the command"))
        await one_shot.close()  # owed, but the owner runs: no checkpoint, and not the last
        assert one_shot.stats.checkpoints == 0
        assert digest(database) == before  # the commit is still only in the log
        assert "from the command" in await keys(owner)
        await owner.checkpoint()  # the owner's takes it, after its journal's fsync
        assert journal.seen == [before] and digest(database) != before
    finally:
        await owner.close()


async def test_without_an_owner_a_store_checkpoints_itself(database: Path) -> None:
    one_shot = store(database)
    await one_shot.open()
    before = digest(database)
    await one_shot.write(insert("alone"))
    await one_shot.close()
    assert one_shot.stats.checkpoints == 1 and digest(database) != before


async def test_a_store_that_cannot_claim_the_log_tries_again_much_later(database: Path) -> None:
    owner = store(database, owner=True)
    await owner.open()
    try:
        policy = Checkpoints(wal_frames=1, quiet_seconds=0.0, max_seconds=3600.0)
        other = Store(database, all_migrations(), checkpoints=policy)
        await other.open()
        try:
            await other.write(insert("deferred"))

            def refused() -> bool:
                wait = other.checkpoints.idle_wait()
                return wait is not None and wait > 3000

            # Due at once (one frame, no quiet period): refused, then not due for an hour.
            await eventually(refused)
            assert other.stats.checkpoints == 0
            assert not other.checkpoints.due(idle=False)
        finally:
            await other.close()
    finally:
        await owner.close()
    assert other.stats.checkpoints == 0


@pytest.mark.slow
async def test_a_one_shot_command_leaves_the_running_bots_log_alone(database: Path) -> None:
    """The real CLI (`raven-bot memory add`) in its own process, while the bot's store runs."""
    # Read through one descriptor kept open: closing any descriptor of the file would drop
    # this process's POSIX locks on it, SQLite's included (the CLI would then find itself
    # the last connection).
    held = os.open(database, os.O_RDONLY)
    owner = store(database, owner=True)
    await owner.open()
    try:
        before = held_digest(held)
        code, _, err = await _run(
            "memory", "add", "--user", "U7", "prefers small PRs", env=_env(database.parent)
        )
        assert code == 0, err
        assert held_digest(held) == before
        row = await owner.fetchone("SELECT COUNT(*) FROM memory_notes")
        assert row is not None and row[0] == 1
    finally:
        await owner.close()
        os.close(held)


async def test_a_log_left_by_a_dead_process_is_synced_with_every_file_first(
    database: Path,
) -> None:
    await died_writing(database, "left behind")
    unsynced = digest(database)
    syncs = FileSyncs(database)
    reopened = store(database, owner=True, syncs=syncs)
    await reopened.open()
    journal = Syncs(reopened)
    await reopened.checkpoint()
    # Every file first (the dead process's too), then the registered fsyncs, then the log.
    assert syncs.seen == [unsynced] and journal.seen == [unsynced]
    await reopened.write(insert("later"))
    await reopened.checkpoint()
    assert len(syncs.seen) == 1  # once
    assert {"left behind", "later"} <= await keys(reopened)
    await reopened.close()


async def test_closing_over_a_dead_processs_log_syncs_every_file_first(database: Path) -> None:
    """Nothing committed since open, but SQLite checkpoints as the last connection closes."""
    await died_writing(database, "left behind")
    unsynced = digest(database)
    syncs = FileSyncs(database)
    reopened = store(database, syncs=syncs)
    await reopened.open()
    await reopened.close()
    assert syncs.seen == [unsynced]
    assert wal_size(database) == -1  # checkpointed and removed on close


async def test_the_start_up_check_leaves_a_dead_processs_log_alone(database: Path) -> None:
    await died_writing(database, "left behind")
    size, unsynced = wal_size(database), digest(database)
    check_database(database, database.parent)
    assert wal_size(database) == size and digest(database) == unsynced


def test_the_start_up_check_accepts_a_missing_database(tmp_path: Path) -> None:
    check_database(tmp_path / "raven.db", tmp_path)
    assert not (tmp_path / "raven.db").exists()  # the store creates it


async def test_an_erasure_scrubs_the_log_even_while_the_owner_runs(database: Path) -> None:
    owner = store(database, owner=True)
    await owner.open()
    try:
        syncs = FileSyncs(database)
        one_shot = store(database, syncs=syncs)
        await one_shot.open()
        await one_shot.write(insert("forgotten"))
        unsynced = digest(database)
        await one_shot.checkpoint()
        # Without the claim, after syncing every file (the owner's journals too).
        assert syncs.seen == [unsynced] and digest(database) != unsynced
        await one_shot.close()
    finally:
        await owner.close()


async def test_an_owner_waits_for_a_checkpoint_in_progress(database: Path) -> None:
    checkpointing = LogLock(database, owner=False)
    await checkpointing.open()
    assert checkpointing.claim()
    owner = LogLock(database, owner=True, wait_seconds=60.0)
    asyncio.get_running_loop().call_later(0.05, checkpointing.release)
    await owner.open()  # returns once the claim is released
    assert not checkpointing.claim()  # and now holds the log
    owner.close()
    assert checkpointing.claim()
    checkpointing.close()


async def test_an_owner_that_waits_too_long_says_why(database: Path) -> None:
    lock_file = Path(f"{database}-checkpoint.lock")
    fd = os.open(lock_file, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        owner = LogLock(database, owner=True, wait_seconds=0.05)
        with pytest.raises(LogBusy, match="wait for the command using the database to finish"):
            await owner.open()
    finally:
        os.close(fd)


async def test_the_bot_owns_its_databases_log(isolated_env: Path) -> None:
    runtime = await build_runtime(load_settings(), [FakeChatAdapter])
    try:
        assert runtime.store.log_lock.owner
        other = LogLock(isolated_env / "raven.db", owner=False)
        await other.open()
        assert not other.claim()
        other.close()
    finally:
        await shutdown(runtime)


def test_a_lock_file_planted_as_a_link_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_text("")
    Path(f"{tmp_path / 'raven.db'}-checkpoint.lock").symlink_to(target)
    lock = LogLock(tmp_path / "raven.db", owner=True)
    with pytest.raises(OSError):
        asyncio.run(lock.open())


def test_sqlite_reads_what_the_dead_process_committed(tmp_path: Path) -> None:
    """(The fixture's premise: the killed writer's commits are in the log, not lost.)"""
    path = tmp_path / "raven.db"
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("CREATE TABLE dedup (key TEXT, expires_at INTEGER)")
    asyncio.run(died_writing(path, "a", "b"))
    with sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True) as db:
        assert {r[0] for r in db.execute("SELECT key FROM dedup")} == {"a", "b"}
