"""What a campaign's page shows, read from the records (a stub: being built)."""

from __future__ import annotations

from dataclasses import dataclass

from oncall.store import CampaignRecord, CampaignStore


@dataclass(frozen=True)
class CampaignView:
    """A campaign as its page shows it."""

    record: CampaignRecord

    @property
    def finished(self) -> bool:
        return self.record.closed_at is not None


async def load_campaign(campaigns: CampaignStore, campaign_id: str) -> CampaignView | None:
    """The campaign's page data (None when there is no such campaign)."""
    record = await campaigns.get(campaign_id)
    return None if record is None else CampaignView(record)


async def campaign_signature(
    campaigns: CampaignStore, campaign_id: str
) -> tuple[object, ...] | None:
    """What changes when the campaign's page would."""
    record = await campaigns.get(campaign_id)
    return None if record is None else (record.state, record.round, record.updated_at)
