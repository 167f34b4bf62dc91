"""Campaign commands from chat without a model: `campaign: resume ID` resumes a campaign
paused because its owner no longer passed the access rules (its owner, an approver or an
admin, from the campaign's own thread; the owner must pass again)."""

from __future__ import annotations

import re

from host.runtime.messages import InboundMessage
from host.runtime.roles import Roles
from oncall.engine import CampaignEngine

_RESUME = re.compile(r"^\s*campaign\s*:\s*resume\s+(?P<id>cmp_[0-9a-f]+)\s*$", re.IGNORECASE)


class CampaignCommands:
    """`campaign: resume ID`."""

    def __init__(self, engine: CampaignEngine, roles: Roles) -> None:
        self._engine = engine
        self._roles = roles

    @property
    def help(self) -> str:
        # Said in `help`'s one Campaigns line (agents/campaign_syntax.py), which must keep
        # the whole message within one Discord message.
        return ""

    async def handle(self, msg: InboundMessage) -> str | None:
        """The reply to `campaign: resume ID`, None for anything else."""
        match = _RESUME.match(msg.text) if msg.origin == "user" else None
        if match is None:
            return None
        campaign_id = match["id"]
        record = await self._engine.store.get(campaign_id)
        if record is None or record.conversation.id != msg.conversation.id:
            return f"No campaign `{campaign_id}` in this thread; resume it from its own thread."
        privileged = self._roles.privileged(msg.author_id)
        if not self._engine.may_act(record, msg.author_id, privileged=privileged):
            return (
                f"You may not resume campaign `{campaign_id}`: only its owner, an approver or "
                "an admin can."
            )
        return await self._engine.resume(campaign_id)
