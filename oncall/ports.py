"""What the campaign engine needs from the rest of the bot, as small protocols (injected by
the assembly root: oncall imports no host or chat code)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Literal, Protocol

from core.ids import ConversationRef
from oncall.model import MachineSpec

# The scheduler job kind of a campaign's scheduled wake-up.
CAMPAIGN_WAKE = "campaign_wake"

JSONScalar = str | int | float | bool | None
# Called with a notice's platform message id once it is posted (the status message's id).
PostedHook = Callable[[str], Awaitable[None]]


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

    async def send(
        self,
        conv: ConversationRef,
        text: str,
        *,
        idempotency_key: str,
        on_posted: PostedHook | None = None,
        recipient: str = "",
        essential: bool = False,
    ) -> None:
        """Record the notice durably, then post it once under `idempotency_key`, possibly
        later (in the conversation's order); `on_posted` gets its platform id. A notice that
        is not `essential` (a final report, a failure, an answer to a person's action) is
        routine: the bot's nudge policy for `recipient` may hold it back or delay it."""
        ...

    async def posted_id(self, conv: ConversationRef, idempotency_key: str) -> str | None:
        """The platform id of a posted notice; None while it is not posted."""
        ...

    async def edit(self, conv: ConversationRef, message_id: str, text: str, *, key: str) -> None:
        """Edit the round's status message in place."""
        ...


@dataclass(frozen=True)
class CommandApproval:
    """A command that will run only once a person allowed to approve it says yes."""

    campaign_id: str
    kind: Literal["start", "resubmit"]
    command: str
    requester: str
    conversation: ConversationRef
    machine: MachineSpec
    goal: str
    workdir: str  # where the round runs, as the person should see it
    budget: str  # the campaign's limits in words
    cite: int | None = None  # resubmit: the measurement the decision cited
    reason: str = ""
    # That directory's path when it is on this host (not over ssh): the prompt looks in it.
    directory: str | None = None


class OwnerAccess(Protocol):
    """Whether a campaign's owner still passes the bot's access rules (the host's admission
    satisfies it): checked at each wake-up and resubmit, as a live message would be."""

    async def refusal(
        self,
        campaign_id: str,
        owner: str,
        conversation: ConversationRef,
        machine: MachineSpec,
        origin: Literal["wake-up", "resubmit", "resume"],
    ) -> str | None:
        """Why the owner may no longer have the campaign go on (their access, or the
        machine's for their current roles); None while they may."""
        ...


class CommandApprovals(Protocol):
    """Asks people to approve a campaign's command (the host's prompt broker satisfies it);
    the decision comes back through `CampaignEngine.approved` / `not_approved`."""

    async def request(self, approval: CommandApproval) -> str:
        """Show the approval prompt (persisted first); the prompt's id."""
        ...
