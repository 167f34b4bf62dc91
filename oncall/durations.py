"""Durations as people write them: `90s`, `15m`, `2h`, `1h30m`, `1d`, or plain seconds."""

from __future__ import annotations

import re

_PART = re.compile(r"(\d+(?:\.\d+)?)\s*(d|h|m|s)", re.IGNORECASE)
_UNITS = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0}


def parse_duration(text: str) -> float:
    """Seconds in `text`; ValueError naming the accepted forms when it is not a duration."""
    raw = text.strip().lower()
    try:
        return _positive(float(raw), text)
    except ValueError:
        pass
    parts = _PART.findall(raw)
    if not parts or _PART.sub("", raw).strip():
        raise ValueError(f"{text!r} is not a duration: write it like 90s, 15m, 2h, 1h30m or 1d")
    return _positive(sum(float(n) * _UNITS[u.lower()] for n, u in parts), text)


def _positive(seconds: float, text: str) -> float:
    if seconds <= 0:
        raise ValueError(f"{text!r}: a duration must be more than zero")
    return seconds
