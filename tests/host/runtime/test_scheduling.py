"""The scheduler port on real APScheduler + SQLite: firing, idempotency, restarts, expiry."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import MappingProxyType

import pytest
from sqlalchemy import event

from agents.models.types import Message, ModelReply, TextBlock, ToolSpec
from core.ids import ConversationRef
from core.store import Store
from host.prompts.broker import PROMPT_EXPIRY_JOB, PromptBroker, expiry_job_id
from host.runtime.apscheduler_adapter import ApschedulerScheduler
from host.runtime.prompt_record import Prompt
from host.runtime.scheduling import FiredJob, JobHandler
from tests.fakes.prompt_surface import RecordingPromptSurface
from tests.fakes.providers import TestProvider
from tests.helpers import decision_bus, eventually, wake_up_bus

CONV = ConversationRef("test", "W1", "C1", "T1")
WITHIN = 10.0  # a hang guard for waits, never a timing assertion


@dataclass
class Recorder:
    """A job handler that records each firing and wakes waiters."""

    fired: list[FiredJob] = field(default_factory=list)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    async def __call__(self, job: FiredJob) -> None:
        self.fired.append(job)
        self.changed.set()

    async def until(self, cond: Callable[[list[FiredJob]], bool]) -> None:
        async with asyncio.timeout(WITHIN):
            while not cond(self.fired):
                self.changed.clear()
                await self.changed.wait()

    def ids(self) -> list[str]:
        return [j.job_id for j in self.fired]


@contextlib.contextmanager
def store_reads(scheduler: ApschedulerScheduler) -> Iterator[list[str]]:
    """The SELECTs run on the job store meanwhile (its reads go through SQLAlchemy, its
    inserts are raw sqlite3): each is a pass over the store."""
    selects: list[str] = []
    engine = scheduler._scheduler._jobstores["default"].engine

    def seen(_conn: object, _cursor: object, sql: str, *_rest: object) -> None:
        if sql.lstrip().startswith("SELECT"):
            selects.append(sql)

    event.listen(engine, "before_cursor_execute", seen)
    try:
        yield selects
    finally:
        event.remove(engine, "before_cursor_execute", seen)


def _adapter(path: Path, handlers: dict[str, JobHandler]) -> ApschedulerScheduler:
    return ApschedulerScheduler(path, wake_up_bus(handlers), misfire_grace_seconds=3600)


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "home" / "scheduler.db"


@pytest.fixture
async def rec_scheduler(db_path: Path) -> AsyncIterator[tuple[ApschedulerScheduler, Recorder]]:
    recorder = Recorder()
    scheduler = _adapter(db_path, {"ping": recorder})
    await scheduler.start()
    try:
        yield scheduler, recorder
    finally:
        await scheduler.stop()


def _soon(seconds: float = 0.0) -> datetime:
    return datetime.now(UTC) + timedelta(seconds=seconds)


async def test_job_fires_with_payload_and_lateness(
    rec_scheduler: tuple[ApschedulerScheduler, Recorder], db_path: Path
) -> None:
    scheduler, recorder = rec_scheduler
    when = _soon(0.05)
    assert await scheduler.schedule_at("j1", when, "ping", {"n": 1, "tags": ["a"]})
    await recorder.until(lambda fired: len(fired) == 1)
    job = recorder.fired[0]
    assert (job.job_id, job.kind, job.payload) == ("j1", "ping", {"n": 1, "tags": ["a"]})
    assert job.scheduled_at == when
    assert job.fired_at >= job.scheduled_at and job.lateness_seconds >= 0
    assert await scheduler.pending_job_ids() == []


async def test_schedule_rejects_what_a_restart_would_lose(
    rec_scheduler: tuple[ApschedulerScheduler, Recorder],
) -> None:
    scheduler, _ = rec_scheduler
    with pytest.raises(TypeError):
        await scheduler.schedule_at("j", _soon(60), "ping", {"obj": object()})  # type: ignore[dict-item]
    with pytest.raises(ValueError):
        await scheduler.schedule_at("j", datetime.now(), "ping", {})  # naive time
    with pytest.raises(ValueError):
        await scheduler.schedule_at("j", _soon(60), "unknown-kind", {})
    assert await scheduler.pending_job_ids() == []


async def test_replace_existing_keeps_one_job(
    rec_scheduler: tuple[ApschedulerScheduler, Recorder],
) -> None:
    scheduler, recorder = rec_scheduler
    assert await scheduler.schedule_at("wake:1", _soon(3600), "ping", {"v": "first"})
    assert await scheduler.schedule_at("wake:1", _soon(3600), "ping", {"v": "second"})
    # Without replacement the stored job wins and the call says so.
    assert not await scheduler.schedule_at(
        "wake:1", _soon(0), "ping", {"v": "third"}, replace_existing=False
    )
    assert await scheduler.pending_job_ids() == ["wake:1"]
    # Re-registering with a due time fires the one job, once, with the latest payload.
    assert await scheduler.schedule_at("wake:1", _soon(0), "ping", {"v": "fourth"})
    await recorder.until(lambda fired: len(fired) == 1)
    assert [j.payload["v"] for j in recorder.fired] == ["fourth"]
    assert await scheduler.pending_job_ids() == []


async def test_a_job_due_after_the_armed_wake_up_needs_no_pass_over_the_store(
    rec_scheduler: tuple[ApschedulerScheduler, Recorder],
) -> None:
    # APScheduler queries the store for due jobs after every add: with many jobs stored that
    # was 40 % of registering one. A job due no sooner than the armed timer is left to the
    # pass that timer makes anyway; an earlier one still re-arms at once.
    scheduler, recorder = rec_scheduler
    assert await scheduler.schedule_at("first", _soon(3600), "ping", {})
    with store_reads(scheduler) as selects:
        for n in range(5):
            # Each add's wake-up callback runs before its call returns (queued first).
            assert await scheduler.schedule_at(f"later{n}", _soon(7200 + n), "ping", {})
        assert not selects
        assert await scheduler.schedule_at("sooner", _soon(0.05), "ping", {})
        await recorder.until(lambda fired: len(fired) == 1)
    assert recorder.ids() == ["sooner"]
    assert sorted(await scheduler.pending_job_ids()) == sorted(
        ["first", *(f"later{n}" for n in range(5))]
    )


async def test_jobs_due_at_the_armed_wake_up_need_no_pass_over_the_store(
    rec_scheduler: tuple[ApschedulerScheduler, Recorder],
) -> None:
    # Tasks approved with one schedule and anchor share their first fire time: each woke a
    # pass (the armed time was read after the pass, later than the job it waits for).
    scheduler, _ = rec_scheduler
    when = _soon(3600)
    assert await scheduler.schedule_at("first", when, "ping", {})
    with store_reads(scheduler) as selects:
        for n in range(5):
            assert await scheduler.schedule_at(f"same{n}", when, "ping", {})
    assert not selects
    assert len(await scheduler.pending_job_ids()) == 6


async def test_a_stored_job_is_the_job_apscheduler_would_store(
    rec_scheduler: tuple[ApschedulerScheduler, Recorder],
) -> None:
    # Jobs are stored from a template APScheduler built: the state must stay what its own
    # add_job stores, or a job would load differently after an upgrade of APScheduler.
    scheduler, _ = rec_scheduler
    when = _soon(3600)
    assert await scheduler.schedule_at("ours", when, "ping", {"n": 1})
    args = [scheduler._name, "theirs", "ping", '{"n": 1}', when.astimezone(UTC).isoformat()]
    await asyncio.to_thread(
        scheduler._scheduler.add_job,
        "host.runtime.apscheduler_adapter:fire",
        trigger="date",
        run_date=when,
        id="theirs",
        name="ping theirs",
        args=args,
    )
    ours, theirs = [
        (await asyncio.to_thread(scheduler._scheduler.get_job, job_id)).__getstate__()
        for job_id in ("ours", "theirs")
    ]
    assert ours.pop("args")[1] == "ours" and theirs.pop("args")[1] == "theirs"
    assert ours.pop("trigger").run_date == theirs.pop("trigger").run_date == when
    assert (ours.pop("id"), ours.pop("name")) == ("ours", "ping ours")
    del theirs["id"], theirs["name"]
    assert ours == theirs


async def test_a_job_stored_during_a_pass_over_the_store_still_wakes_it(
    rec_scheduler: tuple[ApschedulerScheduler, Recorder],
) -> None:
    # The pass may have read the store before the job was committed and then arm its timer
    # past the job: an add that lands during a pass must wake another one, even when the job
    # is due after the timer armed before that pass.
    scheduler, recorder = rec_scheduler
    aps = scheduler._scheduler
    assert await scheduler.schedule_at("far", _soon(3600), "ping", {})
    armed_before: list[datetime | None] = []  # at the start of each pass (it then clears it)
    wake, passes = aps._wake, aps._process_jobs
    landed: list[str] = []

    def wake_noting_the_armed_time() -> None:
        armed_before.append(aps._armed_until)
        wake()

    def pass_with_an_add_landing() -> float | None:
        wait: float | None = passes()
        armed = armed_before[-1]
        # The pass the timer of "first" runs (not one an add asked for): the store was read
        # without the job landing now, which is due after that timer.
        if not landed and armed is not None and armed <= datetime.now(UTC):
            landed.append("late")
            later = armed + timedelta(seconds=0.1)
            assert scheduler._store.put(
                scheduler._job_state("late", later, "ping", "{}"), replace=True
            )
            aps.stored(later)
        return wait

    aps._wake, aps._process_jobs = wake_noting_the_armed_time, pass_with_an_add_landing  # type: ignore[method-assign]
    assert await scheduler.schedule_at("first", _soon(0.05), "ping", {})
    await recorder.until(lambda fired: len(fired) == 2)
    assert recorder.ids() == ["first", "late"]


async def test_cancel_prevents_the_fire(
    rec_scheduler: tuple[ApschedulerScheduler, Recorder],
) -> None:
    scheduler, recorder = rec_scheduler
    assert await scheduler.schedule_at("doomed", _soon(0.5), "ping", {})
    # Due after `doomed`: once it has fired, `doomed` would have fired before it.
    assert await scheduler.schedule_at("sentinel", _soon(0.6), "ping", {})
    assert await scheduler.cancel("doomed")
    assert not await scheduler.cancel("doomed")
    assert await scheduler.pending_job_ids() == ["sentinel"]
    await recorder.until(lambda fired: "sentinel" in [j.job_id for j in fired])
    assert recorder.ids() == ["sentinel"]


async def test_stopped_scheduler_refuses_jobs_and_cancel_is_a_no_op(db_path: Path) -> None:
    scheduler = _adapter(db_path, {"ping": Recorder()})
    with pytest.raises(RuntimeError):
        await scheduler.schedule_at("j", _soon(1), "ping", {})
    assert not await scheduler.cancel("j")
    await scheduler.stop()  # stopping a scheduler that never started is harmless


async def test_a_stopped_scheduler_closes_the_connection_jobs_are_stored_on(
    db_path: Path,
) -> None:
    scheduler = _adapter(db_path, {"ping": Recorder()})
    await scheduler.start()
    assert await scheduler.schedule_at("j", _soon(3600), "ping", {})
    store = scheduler._store
    assert store._writer is not None
    await scheduler.stop()
    assert store._writer is None  # closed with the job store, not left to the collector
    with pytest.raises(RuntimeError, match="shut down"):
        store.put(scheduler._job_state("k", _soon(3600), "ping", "{}"), replace=True)
    # Started again, the same scheduler stores jobs again.
    await scheduler.start()
    try:
        assert await scheduler.schedule_at("k", _soon(3600), "ping", {})
        assert sorted(await scheduler.pending_job_ids()) == ["j", "k"]
    finally:
        await scheduler.stop()


async def test_job_due_during_downtime_fires_once_after_restart(db_path: Path) -> None:
    first = Recorder()
    a = _adapter(db_path, {"ping": first})
    await a.start()
    due = _soon(2.0)
    await a.schedule_at("wake:down", due, "ping", {"why": "downtime"})
    await a.stop()
    assert first.fired == []  # stopped before it was due

    await eventually(lambda: datetime.now(UTC) > due, within=WITHIN)
    second = Recorder()
    b = _adapter(db_path, {"ping": second})
    await b.start()
    try:
        await second.until(lambda fired: len(fired) == 1)
        job = second.fired[0]
        assert (job.job_id, job.payload, job.scheduled_at) == (
            "wake:down",
            {"why": "downtime"},
            due,
        )
        assert job.lateness_seconds > 0  # it was overdue when B started, and that is recorded
        # Fired once: the one-shot job is gone from the store, so nothing can fire it again.
        assert await b.pending_job_ids() == []
    finally:
        await b.stop()
    assert first.fired == [] and len(second.fired) == 1


class EchoProvider(TestProvider):
    """Replies 'echo: <last line>' to every turn."""

    label = "echo"

    async def reply(
        self, system: str, messages: list[Message], tools: list[ToolSpec]
    ) -> ModelReply:
        last = messages[-1].content[0]
        assert isinstance(last, TextBlock)
        return ModelReply(
            content=[TextBlock(text="echo: " + last.text.splitlines()[-1])],
            stop_reason="end_turn",
        )


@dataclass
class ExpiryRig:
    broker: PromptBroker
    scheduler: ApschedulerScheduler
    surface: RecordingPromptSurface
    decided: list[Prompt]


@pytest.fixture
async def expiry_rig(store: Store, db_path: Path) -> AsyncIterator[ExpiryRig]:
    decided: list[Prompt] = []

    async def on_decision(prompt: Prompt) -> None:
        decided.append(prompt)

    async def on_expiry(job: FiredJob) -> None:
        await broker.on_expiry_job(job)

    surface = RecordingPromptSurface()
    scheduler = _adapter(db_path, {PROMPT_EXPIRY_JOB: on_expiry})
    broker = PromptBroker(
        store,
        surfaces=MappingProxyType({"test": surface}),
        bus=decision_bus({"deploy": on_decision}),
        scheduler=scheduler,
    )
    await scheduler.start()
    try:
        yield ExpiryRig(broker, scheduler, surface, decided)
    finally:
        await scheduler.stop()


async def _approval(broker: PromptBroker, expires_in: float) -> Prompt:
    return await broker.create(
        conversation=CONV,
        kind="approval",
        question="Deploy?",
        requester="alice",
        purpose="deploy",
        expires_in=expires_in,
    )


async def test_prompt_expires_through_its_scheduled_job(expiry_rig: ExpiryRig) -> None:
    rig = expiry_rig
    prompt = await _approval(rig.broker, expires_in=1.0)
    assert await rig.scheduler.pending_job_ids() == [expiry_job_id(prompt.id)]
    # A long poll interval: the waiter does not expire it itself, so the job must.
    async with asyncio.timeout(WITHIN):
        decided = await rig.broker.wait(prompt.id, poll_interval=3600)
    assert decided.state == "expired" and not decided.approved

    # The waiter wakes at the decision; the close and the handler follow it.
    async def handled() -> bool:
        return "handled" in [a["action"] for a in await rig.broker.audit(prompt.id)]

    await eventually(handled, within=WITHIN)
    assert [(p.id, p.state) for p in rig.decided] == [(prompt.id, "expired")]
    assert [p.id for p in rig.surface.closed] == [prompt.id]
    audit = [a["action"] for a in await rig.broker.audit(prompt.id)]
    assert audit == ["created", "shown", "expired", "handled"]
    assert await rig.scheduler.pending_job_ids() == []


async def test_answering_or_cancelling_a_prompt_cancels_its_job(expiry_rig: ExpiryRig) -> None:
    rig = expiry_rig
    answered = await _approval(rig.broker, expires_in=3600)
    cancelled = await _approval(rig.broker, expires_in=3600)
    assert sorted(await rig.scheduler.pending_job_ids()) == sorted(
        [expiry_job_id(answered.id), expiry_job_id(cancelled.id)]
    )
    outcome = await rig.broker.answer(answered.id, answered.nonce, "alice", "approve")
    assert outcome.status == "accepted"
    assert await rig.scheduler.pending_job_ids() == [expiry_job_id(cancelled.id)]
    assert await rig.broker.cancel_conversation(CONV) == 1
    assert await rig.scheduler.pending_job_ids() == []


async def test_a_job_firing_before_the_deadline_reschedules(expiry_rig: ExpiryRig) -> None:
    rig = expiry_rig
    prompt = await _approval(rig.broker, expires_in=3600)
    await rig.scheduler.cancel(expiry_job_id(prompt.id))
    early = FiredJob(
        job_id=expiry_job_id(prompt.id),
        kind=PROMPT_EXPIRY_JOB,
        payload={"prompt_id": prompt.id},
        scheduled_at=datetime.now(UTC),
        fired_at=datetime.now(UTC),
    )
    await rig.broker.on_expiry_job(early)
    stored = await rig.broker.get(prompt.id)
    assert stored is not None and stored.state == "pending"
    assert await rig.scheduler.pending_job_ids() == [expiry_job_id(prompt.id)]


async def test_prompts_without_a_job_get_one_at_startup(
    store: Store, expiry_rig: ExpiryRig
) -> None:
    # Created by a broker with no scheduler (before this change, or its job was lost).
    legacy = PromptBroker(store, surfaces=MappingProxyType({}), bus=decision_bus({}))
    old = await _approval(legacy, expires_in=3600)
    assert await expiry_rig.scheduler.pending_job_ids() == []
    assert await expiry_rig.broker.schedule_expiries() == 1
    assert await expiry_rig.scheduler.pending_job_ids() == [expiry_job_id(old.id)]
    assert await expiry_rig.broker.schedule_expiries() == 1  # idempotent
    assert await expiry_rig.scheduler.pending_job_ids() == [expiry_job_id(old.id)]


async def test_serve_starts_the_scheduler_and_shutdown_stops_it(isolated_env: Path) -> None:
    from bot.app import build_runtime, serve
    from bot.settings import load_settings

    runtime = await build_runtime(load_settings(), [])
    scheduler = runtime.scheduler
    assert isinstance(scheduler, ApschedulerScheduler) and not scheduler.running
    # No adapters: serve recovers, starts the scheduler, has nothing to serve, shuts down.
    assert await serve(runtime) == 0
    assert await asyncio.to_thread((isolated_env / "scheduler.db").exists)
    assert not scheduler.running


async def test_stop_cancels_a_handler_that_outlives_the_grace(db_path: Path) -> None:
    # One hung handler must not keep shutdown waiting: past the grace it is cancelled (by the
    # adapter itself, not only as a side effect of APScheduler's executor shutdown).
    entered = asyncio.Event()
    cancelled = asyncio.Event()

    async def hang(job: FiredJob) -> None:
        entered.set()
        try:
            await asyncio.Event().wait()
        finally:
            cancelled.set()

    scheduler = ApschedulerScheduler(db_path, wake_up_bus({"hang": hang}), stop_grace_seconds=0.05)
    await scheduler.start()
    await scheduler.schedule_at("h1", _soon(), "hang", {})
    async with asyncio.timeout(WITHIN):
        await entered.wait()
        await scheduler.stop()
    assert cancelled.is_set()
