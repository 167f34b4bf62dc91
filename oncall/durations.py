"""Durations as people write them: `90s`, `15m`, `2h`, `1h30m`, `1d`, or plain seconds.

Every duration typed in chat or given to a tool is read here, with the longest it may be:
an absurd one (`99999999d`, `1e309`, 400 digits) is refused with that maximum rather than
overflowing a date later."""

from __future__ import annotations

import math
import re

from oncall.report_gate import format_duration

_PART = re.compile(r"(\d+(?:\.\d+)?)\s*(d|h|m|s)", re.IGNORECASE)
_UNITS = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0}
DAY_SECONDS = 86400.0
# No duration anyone may type is longer (the campaign budget's own bound is 90 days).
LONGEST = 5 * 365 * DAY_SECONDS
_FORMS = "write it like 90s, 15m, 2h, 1h30m or 1d"


class TooLong(ValueError):
    """A duration over its maximum; the message names the maximum."""


def parse_duration(text: str, *, most: float = LONGEST, name: str = "") -> float:
    """Seconds in `text`, more than zero and at most `most`.

    ValueError naming the accepted forms when it is not a duration; TooLong naming `most`
    when it is longer (`name` is how the field is written before it, e.g. `snooze`)."""
    raw = text.strip().lower()
    try:
        seconds = float(raw)
    except ValueError:
        parts = _PART.findall(raw)
        if not parts or _PART.sub("", raw).strip():
            raise ValueError(f"{shortened(text)!r} is not a duration: {_FORMS}") from None
        seconds = sum(float(n) * _UNITS[u.lower()] for n, u in parts)
    if math.isnan(seconds):
        raise ValueError(f"{shortened(text)!r} is not a duration: {_FORMS}")
    if seconds <= 0:
        raise ValueError(f"{shortened(text)!r}: a duration must be more than zero")
    if seconds > most:  # infinity too (`1e309`, 400 digits)
        written = f"{name} {shortened(text.strip())}".strip()
        raise TooLong(f"`{written}` is too long: at most {format_duration(most)}")
    return seconds


def shortened(text: str, limit: int = 24) -> str:
    """`text` as a refusal quotes it: a 400-digit number is not echoed whole."""
    return text if len(text) <= limit else text[: limit - 1] + "…"
