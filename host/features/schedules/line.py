"""A scheduled task as people write it, one line:

    schedule: in 20m | WHAT
    schedule: at 2026-12-24 09:00 | WHAT
    schedule: every 2h | WHAT
    schedule: cron 0 9 * * 1-5 | WHAT

with optional fields `| tz: Europe/Paris`, `| until: 2027-01-31`, `| count: 10`,
`| missed: skip|once|all`, `| notify: always|changes|failures`, `| post: thread|channel`, in
any order: before the time part, between it and WHAT, or after WHAT
(`schedule: every 2h | post: channel | s1: shell: df -h /`). WHAT is kept verbatim (it may
itself hold `|` and `name:` fields, as a campaign line does): only fields with one of the
names above, before WHAT or trailing it, are the schedule's. Lines after the first continue
WHAT (an explicit plan spans several lines).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import date, datetime, time
from types import MappingProxyType
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from core.errors import FieldError, field_errors
from oncall.durations import DAY_SECONDS, shortened

Kind = Literal["in", "at", "every", "cron"]
Missed = Literal["skip", "once", "all"]
Notify = Literal["always", "changes", "failures"]
Post = Literal["thread", "channel"]

SYNTAX = (
    "`schedule: in 20m | WHAT`, `schedule: at 2026-12-24 09:00 | WHAT`, "
    "`schedule: every 2h | WHAT` or `schedule: cron 0 9 * * 1-5 | WHAT`, with optional "
    "fields in any order, before or after WHAT: `| tz: Europe/Paris`, `| until: 2027-01-31`, "
    "`| count: 10`, `| missed: skip|once|all`, `| notify: always|changes|failures`, "
    "`| post: thread|channel`"
)
# How far ahead a schedule may reach, from when it is proposed: a firing (`in`, `at`) or an
# interval (`every`) within a year, an end (`until`) within five years, and so many firings.
YEAR_SECONDS = 365 * DAY_SECONDS
MAX_AHEAD_SECONDS = YEAR_SECONDS
MAX_UNTIL_SECONDS = 5 * YEAR_SECONDS
MAX_COUNT = 100_000
# The trailing fields that belong to the schedule, with what each accepts (for errors).
FIELDS: Mapping[str, str] = MappingProxyType(
    {
        "tz": "an IANA time zone such as Europe/Paris",
        "until": "a date or date and time (2027-01-31 or 2027-01-31 18:00)",
        "count": f"a whole number of firings, from 1 to {MAX_COUNT}",
        "missed": "skip, once or all",
        "notify": "always, changes or failures",
        "post": "thread or channel",
    }
)
# A date whose year has five digits or more (`99999-01-01`): too far ahead, not misspelt.
_FAR_YEAR = re.compile(r"^\s*\d{5,}-")
_BARE_START = re.compile(r"^\s*schedule\s*:", re.IGNORECASE)
# The parts before WHAT, each ended by `|` (or by the end of the line when WHAT is on the
# lines after): the time part, and fields.
_TIMING = re.compile(
    r"^\s*(?P<kind>in|at|every|cron)\s+(?P<when>[^|\n]+?)\s*(?:\||$)", re.IGNORECASE
)
_LEADING = re.compile(
    r"^\s*(?P<key>" + "|".join(FIELDS) + r")\s*:\s*(?P<value>[^|\n]*?)\s*(?:\||$)",
    re.IGNORECASE,
)
_TRAILING = re.compile(
    r"\s*\|\s*(?P<key>" + "|".join(FIELDS) + r")\s*:\s*(?P<value>[^|]*?)\s*$", re.IGNORECASE
)


class ScheduleError(ValueError):
    """A schedule line people must fix: what is wrong, then the syntax."""


class TaskSchedule(BaseModel):
    """When a task fires and how its firings are handled; `what` is run at each firing."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Kind
    when: str = Field(min_length=1)
    what: str = Field(min_length=1)
    tz: str = "UTC"
    until: datetime | None = None
    count: int | None = Field(default=None, ge=1)
    missed: Missed = "once"
    notify: Notify = "always"
    post: Post = "thread"

    @field_validator("tz")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        zone(value)
        return value

    @property
    def zone(self) -> ZoneInfo:
        """The task's time zone."""
        return zone(self.tz)


