"""The `Scheduler` port on APScheduler 3: an AsyncIOScheduler with a SQLite job store.

Jobs persist in their own `scheduler.db` (APScheduler's synchronous engine must not contend
with the bot's aiosqlite connection for one file's write lock). Every job calls the
module-level `fire` with picklable arguments only; `fire` hands it to the running adapter.
"""

from __future__ import annotations

import asyncio
import json
import logging
import pickle
import sqlite3
import threading
import weakref
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from apscheduler.job import Job
from apscheduler.jobstores.base import ConflictingIdError, JobLookupError
from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore
from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.triggers.date import DateTrigger
from apscheduler.util import datetime_to_utc_timestamp
from sqlalchemy import Engine, create_engine, event

from host.runtime.events import EventBus, WakeUp
from host.runtime.job_store_health import SetAside, set_aside_if_damaged
from host.runtime.scheduling import FiredJob, JobPayload, JSONValue

log = logging.getLogger(__name__)

# The one piece of process-wide state, and unavoidable: APScheduler persists a job as a
# textual function reference plus pickled arguments, so a job fired after a restart cannot
# carry the adapter object. `fire` finds the running adapter by its name here. Weak values:
# an adapter that was dropped without `stop()` does not stay alive through this table.
_RUNNING: weakref.WeakValueDictionary[str, ApschedulerScheduler] = weakref.WeakValueDictionary()

_FIRE_REF = f"{__name__}:fire"


async def fire(
    scheduler_name: str, job_id: str, kind: str, payload_json: str, scheduled_iso: str
) -> None:
    """The function every persisted job names: dispatch to the running adapter's handler."""
    fired_at = datetime.now(UTC)
    owner = _RUNNING.get(scheduler_name)
    if owner is None:
        log.warning("job %s fired but scheduler %r is not running; dropped", job_id, scheduler_name)
        return
    payload: dict[str, JSONValue] = json.loads(payload_json)
    job = FiredJob(
        job_id=job_id,
        kind=kind,
        payload=payload,
        scheduled_at=datetime.fromisoformat(scheduled_iso),
        fired_at=fired_at,
    )
    await owner._dispatch(job)


def _set_pragmas(connection: sqlite3.Connection) -> None:
    """WAL with synchronous=NORMAL on every connection to the job store: a job's commit is
    an append that survives a crash of the bot (the default journal synced each commit to
    disk: 2.8 ms per job stored, most of a scheduled task's firing cost)."""
    connection.execute("PRAGMA journal_mode=WAL")
    connection.execute("PRAGMA synchronous=NORMAL")


def _sqlite_engine(db_path: Path) -> Engine:
    """The job store's engine (its connections get `_set_pragmas`)."""
    engine = create_engine(f"sqlite:///{db_path}")

    @event.listens_for(engine, "connect")
    def _pragmas(connection: sqlite3.Connection, _record: Any) -> None:
        _set_pragmas(connection)

    return engine


class _JobStore(SQLAlchemyJobStore):  # type: ignore[misc]
    """The SQLAlchemy job store, storing a job with one prepared statement on a sqlite3
    connection of its own: SQLAlchemy Core's statement, transaction and pool handling (a
    checkout and a rollback per job) were 0.15-0.2 of the 0.5 ms storing a job cost (the row
    written is the same; reads stay APScheduler's)."""

    def __init__(self, engine: Engine, db_path: Path) -> None:
        super().__init__(engine=engine)
        self._db_path = db_path
        self._writer: sqlite3.Connection | None = None
        self._closed = False
        # Jobs are stored from worker threads, maybe two at once.
        self._writing = threading.Lock()
        columns = f"{self.jobs_t.name} (id, next_run_time, job_state) VALUES (?, ?, ?)"
        self._insert = f"INSERT INTO {columns}"
        self._upsert = (
            f"INSERT INTO {columns} ON CONFLICT(id) DO UPDATE SET"
            " next_run_time = excluded.next_run_time, job_state = excluded.job_state"
        )

    def add_job(self, job: Job) -> None:
        if not self.put(job.__getstate__(), replace=False):
            raise ConflictingIdError(job.id)

    def put(self, state: dict[str, Any], *, replace: bool) -> bool:
        """Store a job's state (as `Job.__getstate__` gives it); False when its id is taken
        and `replace` is off."""
        row = (
            state["id"],
            datetime_to_utc_timestamp(state["next_run_time"]),
            pickle.dumps(state, self.pickle_protocol),
        )
        with self._writing:
            connection = self._connection()
            try:
                connection.execute(self._upsert if replace else self._insert, row)
            except sqlite3.IntegrityError:
                connection.rollback()
                return False
            connection.commit()
        return True

    def start(self, scheduler: Any, alias: str) -> None:
        super().start(scheduler, alias)
        with self._writing:
            self._closed = False  # started again after a shutdown

    def shutdown(self) -> None:
        with self._writing:
            self._closed = True
            if self._writer is not None:
                self._writer.close()
                self._writer = None
        super().shutdown()

    def _connection(self) -> sqlite3.Connection:
        if self._closed:
            raise RuntimeError("the job store is shut down; the job was not stored")
        if self._writer is None:
            writer = sqlite3.connect(self._db_path, timeout=5.0, check_same_thread=False)
            _set_pragmas(writer)
            self._writer = writer
        return self._writer


