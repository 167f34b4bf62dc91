"""RAVEN_CAMPAIGN_REPORT_TOLERANCE: validated, and the report gate of both the bot's and the
headless `campaigns run` engine holds reports to it."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.app import build_runtime, shutdown, start_serving
from bot.cli.campaign_run import build_headless
from bot.schema import all_migrations
from bot.settings import SettingsError, load_settings
from core.store import Store
from host.prompts.broker import PromptBroker
from oncall.engine import CampaignEngine
from tests.fakes.chat_adapter import FakeChatAdapter
from tests.helpers import approve_campaigns, eventually
from tests.oncall_kit import CONV, spec

# Measured 0.4; the report says 0.42: 5% off, outside the default 0.1% and inside 10%.
NEAR = "From the baseline loss of 1.0 the loss reached 0.42."


def test_the_tolerance_is_read_and_validated(monkeypatch: pytest.MonkeyPatch) -> None:
    assert load_settings().campaign_report_tolerance == 1e-3
    monkeypatch.setenv("RAVEN_CAMPAIGN_REPORT_TOLERANCE", "0.05")
    assert load_settings().campaign_report_tolerance == 0.05
    for wrong in ("-0.1", "2", "lots"):
        monkeypatch.setenv("RAVEN_CAMPAIGN_REPORT_TOLERANCE", wrong)
        with pytest.raises(SettingsError, match="RAVEN_CAMPAIGN_REPORT_TOLERANCE"):
            load_settings()


async def _near_report(engine: CampaignEngine, approve: PromptBroker | None = None) -> str:
    record = await engine.start("U1", CONV, spec("echo loss=0.9; echo loss=0.4; sleep 60"))
    if approve is not None:
        await approve_campaigns(approve)

    async def measured() -> bool:
        return len(await engine.store.measurements(record.id)) == 2

    try:
        await eventually(measured, within=60)
        return await engine.report(record.id, NEAR)
    finally:
        await engine.stop(record.id, by="test")


async def test_the_bot_holds_reports_to_the_configured_tolerance(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RAVEN_CAMPAIGN_REPORT_TOLERANCE", "0.1")
    rt = await build_runtime(load_settings(), [FakeChatAdapter])
    await start_serving(rt)
    try:
        # The bot asks a person to approve the command first.
        assert (await _near_report(rt.campaigns, approve=rt.broker)).startswith("Report accepted")
    finally:
        await shutdown(rt)


async def test_a_headless_run_holds_reports_to_the_configured_tolerance(
    isolated_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAVEN_CAMPAIGN_REPORT_TOLERANCE", "0.1")
    store = Store(isolated_env / "raven.db", all_migrations())
    await store.open()
    headless = await build_headless(load_settings(), store)
    await headless.scheduler.start()
    try:
        assert (await _near_report(headless.engine)).startswith("Report accepted")
    finally:
        await headless.engine.close()
        await headless.scheduler.stop()
        await store.close()
