"""Usage and budgets as a capability: the ledger every model call is recorded in, the
daily limits (RAVEN_BUDGET_PERSON_DAY, RAVEN_BUDGET_CHANNEL_DAY, admins' overrides), the
`budget` command and the `status` line of what a conversation spent today.

The ledger and the gate are also built by the assembly root (`accounting`), before any
feature, because every role's model provider reports to the ledger and the core asks the
gate; both are stateless over the store, so the root's and this feature's copies agree.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from core.errors import ConfigError
from core.ids import ConversationRef
from core.store import Store
from host.conversation.service import CommandHandler
from host.features.feature import BaseFeature, DoctorCheck, DoctorParts, HostParts, StatusSource
from host.features.usage.budgets import Budget, BudgetDefaults, BudgetGate, BudgetOverrides
from host.features.usage.commands import BudgetCommands, spend_line
from host.features.usage.ledger import UsageLedger
from host.features.usage.migrations import MIGRATIONS
from host.features.usage.prices import PRICES_FILE, load_prices
from host.features.usage.settings import UsageSettings


@dataclass(frozen=True)
class UsageSection:
    """The team's zone (a budget's day is theirs) and this capability's own settings."""

    timezone: str
    own: UsageSettings = field(default_factory=UsageSettings)

    @property
    def defaults(self) -> BudgetDefaults:
        own = self.own
        return BudgetDefaults(
            person=Budget.parse(own.budget_person_day) if own.budget_person_day else None,
            channel=Budget.parse(own.budget_channel_day) if own.budget_channel_day else None,
        )


@dataclass(frozen=True)
class Accounting:
    """The ledger calls are recorded in and the gate that refuses work over budget."""

    ledger: UsageLedger
    gate: BudgetGate
    overrides: BudgetOverrides


def accounting(
    store: Store, home: Path, section: UsageSection, *, clock: Callable[[], float] = time.time
) -> Accounting:
    """Build the ledger and gate (a ConfigError when prices.toml or a budget is unusable)."""
    ledger = UsageLedger(store, load_prices(home), timezone=section.timezone)
    defaults = section.defaults
    defaults.check_currency(ledger.currency)
    overrides = BudgetOverrides(store)
    return Accounting(ledger, BudgetGate(ledger, overrides, defaults, clock=clock), overrides)


class UsageFeature(BaseFeature):
    """Every model call counted; daily budgets per person and channel."""

    Section: ClassVar[type[UsageSection]] = UsageSection
    migrations = MIGRATIONS

    @classmethod
    def preflight(cls, home: Path) -> None:
        load_prices(home)  # a broken prices.toml stops the start, naming the file

    @classmethod
    async def doctor(cls, parts: DoctorParts, section: UsageSection) -> Sequence[DoctorCheck]:
        """The price list, and the budgets against it."""
        try:
            prices = await asyncio.to_thread(load_prices, parts.home)
            section.defaults.check_currency(prices.currency)
        except (ConfigError, ValueError) as exc:
            return (DoctorCheck("budgets", "fail", str(exc)),)
        own = parts.home / PRICES_FILE
        source = str(own) if own.exists() else "the shipped list"
        defaults = section.defaults
        limits = ", ".join(
            f"{who} {budget.show()}/day"
            for who, budget in (("person", defaults.person), ("channel", defaults.channel))
            if budget is not None
        )
        detail = (
            f"{len(prices.models)} model price(s) in {prices.currency} from {source}; "
            f"budgets: {limits or 'none'}"
        )
        return (DoctorCheck("budgets", "ok", detail),)

    def __init__(self, parts: HostParts, section: UsageSection) -> None:
        self.accounting = accounting(parts.store, parts.home, section)
        self._commands = BudgetCommands(
            self.accounting.ledger,
            self.accounting.gate,
            self.accounting.overrides,
            parts.roles,
            parts.people,
        )

    def status_sources(self) -> Sequence[StatusSource]:
        return (self._status,)

    def commands(self) -> CommandHandler | None:
        return self._commands

    async def _status(self, conv: ConversationRef) -> str:
        ledger = self.accounting.ledger
        spend = await ledger.spent_today(now=time.time(), conversation=conv.id)
        if not spend.calls:
            return ""
        return f"Model use in this conversation today: {spend_line(spend, ledger.currency)}."
