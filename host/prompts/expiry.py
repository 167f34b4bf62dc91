"""One scheduler job per pending prompt, firing at its deadline."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from host.runtime.prompt_record import Prompt
from host.runtime.scheduling import Scheduler

log = logging.getLogger(__name__)

# The scheduler job kind that expires one prompt at its deadline.
PROMPT_EXPIRY_JOB = "prompt_expiry"


def expiry_job_id(prompt_id: str) -> str:
    """The scheduler job id of a prompt's expiry (stable, so re-scheduling replaces it)."""
    return f"prompt-expiry:{prompt_id}"


class ExpiryJobs:
    """Schedules and cancels prompts' expiry jobs; without a scheduler, does nothing (then
    only sweeps and waiters expire prompts).

    Failures are logged, never raised: answers and waiters check the deadline themselves."""

    def __init__(self, scheduler: Scheduler | None) -> None:
        self._scheduler = scheduler

    async def schedule(self, prompt: Prompt) -> None:
        """Wake at the prompt's deadline (re-scheduling replaces the job)."""
        if self._scheduler is None:
            return
        when = datetime.fromtimestamp(prompt.expires_at, UTC)
        try:
            await self._scheduler.schedule_at(
                expiry_job_id(prompt.id), when, PROMPT_EXPIRY_JOB, {"prompt_id": prompt.id}
            )
        except Exception:
            # Still fails closed: answers and waiters check the deadline, and the next
            # start's sweep expires it.
            log.warning("scheduling the expiry of prompt %s failed", prompt.id, exc_info=True)

    async def cancel(self, prompt_id: str) -> None:
        """Drop a decided prompt's job."""
        if self._scheduler is None:
            return
        try:
            await self._scheduler.cancel(expiry_job_id(prompt_id))
        except Exception:
            # Harmless: the job finds the prompt decided and does nothing.
            log.warning("cancelling the expiry job of prompt %s failed", prompt_id, exc_info=True)
