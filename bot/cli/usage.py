"""`raven-bot usage`: what the model calls recorded in RAVEN_HOME/raven.db used and cost,
grouped by person, channel, model, day, role or conversation, for the operator.

Reads the usage ledger (one row per answered call, priced when it was made) beside a bot
that may be serving the same RAVEN_HOME; it writes nothing but the schema's upgrades, as
every one-shot command opening the database does.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import time
from collections.abc import Sequence
from datetime import date, datetime
from datetime import time as clock_time
from typing import Any, TextIO
from zoneinfo import ZoneInfo

from bot.cli.database import open_database
from bot.home import HomeError, check_home
from bot.settings import Settings
from core.errors import ConfigError
from core.store import Store
from host.features.usage.budgets import money
from host.features.usage.ledger import Grouping, Spend, SpendRow, UsageLedger
from host.features.usage.prices import PriceTable, load_prices

SINCE_FORMS = (
    "a number of days or hours back (7d, 24h), a date (2026-12-01: from its midnight in "
    "RAVEN_TIMEZONE) or a date and time (2026-12-01T09:30, or with an offset: "
    "2026-12-01T09:30+01:00)"
)
_BACK = re.compile(r"^(\d{1,5})([dh])$")
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_HEADERS = ("CALLS", "TOKENS IN", "TOKENS OUT", "CACHE READ", "CACHE WRITE", "COST")
# What an empty key means: work no person asked for (a report, a wake-up, upkeep).
_NOBODY = "(the bot's own)"


def parse_since(text: str, timezone: str, *, now: float) -> float:
    """The moment `--since` names, as a Unix time (ValueError naming the accepted forms)."""
    entry = text.strip()
    back = _BACK.match(entry)
    if back is not None:
        hours = int(back.group(1)) * (24 if back.group(2) == "d" else 1)
        return now - hours * 3600
    zone = ZoneInfo(timezone)
    try:
        if _DATE.match(entry):
            return datetime.combine(date.fromisoformat(entry), clock_time(), zone).timestamp()
        moment = datetime.fromisoformat(entry)
    except ValueError:
        pass
    else:
        return (moment if moment.tzinfo else moment.replace(tzinfo=zone)).timestamp()
    raise ValueError(f"--since {text!r} is not a time: write {SINCE_FORMS}")


def usage_command(args: argparse.Namespace, settings: Settings) -> int:
    """Entry for `raven-bot usage`; 2 with one line for a wrong `--since`, an unusable
    RAVEN_HOME or a broken prices.toml."""
    try:
        since = (
            None
            if args.since is None
            else parse_since(args.since, settings.timezone, now=time.time())
        )
        check_home(settings.home)
        prices = load_prices(settings.home)
        return asyncio.run(_report(settings, prices, args.by, since, args.json, sys.stdout))
    except (ValueError, HomeError, ConfigError) as exc:
        print(f"raven-bot: {exc}", file=sys.stderr)
        return 2


async def _report(
    settings: Settings,
    prices: PriceTable,
    by: Grouping,
    since: float | None,
    as_json: bool,
    out: TextIO,
) -> int:
    currency = prices.currency
    async with open_database(settings.home) as store:
        ledger = UsageLedger(store, prices, timezone=settings.timezone)
        rows = await ledger.summary(by, since=since)
        total = await ledger.total(since=since)
        names = await _names(store, [r.key for r in rows]) if by == "person" else {}
        others = await _other_currencies(store, currency, since)
    if others:
        # Costs are summed as recorded: say so rather than print a sum of two currencies.
        print(
            f"raven-bot: some of these calls were priced in {', '.join(others)}, before the "
            f"prices' currency became {currency}; their costs are added as recorded. "
            "Use --since to count from the change.",
            file=sys.stderr,
        )
    if as_json:
        out.write(json.dumps([row_json(by, r, names, currency) for r in rows], indent=2) + "\n")
        return 0
    period = "" if since is None else f" since {_shown(since, settings.timezone)}"
    if not rows:
        out.write(f"No model calls recorded{period}.\n")
        return 0
    out.write(f"Model calls{period}, by {by}:\n\n")
    table: list[tuple[str, ...]] = [(by.upper(), *_HEADERS)]
    table += [(_label(by, r.key, names), *_figures(r.spend, currency)) for r in rows]
    out.write(_aligned(table, total=("TOTAL", *_figures(total, currency))) + "\n")
    return 0


def _label(by: Grouping, key: str, names: dict[str, str]) -> str:
    if not key:
        return _NOBODY if by == "person" else "(none)"
    name = names.get(key)
    return f"{key} ({name})" if name and name != key else key


def _cost(spend: Spend, currency: str) -> str:
    """The known cost; `unpriced` when no call had a price, and how many lacked one."""
    if spend.calls and spend.unpriced_calls == spend.calls:
        return "unpriced"
    shown = money(spend.cost, currency)
    return f"{shown} + {spend.unpriced_calls} unpriced" if spend.unpriced_calls else shown


def _figures(spend: Spend, currency: str) -> tuple[str, ...]:
    return (
        f"{spend.calls:,}",
        f"{spend.input_tokens:,}",
        f"{spend.output_tokens:,}",
        f"{spend.cache_read_tokens:,}",
        f"{spend.cache_write_tokens:,}",
        _cost(spend, currency),
    )


def _aligned(rows: Sequence[Sequence[str]], *, total: Sequence[str]) -> str:
    """Columns padded to their widest cell, figures right-aligned; a rule, then `total`."""
    every = [*rows, total]
    widths = [max(len(row[i]) for row in every) for i in range(len(total))]

    def line(row: Sequence[str]) -> str:
        cells = [
            row[0].ljust(widths[0]),
            *(c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)),
        ]
        return "  ".join(cells).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([*(line(r) for r in rows), rule, line(total)])


def _shown(at: float, timezone: str) -> str:
    return datetime.fromtimestamp(at, ZoneInfo(timezone)).strftime("%Y-%m-%d %H:%M %Z")


async def _other_currencies(store: Store, currency: str, since: float | None) -> list[str]:
    """The currencies calls in the period were priced in, other than today's."""
    where, params = ("AND at >= ?", (since,)) if since is not None else ("", ())
    rows = await store.fetchall(
        f"SELECT DISTINCT currency FROM model_calls WHERE currency IS NOT NULL {where}", params
    )
    return sorted(str(row[0]) for row in rows if row[0] != currency)


