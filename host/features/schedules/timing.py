"""When a scheduled task fires: APScheduler's triggers over a `TaskSchedule`.

Every trigger is anchored at the task's creation time, which is stored with the task: an
`every` task keeps its phase across restarts (a daily task made at 09:10 fires at 09:10, not
a day after each boot), and the fire times a restart missed can be counted exactly.

Cron lines use the standard crontab weekday numbers (0 or 7 = Sunday, 1 = Monday): APScheduler
3 counts from Monday, so the weekday field is rewritten as day names before it sees it.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator
from datetime import datetime, time, timedelta
from typing import NamedTuple

from apscheduler.triggers.base import BaseTrigger
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.date import DateTrigger
from apscheduler.triggers.interval import IntervalTrigger

from core.reader_time import reader_mark
from host.features.schedules.line import (
    MAX_AHEAD_SECONDS,
    MAX_UNTIL_SECONDS,
    ScheduleError,
    TaskSchedule,
    far_year,
    local_datetime,
    parse_schedule,
    refusal,
    too_far,
    zone,
)
from oncall.durations import parse_duration
from oncall.report_gate import format_duration

_DAY_NAMES = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
# `missed: all` runs each missed firing, up to this many (a week of 5-minute firings is not
# replayed after a long outage; the rest are counted and said).
MAX_CATCH_UP = 24
# Counting the fire times a long outage missed stops here (a 5-minute task down for a year).
MAX_COUNTED = 100_000


def trigger(schedule: TaskSchedule, anchor: datetime) -> BaseTrigger:
    """The APScheduler trigger of `schedule` for a task created at `anchor` (aware).

    ValueError, in words for people, when the schedule's time part is not valid.
    """
    tz = schedule.zone
    if schedule.kind == "at":
        return DateTrigger(_at(schedule.when).replace(tzinfo=tz), tz)
    if schedule.kind == "cron":
        return _cron(schedule.when, schedule.tz, schedule.until)
    # Unbounded here: the bounds hold when a task is proposed, and one stored before them
    # still fires (a date past year 9999 is refused below rather than overflowing).
    seconds = parse_duration(schedule.when, most=math.inf)
    try:
        first = anchor + timedelta(seconds=seconds)
    except OverflowError:  # past year 9999: a date cannot hold it
        raise ValueError(too_far(f"{schedule.kind} {schedule.when}", MAX_AHEAD_SECONDS)) from None
    if schedule.kind == "in":
        return DateTrigger(first, tz)
    return IntervalTrigger(seconds=seconds, start_date=first, end_date=schedule.until, timezone=tz)


def _at(when: str) -> datetime:
    """The local date and time of `at WHEN`; ValueError saying how to write it."""
    try:
        return local_datetime(when)
    except ValueError:
        if far_year(when):
            raise ValueError(too_far(f"at {when}", MAX_AHEAD_SECONDS)) from None
        raise ValueError(
            f"`at {when}` is not a date and time: write it like 2026-12-24 09:00"
        ) from None


# A cron trigger depends on its line, zone and end only, and computing a fire time does not
# change it: building one (compiling five fields) was 70-180 µs of the 10-20 µs a fire time
# costs with it built, paid by every approval, firing and `status` that asks for one.
@functools.lru_cache(maxsize=1024)
def _cron(when: str, tz: str, until: datetime | None) -> CronTrigger:
    fields = when.split()
    if len(fields) != 5:
        raise ValueError(
            f"`cron {when}` needs five fields (minute hour day month weekday), "
            f"not {len(fields)}: for example `cron 0 9 * * 1-5`"
        )
    minute, hour, day, month, weekday = fields
    try:
        return CronTrigger(
            minute=minute,
            hour=hour,
            day=day,
            month=month,
            day_of_week=_weekdays(weekday),
            timezone=zone(tz),
            end_date=until,
        )
    except ValueError as exc:
        raise ValueError(f"`cron {when}` is not a valid cron line: {exc}") from None


def _weekdays(field: str) -> str:
    """A crontab weekday field (0/7 = Sunday) as APScheduler day names."""
    if field == "*":
        return "*"
    days: set[int] = set()
    for part in field.split(","):
        span, _, step_text = part.partition("/")
        step = int(step_text) if step_text.isdigit() and int(step_text) > 0 else None
        if step_text and step is None:
            raise ValueError(f"weekday step {step_text!r} must be a whole number above 0")
        if span == "*":
            low, high = 0, 6
        elif "-" in span:
            first, _, last = span.partition("-")
            low, high = _day(first), _day(last)
        else:
            low = _day(span)
            high = 6 if step else low
        if high < low:
            raise ValueError(f"weekday range {span!r} runs backwards")
        days.update(d % 7 for d in range(low, high + 1, step or 1))
    return ",".join(_DAY_NAMES[d] for d in sorted(days))


def _day(text: str) -> int:
    name = text.strip().lower()[:3]
    if name in _DAY_NAMES:
        return _DAY_NAMES.index(name)
    if text.isdigit() and int(text) <= 7:
        return int(text)
    raise ValueError(f"{text!r} is not a weekday (0–7 or sun–sat)")


def shown(when: datetime, tz: object) -> str:
    """A time as people read it, in the task's zone, with the zone named."""
    local = when.astimezone(tz)  # type: ignore[arg-type]
    return local.strftime("%a %-d %b %Y %H:%M %Z")


def for_readers(when: datetime, tz: object) -> str:
    """A time in the task's zone, named, then in each reader's own zone where their
    platform can show it (Slack, Discord)."""
    return shown(when, tz) + reader_mark(when)


