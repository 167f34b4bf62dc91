"""Prompts that wait well: the reminder at 80 % of a prompt's lifetime (sent once, through
the outbox, never after an answer, never twice across a restart), and
`RAVEN_PROMPT_ON_EXPIRY=hold` (the run keeps waiting, `status` lists it, the buttons stay
answerable, `stop` ends it) next to the unchanged `deny`.

Real broker, store, outbox and nudge policy; the clock is moved by hand and
jobs are fired as the scheduler fires them (one test lets the real APScheduler fire both)."""

from __future__ import annotations

import asyncio
import itertools
import math
from dataclasses import dataclass
from datetime import UTC, datetime, time
from pathlib import Path
from types import MappingProxyType

import pytest

from core.ids import ConversationRef
from core.store import Store
from host.conversation.outbox import Outbox
from host.nudges.policy import NudgeLimits, NudgePolicy
from host.nudges.quiet import QuietHours
from host.prompts.broker import (
    PROMPT_EXPIRY_JOB,
    PROMPT_REMINDER_JOB,
    OnExpiry,
    PromptBroker,
    PromptPolicy,
    expiry_job_id,
    reminder_job_id,
)
from host.prompts.reminders import Notices, reminder_key
from host.prompts.waiting import is_held
from host.runtime.apscheduler_adapter import ApschedulerScheduler
from host.runtime.conversation_log import ConversationLog
from host.runtime.events import ConversationStopped, StopTally
from host.runtime.people import People
from host.runtime.prompt_record import Prompt
from host.runtime.scheduling import FiredJob
from tests.fakes.prompt_surface import RecordingPromptSurface
from tests.fakes.recording_channel import RecordingChannel
from tests.helpers import decision_bus, eventually, wake_up_bus

CONV = ConversationRef("test", "W1", "C1", "T1")
# Noon UTC: outside the quiet hours the tests configure unless they mean to be inside.
NOON = datetime(2026, 12, 7, 12, 0, tzinfo=UTC).timestamp()
LIFETIME = 1000.0
WITHIN = 10.0  # a hang guard, never a timing


class Directory:
    """Display names as a platform's directory gives them."""

    async def display_name(self, user_id: str) -> str:
        return {"alice": "Alice Liddell", "bob": "Bob"}.get(user_id, user_id)


class FakeClock:
    def __init__(self, now: float = NOON) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@dataclass
class Rig:
    broker: PromptBroker
    surface: RecordingPromptSurface
    channel: RecordingChannel
    decided: list[Prompt]
    clock: FakeClock


class Killed(BaseException):
    """The process died here (kill -9): nothing after it runs."""


@dataclass
class KilledAfterSend:
    """An outbox whose process dies right after the reminder was recorded, before it was
    posted and before the prompt's row recorded it."""

    log: ConversationLog

    async def send(self, conv: ConversationRef, text: str, *, idempotency_key: str) -> None:
        # What the outbox does first (Outbox.send), then death.
        await self.log.record_outbound(conv, idempotency_key=idempotency_key, text=text)
        raise Killed


def make_rig(
    store: Store,
    *,
    on_expiry: OnExpiry = "deny",
    clock: FakeClock | None = None,
    quiet: QuietHours | None = None,
    channel: RecordingChannel | None = None,
    killed_after_send: bool = False,
) -> Rig:
    """One process's broker with reminders on, posting through a real outbox and lane."""
    clock = clock or FakeClock()
    channel = channel or RecordingChannel()
    surface = RecordingPromptSurface()
    decided: list[Prompt] = []

    async def on_decision(prompt: Prompt) -> None:
        decided.append(prompt)

    people = People({"test": Directory()})
    log = ConversationLog(store)
    ids = itertools.count(1)
    broker = PromptBroker(
        store,
        surfaces=MappingProxyType({"test": surface}),
        bus=decision_bus({"deploy": on_decision}),
        policy=PromptPolicy(approvers=("boss",), default_expiry_seconds=LIFETIME),
        people=people,
        clock=clock,
        new_id=lambda: f"p{next(ids)}x{id(clock)}",
        on_expiry=on_expiry,
    )
    nudges = NudgePolicy(store, NudgeLimits(), quiet=quiet, people=people, clock=clock)
    notices: Notices = Outbox(log, {"test": channel})
    broker.remind_through(KilledAfterSend(log) if killed_after_send else notices, nudges)
    return Rig(broker, surface, channel, decided, clock)


