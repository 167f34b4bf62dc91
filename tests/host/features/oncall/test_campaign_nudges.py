"""The nudge policy over campaign notices, with the default settings but the policy's own: a
routine notice in its owner's quiet hours is held (recorded) and posted once when they end,
by its wake-up or by the next start after a long downtime; over a cap it is not posted; a
final report or a failure always posts."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from bot.app import build_runtime, shutdown, start_serving
from bot.settings import load_settings
from core.ids import ConversationRef
from host.nudges.held import HELD_POST_RELEASE
from host.runtime.events import WakeUp
from host.runtime.messages import InboundMessage
from host.runtime.scheduling import FiredJob
from tests.fakes.chat_adapter import FakeChatAdapter
from tests.helpers import approve_campaigns, db_rows, eventually
from tests.oncall_kit import spec

CONV = ConversationRef("test", "W", "C", "T")


def _quiet_now() -> str:
    """Quiet hours around the present hour (UTC: the fake platform names no zone), wide
    enough that the test cannot straddle their end."""
    hour = datetime.now(UTC).hour
    return f"{(hour - 1) % 24:02d}:00-{(hour + 3) % 24:02d}:00"


async def _run_campaign(rt: Any, adapter: FakeChatAdapter, owner: str = "U1") -> str:
    """Start a one-round campaign, approve it, and wait for its final report."""
    record = await rt.campaigns.start(
        owner, CONV, spec("echo loss=0.9", budget={"wall_seconds": 600, "rounds": 1})
    )
    await approve_campaigns(rt.broker, by=owner)
    report = f"📋 Campaign `{record.id}` report"
    failed = f"❌ Campaign `{record.id}` failed"
    await eventually(lambda: any(t.startswith((report, failed)) for t in adapter.texts), within=60)
    return str(record.id)


def _status_request() -> InboundMessage:
    return InboundMessage(
        platform="test",
        workspace="W",
        channel="C",
        thread="T",
        message_id="status-1",
        author_id="U1",
        author_name="alice",
        text="status",
        event_id="status-1",
    )


def _status_key(campaign: str) -> str:
    return f"campaign:{campaign}:status"


async def test_a_routine_notice_waits_out_quiet_hours_and_the_final_report_does_not(
    isolated_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAVEN_QUIET_HOURS", _quiet_now())
    adapter = FakeChatAdapter()
    rt = await build_runtime(load_settings(), [lambda: adapter])
    await start_serving(rt)
    try:
        campaign = await _run_campaign(rt, adapter)
        key = _status_key(campaign)
        # The start (an answer to the approval) and the report posted; the round's status
        # notice is held, on disk, with its release armed.
        assert any(t.startswith(f"🛰️ Campaign `{campaign}` started") for t in adapter.texts)
        assert not any(m.idempotency_key == key for _, m in adapter.posts)
        held = f"SELECT key FROM held_posts WHERE key = '{key}'"
        assert db_rows(isolated_env, held) == [(key,)]
        assert f"held:{key}" in await rt.scheduler.pending_job_ids()

        # Their end: the wake-up posts it, once however often it fires.
        job = FiredJob(
            f"held:{key}", HELD_POST_RELEASE, {"key": key}, datetime.now(UTC), datetime.now(UTC)
        )
        for _ in range(2):
            await rt.bus.publish(WakeUp(job=job))
            await rt.service.quiesce(CONV)
        posted = [m for _, m in adapter.posts if m.idempotency_key == key]
        assert len(posted) == 1 and posted[0].text.startswith(f"▶️ Campaign `{campaign}` round 1")
        assert db_rows(isolated_env, held) == []
        await rt.service.accept(_status_request())  # a control word: answered at once
        status = adapter.texts[-1]
        # Ended: counted in the one line of recent work, not listed as live.
        assert f"(latest `{campaign}`, closed)" in status, status
        assert "Proactive posts: quiet hours" in status, status
    finally:
        await shutdown(rt)


async def test_a_held_notice_past_its_release_posts_once_at_the_next_start(
    isolated_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAVEN_QUIET_HOURS", _quiet_now())
    settings = load_settings()
    first = FakeChatAdapter()
    rt = await build_runtime(settings, [lambda: first])
    await start_serving(rt)
    campaign = await _run_campaign(rt, first)
    await shutdown(rt)
    key = _status_key(campaign)
    # What a downtime longer than the scheduler's grace leaves: a release time long past
    # and no wake-up to post it.
    with sqlite3.connect(isolated_env / "raven.db") as db:
        db.execute("UPDATE held_posts SET release_at = 0")
    with sqlite3.connect(isolated_env / "scheduler.db") as db:
        db.execute("DELETE FROM apscheduler_jobs WHERE id = ?", (f"held:{key}",))

    for attempt in range(2):  # the next start posts it; the one after does not again
        again = FakeChatAdapter()
        rt = await build_runtime(settings, [lambda adapter=again: adapter])  # type: ignore[misc]
        await start_serving(rt)
        await rt.service.quiesce(CONV)
        posted = [m for _, m in again.posts if m.idempotency_key == key]
        assert len(posted) == (1 if attempt == 0 else 0), again.texts
        await shutdown(rt)
    assert db_rows(
        isolated_env, f"SELECT delivery FROM messages WHERE idempotency_key = '{key}'"
    ) == [("sent",)]


async def test_over_the_channel_cap_a_notice_is_not_posted_and_a_report_still_is(
    isolated_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAVEN_NUDGE_CHANNEL_PER_HOUR", "1")
    adapter = FakeChatAdapter()
    rt = await build_runtime(load_settings(), [lambda: adapter])
    await start_serving(rt)
    try:
        first = await _run_campaign(rt, adapter)
        second = await _run_campaign(rt, adapter, owner="U2")
        await rt.service.quiesce(CONV)
        keys = {m.idempotency_key for _, m in adapter.posts}
        assert _status_key(first) in keys
        assert _status_key(second) not in keys  # the channel's one routine post is used
        assert {f"campaign:{c}:report" for c in (first, second)} <= keys
    finally:
        await shutdown(rt)