def zone(name: str) -> ZoneInfo:
    """The IANA zone `name`; ValueError naming it when it is unknown."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(
            f"{name!r} is not a time zone: use an IANA name such as Europe/Paris"
        ) from None


def is_schedule_line(text: str) -> bool:
    """Whether `text` starts with `schedule:` (then it is parsed, or refused with the syntax)."""
    return _BARE_START.match(text) is not None


def parse_schedule(text: str, *, default_tz: str = "UTC") -> TaskSchedule:
    """The task of a `schedule:` message; ScheduleError saying what is wrong and the syntax."""
    first, _, more = text.strip().partition("\n")
    timing, fields, rest, problems = _head(_BARE_START.sub("", first, count=1), more=bool(more))
    if timing is None:
        raise ScheduleError(f"I could not read this schedule. Write {SYNTAX}.")
    trailing_fields: list[tuple[str, str]] = []
    while (trailing := _TRAILING.search(rest)) is not None:
        trailing_fields.insert(0, (trailing["key"].lower(), trailing["value"]))
        rest = rest[: trailing.start()]
    for key, value in trailing_fields:
        _add_field(fields, key, value, problems)
    what = "\n".join(part for part in (rest.strip(), more.strip()) if part)
    raw: dict[str, object] = {
        "kind": timing["kind"].lower(),
        "when": timing["when"].strip(),
        "what": what,
        "tz": fields.pop("tz", default_tz),
        **fields,
    }
    if "until" in fields:
        raw["until"] = _until(fields["until"], str(raw["tz"]), problems)
    try:
        schedule = TaskSchedule.model_validate(raw)
    except ValidationError as exc:
        problems.extend(_problem(err) for err in field_errors(exc))
        raise ScheduleError(refusal(problems)) from None
    if schedule.count is not None and schedule.count > MAX_COUNT:
        count = shortened(str(schedule.count))
        problems.append(f"`count: {count}` is too many: at most {MAX_COUNT} firings")
    if problems:
        raise ScheduleError(refusal(problems))
    return schedule


def _head(body: str, *, more: bool) -> tuple[re.Match[str] | None, dict[str, str], str, list[str]]:
    """The time part and the fields before WHAT, in any order; the rest of the line (WHAT and
    trailing fields); the problems (a field given twice). A part ended by the end of the line
    instead of `|` counts only when WHAT follows on the next lines."""
    timing: re.Match[str] | None = None
    fields: dict[str, str] = {}
    problems: list[str] = []
    while True:
        part = _TIMING.match(body) if timing is None else None
        field = None if part is not None else _LEADING.match(body)
        found = part or field
        if found is None or (not more and not found[0].rstrip().endswith("|")):
            return timing, fields, body, problems
        if part is not None:
            timing = part
        else:
            assert field is not None
            _add_field(fields, field["key"].lower(), field["value"], problems)
        body = body[found.end() :]


def _add_field(fields: dict[str, str], key: str, value: str, problems: list[str]) -> None:
    if key in fields:
        problems.append(f"`{key}:` is given twice (`{fields[key]}` and `{value}`): keep one")
        return
    fields[key] = value


def _until(text: str, tz: str, problems: list[str]) -> object:
    try:
        value = local_datetime(text, end_of_day=True)
    except ValueError:
        if far_year(text):
            problems.append(too_far(f"until: {text}", MAX_UNTIL_SECONDS))
        else:
            problems.append(f"`until: {text}` is not {FIELDS['until']}")
        return None
    try:
        return value.replace(tzinfo=zone(tz))
    except ValueError:
        return value  # the zone's own problem is reported by the model


def local_datetime(text: str, *, end_of_day: bool = False) -> datetime:
    """`2026-12-24 09:00` (or `T`), or a bare date (its start, or end with `end_of_day`)."""
    raw = text.strip()
    if len(raw) == len("2026-12-24"):
        return datetime.combine(date.fromisoformat(raw), time.max if end_of_day else time.min)
    parsed = datetime.fromisoformat(raw)
    if parsed.tzinfo is not None:
        raise ValueError("give the time without an offset; set the zone with `tz:`")
    return parsed


def too_far(written: str, most: float) -> str:
    """The refusal of a time later than `most` seconds from now (`written` as typed)."""
    years = most / YEAR_SECONDS
    return (
        f"`{written}` is too far ahead: at most {years:g} year{'s' if years != 1 else ''} "
        f"({most / DAY_SECONDS:g}d) from now"
    )


def far_year(text: str) -> bool:
    """Whether `text` is a date with a year of five digits or more (past what dates hold)."""
    return _FAR_YEAR.match(text) is not None


def _problem(err: FieldError) -> str:
    name = err.name or ""
    if name == "what":
        return "nothing to run: write what to do after the schedule (`| WHAT`)"
    if name == "tz":
        return err.message
    if name in FIELDS:
        return f"`{name}: {shortened(str(err.value))}` is not {FIELDS[name]}"
    return err.message


def refusal(problems: list[str]) -> str:
    lines = "\n".join(f"- {p}" for p in problems)
    # A blank line after the list, so Markdown does not read the last line as part of it.
    return f"This schedule cannot be used:\n{lines}\n\nWrite {SYNTAX}."