async def approval(rig: Rig) -> Prompt:
    return await rig.broker.create(
        conversation=CONV,
        kind="approval",
        question="Deploy build 42 to prod?",
        requester="alice",
        purpose="deploy",
    )


def fired(kind: str, job_id: str, prompt: Prompt) -> FiredJob:
    now = datetime.now(UTC)
    return FiredJob(job_id, kind, {"prompt_id": prompt.id}, now, now)


async def remind(rig: Rig, prompt: Prompt) -> None:
    """The reminder job firing, as the scheduler fires it."""
    await rig.broker.on_reminder_job(fired(PROMPT_REMINDER_JOB, reminder_job_id(prompt.id), prompt))


async def expire(rig: Rig, prompt: Prompt) -> None:
    """The expiry job firing, as the scheduler fires it."""
    await rig.broker.on_expiry_job(fired(PROMPT_EXPIRY_JOB, expiry_job_id(prompt.id), prompt))


async def actions(rig: Rig, prompt_id: str) -> list[str]:
    return [a["action"] for a in await rig.broker.audit(prompt_id)]


# ---------------------------------------------------------------------------- the reminder


async def test_the_reminder_comes_at_80_percent_addressed_by_name(store: Store) -> None:
    rig = make_rig(store)
    prompt = await approval(rig)
    rig.clock.now = prompt.created_at + 0.79 * LIFETIME
    await remind(rig, prompt)  # fired early (clock skew): re-armed, nothing said
    assert await actions(rig, prompt.id) == ["created", "shown"]

    rig.clock.now = prompt.created_at + 0.8 * LIFETIME
    await remind(rig, prompt)
    ((conv, message),) = rig.channel.posts
    assert conv == CONV  # in the prompt's own thread
    text = message.text
    assert text.startswith("⏰ Alice Liddell, a question still waits for your answer")
    assert "“Deploy build 42 to prod?”" in text and f"`{prompt.id[:8]}`" in text
    # When it expires (with the mark each reader's client shows in their zone), and what then.
    assert "It expires at 12:16 UTC" in text and "⟨t:" in text and "(in 3 min)" in text
    assert "it then counts as denied" in text
    assert "<@" not in text and "@alice" not in text  # named, never pinged
    assert message.idempotency_key == reminder_key(prompt.id)
    assert await actions(rig, prompt.id) == ["created", "shown", "reminded"]
    # The prompt itself is untouched: still pending, still answerable.
    outcome = await rig.broker.answer(prompt.id, prompt.nonce, "alice", "approve")
    assert outcome.status == "accepted"


async def test_a_prompt_answered_first_gets_no_reminder(store: Store) -> None:
    rig = make_rig(store)
    prompt = await approval(rig)
    assert (await rig.broker.answer(prompt.id, prompt.nonce, "alice", "deny")).status == "accepted"
    rig.clock.now = prompt.created_at + 0.8 * LIFETIME
    # A job that fired anyway (its cancel raced the answer) finds it decided.
    await remind(rig, prompt)
    assert rig.channel.posts == []
    assert "reminded" not in await actions(rig, prompt.id)


