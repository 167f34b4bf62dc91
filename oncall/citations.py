"""The evidence rule of SPEC §9: every wait / terminate / resubmit cites a recent measurement.

"Recent" is precise: the cited id must be a measurement of this campaign whose id is at least
the newest measurement id of the latest round that has measurements (ids grow with time, so
this is "the newest evidence, or newer"). Older evidence is refused with the id to cite.

When the campaign has no measurement yet there is nothing to cite: wait, terminate and
resubmit are then accepted without a cite, with a note saying so. Resubmit is allowed too
because a round that dies before printing its metric (a typo in the command) is exactly
the case a resubmit with changes fixes; the decision still records its reason. A `report`
never needs a cite: the report gate checks its evidence.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from oncall.model import DecisionAction, Measurement

NO_EVIDENCE_NOTE = "no measurement is recorded yet, so this decision cites none"


@dataclass(frozen=True)
class CitationResult:
    """Whether a cite is accepted; `message` says why not (or notes why none was needed)."""

    ok: bool
    message: str = ""
    cited: Measurement | None = None
    newest: Measurement | None = None  # the measurement a decision should cite now


def describe(measurement: Measurement) -> str:
    """`#42 (loss=0.31, round 3)`: how a measurement is named in messages."""
    return (
        f"#{measurement.id} ({measurement.name}={measurement.value:.6g}, round {measurement.round})"
    )


def newest_measurement(
    measurements: Sequence[Measurement], latest_round: int, *, campaign_id: str | None = None
) -> Measurement | None:
    """The newest measurement of the latest round (≤ `latest_round`) that has measurements."""
    own = [
        m
        for m in measurements
        if m.round <= latest_round and (campaign_id is None or m.campaign_id == campaign_id)
    ]
    if not own:
        return None
    last_round = max(m.round for m in own)
    return max((m for m in own if m.round == last_round), key=lambda m: m.id)


def check_citation(
    cite: int | None,
    measurements: Sequence[Measurement],
    latest_round: int,
    *,
    action: DecisionAction = "wait",
    campaign_id: str | None = None,
) -> CitationResult:
    """Accept `cite` for `action` or refuse it, naming the measurement to cite instead.

    `measurements` are the campaign's (with `campaign_id`, others in the sequence are
    treated as another campaign's); `latest_round` is the campaign's current round.
    """
    if action == "report":
        return CitationResult(ok=True)
    newest = newest_measurement(measurements, latest_round, campaign_id=campaign_id)
    if newest is None:
        return _without_evidence(cite, measurements, campaign_id)
    instead = f"cite measurement {describe(newest)}, the newest"
    if cite is None:
        return CitationResult(False, f"a {action} must cite a measurement: {instead}", None, newest)
    cited = next((m for m in measurements if m.id == cite), None)
    if cited is None:
        text = f"measurement #{cite} is not recorded: {instead}"
        return CitationResult(False, text, None, newest)
    if campaign_id is not None and cited.campaign_id != campaign_id:
        text = f"measurement #{cite} belongs to another campaign: {instead}"
        return CitationResult(False, text, None, newest)
    if cited.id < newest.id:
        text = f"measurement {describe(cited)} is older than the newest evidence: {instead}"
        return CitationResult(False, text, cited, newest)
    return CitationResult(True, "", cited, newest)


def _without_evidence(
    cite: int | None, measurements: Sequence[Measurement], campaign_id: str | None
) -> CitationResult:
    """No measurement of this campaign yet: accept a missing cite, refuse a made-up one."""
    if cite is None:
        return CitationResult(True, NO_EVIDENCE_NOTE)
    foreign = campaign_id is not None and any(m.id == cite for m in measurements)
    where = "belongs to another campaign" if foreign else "is not recorded"
    return CitationResult(
        False, f"measurement #{cite} {where}: no measurement is recorded yet, so cite none"
    )
