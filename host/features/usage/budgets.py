"""Daily budgets: the defaults from the settings, admins' per-person overrides, and the
gate that refuses work once today's spend reached a limit."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal

from core.errors import ConfigError
from core.ids import ConversationRef
from core.store import Store
from host.features.usage.ledger import Spend, UsageLedger
from host.features.usage.prices import MICROS
from host.features.usage.settings import parse_budget


def money(amount: Decimal, currency: str) -> str:
    """`2.50 USD`; small amounts with up to four decimals (`0.0225 USD`), so a budget of
    cents does not read "0.02 of 0.02"."""
    places = Decimal("0.01") if abs(amount) >= 1 or amount == 0 else Decimal("0.0001")
    text = f"{amount.quantize(places):f}"
    if "." in text:
        whole, _, cents = text.partition(".")
        text = f"{whole}.{cents.rstrip('0').ljust(2, '0')}"
    return f"{text} {currency}"


@dataclass(frozen=True)
class Budget:
    """A daily limit: `amount` tokens, or `amount` of a currency."""

    amount: Decimal
    unit: str  # "tokens" or a currency code

    @classmethod
    def parse(cls, text: str) -> Budget:
        """`50000` or `2.50USD` (ValueError naming the forms otherwise)."""
        amount, unit = parse_budget(text)
        return cls(amount, unit)

    @property
    def in_tokens(self) -> bool:
        return self.unit == "tokens"

    def reached(self, spend: Spend) -> bool:
        """Whether `spend` is at or over this limit."""
        if self.in_tokens:
            return spend.tokens >= self.amount
        return spend.cost_micros >= self.amount * MICROS

    def show(self) -> str:
        """`50,000 tokens` or `2.50 USD`."""
        if self.in_tokens:
            return f"{int(self.amount):,} tokens"
        return money(self.amount, self.unit)

    def show_spend(self, spend: Spend) -> str:
        """What `spend` is in this budget's unit."""
        if self.in_tokens:
            return f"{spend.tokens:,} tokens"
        return money(spend.cost, self.unit)


@dataclass(frozen=True)
class BudgetDefaults:
    """The settings' daily limits (None: no limit)."""

    person: Budget | None
    channel: Budget | None

    def check_currency(self, currency: str) -> None:
        """A limit in a currency the prices are not in cannot be counted: stop the start."""
        for name, budget in (
            ("RAVEN_BUDGET_PERSON_DAY", self.person),
            ("RAVEN_BUDGET_CHANNEL_DAY", self.channel),
        ):
            if budget is not None and not budget.in_tokens and budget.unit != currency:
                raise ConfigError(
                    f"{name} is in {budget.unit} but model prices are in {currency}: write the "
                    f"budget in {currency} or in tokens, or set `currency` in prices.toml"
                )


class BudgetOverrides:
    """Per-person daily limits that admins set (`budget @person 100000`)."""

    def __init__(self, store: Store) -> None:
        self._store = store

    async def get(self, person: str) -> Budget | None:
        row = await self._store.fetchone(
            "SELECT budget FROM budget_overrides WHERE person = ?", (person,)
        )
        return None if row is None else Budget.parse(str(row[0]))

    async def set(self, person: str, budget: str, *, by: str, at: float) -> None:
        await self._store.execute(
            "INSERT INTO budget_overrides (person, budget, set_by, set_at) VALUES (?, ?, ?, ?) "
            "ON CONFLICT(person) DO UPDATE SET budget = excluded.budget, "
            "set_by = excluded.set_by, set_at = excluded.set_at",
            (person, budget, by, at),
        )

    async def clear(self, person: str) -> bool:
        return bool(
            await self._store.execute("DELETE FROM budget_overrides WHERE person = ?", (person,))
        )


class BudgetGate:
    """The `SpendGate`: refuses a person's new work once their day's spend, or their
    channel's, reached its limit."""

    def __init__(
        self,
        ledger: UsageLedger,
        overrides: BudgetOverrides,
        defaults: BudgetDefaults,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._ledger = ledger
        self._overrides = overrides
        self._defaults = defaults
        self._clock = clock

    async def person_budget(self, person: str) -> Budget | None:
        """The person's limit: an admin's override, else the default."""
        return await self._overrides.get(person) or self._defaults.person

    @property
    def default_person_budget(self) -> Budget | None:
        """RAVEN_BUDGET_PERSON_DAY (None: no limit)."""
        return self._defaults.person

    async def refusal(self, person: str, conversation: ConversationRef) -> str | None:
        now = self._clock()
        mine = await self.person_budget(person) if person else None
        if mine is not None:
            spend = await self._ledger.spent_today(now=now, person=person)
            if mine.reached(spend):
                return (
                    f"Your daily model budget is spent: {mine.show_spend(spend)} of "
                    f"{mine.show()} today. It renews at midnight; an admin can raise it "
                    "with `budget @person <limit>`."
                )
        channel = self._defaults.channel
        if channel is not None:
            spend = await self._ledger.spent_today(now=now, channel=conversation.channel_key)
            if channel.reached(spend):
                return (
                    f"This channel's daily model budget is spent: {channel.show_spend(spend)} "
                    f"of {channel.show()} today (RAVEN_BUDGET_CHANNEL_DAY). It renews at "
                    "midnight."
                )
        return None
