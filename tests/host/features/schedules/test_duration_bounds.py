"""Every duration and date typed in chat has a maximum (issue 38, finding 9): over it, the
thread gets a reply naming the maximum, and nothing is scheduled or snoozed; an absurd number
(`99999999d`, `1e309`, 400 digits) never overflows a date on the way."""

from __future__ import annotations

import pytest

from tests.helpers import eventually
from tests.host.features.schedules.kit import Bot

WATCH = "watch: every 30m | check: test ! -e alarm"


async def test_a_snooze_over_thirty_days_is_refused_with_the_maximum(bot: Bot) -> None:
    await bot.say(WATCH)
    await bot.approve()
    await eventually(lambda: any("is scheduled:" in t for t in bot.chat.texts))
    reply = await bot.say("snooze 99999999d")
    assert "`snooze 99999999d` is too long: at most 30d" in reply
    assert "`mute`" in reply  # what to write instead for longer
    assert (await bot.only_task()).snoozed_until is None
    assert "Snoozed" in await bot.say("snooze 30d")  # the maximum itself is accepted


@pytest.mark.parametrize(
    ("line", "refusal"),
    [
        ("schedule: in 99999999d | s1: shell: echo hi", "`in 99999999d` is too long: at most 365d"),
        (
            "schedule: every 99999999d | s1: shell: echo hi",
            "`every 99999999d` is too long: at most 365d",
        ),
        ("schedule: every 1e309 | s1: shell: echo hi", "`every 1e309` is too long: at most 365d"),
        (
            "schedule: every " + "9" * 400 + "s | s1: shell: echo hi",
            "`every 99999999999999999999999…` is too long: at most 365d",
        ),
        ("watch: every 99999999d | check: true", "`every 99999999d` is too long: at most 365d"),
        (
            "schedule: at 9999-12-31 09:00 | s1: shell: echo hi",
            "`at 9999-12-31 09:00` is too far ahead: at most 1 year (365d) from now",
        ),
        (
            "schedule: at 99999-01-01 09:00 | s1: shell: echo hi",
            "`at 99999-01-01 09:00` is too far ahead: at most 1 year (365d) from now",
        ),
        (
            "schedule: every 2h | s1: shell: echo hi | until: 99999-01-01",
            "`until: 99999-01-01` is too far ahead: at most 5 years (1825d) from now",
        ),
        (
            "schedule: every 2h | s1: shell: echo hi | until: 9999-12-31",
            "`until: 9999-12-31` is too far ahead: at most 5 years (1825d) from now",
        ),
        (
            "schedule: every 2h | s1: shell: echo hi | count: " + "9" * 400,
            "`count: 99999999999999999999999…` is too many: at most 100000 firings",
        ),
    ],
)
async def test_a_schedule_reaching_too_far_is_refused_with_the_maximum(
    bot: Bot, line: str, refusal: str
) -> None:
    reply = await bot.say(line)
    assert refusal in reply, reply
    assert "`schedule: every 2h | WHAT`" in reply  # and how to write one
    assert await bot.tasks.store.listed(live_only=False) == []


async def test_a_schedule_at_its_maxima_is_proposed(bot: Bot) -> None:
    reply = await bot.say("schedule: every 365d | s1: shell: echo hi | count: 100000")
    assert "waits for approval" in reply, reply
