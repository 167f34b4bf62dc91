"""The host's admission as the campaign engine's `OwnerAccess`: a campaign's owner must still
pass the bot's access rules, and its machine's for their current roles, at each wake-up and
resubmit."""

from __future__ import annotations

import logging
from collections.abc import Collection
from typing import Literal

from core.ids import ConversationRef
from host.runtime.admission import Admission
from oncall.access import Requester, machine_refusal
from oncall.model import MachineSpec

log = logging.getLogger(__name__)


class CampaignOwners:
    """Judges a campaign's owner with the one admission rule every origin uses."""

    def __init__(self, admission: Admission, *, admins: Collection[str]) -> None:
        self._admission = admission
        self._admins = frozenset(admins)

    async def refusal(
        self,
        campaign_id: str,
        owner: str,
        conversation: ConversationRef,
        machine: MachineSpec,
        origin: Literal["wake-up", "resubmit", "resume"],
    ) -> str | None:
        """Why the owner may no longer have the campaign go on; None while they may."""
        admin = owner in self._admins
        verdict = await self._admission.admit(
            origin,
            owner,
            conversation,
            subject=campaign_id,
            machine=lambda roles: machine_refusal(machine, Requester(owner, roles, admin=admin)),
        )
        if verdict.admitted:
            return None
        if verdict.standing.transient:
            # Stopping is final: a platform that did not answer is no reason to end the work.
            log.warning("campaign %s goes on unjudged: %s", campaign_id, verdict.notice)
            return None
        return verdict.standing.refusal