async def test_the_reminder_is_not_doubled_by_a_crash_and_restart(store: Store) -> None:
    first = make_rig(store, killed_after_send=True)
    prompt = await approval(first)
    first.clock.now = prompt.created_at + 0.8 * LIFETIME
    # Killed right after the reminder was recorded in the outbox: never posted, and the
    # prompt's row never recorded it.
    with pytest.raises(Killed):
        await remind(first, prompt)
    assert first.channel.posts == []
    assert "reminded" not in await actions(first, prompt.id)

    channel = RecordingChannel()
    restarted = make_rig(store, clock=first.clock, channel=channel)
    # The start re-arms the reminder job, which fires again (twice, for good measure), and
    # the start's redelivery of what the outbox recorded runs too.
    await restarted.broker.schedule_expiries()
    await remind(restarted, prompt)
    await remind(restarted, prompt)
    await Outbox(ConversationLog(store), {"test": channel}).redeliver_pending("test")
    assert [m.idempotency_key for _, m in channel.posts] == [reminder_key(prompt.id)]
    assert (await actions(restarted, prompt.id)).count("reminded") == 1


async def test_quiet_hours_move_the_reminder_to_their_end(store: Store) -> None:
    rig = make_rig(store, on_expiry="hold", quiet=QuietHours(time(11, 0), time(13, 0)))
    prompt = await approval(rig)
    rig.clock.now = prompt.created_at + 0.8 * LIFETIME
    await remind(rig, prompt)  # in Alice's quiet hours: not said, not used up
    assert "reminded" not in await actions(rig, prompt.id)
    # After they end, the prompt is held (its deadline passed meanwhile): the reminder says so.
    rig.clock.now = datetime(2026, 12, 7, 13, 0, tzinfo=UTC).timestamp()
    await rig.broker.expire_due()
    await remind(rig, prompt)
    (text,) = rig.channel.texts
    assert "It passed its deadline and is held" in text and "`stop`" in text


async def test_the_real_scheduler_fires_the_reminder_before_the_expiry(
    store: Store, tmp_path: Path
) -> None:
    channel = RecordingChannel()
    log = ConversationLog(store)

    async def on_reminder(job: FiredJob) -> None:
        await broker.on_reminder_job(job)

    async def on_expiry(job: FiredJob) -> None:
        await broker.on_expiry_job(job)

    scheduler = ApschedulerScheduler(
        tmp_path / "scheduler.db",
        wake_up_bus({PROMPT_REMINDER_JOB: on_reminder, PROMPT_EXPIRY_JOB: on_expiry}),
        misfire_grace_seconds=3600,
    )
    surface = RecordingPromptSurface()
    broker = PromptBroker(
        store,
        surfaces=MappingProxyType({"test": surface}),
        bus=decision_bus({"deploy": lambda p: asyncio.sleep(0)}),
        scheduler=scheduler,
    )
    broker.remind_through(Outbox(log, {"test": channel}))
    await scheduler.start()
    try:
        prompt = await broker.create(
            conversation=CONV,
            kind="approval",
            question="Deploy?",
            requester="alice",
            purpose="deploy",
            expires_in=1.0,
        )
        assert sorted(await scheduler.pending_job_ids()) == sorted(
            [expiry_job_id(prompt.id), reminder_job_id(prompt.id)]
        )
        async with asyncio.timeout(WITHIN):
            decided = await broker.wait(prompt.id, poll_interval=3600)
        assert decided.state == "expired"

        async def handled() -> bool:
            return "handled" in [a["action"] for a in await broker.audit(prompt.id)]

        await eventually(handled, within=WITHIN)
        audit = [a["action"] for a in await broker.audit(prompt.id)]
        assert audit == ["created", "shown", "reminded", "expired", "handled"]
        await asyncio.wait_for(channel.posted.wait(), WITHIN)
        assert len(channel.posts) == 1 and "counts as denied" in channel.texts[0]
    finally:
        await scheduler.stop()


async def test_answering_cancels_the_reminder_job(store: Store, tmp_path: Path) -> None:
    async def ignore(job: FiredJob) -> None:
        return None

    handlers = {PROMPT_REMINDER_JOB: ignore, PROMPT_EXPIRY_JOB: ignore}
    scheduler = ApschedulerScheduler(
        tmp_path / "scheduler.db", wake_up_bus(handlers), misfire_grace_seconds=3600
    )
    log = ConversationLog(store)
    broker = PromptBroker(
        store,
        surfaces=MappingProxyType({"test": RecordingPromptSurface()}),
        bus=decision_bus({"deploy": lambda p: asyncio.sleep(0)}),
        scheduler=scheduler,
    )
    broker.remind_through(Outbox(log, {}))
    await scheduler.start()
    try:
        prompt = await broker.create(
            conversation=CONV, kind="approval", question="Deploy?", requester="alice"
        )
        assert reminder_job_id(prompt.id) in await scheduler.pending_job_ids()
        await broker.answer(prompt.id, prompt.nonce, "alice", "approve")
        assert await scheduler.pending_job_ids() == []
    finally:
        await scheduler.stop()


