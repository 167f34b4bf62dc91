"""The usage ledger: one row per answered model call, and what was spent since a day began.

Rows are written as calls are answered (before the answer goes on) with the call's cost at
the prices of that moment, so a later price change does not rewrite history.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Literal
from zoneinfo import ZoneInfo

from agents.models.metered import ModelCall
from core.store import Store
from host.features.usage.prices import MICROS, PriceTable

Grouping = Literal["person", "channel", "model", "day", "role", "conversation"]
GROUPINGS: tuple[Grouping, ...] = ("person", "channel", "model", "day", "role", "conversation")


@dataclass(frozen=True)
class Spend:
    """What some calls used: tokens, their cost where known, and how many had no price."""

    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cost_micros: int = 0
    unpriced_calls: int = 0

    @property
    def tokens(self) -> int:
        """Prompt and answer tokens: what a budget in tokens counts."""
        return self.input_tokens + self.output_tokens

    @property
    def cost(self) -> Decimal:
        """The known cost, in the ledger's currency."""
        return Decimal(self.cost_micros) / MICROS


@dataclass(frozen=True)
class SpendRow:
    """One group of `UsageLedger.summary`."""

    key: str
    spend: Spend


_SUMS = (
    "COUNT(*), COALESCE(SUM(input_tokens), 0), COALESCE(SUM(output_tokens), 0), "
    "COALESCE(SUM(cache_read_tokens), 0), COALESCE(SUM(cache_write_tokens), 0), "
    "COALESCE(SUM(cost_micros), 0), COALESCE(SUM(cost_micros IS NULL), 0)"
)


def _spend(row: Sequence[object]) -> Spend:
    return Spend(*(int(str(v)) for v in row))


class UsageLedger:
    """Records model calls (it is the `UsageRecorder` every role's provider reports to) and
    sums them by person, channel, conversation, model or day. `day` is the team's day
    (RAVEN_TIMEZONE)."""

    def __init__(self, store: Store, prices: PriceTable, *, timezone: str = "UTC") -> None:
        self._store = store
        self._prices = prices
        self._zone = ZoneInfo(timezone)

    @property
    def currency(self) -> str:
        """The currency costs are counted in."""
        return self._prices.currency

    def day_of(self, at: float) -> str:
        """The team's calendar day of a moment (`2026-12-06`)."""
        return datetime.fromtimestamp(at, self._zone).date().isoformat()

    async def record(self, call: ModelCall) -> None:
        """Store one answered call, priced now."""
        usage, scope = call.usage, call.scope
        cost = self._prices.cost_micros(call.model, usage)
        await self._store.execute(
            "INSERT INTO model_calls (at, day, role, model, person, conversation, channel, "
            "run_id, node_id, input_tokens, output_tokens, cache_read_tokens, "
            "cache_write_tokens, cost_micros, currency) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                call.at,
                self.day_of(call.at),
                call.role,
                call.model,
                scope.person,
                scope.conversation,
                scope.channel,
                scope.run,
                scope.node,
                usage.input_tokens,
                usage.output_tokens,
                usage.cache_read_tokens,
                usage.cache_write_tokens,
                cost,
                None if cost is None else self._prices.currency,
            ),
        )

    async def spent_today(
        self,
        *,
        now: float,
        person: str | None = None,
        channel: str | None = None,
        conversation: str | None = None,
    ) -> Spend:
        """What was spent on the team's day of `now` by one person, channel or conversation
        (exactly one given)."""
        given = [
            (column, value)
            for column, value in (
                ("person", person),
                ("channel", channel),
                ("conversation", conversation),
            )
            if value is not None
        ]
        if len(given) != 1:
            raise ValueError("name exactly one of person, channel, conversation")
        column, value = given[0]
        row = await self._store.fetchone(
            f"SELECT {_SUMS} FROM model_calls WHERE {column} = ? AND day = ?",
            (value, self.day_of(now)),
        )
        assert row is not None  # an aggregate always answers one row
        return _spend(row)

    async def summary(self, by: Grouping, *, since: float | None = None) -> list[SpendRow]:
        """Totals grouped `by` a column, the largest spender first (by cost, then tokens)."""
        if by not in GROUPINGS:  # the column name goes into the SQL: only known ones
            raise ValueError(f"cannot group by {by!r}; one of {', '.join(GROUPINGS)}")
        column = by
        where, params = ("WHERE at >= ?", (since,)) if since is not None else ("", ())
        rows = await self._store.fetchall(
            f"SELECT {column}, {_SUMS} FROM model_calls {where} GROUP BY {column}",
            params,
        )
        result = [SpendRow(str(row[0]), _spend(row[1:])) for row in rows]
        if by == "day":
            return sorted(result, key=lambda r: r.key)
        return sorted(result, key=lambda r: (-r.spend.cost_micros, -r.spend.tokens, r.key))

    async def total(self, *, since: float | None = None) -> Spend:
        """Every call since `since` (all of them: None)."""
        where, params = ("WHERE at >= ?", (since,)) if since is not None else ("", ())
        row = await self._store.fetchone(f"SELECT {_SUMS} FROM model_calls {where}", params)
        assert row is not None
        return _spend(row)
