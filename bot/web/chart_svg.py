"""A campaign's metric drawn as SVG on the server (a stub: being built)."""

from __future__ import annotations

from bot.web.campaign_view import CampaignView


def campaign_chart_svgs(view: CampaignView) -> list[str]:
    """The campaign's charts as inline `<svg>` elements (text)."""
    return []
