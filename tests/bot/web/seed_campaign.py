"""Campaigns for the viewer's tests, written through the campaign store as the engine writes
them: rounds with their values, decisions citing a value, wake-ups, a report."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from core.ids import ConversationRef
from core.store import Store
from oncall.model import Budget, CampaignSpec, MetricSpec, WakeReason
from oncall.store import CampaignRecord, CampaignStore


@dataclass(frozen=True)
class SeedRound:
    """A round: the metric's values, other named values, and how it ended (None: running)."""

    values: Sequence[float] = ()
    others: Sequence[tuple[str, float]] = ()
    state: str = "ended"
    wake_reason: WakeReason | None = "finished"
    exit_code: int | None = 0


@dataclass(frozen=True)
class SeedDecision:
    """A decision after round `round`, citing measurement number `cite` (#1 first)."""

    round: int
    action: str
    reason: str
    cite: int | None = None


@dataclass
class SteppingClock:
    """Ten seconds later at every look: records get distinct, ordered times."""

    now: float = field(default_factory=lambda: time.time() - 3600)

    def __call__(self) -> float:
        self.now += 10.0
        return self.now


def campaign_spec(
    *,
    goal: str = "get the loss under 1",
    metric: str = "loss",
    rounds: int = 3,
    wall_seconds: float = 7200.0,
    compute_minutes: float | None = 60.0,
    baseline: float | None = None,
) -> CampaignSpec:
    """A campaign's spec as a user would give it."""
    return CampaignSpec(
        goal=goal,
        command="python train.py",
        metric=MetricSpec(name=metric),
        baseline=baseline,
        budget=Budget(wall_seconds=wall_seconds, compute_minutes=compute_minutes, rounds=rounds),
    )


async def seed_campaign(
    store: Store,
    conv: ConversationRef,
    spec: CampaignSpec,
    rounds: Sequence[SeedRound] = (),
    decisions: Sequence[SeedDecision] = (),
    *,
    campaign_id: str = "c1",
    report: str | None = None,
    error: str | None = None,
    compute_seconds: float = 0.0,
    model_calls: int = 0,
    closed: bool = True,
    clock: SteppingClock | None = None,
) -> CampaignRecord:
    """A campaign with `rounds` and `decisions`, closed (or still running when not `closed`)."""
    clock = clock or SteppingClock()
    campaigns = CampaignStore(store, clock=clock)
    await campaigns.create(campaign_id, "U1", conv, spec, state="planning")
    for number, r in enumerate(rounds, start=1):
        await campaigns.start_round(campaign_id, number, None, None)
        values = [(spec.metric.name, v, f"{spec.metric.name}={v}") for v in r.values]
        values += [(name, v, f"{name}={v}") for name, v in r.others]
        if values:
            await campaigns.record_measurements(campaign_id, number, values, watch={})
        ended = r.state in ("ended", "failed")
        await campaigns.set_round(
            campaign_id,
            number,
            state=r.state,
            wake_reason=r.wake_reason,
            exit_code=r.exit_code,
            ended_at=clock() if ended else None,
        )
    for d in decisions:
        await campaigns.record_decision(campaign_id, d.round, d.action, d.cite, d.reason)
    await campaigns.add_model_calls(campaign_id, model_calls)
    fields: dict[str, object] = {"compute_seconds": compute_seconds}
    if report is not None:
        fields["report"] = report
    if error is not None:
        fields["error"] = error
    if closed:
        fields.update(state="closed", closed_at=clock())
    else:
        fields["state"] = "running"
    await campaigns.update(campaign_id, **fields)
    record = await campaigns.get(campaign_id)
    assert record is not None
    return record