class _AddAwareScheduler(AsyncIOScheduler):  # type: ignore[misc]
    """An AsyncIOScheduler told about each stored job, which skips the pass over the job
    store when the job is due no sooner than the armed timer.

    APScheduler wakes up after every added job and queries the store for due jobs and the
    next run time: with 10,000 jobs stored, 0.4 of the 1 ms that storing one costs. A job due
    at or after the armed wake-up is found by the pass that wake-up makes anyway.

    The adding thread decides this itself, after its commit, without a hop to the loop: the
    loop clears the armed time before a pass reads the store and sets it after, so a thread
    that finds a time finds it either before the pass reads (the pass will see the job) or
    after the pass armed it (the job is due no sooner, or the thread wakes the loop)."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        # When the armed timer runs the next pass (None: no timer, or a pass is running).
        self._armed_until: datetime | None = None

    def stored(self, run_at: datetime) -> None:
        """A job due at `run_at` was committed to the store (called from any thread)."""
        armed = self._armed_until
        if armed is None or run_at < armed:
            self._eventloop.call_soon_threadsafe(self._wake)

    def wakeup(self) -> None:
        # Called by APScheduler (its timer, resume, a modified job) from any thread.
        self._eventloop.call_soon_threadsafe(self._wake)

    def _wake(self) -> None:
        self._stop_timer()  # clears the armed time before the pass reads the store
        started = datetime.now(UTC)
        wait_seconds = self._process_jobs()
        self._start_timer(wait_seconds)
        # The pass read its clock after `started`, so the timer's target (the next job's
        # due time) is no earlier than this. The clock read after the pass came later than
        # the target by the pass's length: jobs stored for the target itself (tasks sharing
        # a schedule and an anchor) then each woke a needless pass over the store.
        if wait_seconds is not None:
            self._armed_until = started + timedelta(seconds=wait_seconds)

    def _stop_timer(self) -> None:
        super()._stop_timer()
        self._armed_until = None


class ApschedulerScheduler:
    """`Scheduler` on AsyncIOScheduler + SQLAlchemyJobStore (coalesce, one instance a job)."""

    def __init__(
        self,
        db_path: Path,
        bus: EventBus,
        *,
        misfire_grace_seconds: int = 3600,
        name: str | None = None,
        stop_grace_seconds: float = 5.0,
    ) -> None:
        if misfire_grace_seconds <= 0:
            raise ValueError("misfire_grace_seconds must be positive")
        self._db_path = db_path
        self._bus = bus
        # The job store's identity by default: jobs persisted in one scheduler.db name it, and
        # two runtimes in one process (tests) on different homes each get their own jobs.
        self._name = name if name is not None else str(db_path.resolve())
        self._stop_grace = stop_grace_seconds
        job_defaults: dict[str, Any] = {
            # A job overdue several times (it cannot be, being one-shot, but a later
            # recurring kind might) runs once; never two copies of one job at a time.
            "coalesce": True,
            "max_instances": 1,
            # Beyond this, APScheduler drops an overdue job (logged as missed).
            "misfire_grace_time": int(misfire_grace_seconds),
        }
        self._store = _JobStore(_sqlite_engine(db_path), db_path)
        self._scheduler = _AddAwareScheduler(
            jobstores={"default": self._store}, job_defaults=job_defaults, timezone=UTC
        )
        # Every job is this one with its own id, time and arguments. Built once by APScheduler
        # itself, so the stored state is the one `add_job` would store; building and checking
        # a Job per call (the callable's signature through `inspect`, twice `_modify`) was
        # 0.15-0.2 ms of the 0.5 ms a job cost.
        epoch = datetime.fromtimestamp(0, UTC)
        self._template: dict[str, Any] = Job(
            self._scheduler,
            id="template",
            func=_FIRE_REF,
            trigger=DateTrigger(run_date=epoch, timezone=UTC),
            executor="default",
            # The shape every job's arguments have (APScheduler checks them against `fire`).
            args=("", "template", "", "{}", epoch.isoformat()),
            kwargs={},
            name="template",
            next_run_time=epoch,
            **job_defaults,
        ).__getstate__()
        self._inflight: set[asyncio.Task[Any]] = set()
        self._started = False
        # The damaged job store the last start moved out of the way, if it did.
        self.set_aside: SetAside | None = None

    @property
    def running(self) -> bool:
        """True between `start()` and `stop()`."""
        return self._started

    async def start(self) -> None:
        """Open `scheduler.db` and begin firing; overdue jobs within the grace fire now."""
        if self._started:
            return
        other = _RUNNING.get(self._name)
        if other is not None and other is not self:
            raise RuntimeError(f"a scheduler named {self._name!r} is already running")
        self._db_path.parent.mkdir(parents=True, exist_ok=True)
        # Found now, not at a firing: a damaged store is derived data, set aside and rebuilt
        # (each feature's start re-arms its jobs from raven.db).
        set_aside = await asyncio.to_thread(set_aside_if_damaged, self._db_path, datetime.now(UTC))
        if set_aside is not None:
            self.set_aside = set_aside
            log.warning(
                "%s was damaged (%s); moved aside to %s and rebuilt from raven.db",
                self._db_path.name,
                set_aside.reason,
                set_aside.moved_to,
            )
        # Registered before starting: overdue jobs fire on the first wake-up after start.
        _RUNNING[self._name] = self
        try:
            self._scheduler.start()
        except BaseException:
            _RUNNING.pop(self._name, None)
            raise
        self._started = True

    async def stop(self) -> None:
        """Stop firing, give in-flight handlers `stop_grace_seconds`, then close the store."""
        if not self._started:
            return
        self._started = False
        self._scheduler.pause()
        if self._inflight:
            _, late = await asyncio.wait(set(self._inflight), timeout=self._stop_grace)
            if late:
                log.warning("%d scheduled job(s) still running at shutdown; cancelled", len(late))
                for task in late:
                    task.cancel()
        # AsyncIOScheduler.shutdown only queues the work on the loop (call_soon_threadsafe);
        # yield until it has run so the job store is closed when this returns.
        self._scheduler.shutdown(wait=False)
        for _ in range(100):
            if not self._scheduler.running:
                break
            await asyncio.sleep(0)
        if self._inflight:
            await asyncio.gather(*self._inflight, return_exceptions=True)
        if _RUNNING.get(self._name) is self:
            del _RUNNING[self._name]

    async def schedule_at(
        self,
        job_id: str,
        when: datetime,
        kind: str,
        payload: JobPayload,
        *,
        replace_existing: bool = True,
    ) -> bool:
        """Store a one-shot job (see `Scheduler.schedule_at`); needs a started scheduler."""
        if not self._started:
            raise RuntimeError("the scheduler is not running")
        if when.tzinfo is None:
            raise ValueError("`when` must be timezone-aware")
        if not self._bus.has_subscriber(WakeUp, kind):
            raise ValueError(f"no handler for job kind {kind!r}")
        payload_json = json.dumps(dict(payload))  # fails here for values a restart would lose
        run_at = when.astimezone(UTC)

        state = self._job_state(job_id, run_at, kind, payload_json)

        def add() -> bool:
            if not self._store.put(state, replace=replace_existing):
                return False
            self._scheduler.stored(run_at)
            return True

        # The job store is synchronous SQLite: write it off the event loop.
        return await asyncio.to_thread(add)

    def _job_state(
        self, job_id: str, run_at: datetime, kind: str, payload_json: str
    ) -> dict[str, Any]:
        """What APScheduler stores for a one-shot job calling `fire` at `run_at` (UTC)."""
        return {
            **self._template,
            "id": job_id,
            "trigger": DateTrigger(run_date=run_at, timezone=UTC),
            "args": (self._name, job_id, kind, payload_json, run_at.isoformat()),
            "name": f"{kind} {job_id}",
            "next_run_time": run_at,
        }

    async def cancel(self, job_id: str) -> bool:
        """Remove a job; False when unknown, already fired, or the scheduler is stopped."""
        if not self._started:
            return False

        def remove() -> bool:
            try:
                self._scheduler.remove_job(job_id)
            except JobLookupError:
                return False
            return True

        return await asyncio.to_thread(remove)

    async def pending_job_ids(self) -> list[str]:
        """Ids of the jobs waiting to fire (for status and tests)."""
        jobs: list[Job] = await asyncio.to_thread(self._scheduler.get_jobs)
        return [job.id for job in jobs]

    async def _dispatch(self, job: FiredJob) -> None:
        if not self._bus.has_subscriber(WakeUp, job.kind):
            log.error("no handler for scheduled job kind %r (job %s)", job.kind, job.job_id)
            return
        task = asyncio.current_task()
        if task is not None:
            self._inflight.add(task)
        try:
            log.info("job %s (%s) fired %.3fs late", job.job_id, job.kind, job.lateness_seconds)
            if not await self._bus.publish(WakeUp(job)):
                log.error("scheduled job %s (%s) failed", job.job_id, job.kind)
        finally:
            if task is not None:
                self._inflight.discard(task)
