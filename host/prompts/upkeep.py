"""Deadlines and restarts: expiring due prompts, and finishing what a crash interrupted."""

from __future__ import annotations

import logging
from collections.abc import Callable

from host.prompts.decisions import Decider
from host.prompts.expiry import ExpiryJobs
from host.prompts.posting import PromptPoster
from host.prompts.prompt_store import PromptStore
from host.runtime.prompt_record import Prompt
from host.runtime.scheduling import FiredJob

log = logging.getLogger(__name__)


class PromptUpkeep:
    """Expires prompts at their deadlines and, at startup, finishes interrupted work."""

    def __init__(
        self,
        records: PromptStore,
        decider: Decider,
        poster: PromptPoster,
        expiry: ExpiryJobs,
        clock: Callable[[], float],
    ) -> None:
        self._records = records
        self._decider = decider
        self._poster = poster
        self._expiry = expiry
        self._clock = clock

    async def expire_due(self) -> list[Prompt]:
        """Expire (or hold) every pending prompt past its deadline; return the ones expired."""
        now = self._clock()
        return await self._decider.expire(await self._records.due_ids(now), now)

    async def on_expiry_job(self, job: FiredJob) -> None:
        """Scheduler handler for `prompt_expiry` jobs: expire that prompt if it is due."""
        prompt = await self._records.get(str(job.payload["prompt_id"]))
        if prompt is None or prompt.state != "pending":
            return
        now = self._clock()
        if now < prompt.expires_at:
            # Fired early by this process's clock (skew or rounding): wake again at the deadline.
            await self._expiry.schedule(prompt)
            return
        log.info("prompt %s expired by its job, %.3fs late", prompt.id, job.lateness_seconds)
        await self._decider.expire([prompt.id], now)

    async def schedule_expiries(self) -> int:
        """Schedule the expiry job of every pending prompt (after the scheduler starts).

        Covers prompts created before expiry jobs existed and jobs lost or missed beyond the
        scheduler's grace; re-scheduling replaces a job, so this is idempotent.
        """
        pending = await self._records.pending()
        for prompt in pending:
            await self._expiry.schedule(prompt)
        return len(pending)

    async def recover(self) -> None:
        """At startup: finish decided-but-unhandled prompts, then expire overdue ones."""
        for prompt_id in await self._records.unhandled_ids():
            prompt = await self._records.get(prompt_id)
            if prompt is None:
                continue
            # The crash may have come before the message was edited; editing is idempotent.
            await self._poster.close(prompt)
            await self._decider.run_handler(prompt.id)
        await self.expire_due()
        # A crash between storing a prompt and showing it left it invisible: show it now.
        # (A crash after showing but before recording the message id shows it twice, which
        # beats a question nobody can see.)
        for prompt in await self._records.pending():
            if prompt.message_id is None and self._poster.can_show(prompt.conversation.platform):
                await self._poster.show(prompt)
