"""The nudge policy over campaign notices, with the default settings but the policy's own: a
campaign's rounds are edited into its one status message, which, like its start and its
report, always posts (quiet hours and caps never swallow a round); a routine notice in its
owner's quiet hours is held (recorded) and posted once when they end, by its wake-up or by
the next start after a long downtime; over a cap it is held back and listed in `status`."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from bot.app import build_runtime, shutdown, start_serving
from bot.settings import load_settings
from core.ids import ConversationRef
from host.features.oncall.feature import OncallFeature
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


def _status_request(event: str = "status-1") -> InboundMessage:
    return InboundMessage(
        platform="test",
        workspace="W",
        channel="C",
        thread="T",
        message_id=event,
        author_id="U1",
        author_name="alice",
        text="status",
        event_id=event,
    )


def _status_key(campaign: str) -> str:
    return f"campaign:{campaign}:status"


ROUTINE = "routine:1"


async def _routine_notice(
    rt: Any, text: str = "⚠️ A routine notice for alice.", key: str = ROUTINE
) -> None:
    """A notice that passes the nudge policy (as a campaign's were before its rounds moved
    into its status message), for alice."""
    notifier = rt.feature(OncallFeature).notifier
    await notifier.send(CONV, text, idempotency_key=key, recipient="U1")


async def test_in_quiet_hours_a_campaign_still_posts_its_status_and_a_routine_notice_waits(
    isolated_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAVEN_QUIET_HOURS", _quiet_now())
    adapter = FakeChatAdapter()
    rt = await build_runtime(load_settings(), [lambda: adapter])
    await start_serving(rt)
    try:
        campaign = await _run_campaign(rt, adapter)
        # The start (an answer to the approval), the one status message and the report
        # posted: a round is never held until morning.
        keys = [m.idempotency_key for _, m in adapter.posts]
        assert {f"campaign:{campaign}:started", _status_key(campaign)} <= set(keys)
        assert f"campaign:{campaign}:report" in keys
        # A routine notice is held, on disk, with its release armed.
        await _routine_notice(rt)
        assert ROUTINE not in [m.idempotency_key for _, m in adapter.posts]
        held = f"SELECT key FROM held_posts WHERE key = '{ROUTINE}'"
        assert db_rows(isolated_env, held) == [(ROUTINE,)]
        assert f"held:{ROUTINE}" in await rt.scheduler.pending_job_ids()
        await rt.service.accept(_status_request("status-held"))  # listed until it posts
        status = adapter.texts[-1]
        assert "🌙 1 update(s) held for quiet hours here; posted at " in status, status
        assert "- ⚠️ A routine notice for alice." in status, status

        # Their end: the wake-up posts it, once however often it fires.
        job = FiredJob(
            f"held:{ROUTINE}",
            HELD_POST_RELEASE,
            {"key": ROUTINE},
            datetime.now(UTC),
            datetime.now(UTC),
        )
        for _ in range(2):
            await rt.bus.publish(WakeUp(job=job))
            await rt.service.quiesce(CONV)
        posted = [m for _, m in adapter.posts if m.idempotency_key == ROUTINE]
        assert len(posted) == 1 and posted[0].text == "⚠️ A routine notice for alice."
        assert db_rows(isolated_env, held) == []
        await rt.service.accept(_status_request())  # a control word: answered at once
        status = adapter.texts[-1]
        assert f"`{campaign}`" in status, status
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
    await _run_campaign(rt, first)
    await _routine_notice(rt)
    await shutdown(rt)
    # What a downtime longer than the scheduler's grace leaves: a release time long past
    # and no wake-up to post it.
    with sqlite3.connect(isolated_env / "raven.db") as db:
        db.execute("UPDATE held_posts SET release_at = 0")
    with sqlite3.connect(isolated_env / "scheduler.db") as db:
        db.execute("DELETE FROM apscheduler_jobs WHERE id = ?", (f"held:{ROUTINE}",))

    for attempt in range(2):  # the next start posts it; the one after does not again
        again = FakeChatAdapter()
        rt = await build_runtime(settings, [lambda adapter=again: adapter])  # type: ignore[misc]
        await start_serving(rt)
        await rt.service.quiesce(CONV)
        posted = [m for _, m in again.posts if m.idempotency_key == ROUTINE]
        assert len(posted) == (1 if attempt == 0 else 0), again.texts
        await shutdown(rt)
    assert db_rows(
        isolated_env, f"SELECT delivery FROM messages WHERE idempotency_key = '{ROUTINE}'"
    ) == [("sent",)]


async def test_over_the_channel_cap_campaigns_still_post_and_a_routine_notice_is_listed(
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
        # Neither campaign's status message nor report passes the caps: nothing capped.
        assert {_status_key(c) for c in (first, second)} <= keys
        assert {f"campaign:{c}:report" for c in (first, second)} <= keys
        await _routine_notice(rt)  # the channel's one routine post
        # Over the cap: held back, listed.
        await _routine_notice(rt, "⚠️ A second routine notice.", "routine:2")
        await rt.service.quiesce(CONV)
        assert [m.text for _, m in adapter.posts if m.idempotency_key == ROUTINE] == [
            "⚠️ A routine notice for alice."
        ]
        await rt.service.accept(_status_request())
        status = adapter.texts[-1]
        assert "📬 1 update(s) held back here (this channel had 1 in the last hour)" in status
        assert "- ⚠️ A second routine notice." in status, status
    finally:
        await shutdown(rt)
