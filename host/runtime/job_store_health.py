"""Whether `scheduler.db` can be used, and setting a damaged one aside.

The job store is derived data: every job in it is re-armed at start from what `raven.db`
holds (tasks and checks, campaign wake-ups, prompt expiries, held posts). A damaged one is
therefore renamed out of the way (kept for a look, never deleted) and a fresh one created,
rather than stopping the bot.
"""

from __future__ import annotations

import contextlib
import pickle
import shutil
import sqlite3
import tempfile
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from apscheduler.job import Job

JOBS_TABLE = "apscheduler_jobs"
_COLUMNS = {"id", "next_run_time", "job_state"}
# SQLite's primary result codes for a file that is not (or no longer) a sound database.
_SQLITE_CORRUPT = 11
_SQLITE_NOTADB = 26
# ... and for a read-only connection that could not replay a WAL.
_SQLITE_IOERR = 10
_SQLITE_CANTOPEN = 14
# A moved-aside store's name: `scheduler.db.damaged-20261206T021203Z`.
DAMAGED_INFIX = ".damaged-"
_STAMP = "%Y%m%dT%H%M%SZ"


@dataclass(frozen=True)
class SetAside:
    """A damaged job store that was moved out of the way."""

    reason: str
    moved_to: Path


def job_store_damage(db_path: Path, *, busy_timeout: float = 5.0) -> str | None:
    """Why the job store at `db_path` cannot be used (a short phrase), or None when it is
    sound or does not exist yet. Reads every page (`quick_check`) and every job, so damage
    is found at start rather than at a firing. Raises `sqlite3.Error` for what is no damage
    (a locked or unreadable file)."""
    if not db_path.exists():
        return None
    # Read-only: a read-write connection to a damaged file deleted its WAL on closing (the
    # last commits, if any, are kept with the copy moved aside).
    try:
        return _examine(f"{db_path.resolve().as_uri()}?mode=ro", busy_timeout)
    except sqlite3.OperationalError as exc:
        if exc.sqlite_errorcode & 0xFF not in (_SQLITE_IOERR, _SQLITE_CANTOPEN):
            raise
    # Read-only cannot replay a torn WAL (read-write ignores it): examine a copy read-write.
    with tempfile.TemporaryDirectory(prefix="raven-job-store-") as scratch:
        copy = Path(scratch) / db_path.name
        for suffix in ("", "-wal"):
            source = db_path.with_name(db_path.name + suffix)
            if source.exists():
                shutil.copyfile(source, copy.with_name(copy.name + suffix))
        return _examine(str(copy), busy_timeout)


def _examine(target: str, busy_timeout: float) -> str | None:
    """`_damage` of the database at `target` (a path, or a `file:` URI)."""
    uri = target.startswith("file:")
    try:
        with contextlib.closing(sqlite3.connect(target, uri=uri, timeout=busy_timeout)) as db:
            return _damage(db)
    except sqlite3.DatabaseError as exc:
        if exc.sqlite_errorcode & 0xFF in (_SQLITE_CORRUPT, _SQLITE_NOTADB):
            return str(exc)
        raise


def _damage(db: sqlite3.Connection) -> str | None:
    verdict = [str(row[0]) for row in db.execute("PRAGMA quick_check")]
    if verdict != ["ok"]:
        return f"database disk image is malformed: {verdict[0]}"
    tables = {str(r[0]) for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if JOBS_TABLE not in tables:
        # An empty file is a store not yet created; anything else is not a job store.
        return None if not tables else f"no {JOBS_TABLE} table"
    columns = {str(r[1]) for r in db.execute(f"PRAGMA table_info({JOBS_TABLE})")}
    if missing := _COLUMNS - columns:
        return f"the {JOBS_TABLE} table lacks {', '.join(sorted(missing))}"
    for job_id, state in db.execute(f"SELECT id, job_state FROM {JOBS_TABLE}"):
        try:
            # What APScheduler does to every job it loads (its function reference resolved).
            Job.__new__(Job).__setstate__(pickle.loads(state))
        except Exception as exc:
            return f"job {job_id} cannot be loaded ({type(exc).__name__}: {exc})"
    return None


def set_aside_if_damaged(db_path: Path, now: datetime) -> SetAside | None:
    """Move a damaged job store (and its -wal and -shm) to `<name>.damaged-<UTC time>`, so
    the scheduler creates a fresh one; None when it is sound."""
    reason = job_store_damage(db_path)
    if reason is None:
        return None
    base = db_path.with_name(f"{db_path.name}{DAMAGED_INFIX}{now.strftime(_STAMP)}")
    moved_to, n = base, 1
    while moved_to.exists():  # two in one second (tests): never overwrite an earlier copy
        n += 1
        moved_to = base.with_name(f"{base.name}.{n}")
    # Its -wal and -shm first: a crash in between must not leave them beside a fresh store.
    for suffix in ("-wal", "-shm"):
        side = db_path.with_name(db_path.name + suffix)
        if side.exists():
            side.rename(moved_to.with_name(moved_to.name + suffix))
    db_path.rename(moved_to)
    return SetAside(reason, moved_to)


def damaged_copies(db_path: Path) -> list[Path]:
    """Job stores set aside next to `db_path`, the newest first (for `doctor`)."""
    found = db_path.parent.glob(f"{db_path.name}{DAMAGED_INFIX}*")
    copies = [p for p in found if not p.name.endswith(("-wal", "-shm"))]
    return sorted(copies, key=lambda p: p.name, reverse=True)
