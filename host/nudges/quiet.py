"""Quiet hours: a daily span (`22:00-07:00`, across midnight or not) in a task's time zone
during which its firings wait: a firing due then runs, and speaks, when they end."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, time, timedelta
from zoneinfo import ZoneInfo

_SPAN = re.compile(r"^\s*(\d{1,2}):(\d\d)\s*-\s*(\d{1,2}):(\d\d)\s*$")
SYNTAX = "HH:MM-HH:MM, for example 22:00-07:00 (empty: none)"


@dataclass(frozen=True)
class QuietHours:
    """From `start` to `end` every day, local time."""

    start: time
    end: time

    def __str__(self) -> str:
        return f"{self.start:%H:%M}–{self.end:%H:%M}"

    def end_after(self, when: datetime, zone: ZoneInfo) -> datetime | None:
        """When the quiet hours `when` falls in end (aware), or None when it is outside."""
        local = when.astimezone(zone)
        clock = local.time().replace(tzinfo=None)
        if self.start <= self.end:
            inside = self.start <= clock < self.end
            ends_today = True
        else:  # across midnight
            inside = clock >= self.start or clock < self.end
            ends_today = clock < self.end
        if not inside:
            return None
        day = local.date() if ends_today else local.date() + timedelta(days=1)
        return datetime.combine(day, self.end, tzinfo=zone)


def parse_quiet_hours(text: str) -> QuietHours | None:
    """`22:00-07:00` as QuietHours, "" as None; ValueError with the syntax otherwise."""
    if not text.strip():
        return None
    match = _SPAN.match(text)
    if match is None:
        raise ValueError(f"{text!r} is not quiet hours: write {SYNTAX}")
    h1, m1, h2, m2 = (int(g) for g in match.groups())
    try:
        start, end = time(h1, m1), time(h2, m2)
    except ValueError:
        raise ValueError(f"{text!r} is not quiet hours: write {SYNTAX}") from None
    if start == end:
        raise ValueError(f"{text!r} starts and ends at once: write {SYNTAX}")
    return QuietHours(start, end)