async def _names(store: Store, people: Sequence[str]) -> dict[str, str]:
    """The latest display name each person wrote under in the conversation log (the command
    line has no platform directory to ask)."""
    wanted = [p for p in people if p]
    if not wanted:
        return {}
    marks = ", ".join("?" for _ in wanted)
    rows = await store.fetchall(
        f"SELECT author_id, author_name FROM turns WHERE author_id IN ({marks}) "
        "AND author_name != '' ORDER BY started_at",
        tuple(wanted),
    )
    # Ordered oldest first, so each person's latest name is the one kept.
    return {str(person): str(name) for person, name in rows}


def row_json(by: Grouping, row: SpendRow, names: dict[str, str], currency: str) -> dict[str, Any]:
    """One group as `--json` prints it: the key as stored, every figure, the cost in
    `currency` (null when none of its calls had a price)."""
    spend = row.spend
    priced = spend.calls > spend.unpriced_calls
    return {
        "by": by,
        "key": row.key,
        "name": names.get(row.key),
        "calls": spend.calls,
        "input_tokens": spend.input_tokens,
        "output_tokens": spend.output_tokens,
        "cache_read_tokens": spend.cache_read_tokens,
        "cache_write_tokens": spend.cache_write_tokens,
        "cost": float(spend.cost) if priced else None,
        "currency": currency,
        "unpriced_calls": spend.unpriced_calls,
    }
