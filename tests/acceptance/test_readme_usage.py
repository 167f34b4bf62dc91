"""The README's usage report, as an operator runs it: `raven-bot usage` in a real process over
a RAVEN_HOME whose ledger holds calls recorded by the bot's own `UsageLedger`, priced by the
README's prices.toml; each synopsis option, `--json`, an unreadable `--since`, and the empty
ledger first. The `budget` chat command's examples are run by the budgets' own acceptance
test."""

from __future__ import annotations

import asyncio
import json
import re
import time
from pathlib import Path

import pytest

from agents.models.metered import ModelCall
from agents.models.types import Usage
from bot.schema import all_migrations
from core.call_scope import CallScope
from core.ids import ConversationRef
from core.store import Store
from host.features.usage.ledger import UsageLedger
from host.features.usage.prices import load_prices
from tests.acceptance.harness import Result, noise, product_env, project_dir, sh

pytestmark = pytest.mark.slow

PRICES = """\
currency = "USD"

[models."anthropic:claude-sonnet-*"]
input = 2.40
output = 12.00
cache_read = 0.24
cache_write = 3.00"""
REPORT = "raven-bot usage"
BY_MODEL = "raven-bot usage --by model --json"
SYNOPSIS = (
    "raven-bot usage [--by person\\|channel\\|model\\|day\\|role\\|conversation] "
    "[--since 7d\\|24h\\|DATE] [--json]"
)
README_EXAMPLES = [PRICES, REPORT, BY_MODEL, SYNOPSIS]

SONNET = "anthropic:claude-sonnet-5"
LOCAL = "openai:qwen2.5-coder@http://127.0.0.1:8080/v1"
ROOM = ConversationRef("slack", "T1", "C1", "100.1")


async def _record(home: Path, calls: list[ModelCall]) -> None:
    """`calls` as the serving bot records them, at the prices in `home`."""
    store = Store(home / "raven.db", all_migrations())
    await store.open()
    try:
        ledger = UsageLedger(store, load_prices(home))
        for call in calls:
            await ledger.record(call)
    finally:
        await store.close()


def _call(model: str, person: str, at: float, **tokens: int) -> ModelCall:
    scope = CallScope(person=person, conversation=ROOM.id, channel=ROOM.channel_key)
    return ModelCall(role="host", model=model, scope=scope, usage=Usage(**tokens), at=at)


def test_the_usage_report_from_the_shell(tmp_path: Path) -> None:
    home = tmp_path / "raven-home"
    home.mkdir()
    env = product_env(home)
    cwd = project_dir(tmp_path / "project")
    shown: list[Result] = []

    def run(command: str) -> Result:
        result = sh(command, env=env, cwd=cwd)
        shown.append(result)
        return result

    # "With no calls recorded it says so in one sentence."
    empty = run(REPORT)
    assert (empty.code, empty.out) == (0, "No model calls recorded.\n"), empty.both

    (home / "prices.toml").write_text(PRICES + "\n", encoding="utf-8")
    now = time.time()
    calls = [
        _call(SONNET, "U1", now - 60, input_tokens=1_000_000, output_tokens=100_000),
        _call(SONNET, "U2", now - 3 * 86400, input_tokens=100_000, cache_read_tokens=100_000),
        _call(LOCAL, "U2", now - 30 * 86400, input_tokens=4_000, output_tokens=250),
    ]
    asyncio.run(_record(home, calls))

    report = run(REPORT)
    assert report.code == 0, report.both
    lines = report.out.splitlines()
    assert lines[0] == "Model calls, by day:", report.out
    assert re.match(r"DAY +CALLS +TOKENS IN +TOKENS OUT +CACHE READ +CACHE WRITE +COST$", lines[2])
    # The README's prices: 1M in at 2.40, 0.1M out at 12, 0.1M cache reads at 0.24.
    assert re.match(
        r"TOTAL +3 +1,104,000 +100,250 +100,000 +0 +3\.62 USD \+ 1 unpriced$", lines[-1]
    ), report.out
    assert sum(" unpriced" in line for line in lines) == 2, report.out

    by_model = run(BY_MODEL)
    assert by_model.code == 0, by_model.both
    sonnet, local = json.loads(by_model.out)
    assert (sonnet["key"], sonnet["calls"], sonnet["currency"]) == (SONNET, 2, "USD")
    assert sonnet["cost"] == pytest.approx(2.40 + 1.20 + 0.024)
    assert (local["key"], local["cost"], local["unpriced_calls"]) == (LOCAL, None, 1)

    # The synopsis: every grouping, each form of --since, --json.
    for by in ("person", "channel", "model", "day", "role", "conversation"):
        grouped = run(f"raven-bot usage --by {by}")
        assert grouped.code == 0 and f"by {by}:" in grouped.out, grouped.both
    week = run("raven-bot usage --by person --since 7d")
    assert re.search(r"^TOTAL +2 ", week.out, re.MULTILINE), week.out
    day = json.loads(run("raven-bot usage --since 24h --json").out)
    assert [(g["by"], g["calls"]) for g in day] == [("day", 1)], day
    dated = run("raven-bot usage --since 2026-01-01T00:00 --by role")
    assert re.search(r"^host +3 ", dated.out, re.MULTILINE), dated.out
    wrong = run("raven-bot usage --since 'last week'")
    assert wrong.code == 2 and wrong.out == "", wrong.both
    assert re.fullmatch(
        r"raven-bot: --since 'last week' is not a time: write .*7d, 24h.*\n", wrong.err
    )

    everything = "".join(result.both for result in shown)
    assert not noise(everything), noise(everything)
