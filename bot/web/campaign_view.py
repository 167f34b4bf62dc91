"""What a campaign's page shows, read from the records: its chart data, its rounds with their
values, each decision next to the measurement it cites, and the budget spent so far."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Final

from bot.web.pages import duration
from oncall.chart import CampaignChart, chart_of, round_failed
from oncall.model import Measurement
from oncall.store import CampaignRecord, CampaignStore, DecisionRecord, RoundRecord, WakeRecord

ROUND_VALUES_SHOWN: Final = 12  # values listed per round in the table (the chart has them all)


def value_text(value: float) -> str:
    """A measured value as people read it (`nan`, `inf` as such)."""
    return f"{value:.6g}" if math.isfinite(value) else str(value)


@dataclass(frozen=True)
class RoundView:
    """One round: its record, its values and whether it failed."""

    record: RoundRecord
    measurements: tuple[Measurement, ...]
    failed: bool

    @property
    def shown(self) -> tuple[Measurement, ...]:
        return self.measurements[:ROUND_VALUES_SHOWN]

    @property
    def not_shown(self) -> int:
        return max(len(self.measurements) - ROUND_VALUES_SHOWN, 0)


@dataclass(frozen=True)
class DecisionView:
    """A decision with the measurement it cites (None when it cites none, or one not found)."""

    record: DecisionRecord
    cited: Measurement | None

    @property
    def cite_missing(self) -> bool:
        """It names a measurement the campaign does not have."""
        return self.record.cite is not None and self.cited is None


@dataclass(frozen=True)
class BudgetLine:
    """One budget: what is spent, of what is allowed (None: no limit), as words and a share."""

    label: str
    used: str
    allowed: str | None
    share: float | None  # 0..1 for a meter; None when there is no limit


@dataclass(frozen=True)
class CampaignView:
    """A campaign as its page shows it."""

    record: CampaignRecord
    rounds: tuple[RoundView, ...] = ()
    measurements: tuple[Measurement, ...] = ()
    decisions: tuple[DecisionView, ...] = ()
    wakes: tuple[WakeRecord, ...] = ()
    budget: tuple[BudgetLine, ...] = ()
    chart: CampaignChart | None = field(default=None)

    @property
    def finished(self) -> bool:
        return self.record.closed_at is not None

    @property
    def next_wake(self) -> WakeRecord | None:
        """The pending wake-up, if one is scheduled."""
        return next((w for w in self.wakes if w.state == "pending"), None)

    def chart_data(self) -> CampaignChart:
        """The chart's data (from the records when the view was made without it)."""
        return self.chart or chart_of(
            self.record, [r.record for r in self.rounds], self.measurements
        )


async def load_campaign(
    campaigns: CampaignStore, campaign_id: str, *, now: float | None = None
) -> CampaignView | None:
    """The campaign's page data (None when there is no such campaign)."""
    record = await campaigns.get(campaign_id)
    if record is None:
        return None
    rounds = await campaigns.rounds(campaign_id)
    measurements = await campaigns.measurements(campaign_id)
    decisions = await campaigns.decisions(campaign_id)
    wakes = await campaigns.wakes(campaign_id)
    by_id = {m.id: m for m in measurements}
    by_round: dict[int, list[Measurement]] = {}
    for m in measurements:
        by_round.setdefault(m.round, []).append(m)
    return CampaignView(
        record=record,
        rounds=tuple(
            RoundView(r, tuple(by_round.get(r.round, ())), round_failed(r)) for r in rounds
        ),
        measurements=tuple(measurements),
        decisions=tuple(
            DecisionView(d, None if d.cite is None else by_id.get(d.cite)) for d in decisions
        ),
        wakes=tuple(wakes),
        budget=budget_lines(record, time.time() if now is None else now),
        chart=chart_of(record, rounds, measurements),
    )


def budget_lines(record: CampaignRecord, now: float) -> tuple[BudgetLine, ...]:
    """Rounds, wall clock, compute and model calls spent, against the spec's budget."""
    budget = record.spec.budget
    wall_used = max((record.closed_at or now) - record.created_at, 0.0)
    compute_allowed = None if budget.compute_minutes is None else budget.compute_minutes * 60
    return (
        BudgetLine(
            "Rounds", str(record.round), str(budget.rounds), _share(record.round, budget.rounds)
        ),
        BudgetLine(
            "Wall clock",
            duration(wall_used),
            duration(budget.wall_seconds),
            _share(wall_used, budget.wall_seconds),
        ),
        BudgetLine(
            "Compute",
            duration(record.compute_seconds),
            None if compute_allowed is None else duration(compute_allowed),
            None if compute_allowed is None else _share(record.compute_seconds, compute_allowed),
        ),
        # The spec sets no limit on model calls: the count is shown as it is.
        BudgetLine("Model calls", str(record.model_calls), None, None),
    )


def _share(used: float, allowed: float) -> float:
    return min(max(used / allowed, 0.0), 1.0) if allowed > 0 else 1.0


async def campaign_signature(
    campaigns: CampaignStore, campaign_id: str
) -> tuple[object, ...] | None:
    """What changes when the campaign's page would: its state, round and update time, how
    many values and decisions it has, its rounds' states and its wake-ups."""
    record = await campaigns.get(campaign_id)
    if record is None:
        return None
    rounds = await campaigns.rounds(campaign_id)
    wakes = await campaigns.wakes(campaign_id)
    measured, decided = await campaigns.counts(campaign_id)
    return (
        record.state,
        record.round,
        record.updated_at,
        record.model_calls,
        record.compute_seconds,
        measured,
        decided,
        tuple((r.round, r.state, r.ended_at, r.wake_reason) for r in rounds),
        tuple((w.id, w.state) for w in wakes),
    )
