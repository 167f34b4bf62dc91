"""The reminder of an unanswered prompt: one message in its thread, addressed to the person
asked by display name, at 80 % of the prompt's lifetime.

The reminder is a notice the bot says on its own, so it passes the nudge policy like the
others: in the recipient's quiet hours its durable job is moved to their end (a reminder
after the deadline is sent only for a held prompt: an expired one is decided), and over the
caps it is left out. It goes through the outbox under a key (recorded, then posted; a
failed post retried, one cut off by a crash posted by the next start's redelivery), so it is
posted once; the prompt's row then records it, so its job never sends a second one.

Not through the conversation's lane, unlike other notices: a turn waiting there for a
foreground run may be what waits for this very prompt, and a reminder queued behind it would
come after the answer.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Protocol
from zoneinfo import ZoneInfo

from core.ids import ConversationRef
from host.nudges.policy import Nudge, NudgePolicy
from host.prompts.expiry import ExpiryJobs
from host.prompts.prompt_store import PromptStore
from host.prompts.waiting import OnExpiry, is_held, remind_at, reminder_text
from host.prompts.wording import gist, short_ids
from host.runtime.people import People
from host.runtime.prompt_record import Prompt
from host.runtime.scheduling import FiredJob

log = logging.getLogger(__name__)


class Notices(Protocol):
    """Where the reminder is posted: the outbox (host.conversation.outbox.Outbox)."""

    async def send(self, conv: ConversationRef, text: str, *, idempotency_key: str) -> object:
        """Record the message under its key, then post it unless it was posted already."""
        ...


def reminder_key(prompt_id: str) -> str:
    """The outbox key of a prompt's reminder: one post, whatever restarts."""
    return f"prompt-reminder:{prompt_id}"


class PromptReminders:
    """Schedules, sends (once) and skips prompts' reminders."""

    def __init__(
        self,
        records: PromptStore,
        jobs: ExpiryJobs,
        people: People,
        clock: Callable[[], float],
        on_expiry: OnExpiry,
    ) -> None:
        self._records = records
        self._jobs = jobs
        self._people = people
        self._clock = clock
        self._on_expiry = on_expiry
        # Set by `send_through` once the notices' path exists; until then none is scheduled.
        self._notices: Notices | None = None
        self._nudges: NudgePolicy | None = None

    def send_through(self, notices: Notices, nudges: NudgePolicy | None) -> None:
        """Turn reminders on: posted through `notices`, under the nudge policy `nudges`."""
        self._notices = notices
        self._nudges = nudges

    async def schedule(self, prompt: Prompt) -> None:
        """Wake at the new prompt's reminder time (when reminders are on)."""
        if self._notices is not None:
            await self._jobs.schedule_reminder(prompt)

    async def schedule_all(self) -> None:
        """At start: a job for every pending prompt not reminded yet (idempotent)."""
        if self._notices is None:
            return
        now = self._clock()
        for prompt in await self._records.unreminded():
            # One due while the bot was down fires now (a past date may count as missed).
            await self._jobs.schedule_reminder(prompt, max(remind_at(prompt), now))

    async def on_job(self, job: FiredJob) -> None:
        """Scheduler handler for `prompt_reminder` jobs: remind once, if still due."""
        prompt = await self._records.get(str(job.payload["prompt_id"]))
        if self._notices is None or prompt is None or prompt.state != "pending":
            return
        if await self._records.reminded(prompt.id):
            return
        now = self._clock()
        if now < remind_at(prompt):
            # Fired early by this process's clock: wake again at the reminder time.
            await self._jobs.schedule_reminder(prompt)
            return
        if not is_held(prompt) and now >= prompt.expires_at:
            # Its deadline decides it now (its expiry job or the next sweep); nothing to add.
            return
        await self._remind(prompt, now)

    async def _remind(self, prompt: Prompt, now: float) -> None:
        assert self._notices is not None
        conv = prompt.conversation
        # The person asked: the requester, unless others were named in their stead.
        asked = [prompt.requester] if prompt.requester in prompt.allowed_responders else []
        asked = asked or list(prompt.allowed_responders)
        names = await self._people.names(conv, asked)
        zone = await self._zone(conv, asked[0])
        pending = await self._records.pending(conv)
        text = reminder_text(
            prompt,
            addressee=" and ".join(names),
            gist_text=gist(prompt.question),
            short_id=f"`{short_ids([*pending, prompt])[prompt.id]}`",
            now=now,
            on_expiry=self._on_expiry,
            zone=zone,
        )
        nudge = Nudge(conv, asked[0], text, f"prompt {prompt.id}")
        if self._nudges is not None:
            until = await self._nudges.quiet_until(nudge, datetime.fromtimestamp(now, UTC))
            if until is not None:
                log.info("the reminder of prompt %s waits for quiet hours to end", prompt.id)
                await self._jobs.schedule_reminder(prompt, until.timestamp())
                return
            # Caps only: each reminder is about its own prompt (its key keeps it to one post),
            # and one counted before a crash must not hold back its own second attempt.
            if not await self._nudges.admit(nudge, dedup=False, now=now):
                await self._records.claim_reminder(
                    prompt.id,
                    at=now,
                    detail="not sent: over the nudge policy's caps",
                )
                return
        # Recorded in the outbox first (its key posts it once), then marked here: a crash
        # in between sends the same key again, which the outbox does not post twice.
        try:
            await self._notices.send(conv, text, idempotency_key=reminder_key(prompt.id))
        except Exception as exc:
            # Recorded: the outbox retries it (or the next start redelivers it).
            log.warning("the reminder of prompt %s is not posted yet: %s", prompt.id, exc)
        await self._records.claim_reminder(prompt.id, at=now, detail="sent")

    async def _zone(self, conv: ConversationRef, person: str) -> ZoneInfo:
        """The recipient's zone for the deadline's time (UTC without a nudge policy)."""
        if self._nudges is None:
            return ZoneInfo("UTC")
        return await self._nudges.zone(conv, person)
