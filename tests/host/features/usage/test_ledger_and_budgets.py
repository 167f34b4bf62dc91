"""The usage ledger, the price list and daily budgets over a real store."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from agents.models.metered import ModelCall
from agents.models.types import Usage
from core.call_scope import CallScope
from core.errors import ConfigError
from core.ids import ConversationRef
from core.store import Store
from host.features.usage.budgets import Budget, BudgetDefaults, BudgetGate, BudgetOverrides
from host.features.usage.feature import UsageSection, accounting
from host.features.usage.ledger import UsageLedger
from host.features.usage.prices import load_prices
from host.features.usage.settings import UsageSettings

CONV = ConversationRef("slack", "T1", "C1", "1.0")
OTHER_THREAD = ConversationRef("slack", "T1", "C1", "2.0")
OTHER_CHANNEL = ConversationRef("slack", "T1", "C9", "1.0")
NOON = datetime(2026, 12, 6, 12, 0, tzinfo=ZoneInfo("UTC")).timestamp()


def _call(
    person: str,
    conv: ConversationRef = CONV,
    *,
    at: float = NOON,
    model: str = "anthropic:claude-sonnet-5",
    tokens: tuple[int, int] = (1000, 100),
    role: str = "host",
) -> ModelCall:
    scope = CallScope(person, conv.id, conv.channel_key, "run_1", "s1")
    usage = Usage(input_tokens=tokens[0], output_tokens=tokens[1])
    return ModelCall(role, model, scope, usage, at)


def _ledger(store: Store, home: Path, timezone: str = "UTC") -> UsageLedger:
    return UsageLedger(store, load_prices(home), timezone=timezone)


async def test_calls_are_summed_per_person_channel_and_conversation(
    store: Store, tmp_path: Path
) -> None:
    ledger = _ledger(store, tmp_path)
    await ledger.record(_call("U1"))
    await ledger.record(_call("U1", OTHER_THREAD))
    await ledger.record(_call("U2", OTHER_CHANNEL, model="openai:local-qwen"))
    await ledger.record(_call("U1", at=NOON - 86_400))  # yesterday
    mine = await ledger.spent_today(now=NOON, person="U1")
    assert (mine.calls, mine.tokens) == (2, 2200)
    # Sonnet list prices: 3 USD in, 15 USD out per million tokens.
    assert mine.cost == Decimal("0.009")
    channel = await ledger.spent_today(now=NOON, channel=CONV.channel_key)
    assert channel.calls == 2
    thread = await ledger.spent_today(now=NOON, conversation=CONV.id)
    assert thread.calls == 1
    # A model with no price counts in tokens, and says it was not priced.
    theirs = await ledger.spent_today(now=NOON, person="U2")
    assert (theirs.tokens, theirs.cost_micros, theirs.unpriced_calls) == (1100, 0, 1)
    by_model = {row.key: row.spend.calls for row in await ledger.summary("model")}
    assert by_model == {"anthropic:claude-sonnet-5": 3, "openai:local-qwen": 1}
    days = [row.key for row in await ledger.summary("day")]
    assert days == ["2026-12-05", "2026-12-06"]


async def test_the_day_is_the_teams_day(store: Store, tmp_path: Path) -> None:
    # 23:30 in Los Angeles on the 5th is the 6th in UTC: it counts on the team's 5th.
    late = datetime(2026, 12, 5, 23, 30, tzinfo=ZoneInfo("America/Los_Angeles")).timestamp()
    ledger = _ledger(store, tmp_path, "America/Los_Angeles")
    await ledger.record(_call("U1", at=late))
    assert [row.key for row in await ledger.summary("day")] == ["2026-12-05"]


def test_prices_toml_overrides_the_shipped_list_and_a_broken_one_names_itself(
    tmp_path: Path,
) -> None:
    shipped = load_prices(tmp_path)
    assert shipped.currency == "USD"
    usage = Usage(input_tokens=1_000_000, output_tokens=0, cache_read_tokens=1_000_000)
    # Every token was read from the cache: the cache price applies.
    assert shipped.cost_micros("anthropic:claude-sonnet-5", usage) == 300_000
    (tmp_path / "prices.toml").write_text(
        '[models."openai:qwen*"]\ninput = 0\noutput = 0\n'
        '[models."anthropic:claude-sonnet-5"]\ninput = 2\noutput = 10\n',
        encoding="utf-8",
    )
    own = load_prices(tmp_path)
    assert own.cost_micros("openai:qwen2.5-coder", Usage(input_tokens=5)) == 0
    # The exact entry wins over the shipped pattern; no cache price: the input price.
    assert own.cost_micros("anthropic:claude-sonnet-5", usage) == 2_000_000
    assert own.price("anthropic:claude-opus-5") is not None  # the rest stays shipped
    (tmp_path / "prices.toml").write_text('[models."x"]\ninput = "cheap"\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"prices\.toml: models\.x\.input"):
        load_prices(tmp_path)


def test_budgets_parse_in_tokens_or_money_and_bad_ones_say_the_forms(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert Budget.parse("50000").show() == "50,000 tokens"
    assert Budget.parse("2.5USD").show() == "2.50 USD"
    assert Budget.parse("2.50 usd").unit == "USD"
    monkeypatch.setenv("RAVEN_BUDGET_PERSON_DAY", "lots")
    with pytest.raises(ValueError, match=r"tokens \(50000\) or an amount and currency"):
        UsageSettings()


async def test_a_person_over_budget_is_refused_with_the_figures(
    store: Store, tmp_path: Path
) -> None:
    ledger = _ledger(store, tmp_path)
    overrides = BudgetOverrides(store)
    gate = BudgetGate(
        ledger,
        overrides,
        BudgetDefaults(person=Budget.parse("2000"), channel=Budget.parse("0.02USD")),
        clock=lambda: NOON,
    )
    assert await gate.refusal("U1", CONV) is None
    await ledger.record(_call("U1"))  # 1,100 tokens
    assert await gate.refusal("U1", CONV) is None
    await ledger.record(_call("U1"))  # 2,200: at the limit
    refusal = await gate.refusal("U1", CONV)
    assert refusal is not None and "2,200 tokens of 2,000 tokens today" in refusal
    # Another person in the channel is not refused by U1's budget.
    assert await gate.refusal("U2", CONV) is None
    # An admin's override for U1 lets them go on.
    await overrides.set("U1", "100000", by="admin", at=NOON)
    assert await gate.refusal("U1", CONV) is None
    # The channel's money budget: 0.0045 USD a call; 5 calls pass 0.02 USD.
    for _ in range(3):
        await ledger.record(_call("U3"))
    refusal = await gate.refusal("U2", CONV)
    assert refusal is not None
    assert "channel's daily model budget is spent: 0.0225 USD of 0.02 USD" in refusal
    assert await gate.refusal("U2", OTHER_CHANNEL) is None


async def test_a_money_budget_in_another_currency_stops_the_start(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "prices.toml").write_text('currency = "EUR"\n', encoding="utf-8")
    monkeypatch.setenv("RAVEN_BUDGET_CHANNEL_DAY", "5USD")
    section = UsageSection(timezone="UTC", own=UsageSettings())
    with pytest.raises(ConfigError, match="RAVEN_BUDGET_CHANNEL_DAY is in USD but model prices"):
        accounting(store, tmp_path, section)
