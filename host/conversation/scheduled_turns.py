"""The `system_turn` job kind: a scheduled proactive turn in a conversation.

The job id is the turn's idempotency key, so a job that fires twice (a crash between
firing and APScheduler removing it, or a re-registration) is recorded and posted once.
"""

from __future__ import annotations

from datetime import datetime

from core.ids import ConversationRef
from host.conversation.service import ConversationService
from host.runtime.scheduling import FiredJob, JobHandler, JSONValue, Scheduler

SYSTEM_TURN = "system_turn"


async def schedule_system_turn(
    scheduler: Scheduler, job_id: str, when: datetime, conv: ConversationRef, text: str
) -> bool:
    """Schedule a proactive turn `text` in `conv` at `when`; `job_id` is its dedup key."""
    payload: dict[str, JSONValue] = {"conversation": conv.id, "text": text}
    return await scheduler.schedule_at(job_id, when, SYSTEM_TURN, payload)


def system_turn_handler(service: ConversationService) -> JobHandler:
    """The handler for `system_turn` jobs: record and run the turn, keyed by the job id."""

    async def handle(job: FiredJob) -> None:
        conv = ConversationRef.parse(str(job.payload["conversation"]))
        await service.system_turn(conv, str(job.payload["text"]), key=f"job:{job.job_id}")

    return handle