def describe_schedule(schedule: TaskSchedule) -> str:
    """`every 2h (Europe/Paris), until …, at most 5 times; missed runs: once`."""
    parts = [f"{schedule.kind} {schedule.when} ({schedule.tz})"]
    if schedule.until is not None:
        parts.append(f"until {shown(schedule.until, schedule.zone)}")
    if schedule.count is not None:
        parts.append(f"at most {schedule.count} time(s)")
    parts.append(f"missed runs: {schedule.missed}")
    parts.append(f"results: {schedule.notify}")
    return ", ".join(parts)


def fire_times(
    schedule: TaskSchedule, anchor: datetime, after: datetime, *, fired: int = 0
) -> Iterator[datetime]:
    """The task's fire times strictly after `after`, in order, ending with its `count` (of
    which `fired` are used) or its `until`; a one-shot task yields at most its one time."""
    when = trigger(schedule, anchor)
    left = None if schedule.count is None else schedule.count - fired
    previous: datetime | None = None
    now = after
    while left is None or left > 0:
        nxt = when.get_next_fire_time(previous, now)
        if nxt is None:
            return
        if nxt > after:
            yield nxt
            if left is not None:
                left -= 1
        previous = nxt
        now = nxt + timedelta(microseconds=1)


def upcoming(
    schedule: TaskSchedule, anchor: datetime, after: datetime, n: int = 3
) -> list[datetime]:
    """The next `n` fire times after `after` (for the approval prompt and `status`)."""
    times = []
    for when in fire_times(schedule, anchor, after):
        times.append(when)
        if len(times) == n:
            break
    return times


class Due(NamedTuple):
    """Fire times in a span: the first MAX_CATCH_UP, how many in all, and the last."""

    times: list[datetime]
    total: int
    last: datetime | None


def due_span(
    schedule: TaskSchedule, anchor: datetime, after: datetime, until: datetime, *, fired: int = 0
) -> Due:
    """Fire times in (`after`, `until`] (a restart's missed firings: counted exactly up to
    MAX_COUNTED, replayed within MAX_CATCH_UP)."""
    times: list[datetime] = []
    total = 0
    last: datetime | None = None
    for when in fire_times(schedule, anchor, after, fired=fired):
        if when > until or total >= MAX_COUNTED:
            break
        total, last = total + 1, when
        if len(times) < MAX_CATCH_UP:
            times.append(when)
    return Due(times, total, last)


def due_between(
    schedule: TaskSchedule, anchor: datetime, after: datetime, until: datetime, *, fired: int = 0
) -> tuple[list[datetime], int]:
    """`due_span`'s first MAX_CATCH_UP fire times in (`after`, `until`] and their count."""
    span = due_span(schedule, anchor, after, until, fired=fired)
    return span.times, span.total


def checked_schedule(
    text: str, *, now: datetime, default_tz: str = "UTC", min_interval: float = 300.0
) -> TaskSchedule:
    """The schedule of a `schedule:` line that will fire: its grammar, fields and time part
    checked, its interval no shorter than `min_interval` seconds, a first firing after `now`.
    ScheduleError with every problem and the syntax otherwise."""
    schedule = parse_schedule(text, default_tz=default_tz)
    problems = timing_problems(schedule, now, min_interval=min_interval)
    if problems:
        raise ScheduleError(refusal(problems))
    return schedule


def timing_problems(schedule: TaskSchedule, anchor: datetime, *, min_interval: float) -> list[str]:
    """What keeps `schedule`, created at `anchor`, from firing as asked (empty when nothing)."""
    try:
        beyond = _reach_problems(schedule, anchor)
        if beyond:
            return beyond
        first = next(fire_times(schedule, anchor, anchor), None)
    except ValueError as exc:
        return [str(exc)]
    if schedule.kind == "every" and parse_duration(schedule.when) < min_interval:
        return [
            f"`every {schedule.when}` is more often than the limit of one firing every "
            f"{format_duration(min_interval)} (RAVEN_SCHEDULE_MIN_INTERVAL)"
        ]
    if first is None:
        when = "is in the past" if schedule.kind == "at" else "ends before its first firing"
        return [f"this schedule never fires: `{schedule.kind} {schedule.when}` {when}"]
    return []


def _reach_problems(schedule: TaskSchedule, anchor: datetime) -> list[str]:
    """What in `schedule` reaches further ahead of `anchor` than a schedule may."""
    problems: list[str] = []
    if schedule.kind in ("in", "every"):
        try:
            parse_duration(schedule.when, most=MAX_AHEAD_SECONDS, name=schedule.kind)
        except ValueError as exc:
            problems.append(str(exc))
    if schedule.kind == "at":
        at = _at(schedule.when).replace(tzinfo=schedule.zone)
        if at - anchor > timedelta(seconds=MAX_AHEAD_SECONDS):
            problems.append(too_far(f"at {schedule.when}", MAX_AHEAD_SECONDS))
    until = schedule.until
    if until is not None and until - anchor > timedelta(seconds=MAX_UNTIL_SECONDS):
        problems.append(too_far(f"until: {_written(until, schedule)}", MAX_UNTIL_SECONDS))
    return problems


def _written(until: datetime, schedule: TaskSchedule) -> str:
    """`until` as its author wrote it: the date alone when they gave no time."""
    local = until.astimezone(schedule.zone)
    return f"{local:%Y-%m-%d}" if local.time() == time.max else f"{local:%Y-%m-%d %H:%M}"
