"""Campaigns as text, for `status` in a thread and `raven-bot campaigns show`."""

from __future__ import annotations

import time

from core.ids import ConversationRef
from oncall.engine.parts import CampaignError, cites
from oncall.model import FINAL_STATES
from oncall.store import CampaignStore

RECENT_SECONDS = 86_400.0  # `status` counts campaigns that ended within this


class Describer:
    """Reads the records; changes nothing."""

    def __init__(self, store: CampaignStore) -> None:
        self._store = store

    async def status(self, conv: ConversationRef) -> str:
        """One line per live campaign of the conversation, for `status`, then those that
        ended in the last 24 h as one `Recent:` line."""
        campaigns = await self._store.of_conversation(conv.id)
        since = time.time() - RECENT_SECONDS
        ended = [
            c
            for c in campaigns
            if c.state in FINAL_STATES and (c.closed_at or c.updated_at) >= since
        ]
        lines = []
        for record in [c for c in campaigns if c.state not in FINAL_STATES][:5]:
            values = [
                m
                for m in await self._store.measurements(record.id)
                if m.name == record.spec.metric.name
            ]
            latest = (
                f", {record.spec.metric.name}={values[-1].value:g} (#{values[-1].id})"
                if values
                else ""
            )
            lines.append(
                f"- campaign `{record.id}` {record.state}, round {record.round}{latest}: "
                f"{record.spec.goal[:60]}"
            )
        if ended:
            last = max(ended, key=lambda c: c.closed_at or c.updated_at)
            lines.append(
                f"Recent: {len(ended)} campaign(s) ended in the last 24 h (latest "
                f"`{last.id}`, {last.state})"
            )
        return "\n".join(lines)

    async def describe(self, campaign_id: str) -> str:
        """A campaign's full state as text: rounds, wake-ups, decisions, measurements."""
        record = await self._store.get(campaign_id)
        if record is None:
            raise CampaignError(f"No campaign `{campaign_id}`.")
        measurements = await self._store.measurements(record.id)
        lines = [
            f"Campaign `{record.id}` ({record.state}): {record.spec.goal}",
            f"Machine `{record.spec.machine}`, metric `{record.spec.metric.name}` "
            f"({record.spec.direction}), baseline {record.baseline}, model calls "
            f"{record.model_calls}.",
        ]
        lines += [
            f"- round {r.round}: {r.state}, exit {r.exit_code}, woke: {r.wake_reason or '-'}"
            for r in await self._store.rounds(record.id)
        ]
        lines += [
            f"- wake-up {w.id}: {w.state} ({w.reason}), late {w.lateness or 0:.1f}s"
            for w in (await self._store.wakes(record.id))[-5:]
        ]
        lines += [
            f"- decision {d.action}{cites(d.cite, ' (cites #{})')}: {d.reason}"
            for d in (await self._store.decisions(record.id))[-5:]
        ]
        lines += [f"- #{m.id} round {m.round}: {m.name}={m.value:g}" for m in measurements[-5:]]
        return "\n".join(lines)
