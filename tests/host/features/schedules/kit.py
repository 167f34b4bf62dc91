"""How a test talks to the assembled offline runtime and drives its scheduled tasks' clock."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from bot.app import Runtime
from core.ids import ConversationRef
from host.features.schedules.feature import SchedulesFeature
from host.features.schedules.store import ScheduledTask
from host.features.schedules.tasks import SCHEDULED_TASK_JOB, ScheduledTasks, job_id
from host.runtime.events import WakeUp
from host.runtime.messages import InboundMessage
from host.runtime.prompt_record import Prompt
from host.runtime.scheduling import FiredJob
from tests.fakes.chat_adapter import FakeChatAdapter

CONV = ConversationRef("test", "W", "C", "T")


def days_ahead(hour: int, minute: int = 0, *, days: int = 2) -> datetime:
    """A time of day some days from now (UTC), for a test that needs one. The runtime's real
    scheduler never finds a job armed for it due while the test runs: with a fixed date it
    fired the test's jobs on its own once the real clock had passed that date."""
    day = datetime.now(UTC).date() + timedelta(days=days)
    return datetime(day.year, day.month, day.day, hour, minute, tzinfo=UTC)


@dataclass
class FakeClock:
    now: datetime

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)


@dataclass
class Bot:
    rt: Runtime
    chat: FakeChatAdapter
    clock: FakeClock
    events: int = 0

    @property
    def tasks(self) -> ScheduledTasks:
        return self.rt.feature(SchedulesFeature).tasks

    async def say(self, text: str, author: str = "U1", name: str = "alice") -> str:
        """Send a message as `author`; the bot's last reply once the thread is quiet."""
        await self.send(text, author, name)
        await self.rt.service.quiesce(CONV)
        return self.chat.texts[-1]

    async def send(self, text: str, author: str = "U1", name: str = "alice") -> None:
        """Send a message as `author` and wait for its turn (not for the runs it starts)."""
        self.events += 1
        msg = InboundMessage(
            platform="test",
            workspace="W",
            channel="C",
            thread="T",
            message_id=f"m{self.events}",
            author_id=author,
            author_name=name,
            text=text,
            event_id=f"e{self.events}",
        )
        turn = await self.rt.service.accept(msg)
        if turn is not None:
            await turn

    async def approve(self, by: str = "U1") -> Prompt:
        (prompt,) = [p for p in await self.rt.broker.pending() if p.purpose == "schedule_approval"]
        outcome = await self.rt.broker.answer(prompt.id, prompt.nonce, by, "Approve")
        assert outcome.status == "accepted", outcome.message
        return prompt

    async def only_task(self) -> ScheduledTask:
        (task,) = await self.tasks.store.listed(live_only=False)
        return task

    async def fire_due(self) -> None:
        """The active task's job fires, as the scheduler would, at the fake clock's time."""
        (task,) = await self.tasks.store.active()
        assert task.next_due is not None
        job = FiredJob(
            job_id(task.id),
            SCHEDULED_TASK_JOB,
            {"task_id": task.id, "due": task.next_due.isoformat()},
            task.next_due,
            self.clock.now,
        )
        assert await self.rt.bus.publish(WakeUp(job))
        await self.rt.service.quiesce(CONV)
