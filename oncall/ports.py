"""What the campaign engine needs from the rest of the bot, as small protocols (injected by
the assembly root: oncall imports no host or chat code)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Protocol

from core.ids import ConversationRef

# The scheduler job kind of a campaign's scheduled wake-up.
CAMPAIGN_WAKE = "campaign_wake"

JSONScalar = str | int | float | bool | None


class WakeScheduler(Protocol):
    """Durable one-shot wake-ups (the host's scheduler port satisfies it)."""

    async def schedule_at(
        self,
        job_id: str,
        when: datetime,
        kind: str,
        payload: Mapping[str, JSONScalar],
        *,
        replace_existing: bool = True,
    ) -> bool:
        """Store a job firing `kind` with `payload` at `when`."""
        ...

    async def cancel(self, job_id: str) -> bool:
        """Remove a job before it fires."""
        ...


class CampaignNotifier(Protocol):
    """Where campaign news goes: the campaign's thread (persisted first, posted once)."""

    async def send(self, conv: ConversationRef, text: str, *, idempotency_key: str) -> str | None:
        """Record, then post a message under `idempotency_key` (once); its platform id."""
        ...

    async def edit(self, conv: ConversationRef, message_id: str, text: str, *, key: str) -> None:
        """Edit the round's status message in place."""
        ...
