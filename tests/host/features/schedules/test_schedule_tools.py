"""With a model: the Host's `schedule_task` tool proposes a task from plain words (the same
approval), a firing is a turn told it is one, and that turn cannot schedule another task."""

from __future__ import annotations

import json
from typing import cast

from host.features.schedules.tasks import ScheduledTasks
from host.features.schedules.tools import build_schedule_tools
from host.runtime.roles import Roles
from tests.fakes.anthropic_server import FakeAnthropic
from tests.helpers import eventually
from tests.host.features.schedules.kit import Bot


async def test_the_host_schedules_from_words_and_a_firing_cannot_schedule(
    model_bot: tuple[Bot, FakeAnthropic],
) -> None:
    bot, fake = model_bot
    fake.queue_tool_use(
        "schedule_task",
        {"when": "every 2h", "what": "summarise the open incidents", "tz": "Europe/Paris"},
    )
    fake.queue_text("I asked you to approve the schedule.")
    await bot.say("every two hours, summarise the open incidents for me")
    (prompt,) = bot.chat.shown
    assert "every 2h (Europe/Paris)" in prompt.question and " CET" in prompt.question
    assert "summarise the open incidents" in prompt.question
    await bot.approve()
    await eventually(lambda: any("is scheduled:" in t for t in bot.chat.texts))

    before = len(fake.requests)
    fake.queue_tool_use("schedule_task", {"when": "every 5m", "what": "again and again"})
    fake.queue_text("Incident summary: nothing is open.")
    bot.clock.advance(hours=2)
    await bot.fire_due()
    await eventually(lambda: "Incident summary: nothing is open." in bot.chat.texts)
    firing = [r["json"] for r in fake.requests[before:] if "tools" in r["json"]]
    assert "This turn is a scheduled firing" in json.dumps(firing[0]["system"])
    refused = json.dumps(firing[1]["messages"][-1])
    assert "cannot create scheduled tasks" in refused
    assert len(await bot.tasks.store.listed(live_only=False)) == 1


async def test_the_host_proposes_a_standing_check(model_bot: tuple[Bot, FakeAnthropic]) -> None:
    bot, fake = model_bot
    fake.queue_tool_use("watch", {"every": "30m", "check": "test -d .", "output_matches": "x+"})
    fake.queue_text("I asked you to approve the check.")
    await bot.say("keep an eye on the workspace every half hour")
    (prompt,) = bot.chat.shown
    assert "without a model" in prompt.question and "test -d ." in prompt.question
    assert "its output matches `x+`" in prompt.question


async def test_the_host_proposes_a_metric_check_on_a_machine(
    model_bot: tuple[Bot, FakeAnthropic],
) -> None:
    bot, fake = model_bot
    fake.queue_tool_use(
        "watch",
        {
            "every": "30m",
            "check": "cat gauge.txt",
            "metric_above_or_below": "temp > 85",
            "machine": "local",
        },
    )
    fake.queue_text("I asked you to approve the check.")
    await bot.say("tell me when the gauge gets hot")
    (prompt,) = bot.chat.shown
    assert "on machine `local`" in prompt.question, prompt.question
    assert "the last `temp` it prints is > 85" in prompt.question, prompt.question


def test_schedule_task_offers_only_its_own_fields() -> None:
    """Its description does not repeat the `schedule:` line (the `when` field says it) nor
    name an option the schema lacks (`post:`); every `| name:` option the line takes that a
    model may set is a field."""
    specs = {t.name: t.spec for t in build_schedule_tools(cast(ScheduledTasks, None), Roles())}
    spec = specs["schedule_task"]
    assert "schedule:" not in spec.description and "post:" not in spec.description
    fields = set(spec.input_schema["properties"])
    assert {"when", "what", "tz", "until", "count", "missed", "notify"} == fields
