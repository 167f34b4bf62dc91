"""The conversation's overview (the page `status` links to): its runs, campaigns and
scheduled tasks, and nothing of another conversation's."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path

import aiohttp
import pytest

from core.store import Store
from host.features.schedules.line import TaskSchedule
from tests.bot.web.seed import CHANNEL, DM, SeedNode, seed_run, serving, token
from tests.bot.web.seed_campaign import campaign_spec, seed_campaign
from tests.bot.web.seed_schedules import seed_task


async def _get(url: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as client, client.get(url) as response:
        return response.status, await response.text()


async def test_the_overview_lists_runs_campaigns_and_tasks_of_its_conversation_only(
    store: Store, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    await seed_run(store, home, CHANNEL, [SeedNode("a")], run_id="run_channel")
    await seed_run(store, home, DM, [SeedNode("b")], run_id="run_dm")
    await seed_campaign(store, CHANNEL, campaign_spec(goal="<b>tune</b> it"), campaign_id="c_ch")
    await seed_campaign(store, DM, campaign_spec(), campaign_id="c_dm")
    anchor = datetime(2026, 12, 1, 9, tzinfo=UTC)
    await seed_task(
        store,
        CHANNEL,
        TaskSchedule(kind="every", when="1h", what="s1: shell: df -h /", tz="UTC"),
        task_id="t_ch",
        anchor=anchor,
        next_due=anchor + timedelta(hours=1),
    )
    async with serving(store, home) as base:
        status, page = await _get(f"{base}/v/{token(home, CHANNEL)}/")
    assert status == 200
    assert 'href="run/run_channel"' in page
    assert 'href="campaign/c_ch"' in page
    assert "&lt;b&gt;tune&lt;/b&gt; it" in page
    assert "1 scheduled task(s)" in page
    assert "run_dm" not in page and "c_dm" not in page


async def test_a_browsers_icon_request_is_answered_without_a_log_line(
    store: Store, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    caplog.set_level(logging.INFO, logger="bot.web")
    async with serving(store, home) as base:
        status, _ = await _get(f"{base}/favicon.ico")
    assert status == 204
    assert not [r for r in caplog.records if r.name.startswith("bot.web")]
