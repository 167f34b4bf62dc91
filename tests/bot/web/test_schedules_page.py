"""The scheduled-work page, served by the real viewer on 127.0.0.1: a conversation's tasks
with their next fire times, firings and runs; nobody else's tasks; hostile text escaped."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime, timedelta
from datetime import time as dt_time
from pathlib import Path
from urllib.parse import urljoin
from zoneinfo import ZoneInfo

import aiohttp
import pytest

from core.ids import ConversationRef
from core.store import Store
from host.features.schedules.line import TaskSchedule
from tests.bot.web.seed import CHANNEL, DM, OTHER_THREAD, serving, token
from tests.bot.web.seed_schedules import SeedFiring, seed_task

HOUR = timedelta(hours=1)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """The bot's home, where the link key is kept."""
    path = tmp_path / "home"
    path.mkdir()
    return path


def _iso(at: datetime) -> str:
    return at.astimezone(UTC).isoformat(timespec="seconds")


def _section(page: str, task_id: str) -> str:
    """The part of the page about one task."""
    found = re.search(rf'<section class="task" id="task-{task_id}">(.*?)</section>', page, re.S)
    assert found is not None, f"no section for {task_id}"
    return found.group(1)


async def _page(base: str, home: Path, conv: ConversationRef) -> tuple[str, str]:
    url = f"{base}/v/{token(home, conv)}/schedules"
    async with aiohttp.ClientSession() as client, client.get(url) as response:
        assert response.status == 200
        return url, await response.text()


def _hourly(what: str) -> TaskSchedule:
    return TaskSchedule(kind="every", when="1h", what=what, tz="Europe/Paris")


async def test_a_live_and_an_ended_task_show_next_times_firings_and_runs(
    store: Store, home: Path
) -> None:
    anchor = datetime.fromtimestamp(int(time.time()), UTC) - 3 * HOUR - timedelta(minutes=5)
    await seed_task(
        store,
        CHANNEL,
        _hourly("s1: shell: df -h /"),
        task_id="t_live",
        anchor=anchor,
        next_due=anchor + HOUR,
        firings=[
            SeedFiring(anchor + HOUR, "ran", run_id="run_first"),
            SeedFiring(anchor + 2 * HOUR, "skipped", late_seconds=600.0),
            SeedFiring(anchor + 3 * HOUR, "ran", run_id="run_third"),
        ],
        after_firings=anchor + 4 * HOUR,
        grants=("df -h /",),
    )
    once = TaskSchedule(kind="in", when="20m", what="summarise the open issues")
    ended_anchor = anchor - 2 * HOUR
    await seed_task(
        store,
        CHANNEL,
        once,
        task_id="t_ended",
        anchor=ended_anchor,
        next_due=ended_anchor + timedelta(minutes=20),
        firings=[SeedFiring(ended_anchor + timedelta(minutes=20), "ran", run_id="run_once")],
        after_firings=None,
        state="done",
    )
    async with serving(store, home) as base:
        url, page = await _page(base, home, CHANNEL)
        live, ended = _section(page, "t_live"), _section(page, "t_ended")
        # Live tasks first, then the ended ones.
        assert page.index('id="task-t_live"') < page.index("Ended in the last")
        assert page.index("Ended in the last") < page.index('id="task-t_ended"')

        # The next five fire times: every hour from the anchor, after the three used ones.
        nexts = re.search(r'<ol class="next-times">(.*?)</ol>', live, re.S)
        assert nexts is not None
        shown = re.findall(r'<time datetime="([^"]+)">', nexts.group(1))
        assert shown == [_iso(anchor + k * HOUR) for k in range(4, 9)]
        assert "every 1h (Europe/Paris)" in live
        assert "df -h /" in live

        # Firings newest first, with outcome, lateness and the run each started.
        rows = re.findall(r'<tr class="outcome-(\w+)">(.*?)</tr>', live, re.S)
        assert [outcome for outcome, _ in rows] == ["ran", "skipped", "ran"]
        assert _iso(anchor + 3 * HOUR) in rows[0][1] and 'href="run/run_third"' in rows[0][1]
        assert "10 min 00 s" in rows[1][1] and "href=" not in rows[1][1]
        assert 'href="run/run_first"' in rows[2][1] and "run_third" not in rows[2][1]
        assert "3 time(s) (2 ran, 1 skipped)" in live

        # The ended task: no next fire times, its one firing and run.
        assert "It fires no more." in ended and "next-times" not in ended
        assert 'href="run/run_once"' in ended

        # The relative link opens the firing's run page with the same token.
        run_url = urljoin(url, "run/run_third")
        async with aiohttp.ClientSession() as client, client.get(run_url) as response:
            assert response.status == 200
            assert "scheduled task t_live" in await response.text()


