"""A damaged `scheduler.db` (derived data) is found when the scheduler starts, moved aside
with its -wal and -shm, said in one line, and replaced by a fresh, working job store."""

from __future__ import annotations

import contextlib
import logging
import pickle
import sqlite3
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from host.runtime.apscheduler_adapter import ApschedulerScheduler
from host.runtime.job_store_health import damaged_copies, job_store_damage
from host.runtime.scheduling import FiredJob
from tests.helpers import wake_up_bus


async def _ignore(_job: FiredJob) -> None:
    return None


def _adapter(path: Path) -> ApschedulerScheduler:
    return ApschedulerScheduler(path, wake_up_bus({"ping": _ignore}))


async def _store_with_jobs(path: Path, count: int = 3) -> None:
    """A sound job store holding `count` jobs, left as a stopped bot leaves it."""
    scheduler = _adapter(path)
    await scheduler.start()
    later = datetime.now(UTC) + timedelta(days=1)
    for n in range(count):
        await scheduler.schedule_at(f"j{n}", later, "ping", {"n": n})
    await scheduler.stop()


def _garbage(path: Path) -> None:
    path.write_bytes(bytes(range(256)) * 16)


def _truncated(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:4096])


def _foreign_table(path: Path) -> None:
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        db.execute("DROP TABLE apscheduler_jobs")
        db.execute("CREATE TABLE apscheduler_jobs (id TEXT PRIMARY KEY, state BLOB)")


def _unloadable_job(path: Path) -> None:
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        (state,) = db.execute("SELECT job_state FROM apscheduler_jobs WHERE id = 'j1'").fetchone()
        job = pickle.loads(state)
        job["func"] = "host.runtime.no_such_module:fire"  # renamed code, say
        db.execute(
            "UPDATE apscheduler_jobs SET job_state = ? WHERE id = 'j1'", (pickle.dumps(job),)
        )


DAMAGES: dict[str, tuple[Callable[[Path], None], str]] = {
    "garbage": (_garbage, "file is not a database"),
    "truncated": (_truncated, "malformed"),
    "foreign table": (_foreign_table, "lacks job_state, next_run_time"),
    "unloadable job": (_unloadable_job, "job j1 cannot be loaded"),
}


@pytest.mark.parametrize("kind", DAMAGES)
async def test_a_damaged_job_store_is_moved_aside_said_once_and_rebuilt_empty(
    tmp_path: Path, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    damage, reason = DAMAGES[kind]
    path = tmp_path / "scheduler.db"
    await _store_with_jobs(path)
    damage(path)
    assert reason in (job_store_damage(path) or "")
    # A WAL beside it (as a killed bot leaves one) goes with it, never beside a fresh store.
    path.with_name("scheduler.db-wal").write_bytes(b"wal")
    damaged_bytes = path.read_bytes()

    scheduler = _adapter(path)
    with caplog.at_level(logging.WARNING):
        await scheduler.start()
    try:
        (copy,) = damaged_copies(path)
        assert copy.read_bytes() == damaged_bytes
        assert copy.with_name(copy.name + "-wal").read_bytes() == b"wal"
        assert scheduler.set_aside is not None and scheduler.set_aside.moved_to == copy
        lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        assert len(lines) == 1, lines
        assert lines[0].startswith("scheduler.db was damaged (") and reason in lines[0]
        assert f"moved aside to {copy} and rebuilt from raven.db" in lines[0]
        assert not any(r.exc_info for r in caplog.records)
        # The fresh store works: it holds no job, stores one, and is sound.
        assert await scheduler.pending_job_ids() == []
        assert await scheduler.schedule_at("fresh", datetime.now(UTC) + timedelta(1), "ping", {})
        assert await scheduler.pending_job_ids() == ["fresh"]
    finally:
        await scheduler.stop()
    assert job_store_damage(path) is None


async def test_a_sound_job_store_keeps_its_jobs_and_is_not_moved(tmp_path: Path) -> None:
    path = tmp_path / "scheduler.db"
    await _store_with_jobs(path)
    scheduler = _adapter(path)
    await scheduler.start()
    try:
        assert sorted(await scheduler.pending_job_ids()) == ["j0", "j1", "j2"]
        assert scheduler.set_aside is None
    finally:
        await scheduler.stop()
    assert damaged_copies(path) == []


async def test_two_damaged_stores_in_one_second_keep_both_copies(tmp_path: Path) -> None:
    path = tmp_path / "scheduler.db"
    for _ in range(2):
        _garbage(path)
        scheduler = _adapter(path)
        await scheduler.start()
        await scheduler.stop()
    assert len(damaged_copies(path)) == 2


def test_a_locked_store_is_no_damage(tmp_path: Path) -> None:
    """Another process holding the write lock raises; it never moves a sound store aside."""
    path = tmp_path / "scheduler.db"
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        db.execute("CREATE TABLE apscheduler_jobs (id, next_run_time, job_state)")
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        holder.execute("BEGIN EXCLUSIVE")
        with pytest.raises(sqlite3.OperationalError):
            job_store_damage(path, busy_timeout=0)
    finally:
        holder.close()
    assert job_store_damage(path) is None
