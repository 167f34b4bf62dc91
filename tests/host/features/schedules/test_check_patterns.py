"""A standing check's patterns (`when: output ~ REGEX`, `metric: NAME /REGEX/`) run on RE2:
one member's catastrophic pattern meets a check's whole output (16,000 characters) and the
verdict comes back, off the event loop; a pattern RE2 refuses is refused when proposed, in
chat and through the Host's `watch` tool, naming what is unsupported."""

from __future__ import annotations

import json
import threading
from typing import SupportsIndex

from host.features.schedules.work import parse_check
from oncall.probe import OUTPUT_CAP, ProbeResult
from tests.fakes.anthropic_server import FakeAnthropic
from tests.host.features.schedules.kit import Bot
from tests.liveness import returns_within

# The finding's pattern, backtracking exponentially in Python's `re`.
CATASTROPHIC = r"^(a+)+$"


def test_a_catastrophic_output_pattern_meets_a_whole_output_and_decides() -> None:
    check = parse_check(f"check: cat log | when: output ~ {CATASTROPHIC}")
    assert check is not None
    with returns_within():
        assert check.verdict(ProbeResult(0, "a" * (OUTPUT_CAP - 1) + "!")) == ("passing", "")
        tripped, why = check.verdict(ProbeResult(0, "a" * OUTPUT_CAP))
    assert tripped == "tripped" and why == f"its output matched `{CATASTROPHIC}`"


def test_a_catastrophic_metric_pattern_meets_a_whole_output_and_decides() -> None:
    check = parse_check(r"check: cat log | metric: m /^(?:a+)+m=(\d+)$/ | when: m > 5")
    assert check is not None
    with returns_within():
        missing = check.verdict(ProbeResult(0, "a" * (OUTPUT_CAP - 1) + "!"))
        crossed = check.verdict(ProbeResult(0, "aaam=7\n"))
    assert missing == ("tripped", "it printed no `m` value")
    assert crossed == ("tripped", "m is 7 (m > 5)")


class _WitnessedOutput(str):
    """Output that notes the threads reading it (the pattern reads it as it matches)."""

    __slots__ = ("readers",)

    readers: set[int]

    def __getitem__(self, key: SupportsIndex | slice) -> str:
        self.readers.add(threading.get_ident())
        return super().__getitem__(key)


async def test_a_firing_matches_its_pattern_off_the_event_loop() -> None:
    check = parse_check("check: cat log | when: output ~ DEGRADED")
    assert check is not None
    output = _WitnessedOutput("service DEGRADED")
    output.readers = set()
    assert await check.judge(ProbeResult(0, output)) == (
        "tripped",
        "its output matched `DEGRADED`",
    )
    assert output.readers and threading.get_ident() not in output.readers


async def test_a_watch_line_with_a_backreference_is_refused_naming_it(bot: Bot) -> None:
    reply = await bot.say(r"watch: every 30m | check: cat log | when: output ~ (\w+) \1")
    assert "a backreference `\\1` is not supported by RE2" in reply, reply
    assert "write the text out again" in reply and "when: output ~ REGEX" in reply
    reply = await bot.say(
        r"watch: every 1h | check: cat log | metric: t /(?<=t=)(\d+)/ | when: t > 1"
    )
    assert "a lookbehind `(?<=…)` is not supported by RE2" in reply, reply
    assert bot.chat.shown == [] and await bot.tasks.store.listed(live_only=False) == []


async def test_the_watch_tool_refuses_a_lookahead_naming_it(
    model_bot: tuple[Bot, FakeAnthropic],
) -> None:
    bot, fake = model_bot
    fake.queue_tool_use(
        "watch", {"every": "30m", "check": "cat log", "output_matches": "ERROR(?!: retrying)"}
    )
    fake.queue_text("The pattern was refused.")
    await bot.say("tell me when the log shows an error that is not retried")
    told = json.dumps(fake.requests[-1]["json"]["messages"][-1])
    assert "a negative lookahead" in told and "is not supported by RE2" in told, told
    assert bot.chat.shown == [] and await bot.tasks.store.listed(live_only=False) == []
