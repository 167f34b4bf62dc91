"""Offline, a reminder-like request gets the `schedule:` line that would do it (issue 39,
finding 13): a line the real parser accepts, that fires when asked, and whose work is an
explicit plan (what a schedule may run without a model)."""

from __future__ import annotations

import re
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from agents.models.offline import OFFLINE_NOTICE, OfflineProvider
from agents.models.reminder_hint import reminder_hint
from agents.models.types import Message
from host.features.schedules.timing import checked_schedule, upcoming
from host.features.schedules.work import task_work

UTC = ZoneInfo("UTC")
NOW = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)  # a Wednesday
_LINE = re.compile(r"```\n(?P<line>schedule: [^\n]+)\n```")


def _line(text: str) -> str:
    hint = reminder_hint(text)
    assert hint is not None, text
    found = _LINE.search(hint)
    assert found is not None, hint
    return found["line"]


@pytest.mark.parametrize(
    ("request_text", "line", "first"),
    [
        (
            "remind me every morning at 9 to check the CI",
            "schedule: cron 0 9 * * * | s1: shell: echo 'Reminder: check the CI'",
            datetime(2026, 12, 3, 9, 0, tzinfo=UTC),
        ),
        (
            "every monday at 10 remind us to update the roadmap",
            "schedule: cron 0 10 * * 1 | s1: shell: echo 'Reminder: update the roadmap'",
            datetime(2026, 12, 7, 10, 0, tzinfo=UTC),
        ),
        (
            "every 2 hours check the disk space",
            "schedule: every 2h | s1: shell: echo 'Reminder: check the disk space'",
            datetime(2026, 12, 2, 12, 0, tzinfo=UTC),
        ),
        (
            "Remind us every weekday at 9:30am to do the standup!",
            "schedule: cron 30 9 * * 1-5 | s1: shell: echo 'Reminder: do the standup'",
            datetime(2026, 12, 3, 9, 30, tzinfo=UTC),
        ),
        (
            "every friday at 5pm remind the team that Bob's deploy freeze starts; thanks",
            "schedule: cron 0 17 * * 5 | s1: shell: echo "
            "'Reminder: Bob\u2019s deploy freeze starts thanks'",
            datetime(2026, 12, 4, 17, 0, tzinfo=UTC),
        ),
        (
            "can you remind me in 20 minutes to call Bob?",
            "schedule: in 20m | s1: shell: echo 'Reminder: call Bob'",
            datetime(2026, 12, 2, 10, 20, tzinfo=UTC),
        ),
    ],
)
def test_a_reminder_request_gets_a_schedule_line_that_parses_and_fires_as_asked(
    request_text: str, line: str, first: datetime
) -> None:
    assert _line(request_text) == line
    schedule = checked_schedule(line, now=NOW)  # the real parser, with the product's limits
    assert upcoming(schedule, NOW, NOW, 1) == [first]
    work = task_work(schedule.what, offline=True)  # runnable without a model: a plan
    assert work.kind == "plan" and work.grants == (line.split("shell: ", 1)[1],)


@pytest.mark.parametrize(
    "text",
    [
        "hello there",
        "note: the build is red",
        "every time I push, the CI fails",
        "I'll be back in 20 minutes",
        "remind me every morning at 9\nand also at 10",
    ],
)
def test_other_text_gets_no_hint(text: str) -> None:
    assert reminder_hint(text) is None


async def test_offline_the_reminder_hint_replaces_the_notice_and_other_text_keeps_it() -> None:
    provider = OfflineProvider()
    asked = Message.user_text("remind me every morning at 9 to check the CI")
    reply = await provider.complete(system="s", messages=[asked])
    assert reply.text == (
        "I can't read free-form requests offline (no model key), but this line would do it "
        "(every day at 09:00):\n"
        "```\nschedule: cron 0 9 * * * | s1: shell: echo 'Reminder: check the CI'\n```\n"
        "Send it and approve the prompt: the reminder then posts here. For a command to run "
        "instead, put it after `s1: shell:`."
    )
    other = await provider.complete(system="s", messages=[Message.user_text("what's up?")])
    assert other.text == OFFLINE_NOTICE