async def test_other_conversations_and_dm_tasks_never_show(store: Store, home: Path) -> None:
    anchor = datetime.fromtimestamp(int(time.time()), UTC)
    for conv, task_id, marker in (
        (CHANNEL, "t_mine", "mine-marker"),
        (OTHER_THREAD, "t_other", "other-thread-marker"),
        (DM, "t_dm", "dm-marker"),
    ):
        await seed_task(
            store,
            conv,
            _hourly(f"echo {marker}"),
            task_id=task_id,
            anchor=anchor,
            next_due=anchor + HOUR,
            firings=[SeedFiring(anchor + HOUR, "ran", run_id=f"run_{task_id}")],
            after_firings=anchor + 2 * HOUR,
        )
    async with serving(store, home) as base:
        _, page = await _page(base, home, CHANNEL)
        assert "mine-marker" in page and "run_t_mine" in page
        for hidden in ("t_other", "other-thread-marker", "run_t_other", "t_dm", "dm-marker"):
            assert hidden not in page
        _, dm_page = await _page(base, home, DM)
        assert "dm-marker" in dm_page and "mine-marker" not in dm_page


async def test_hostile_task_text_is_escaped(store: Store, home: Path) -> None:
    anchor = datetime.fromtimestamp(int(time.time()), UTC)
    what = '<script>alert(1)</script> [open](javascript:alert(2)) \u202eexe.txt "quoted"'
    await seed_task(
        store,
        CHANNEL,
        _hourly(what),
        task_id="t_hostile",
        anchor=anchor,
        next_due=anchor + HOUR,
        owner_name="<img src=x onerror=alert(3)>\u202e",
        approved_by="<b>U2</b>",
        grants=("<script>grant</script>",),
    )
    async with serving(store, home) as base:
        _, page = await _page(base, home, CHANNEL)
    assert "<script>alert" not in page and "<script>grant" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert 'href="javascript:' not in page.lower()
    assert "<img src=x" not in page and "&lt;img src=x onerror=alert(3)&gt;" in page
    assert "<b>U2</b>" not in page and "&lt;b&gt;U2&lt;/b&gt;" in page
    assert "\u202e" not in page and "⟨U+202E⟩exe.txt" in page


async def test_a_check_shows_its_command_last_result_and_quiet_states(
    store: Store, home: Path
) -> None:
    anchor = datetime.fromtimestamp(int(time.time()), UTC) - timedelta(minutes=45)
    check = TaskSchedule(
        kind="every", when="30m", what="check: test -f /tmp/ok && grep -c x <log | when: fails"
    )
    snooze_end = anchor + 5 * HOUR
    await seed_task(
        store,
        CHANNEL,
        check,
        task_id="t_check",
        anchor=anchor,
        next_due=anchor + timedelta(minutes=30),
        firings=[SeedFiring(anchor + timedelta(minutes=30), "checked")],
        after_firings=anchor + timedelta(minutes=60),
        last_digest="tripped",
        snoozed_until=snooze_end,
    )
    await seed_task(
        store,
        CHANNEL,
        _hourly("echo paused"),
        task_id="t_paused",
        anchor=anchor,
        next_due=anchor + HOUR,
        state="paused",
        muted=True,
    )
    await seed_task(
        store,
        CHANNEL,
        _hourly("echo late"),
        task_id="t_overdue",
        anchor=anchor - HOUR,
        next_due=anchor,
    )
    async with serving(store, home) as base:
        _, page = await _page(base, home, CHANNEL)
    checked, paused = _section(page, "t_check"), _section(page, "t_paused")
    overdue = _section(page, "t_overdue")
    assert "The first is overdue" in overdue and f'<time datetime="{_iso(anchor)}">' in overdue
    assert "overdue" not in checked
    assert '<pre class="command">test -f /tmp/ok &amp;&amp; grep -c x &lt;log</pre>' in checked
    assert "the command fails" in checked
    assert '<span class="badge check-tripped">tripped</span>' in checked
    assert f'Snoozed until <time datetime="{_iso(snooze_end)}">' in checked
    assert "Paused: it does not fire until someone resumes it." in paused
    assert "No fire times while it is paused." in paused and "next-times" not in paused
    assert "Muted: its firings say nothing until it is unmuted." in paused


async def test_no_tasks_says_so(store: Store, home: Path) -> None:
    async with serving(store, home) as base:
        _, page = await _page(base, home, CHANNEL)
    assert "No scheduled tasks in this conversation." in page
    assert '<section class="task"' not in page


async def test_a_proposed_cron_task_shows_the_times_it_would_fire(store: Store, home: Path) -> None:
    paris = ZoneInfo("Europe/Paris")
    now = datetime.now(UTC)
    weekly = TaskSchedule(
        kind="cron", when="0 9 * * 1", what="post the week's plan", tz="Europe/Paris"
    )
    await seed_task(
        store, CHANNEL, weekly, task_id="t_proposed", anchor=now, next_due=None, state="proposed"
    )
    # Mondays (crontab weekday 1) at 09:00 in Paris, from today on, counted by hand.
    day = now.astimezone(paris).date()
    mondays: list[datetime] = []
    while len(mondays) < 5:
        at = datetime.combine(day, dt_time(9, 0), tzinfo=paris)
        if day.weekday() == 0 and at > now:
            mondays.append(at)
        day += timedelta(days=1)
    async with serving(store, home) as base:
        _, page = await _page(base, home, CHANNEL)
    proposed = _section(page, "t_proposed")
    assert "Waiting for approval" in proposed and "If it is approved:" in proposed
    nexts = re.search(r'<ol class="next-times">(.*?)</ol>', proposed, re.S)
    assert nexts is not None
    assert re.findall(r'<time datetime="([^"]+)">', nexts.group(1)) == [_iso(m) for m in mondays]
