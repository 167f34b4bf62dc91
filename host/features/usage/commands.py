"""`budget` from chat, without a model: anyone sees their own day's spend and limit; admins
see anyone's and set or clear a person's daily limit.

    budget                      your spend today and your limit
    budget @person              theirs (admins)
    budget @person 100000       set their daily limit in tokens (admins)
    budget @person 2.50USD      … or in the prices' currency
    budget @person default      back to RAVEN_BUDGET_PERSON_DAY
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable

from host.features.usage.budgets import Budget, BudgetGate, BudgetOverrides, money
from host.features.usage.ledger import Spend, UsageLedger
from host.features.usage.settings import budget_problem
from host.runtime.messages import InboundMessage
from host.runtime.people import People
from host.runtime.roles import Roles

_BUDGET = re.compile(
    # A person only as a mention (`<@U1>`, `@U1`), so "budget review" is not a command.
    r"^\s*budget(?:\s+(?P<who><@!?[\w.-]+>|@[\w.-]+)(?:\s+(?P<limit>\d[\d.]*\s?(?:[A-Za-z]{3})?"
    r"|default))?)?\s*$",
    re.IGNORECASE,
)


def _person(who: str) -> str:
    """A mention (`<@U1>`, `<@!1>`, `@U1`) or a bare id, as the person's id."""
    return who.strip("<>").lstrip("@!")


def spend_line(spend: Spend, currency: str) -> str:
    """`12,345 tokens (0.04 USD)` — the cost left out when nothing was priced."""
    text = f"{spend.tokens:,} tokens in {spend.calls} model call{'s' if spend.calls != 1 else ''}"
    if spend.calls and spend.unpriced_calls < spend.calls:
        text += f" ({money(spend.cost, currency)}"
        text += ", some models unpriced)" if spend.unpriced_calls else ")"
    return text


class BudgetCommands:
    """The `budget` command."""

    def __init__(
        self,
        ledger: UsageLedger,
        gate: BudgetGate,
        overrides: BudgetOverrides,
        roles: Roles,
        people: People,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._ledger = ledger
        self._gate = gate
        self._overrides = overrides
        self._roles = roles
        self._people = people
        self._clock = clock

    @property
    def help(self) -> str:
        return (
            "**Budget**: `budget` shows your spend today; admins: "
            "`budget @person 100000|2.50USD|default`."
        )

    async def handle(self, msg: InboundMessage) -> str | None:
        match = _BUDGET.match(msg.text) if msg.origin == "user" else None
        if match is None:
            return None
        who = _person(match["who"]) if match["who"] else msg.author_id
        limit = match["limit"]
        admin = msg.author_id in self._roles.admins
        if who != msg.author_id and not admin:
            return "Only admins can see or set another person's budget."
        # Named, never mentioned: a mention in the bot's message would ping them.
        name = await self._people.name(msg.conversation, who)
        if limit is None:
            return await self._show(who, name, yours=who == msg.author_id)
        if not admin:
            return "Only admins can set a budget (RAVEN_ADMINS)."
        if limit.lower() == "default":
            cleared = await self._overrides.clear(who)
            fallback = self._gate_default()
            return (
                f"{name}'s daily budget is back to the default ({fallback})."
                if cleared
                else f"{name} had no budget of their own; the default applies ({fallback})."
            )
        problem = budget_problem(limit)
        if problem is not None:
            return f"{problem}, or `default`."
        budget = Budget.parse(limit)
        if not budget.in_tokens and budget.unit != self._ledger.currency:
            return (
                f"Budgets in money are counted in {self._ledger.currency} (prices.toml): write "
                f"`{budget.amount}{self._ledger.currency}` or a number of tokens."
            )
        await self._overrides.set(who, limit.replace(" ", ""), by=msg.author_id, at=self._clock())
        return f"{name}'s daily model budget is now {budget.show()}."

    def _gate_default(self) -> str:
        default = self._gate.default_person_budget
        return default.show() if default is not None else "no limit"

    async def _show(self, person: str, name: str, *, yours: bool) -> str:
        spend = await self._ledger.spent_today(now=self._clock(), person=person)
        budget = await self._gate.person_budget(person)
        whose = "You have" if yours else f"{name} has"
        limit = "no daily limit" if budget is None else f"a daily limit of {budget.show()}"
        return f"{whose} spent {spend_line(spend, self._ledger.currency)} today; {limit}."
