"""The `schedule:` line: what it accepts, what it refuses (with the syntax), and when a task
fires: weekdays as crontab numbers them, DST, phase kept across restarts, missed firings."""

from __future__ import annotations

from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from host.features.schedules.line import ScheduleError, is_schedule_line, parse_schedule
from host.features.schedules.timing import (
    MAX_CATCH_UP,
    checked_schedule,
    due_between,
    fire_times,
    upcoming,
)

UTC = ZoneInfo("UTC")
PARIS = ZoneInfo("Europe/Paris")
NOW = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)  # a Wednesday


def test_each_kind_and_the_trailing_fields() -> None:
    s = parse_schedule(
        "schedule: every 2h | check the queue | tz: Europe/Paris | count: 3 | missed: all "
        "| notify: changes | post: channel | until: 2027-01-31"
    )
    assert (s.kind, s.when, s.what, s.tz) == ("every", "2h", "check the queue", "Europe/Paris")
    assert (s.count, s.missed, s.notify, s.post) == (3, "all", "changes", "channel")
    assert s.until == datetime(2027, 1, 31, 23, 59, 59, 999999, tzinfo=PARIS)
    defaults = parse_schedule("schedule: in 20m | say hi")
    assert (defaults.tz, defaults.missed, defaults.notify, defaults.post) == (
        "UTC",
        "once",
        "always",
        "thread",
    )
    assert parse_schedule("SCHEDULE: cron 0 9 * * 1-5 | standup").when == "0 9 * * 1-5"
    assert parse_schedule("schedule: at 2026-12-24 09:00 | gifts").when == "2026-12-24 09:00"


def test_what_is_kept_verbatim_with_its_pipes_fields_and_lines() -> None:
    campaign = "campaign: lower the loss | machine: local | run: python t.py | budget: 2h"
    s = parse_schedule(f"schedule: every 1d | {campaign} | tz: Europe/Paris")
    assert (s.what, s.tz) == (campaign, "Europe/Paris")
    assert parse_schedule("schedule: every 1h | shell: ps aux | grep x").what == (
        "shell: ps aux | grep x"
    )
    plan = parse_schedule("schedule: in 1h | a: echo: hi\nb: echo: there\nconfirm")
    assert plan.what == "a: echo: hi\nb: echo: there\nconfirm"


@pytest.mark.parametrize(
    "line",
    [
        "schedule: every 2h | post: channel | s1: shell: df -h /",
        "schedule: post: channel | every 2h | s1: shell: df -h /",
        "schedule: every 2h | s1: shell: df -h / | post: channel",
        "schedule: notify: failures | every 2h | post: channel | s1: shell: df -h /",
        "schedule: every 2h | post: channel\ns1: shell: df -h /",
    ],
)
def test_optional_fields_go_in_any_order_before_or_after_what(line: str) -> None:
    # Issue 39, finding 4: fields before WHAT were read as WHAT, and refused offline with
    # "I can schedule only … an explicit plan".
    s = checked_schedule(line, now=NOW)
    assert (s.kind, s.when, s.what, s.post) == ("every", "2h", "s1: shell: df -h /", "channel")


def test_a_field_given_twice_is_refused() -> None:
    with pytest.raises(ScheduleError) as refused:
        parse_schedule("schedule: every 2h | post: thread | s1: shell: df | post: channel")
    assert "`post:` is given twice (`thread` and `channel`): keep one" in str(refused.value)


def test_is_schedule_line() -> None:
    assert is_schedule_line("  schedule: whenever")
    assert not is_schedule_line("please schedule: this")


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("schedule: sometimes | x", "I could not read this schedule"),
        ("schedule: every 2h", "I could not read this schedule"),
        ("schedule: every 2h |   ", "nothing to run"),
        ("schedule: every 2h | x | tz: Mars/Olympus", "'Mars/Olympus' is not a time zone"),
        ("schedule: every 2h | x | missed: sometimes", "`missed: sometimes` is not skip, once"),
        ("schedule: every 2h | x | count: 0", "`count: 0` is not a whole number"),
        ("schedule: every 2h | x | until: soon", "`until: soon` is not a date"),
        ("schedule: every 1m | x", "more often than the limit of one firing every 5m"),
        ("schedule: every often | x", "'often' is not a duration"),
        ("schedule: at 2020-01-01 09:00 | x", "never fires: `at 2020-01-01 09:00` is in the past"),
        ("schedule: at tomorrow | x", "`at tomorrow` is not a date and time"),
        ("schedule: cron 0 9 * * | x", "needs five fields"),
        ("schedule: cron 0 25 * * * | x", "is not a valid cron line"),
        ("schedule: cron 0 9 * * 5-1 | x", "runs backwards"),
        ("schedule: every 1h | x | until: 2026-12-01", "ends before its first firing"),
    ],
)
def test_wrong_input_is_refused_with_what_is_wrong_and_the_syntax(line: str, problem: str) -> None:
    with pytest.raises(ScheduleError) as refused:
        checked_schedule(line, now=NOW)
    assert problem in str(refused.value)
    assert "`schedule: every 2h | WHAT`" in str(refused.value)


