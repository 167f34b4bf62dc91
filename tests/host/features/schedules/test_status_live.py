"""`status` and `schedule: list` show what is live (mute and snooze included); finished work
is one short `Recent:` line."""

from __future__ import annotations

import re

from tests.helpers import eventually
from tests.host.features.schedules.kit import CONV, Bot


async def _schedule(bot: Bot, line: str) -> str:
    """Propose and approve a task; its id."""
    await bot.say(line)
    await bot.approve()
    await eventually(lambda: "is scheduled:" in bot.chat.texts[-1])
    found = re.search(r"Task `(t_\w+)` is scheduled", bot.chat.texts[-1])
    assert found is not None
    return found[1]


def _ids(text: str) -> str:
    """`text` with its run, task and prompt ids and times made stable."""
    text = re.sub(r"run_[0-9a-f]+", "run_ID", text)
    text = re.sub(r"prompt `[0-9a-f]{8}`", "prompt `ID`", text)
    text = re.sub(r"\w{3} \d+ \w{3} \d{4} \d\d:\d\d UTC( ⟨t:\d+⟩)?", "TIME", text)
    return text


async def test_status_lists_live_work_with_mute_and_snooze_and_finished_work_in_one_line(
    bot: Bot,
) -> None:
    await bot.send("s9: shell: echo finished-work")
    await eventually(
        lambda: bool(bot.chat.shown) and bot.chat.shown[-1].purpose == "command_approval"
    )
    asking = bot.chat.shown[-1]
    await bot.rt.broker.answer(asking.id, asking.nonce, "U1", "Approve")
    await bot.rt.service.quiesce(CONV)
    muted = await _schedule(bot, "schedule: every 2h | s1: shell: echo two")
    await bot.say(f"mute {muted}")
    snoozed = await _schedule(bot, "watch: every 30m | check: true")
    await bot.say(f"snooze 2h {snoozed}")
    ended = await _schedule(bot, "schedule: every 3h | s2: shell: echo three")
    await bot.say(f"schedule: cancel {ended}")

    status = _ids(await bot.say("status"))
    assert status == (
        "**Status**: running nothing; 0 request(s) queued.\n\n"
        "**Scheduled tasks**:\n\n"
        "| Task | Owner | Schedule | Next | What |\n"
        "|---|---|---|---|---|\n"
        f"| `{muted}` | alice | every 2h (UTC) | TIME (muted until `unmute`) | "
        "`s1: shell: echo two` |\n"
        f"| `{snoozed}` | alice | every 30m (UTC) | TIME (snoozed until TIME) | "
        "`check: true` |\n\n"
        "Proactive posts: no quiet hours; at most 20 per channel and 10 per person per hour; "
        "the same post once a day per conversation; final reports and failures always post."
        "\n\n"
        "Recent: 1 run(s) finished in the last 24 h (latest `run_ID`, completed); "
        f"1 scheduled task(s) ended in the last 24 h (latest `{ended}`, cancelled)."
    )

    listed = _ids(await bot.say("schedule: list"))
    assert listed == (
        "| Task | Owner | Schedule | Next | What |\n"
        "|---|---|---|---|---|\n"
        f"| `{muted}` | alice | every 2h (UTC) | TIME (muted until `unmute`) | "
        "`s1: shell: echo two` |\n"
        f"| `{snoozed}` | alice | every 30m (UTC) | TIME (snoozed until TIME) | "
        "`check: true` |\n\n"
        f"Recent: 1 scheduled task(s) ended in the last 24 h (latest `{ended}`, cancelled)"
    )
