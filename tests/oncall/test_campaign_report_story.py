"""A campaign's report and numbers read as one story: measurements are numbered within their
campaign from #1 (a second campaign in the same thread starts at #1 again), and a one-shot
campaign without a given baseline does not say "without a baseline" above its
"Baseline loss:" line."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from bot.schema import all_migrations
from core.store import Store
from oncall.store import CampaignStore
from tests.oncall_kit import CONV, oncall_kit, spec

ONE_SHOT = "echo loss=1.4331; echo loss=1.2"


async def test_measurements_are_numbered_from_one_in_each_campaign(tmp_path: Path) -> None:
    async with oncall_kit(tmp_path) as kit:
        reports = []
        for _ in range(2):
            record = await kit.engine.start(
                "U1", CONV, spec(ONE_SHOT, budget={"wall_seconds": 600, "rounds": 1})
            )
            final = await kit.until_final(record.id)
            numbers = [m.id for m in await kit.campaigns.measurements(record.id)]
            assert numbers == [1, 2], numbers
            assert final.report is not None
            reports.append(final.report)
        # The second campaign's report cites its own #1 and #2, not the thread's #3 and #4.
        assert "#1 in round 1" in reports[1] and "measurement #2" in reports[1], reports[1]
        assert "#3" not in reports[1] and "#4" not in reports[1], reports[1]


async def test_a_one_shot_campaign_without_a_baseline_reports_without_contradiction(
    tmp_path: Path,
) -> None:
    async with oncall_kit(tmp_path) as kit:
        record = await kit.engine.start(
            "U1", CONV, spec(ONE_SHOT, budget={"wall_seconds": 600, "rounds": 2})
        )
        final = await kit.until_final(record.id)
    assert final.state == "closed" and final.report is not None
    lines = final.report.splitlines()
    assert lines[:2] == [
        "The campaign finished after round 1: one run and no baseline given, so its first "
        "measurement serves as the baseline and no earlier round was there to beat.",
        "Baseline loss: 1.4331 (none was given: the first measurement, #1 in round 1).",
    ], lines
    assert "without a baseline" not in final.report


async def test_measurements_stored_before_the_numbering_are_numbered_per_campaign(
    tmp_path: Path,
) -> None:
    """A database from before: its measurements get their campaign's numbers once."""
    path = tmp_path / "raven.db"
    store = Store(path, all_migrations())
    await store.open()
    campaigns = CampaignStore(store)
    for campaign in ("c1", "c2"):
        await campaigns.create(campaign, "U1", CONV, spec(ONE_SHOT))
        await campaigns.start_round(campaign, 1, None, None)
        await campaigns.record_measurements(
            campaign, 1, [("loss", 1.0, "loss=1"), ("loss", 0.5, "loss=0.5")], watch={}
        )
    await store.close()
    with sqlite3.connect(path) as db:  # as the previous schema left them: no numbers
        db.execute("UPDATE campaign_measurements SET number = NULL")
        db.execute("DROP INDEX campaign_measurements_by_number")
        db.execute("DELETE FROM schema_ledger WHERE package = 'oncall' AND version = 2")
        db.execute("ALTER TABLE campaigns DROP COLUMN status_view")
        db.execute("ALTER TABLE campaign_measurements DROP COLUMN number")
    store = Store(path, all_migrations())
    await store.open()
    try:
        campaigns = CampaignStore(store)
        for campaign in ("c1", "c2"):
            assert [m.id for m in await campaigns.measurements(campaign)] == [1, 2]
    finally:
        await store.close()