def test_every_problem_is_named_at_once() -> None:
    with pytest.raises(ScheduleError) as refused:
        checked_schedule("schedule: every 2h | x | missed: no | post: dm", now=NOW)
    assert "`missed: no`" in str(refused.value) and "`post: dm`" in str(refused.value)


def test_cron_weekdays_are_crontabs_sunday_zero() -> None:
    weekdays = checked_schedule("schedule: cron 0 9 * * 1-5 | standup", now=NOW)
    saturday = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
    days = [t.strftime("%a") for t in upcoming(weekdays, saturday, saturday, 6)]
    assert days == ["Mon", "Tue", "Wed", "Thu", "Fri", "Mon"]
    for field, expected in [("0", ["Sun"]), ("7", ["Sun"]), ("0-6", None), ("sat,sun", None)]:
        s = checked_schedule(f"schedule: cron 0 9 * * {field} | x", now=NOW)
        got = sorted({t.strftime("%a") for t in upcoming(s, NOW, NOW, 14)})
        assert got == (expected or sorted({"Sat", "Sun"} if "sat" in field else _week()))


def _week() -> set[str]:
    return {"Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"}


@pytest.mark.parametrize("change", [datetime(2027, 3, 25), datetime(2027, 10, 28)])
def test_a_daily_cron_in_paris_fires_once_a_day_at_nine_across_dst(change: datetime) -> None:
    s = checked_schedule("schedule: cron 0 9 * * * | report | tz: Europe/Paris", now=NOW)
    start = change.replace(tzinfo=PARIS)
    times = [t.astimezone(PARIS) for t in upcoming(s, NOW, start, 7)]
    assert [(t.hour, t.minute) for t in times] == [(9, 0)] * 7
    assert [t.date() for t in times] == [(start + timedelta(days=i)).date() for i in range(7)]
    offsets = {t.utcoffset() for t in times}
    assert offsets == {timedelta(hours=1), timedelta(hours=2)}  # the change is inside


def test_an_interval_keeps_its_phase_after_a_restart() -> None:
    created = datetime(2026, 12, 2, 9, 10, tzinfo=UTC)
    s = checked_schedule("schedule: every 1d | digest", now=created)
    restarted = created + timedelta(days=3, hours=5)
    (next_time,) = upcoming(s, created, restarted, 1)
    assert next_time == datetime(2026, 12, 6, 9, 10, tzinfo=UTC)


def test_missed_firings_are_counted_exactly_and_replayed_within_a_bound() -> None:
    created = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)
    hourly = checked_schedule("schedule: every 1h | x", now=created)
    last_fired = created + timedelta(hours=1)
    due, total = due_between(hourly, created, last_fired, created + timedelta(hours=5, minutes=30))
    assert total == 4 and due == [created + timedelta(hours=h) for h in (2, 3, 4, 5)]
    often = checked_schedule("schedule: every 5m | x", now=created)
    due, total = due_between(often, created, created, created + timedelta(days=7))
    assert (len(due), total) == (MAX_CATCH_UP, 7 * 24 * 12)


def test_count_and_one_shots_end() -> None:
    s = checked_schedule("schedule: every 1h | x | count: 3", now=NOW)
    assert len(list(fire_times(s, NOW, NOW))) == 3
    assert len(list(fire_times(s, NOW, NOW, fired=2))) == 1
    once = checked_schedule("schedule: in 20m | x", now=NOW)
    assert list(fire_times(once, NOW, NOW)) == [NOW + timedelta(minutes=20)]
    paris = checked_schedule("schedule: at 2026-12-24 09:00 | x | tz: Europe/Paris", now=NOW)
    assert upcoming(paris, NOW, NOW) == [datetime(2026, 12, 24, 8, 0, tzinfo=UTC)]