# ---------------------------------------------------------------------- what a deadline does


async def test_deny_expires_the_prompt_as_before(store: Store) -> None:
    rig = make_rig(store)
    prompt = await approval(rig)
    waiter = asyncio.create_task(rig.broker.wait(prompt.id, poll_interval=3600))
    rig.clock.now = prompt.expires_at
    await expire(rig, prompt)
    decided = await asyncio.wait_for(waiter, WITHIN)
    assert decided.state == "expired" and not decided.approved
    assert [(p.id, p.state) for p in rig.decided] == [(prompt.id, "expired")]
    assert [p.state for p in rig.surface.closed] == ["expired"]
    late = await rig.broker.answer(prompt.id, prompt.nonce, "alice", "approve")
    assert late.status == "expired"
    assert "held" not in await actions(rig, prompt.id)


async def test_hold_keeps_the_run_waiting_visible_and_answerable(store: Store) -> None:
    rig = make_rig(store, on_expiry="hold")
    prompt = await approval(rig)
    waiter = asyncio.create_task(rig.broker.wait(prompt.id, poll_interval=3600))
    rig.clock.now = prompt.expires_at + 5
    await expire(rig, prompt)

    held = await rig.broker.get(prompt.id)
    assert held is not None and held.state == "pending" and is_held(held)
    assert math.isinf(held.expires_at)
    assert rig.decided == [] and not waiter.done()
    # Its message was edited to say so (the surface renders the held state, buttons kept).
    assert [(p.id, is_held(p)) for p in rig.surface.closed] == [(prompt.id, True)]
    assert (await actions(rig, prompt.id))[-1] == "held"
    # The sweeps of later starts leave it alone.
    rig.clock.now += 10 * LIFETIME
    assert await rig.broker.expire_due() == []
    await rig.broker.recover()
    status = await rig.broker.status(CONV)
    assert f"prompt `{prompt.id[:8]}` waiting: Deploy build 42 to prod?" in status
    assert "waiting for an answer from Alice Liddell since 12:00 UTC" in status
    assert "held past its deadline" in status

    # The buttons still answer it, and the waiting run goes on with the answer.
    outcome = await rig.broker.answer(prompt.id, prompt.nonce, "alice", "approve")
    assert outcome.status == "accepted"
    decided = await asyncio.wait_for(waiter, WITHIN)
    assert decided.approved
    assert [(p.id, p.state) for p in rig.decided] == [(prompt.id, "answered")]
    assert await rig.broker.status(CONV) == ""


async def test_a_typed_answer_answers_a_held_prompt(store: Store) -> None:
    rig = make_rig(store, on_expiry="hold")
    prompt = await approval(rig)
    rig.clock.now = prompt.expires_at
    # Answered at its deadline: held on the spot, then answered (not refused as expired).
    outcome = await rig.broker.answer_typed(CONV, "alice", "approve")
    assert outcome is not None and outcome.status == "accepted"
    assert (await actions(rig, prompt.id))[2:] == ["held", "answered", "handled"]


async def test_stop_ends_a_held_prompt(store: Store) -> None:
    rig = make_rig(store, on_expiry="hold")
    prompt = await approval(rig)
    waiter = asyncio.create_task(rig.broker.wait(prompt.id, poll_interval=3600))
    rig.clock.now = prompt.expires_at
    await rig.broker.expire_due()
    tally = StopTally()
    await rig.broker.cancel_conversation_id(
        ConversationStopped(CONV.id, by="alice", privileged=False, tally=tally)
    )
    decided = await asyncio.wait_for(waiter, WITHIN)
    assert decided.state == "cancelled" and not decided.approved
    assert [p.state for p in rig.decided] == ["cancelled"]
    assert await rig.broker.pending() == []


