"""The scheduler port: durable one-shot wake-ups, published on the event bus as `WakeUp`.

The host only sees this protocol; the APScheduler adapter lives in
`host.runtime.apscheduler_adapter` and tests use an in-memory fake. Payloads are JSON values
so a job survives a restart.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

JSONValue = str | int | float | bool | None | list["JSONValue"] | dict[str, "JSONValue"]
JobPayload = Mapping[str, JSONValue]


@dataclass(frozen=True)
class FiredJob:
    """One firing of a scheduled job, with when it was due and when it actually ran."""

    job_id: str
    kind: str
    payload: dict[str, JSONValue]
    scheduled_at: datetime
    fired_at: datetime

    @property
    def lateness_seconds(self) -> float:
        """How late the job ran (fired − scheduled); large after a restart or a stall."""
        return (self.fired_at - self.scheduled_at).total_seconds()


JobHandler = Callable[[FiredJob], Awaitable[None]]


class Scheduler(Protocol):
    """Durable one-shot jobs: a job id names one wake-up; firing calls its kind's handler."""

    async def schedule_at(
        self,
        job_id: str,
        when: datetime,
        kind: str,
        payload: JobPayload,
        *,
        replace_existing: bool = True,
    ) -> bool:
        """Schedule `kind` with `payload` at `when` (timezone-aware).

        With `replace_existing` an existing job of that id is replaced; without it the
        existing one is kept. Returns True when this call stored the job.
        """
        ...

    async def cancel(self, job_id: str) -> bool:
        """Remove a job before it fires; False when there was none (or it already fired)."""
        ...

    async def pending_job_ids(self) -> list[str]:
        """Ids of the jobs waiting to fire."""
        ...

    async def start(self) -> None:
        """Open the job store and begin firing due jobs (overdue ones within the grace)."""
        ...

    async def stop(self) -> None:
        """Stop firing, let in-flight handlers finish briefly, and close the job store."""
        ...
