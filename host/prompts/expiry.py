"""Scheduler jobs of a pending prompt: its expiry at its deadline and, where reminders are
on, its reminder at 80 % of its lifetime (both in the scheduler's SQLite store, so they
survive restarts; stable ids, so scheduling again replaces them)."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from host.prompts.waiting import is_held, remind_at
from host.runtime.prompt_record import Prompt
from host.runtime.scheduling import Scheduler

log = logging.getLogger(__name__)

# The scheduler job kind that expires one prompt at its deadline.
PROMPT_EXPIRY_JOB = "prompt_expiry"
# The scheduler job kind that reminds the person asked, once.
PROMPT_REMINDER_JOB = "prompt_reminder"


def expiry_job_id(prompt_id: str) -> str:
    """The scheduler job id of a prompt's expiry (stable, so re-scheduling replaces it)."""
    return f"prompt-expiry:{prompt_id}"


def reminder_job_id(prompt_id: str) -> str:
    """The scheduler job id of a prompt's reminder."""
    return f"prompt-reminder:{prompt_id}"


class ExpiryJobs:
    """Schedules and cancels prompts' expiry jobs; without a scheduler, does nothing (then
    only sweeps and waiters expire prompts).

    Failures are logged, never raised: answers and waiters check the deadline themselves."""

    def __init__(self, scheduler: Scheduler | None) -> None:
        self._scheduler = scheduler

    async def schedule(self, prompt: Prompt) -> None:
        """Wake at the prompt's deadline (re-scheduling replaces the job); a held prompt
        has none."""
        if self._scheduler is None or is_held(prompt):
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

    async def schedule_reminder(self, prompt: Prompt, at: float | None = None) -> None:
        """Wake at the prompt's reminder time (or `at`: the end of quiet hours)."""
        if self._scheduler is None:
            return
        when = datetime.fromtimestamp(remind_at(prompt) if at is None else at, UTC)
        try:
            await self._scheduler.schedule_at(
                reminder_job_id(prompt.id), when, PROMPT_REMINDER_JOB, {"prompt_id": prompt.id}
            )
        except Exception:
            # A reminder is a courtesy: the prompt still expires (or is held) on time.
            log.warning("scheduling the reminder of prompt %s failed", prompt.id, exc_info=True)

    async def cancel(self, prompt_id: str) -> None:
        """Drop a decided prompt's jobs (its reminder's too)."""
        if self._scheduler is None:
            return
        for job_id in (expiry_job_id(prompt_id), reminder_job_id(prompt_id)):
            try:
                await self._scheduler.cancel(job_id)
            except Exception:
                # Harmless: the job finds the prompt decided and does nothing.
                log.warning("cancelling job %s failed", job_id, exc_info=True)