async def test_a_prompt_that_lapsed_while_down_is_held_at_the_next_start(store: Store) -> None:
    first = make_rig(store, on_expiry="hold")
    prompt = await approval(first)
    first.clock.now = prompt.expires_at + LIFETIME
    restarted = make_rig(store, on_expiry="hold", clock=first.clock)
    await restarted.broker.recover()
    held = await restarted.broker.get(prompt.id)
    assert held is not None and is_held(held)
    assert restarted.decided == []


class AnsweredWhileHeld(RecordingPromptSurface):
    """A surface on which someone clicks Approve while the held message is being written."""

    def __init__(self) -> None:
        super().__init__()
        self.broker: PromptBroker | None = None

    async def close_prompt(self, prompt: Prompt) -> None:
        if is_held(prompt) and self.broker is not None:
            await self.broker.answer(prompt.id, prompt.nonce, "alice", "approve")
        await super().close_prompt(prompt)


async def test_a_prompt_answered_while_its_hold_is_shown_ends_showing_the_answer(
    store: Store,
) -> None:
    surface = AnsweredWhileHeld()
    clock = FakeClock()
    broker = PromptBroker(
        store,
        surfaces=MappingProxyType({"test": surface}),
        bus=decision_bus({"deploy": lambda p: asyncio.sleep(0)}),
        clock=clock,
        on_expiry="hold",
    )
    surface.broker = broker
    prompt = await broker.create(
        conversation=CONV, kind="approval", question="Deploy?", requester="alice", purpose="deploy"
    )
    clock.now = prompt.expires_at
    await broker.expire_due()
    # The held edit landed after the answer's: the message is shown answered once more.
    assert [(p.state, is_held(p)) for p in surface.closed][-1] == ("answered", False)


async def test_the_reminder_job_survives_a_restart_in_the_scheduler_store(
    store: Store, tmp_path: Path
) -> None:
    """Stored by one process's scheduler, fired by the next one's, posted once."""
    channel = RecordingChannel()
    log = ConversationLog(store)

    def process() -> tuple[PromptBroker, ApschedulerScheduler]:
        async def on_reminder(job: FiredJob) -> None:
            await broker.on_reminder_job(job)

        async def on_expiry(job: FiredJob) -> None:
            await broker.on_expiry_job(job)

        scheduler = ApschedulerScheduler(
            tmp_path / "scheduler.db",
            wake_up_bus({PROMPT_REMINDER_JOB: on_reminder, PROMPT_EXPIRY_JOB: on_expiry}),
            misfire_grace_seconds=3600,
        )
        broker = PromptBroker(
            store,
            surfaces=MappingProxyType({"test": RecordingPromptSurface()}),
            bus=decision_bus({"deploy": lambda p: asyncio.sleep(0)}),
            scheduler=scheduler,
            on_expiry="hold",
        )
        broker.remind_through(Outbox(log, {"test": channel}))
        return broker, scheduler

    first, scheduler = process()
    await scheduler.start()
    prompt = await first.create(
        conversation=CONV,
        kind="approval",
        question="Deploy?",
        requester="alice",
        purpose="deploy",
        expires_in=2.0,
    )
    await scheduler.stop()  # down before the reminder is due
    assert channel.posts == []

    second, scheduler = process()
    await scheduler.start()
    try:
        await second.schedule_expiries()  # as every start does: replaces, never doubles
        await eventually(lambda: channel.posts, within=WITHIN, what="the reminder")

        async def held() -> bool:
            return "held" in [a["action"] for a in await second.audit(prompt.id)]

        await eventually(held, within=WITHIN)
        assert len(channel.posts) == 1 and channel.texts[0].startswith("⏰ alice")
        assert await scheduler.pending_job_ids() == []
    finally:
        await scheduler.stop()
