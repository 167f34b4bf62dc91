"""Offline, a reminder or a recurring request ("remind me every morning at 9 to check the CI",
"every monday at 10 remind us to …", "every 2 hours check …") cannot be read, but the
`schedule:` line that would do it can be offered to copy.

The line is written in the syntax README's "Scheduled tasks" section documents (`cron M H * * D`,
`every 2h`, `in 20m`), with an explicit plan as what to do: a `shell` node that says the
reminder (tests read every line this makes with the real schedule parser). Only what is
clearly a time is read; anything else gets no hint.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_DAYS = ("sunday", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday")
_DAY = r"(?:sun|mon|tues?|wed(?:nes)?|thu(?:rs)?|fri|sat(?:ur)?)(?:day)?s?"
# Parts of a day, with the hour meant when none is given and whether a bare hour is p.m.
_PARTS: dict[str, tuple[int, bool]] = {
    "morning": (9, False),
    "afternoon": (14, True),
    "evening": (18, True),
    "night": (21, True),
}
_UNITS = {"m": "m", "min": "m", "minute": "m", "h": "h", "hr": "h", "hour": "h", "d": "d"}
_INTERVAL = re.compile(
    r"\b(?:every|each)\s+(?:(?P<n>\d{1,3})\s*|(?P<half>half\s+an?\s+|half\s+))?"
    r"(?P<unit>minutes?|mins?|m|hours?|hrs?|h)\b|\b(?P<hourly>hourly)\b",
    re.IGNORECASE,
)
_IN = re.compile(
    r"\bin\s+(?P<n>\d{1,3})\s*(?P<unit>minutes?|mins?|m|hours?|hrs?|h|days?|d)\b", re.IGNORECASE
)
_DAILY = re.compile(
    rf"\b(?:(?:every|each)\s+(?P<part>day|morning|afternoon|evening|night|weekday|"
    rf"work\s*day|{_DAY}(?:\s*(?:,|and)\s*{_DAY})*)|(?P<daily>daily)|on\s+(?P<on>weekdays|"
    rf"{_DAY}(?:\s*(?:,|and)\s*{_DAY})*))\b",
    re.IGNORECASE,
)
_AT = re.compile(
    r"\b(?:at\s+)?(?P<h>\d{1,2})(?:[:.h](?P<m>\d{2}))?\s*(?P<ampm>[ap]\.?m\.?)(?!\w)"
    r"|\bat\s+(?P<h24>\d{1,2})(?:[:.h](?P<m24>\d{2}))?\b|\bat\s+(?P<word>noon|midnight)\b",
    re.IGNORECASE,
)
_REMIND = re.compile(
    r"\b(?:please\s+)?(?:can\s+you\s+|could\s+you\s+)?remind\s+(?:me|us|everyone|everybody|"
    r"the\s+team|all\s+of\s+us)?\s*(?:to|that|about|of)?\b",
    re.IGNORECASE,
)
_FILLER = re.compile(
    r"^(?:(?:(?:and|then|to|please|also)\b|[,:-])\s*)+|[\s,.:;!?-]+$", re.IGNORECASE
)
# Kept in the reminder: words and plain punctuation, nothing a shell or Markdown reads (a
# straight quote becomes a typographic one, so `Bob's` stays readable inside '…').
_UNSAFE = re.compile(r"[^A-Za-z0-9 ,.:/#@_+\u2019-]")
MAX_TASK_CHARS = 80
MAX_TEXT_CHARS = 400


@dataclass(frozen=True)
class _Timing:
    when: str  # the schedule's time part: `cron 0 9 * * *`, `every 2h`, `in 20m`
    said: str  # how it reads: `every day at 09:00`


def reminder_hint(text: str) -> str | None:
    """The reply offering the `schedule:` line for a reminder-like request, else None."""
    if len(text) > MAX_TEXT_CHARS or "\n" in text.strip():
        return None
    found = _timing(text)
    if found is None:
        return None
    timing, spans = found
    line = schedule_line(timing.when, _task(text, spans))
    return (
        "I can't read free-form requests offline (no model key), but this line would do it "
        f"({timing.said}):\n```\n{line}\n```\nSend it and approve the prompt: the reminder "
        "then posts here. For a command to run instead, put it after `s1: shell:`."
    )


def schedule_line(when: str, task: str) -> str:
    """The `schedule:` line that says `task` as a reminder at each firing."""
    said = f"Reminder: {task}" if task else "Reminder"
    return f"schedule: {when} | s1: shell: echo '{said}'"


def _timing(text: str) -> tuple[_Timing, list[tuple[int, int]]] | None:
    interval = _INTERVAL.search(text)
    if interval is not None:
        return _every(interval), [interval.span()]
    daily = _DAILY.search(text)
    if daily is not None:
        at = _AT.search(text)
        spans = [daily.span(), *([at.span()] if at is not None else [])]
        return _cron(daily, at), spans
    once = _IN.search(text)
    if once is not None and _REMIND.search(text):
        n, unit = int(once["n"]), _unit(once["unit"])
        if n == 0:
            return None
        return _Timing(f"in {n}{unit}", f"once, in {n}{unit}"), [once.span()]
    return None


def _unit(word: str) -> str:
    word = word.lower().rstrip("s")
    return _UNITS.get(word, "d" if word in ("day", "d") else "m")


def _every(match: re.Match[str]) -> _Timing:
    if match["hourly"]:
        return _Timing("every 1h", "every hour")
    unit = _unit(match["unit"])
    if match["half"]:
        n, unit = (30, "m") if unit == "h" else (1, unit)
    else:
        n = int(match["n"] or 1)
    return _Timing(f"every {n}{unit}", f"every {n}{unit}")


def _cron(daily: re.Match[str], at: re.Match[str] | None) -> _Timing:
    part = (daily["part"] or daily["on"] or "day").lower()
    default_hour, evening = _PARTS.get(part, (9, False))
    hour, minute = _clock(at, default_hour, evening)
    if part in ("weekday", "weekdays") or re.fullmatch(r"work\s*day", part):
        days, said = "1-5", "every weekday"
    elif part in ("day", *_PARTS):
        days, said = "*", "every day"
    else:
        numbers = sorted({_day_number(d) for d in re.findall(_DAY, part, re.IGNORECASE)})
        days = ",".join(str(n) for n in numbers)
        said = "every " + " and ".join(_DAYS[n].capitalize() for n in numbers)
    return _Timing(f"cron {minute} {hour} * * {days}", f"{said} at {hour:02d}:{minute:02d}")


def _clock(at: re.Match[str] | None, default_hour: int, evening: bool) -> tuple[int, int]:
    """The hour and minute of `at 9`, `9:30`, `6pm`, `at noon` (a bare hour in an evening
    part of the day is p.m.); the part of the day's usual hour without one."""
    if at is None:
        return default_hour, 0
    if at["word"]:
        return (12 if at["word"].lower() == "noon" else 0), 0
    hour = int(at["h"] or at["h24"])
    minute = int(at["m"] or at["m24"] or 0)
    if hour > 23 or minute > 59:
        return default_hour, 0
    ampm = (at["ampm"] or "").lower().replace(".", "")
    if ampm == "pm" and hour < 12:
        hour += 12
    elif ampm == "am" and hour == 12:
        hour = 0
    elif not ampm and evening and hour < 12:
        hour += 12
    return hour, minute


def _day_number(word: str) -> int:
    prefix = word.lower()[:3]
    return next(i for i, name in enumerate(_DAYS) if name.startswith(prefix))


def _task(text: str, spans: list[tuple[int, int]]) -> str:
    """What to be reminded of: the text without its timing and `remind me to`, in words that
    are safe inside single quotes in a shell command and a code block."""
    kept = text
    for start, end in sorted(spans, reverse=True):
        kept = kept[:start] + " " + kept[end:]
    kept = _REMIND.sub(" ", kept)
    kept = _UNSAFE.sub(" ", kept.replace("'", "\u2019"))
    kept = " ".join(kept.split())
    while (trimmed := _FILLER.sub("", kept).strip()) != kept:
        kept = trimmed
    if len(kept) > MAX_TASK_CHARS:
        kept = kept[: MAX_TASK_CHARS - 1].rstrip() + "…"
    return kept
