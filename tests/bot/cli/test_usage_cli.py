"""`raven-bot usage` over a RAVEN_HOME whose model calls were recorded by the usage ledger
itself: each grouping with its totals, `--since` in every accepted form and its error,
`--json`'s fields, display names from the conversation log, and an empty ledger."""

from __future__ import annotations

import asyncio
import json
import re
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from agents.models.metered import ModelCall
from agents.models.types import Usage
from bot.cli.main import main
from bot.cli.parsers import _GROUPINGS
from bot.cli.usage import parse_since
from bot.schema import all_migrations
from core.call_scope import CallScope
from core.ids import ConversationRef
from core.store import Store
from host.features.usage.ledger import GROUPINGS, UsageLedger
from host.features.usage.prices import load_prices
from host.runtime.conversation_log import ConversationLog
from tests.bot.cli.mcp_home import logging_kept

__all__ = ["logging_kept"]  # fixture: the root logger given back after main()

SONNET = "anthropic:claude-sonnet-4-5"  # priced by the shipped list (3 / 15 per million)
LOCAL = "openai:qwen2.5-coder@http://127.0.0.1:8080/v1"  # no price
ADA_ROOM = ConversationRef("slack", "T1", "C1", "100.1")
BOB_ROOM = ConversationRef("slack", "T1", "C2", "200.2")
HOUR = 3600.0


def _call(model: str, person: str, room: ConversationRef, at: float, **tokens: int) -> ModelCall:
    scope = CallScope(person=person, conversation=room.id, channel=room.channel_key)
    return ModelCall(role="host", model=model, scope=scope, usage=Usage(**tokens), at=at)


async def _record(home: Path, calls: list[ModelCall], *, names: dict[str, str]) -> None:
    """`calls` through the ledger the bot records with, and a turn per named person."""
    store = Store(home / "raven.db", all_migrations())
    await store.open()
    try:
        ledger = UsageLedger(store, load_prices(home))
        for call in calls:
            await ledger.record(call)
        log = ConversationLog(store)
        for n, (person, name) in enumerate(names.items()):
            await log.start_turn(
                ADA_ROOM, turn_id=f"t{n}", kind="user", author_id=person, author_name=name
            )
    finally:
        await store.close()


@pytest.fixture
def recorded(isolated_env: Path) -> float:
    """Four calls: Ada's two on Sonnet now and an hour ago, Bob's on the unpriced local
    model two days ago, and one of the bot's own (no person) ten days ago. Returns now."""
    now = time.time()
    calls = [
        _call(SONNET, "U1", ADA_ROOM, now - 60, input_tokens=1_000_000, output_tokens=100_000),
        _call(SONNET, "U1", ADA_ROOM, now - HOUR, input_tokens=300_000, cache_read_tokens=100_000),
        _call(LOCAL, "U2", BOB_ROOM, now - 48 * HOUR, input_tokens=7_000, output_tokens=300),
        _call(SONNET, "", BOB_ROOM, now - 240 * HOUR, input_tokens=10_000, cache_write_tokens=400),
    ]
    isolated_env.mkdir(parents=True, exist_ok=True)
    asyncio.run(_record(isolated_env, calls, names={"U1": "Ada"}))
    return now


def _usage(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["usage", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _rows(out: str) -> dict[str, list[str]]:
    """The table's rows by their first cell (columns are two or more spaces apart)."""
    lines = [line for line in out.splitlines() if "  " in line and not line.startswith("-")]
    return {cells[0]: cells[1:] for cells in (re.split(r"\s{2,}", line) for line in lines)}


def _day(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).date().isoformat()


@pytest.mark.usefixtures("logging_kept")
def test_by_day_is_the_default_with_cost_unpriced_and_total(
    recorded: float, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _usage(capsys)
    assert code == 0, err
    rows = _rows(out)
    header, *days, footer = rows
    assert (header, footer) == ("DAY", "TOTAL")
    ago = (60, HOUR, 48 * HOUR, 240 * HOUR)
    assert days == sorted({_day(recorded - back) for back in ago}), out  # oldest day first
    assert rows["DAY"] == ["CALLS", "TOKENS IN", "TOKENS OUT", "CACHE READ", "CACHE WRITE", "COST"]
    assert rows[_day(recorded - 48 * HOUR)] == ["1", "7,000", "300", "0", "0", "unpriced"]
    # The footer: every call, the priced ones' cost, and how many had no price.
    calls, tokens_in, tokens_out, read, write, cost = rows["TOTAL"]
    assert (calls, tokens_in, tokens_out, read, write) == (
        "4",
        "1,317,000",
        "100,300",
        "100,000",
        "400",
    )
    assert cost.endswith(" USD + 1 unpriced"), out


@pytest.mark.usefixtures("logging_kept")
def test_each_grouping(recorded: float, capsys: pytest.CaptureFixture[str]) -> None:
    expected_keys = {
        "person": {"U1 (Ada)", "U2", "(the bot's own)"},
        "channel": {ADA_ROOM.channel_key, BOB_ROOM.channel_key},
        "model": {SONNET, LOCAL},
        "role": {"host"},
        "conversation": {ADA_ROOM.id, BOB_ROOM.id},
    }
    for by, keys in expected_keys.items():
        code, out, err = _usage(capsys, "--by", by)
        assert code == 0, err
        rows = _rows(out)
        assert set(rows) - {by.upper(), "TOTAL"} == keys, out
        assert rows["TOTAL"][0] == "4", out
    _, out, _ = _usage(capsys, "--by", "person")
    # Ada: 1.2M read fresh at 3, 0.1M out at 15, 0.1M cache reads at 0.30 per million.
    assert _rows(out)["U1 (Ada)"] == ["2", "1,300,000", "100,000", "100,000", "0", "5.13 USD"]
    assert _rows(out)["U2"][-1] == "unpriced"
    assert list(_rows(out))[1] == "U1 (Ada)"  # the largest spender first


def test_the_command_line_offers_every_grouping_the_ledger_has() -> None:
    assert _GROUPINGS == GROUPINGS


@pytest.mark.usefixtures("logging_kept")
def test_since_counts_only_calls_from_then_on(
    recorded: float, capsys: pytest.CaptureFixture[str]
) -> None:
    for since, calls in (("24h", "2"), ("7d", "3"), ("30d", "4"), ("1h", "1")):
        code, out, err = _usage(capsys, "--by", "model", "--since", since)
        assert code == 0, err
        assert _rows(out)["TOTAL"][0] == calls, (since, out)
        assert " since " in out.splitlines()[0], out
    yesterday = _day(recorded - 24 * HOUR)
    _, out, _ = _usage(capsys, "--since", yesterday)
    assert _rows(out)["TOTAL"][0] == "2", out
    _, out, _ = _usage(capsys, "--since", f"{_day(recorded + 48 * HOUR)}T00:00")
    assert out == f"No model calls recorded since {_day(recorded + 48 * HOUR)} 00:00 UTC.\n"


@pytest.mark.usefixtures("logging_kept")
@pytest.mark.parametrize("wrong", ["3 weeks", "7", "yesterday", "2026-13-01", "1w"])
def test_a_since_it_cannot_read_names_the_accepted_forms(
    recorded: float, capsys: pytest.CaptureFixture[str], wrong: str
) -> None:
    code, out, err = _usage(capsys, "--since", wrong)
    assert code == 2 and out == ""
    assert err.startswith(f"raven-bot: --since {wrong!r} is not a time: write "), err
    assert "7d, 24h" in err and "2026-12-01" in err and "2026-12-01T09:30" in err, err
    assert len(err.splitlines()) == 1, err


def test_since_forms_in_the_team_zone() -> None:
    now = 1_800_000_000.0
    assert parse_since("7d", "UTC", now=now) == now - 7 * 86400
    assert parse_since("24h", "UTC", now=now) == now - 86400
    # A date is from its midnight, and a time without an offset is, in RAVEN_TIMEZONE.
    berlin_midnight = datetime(2026, 11, 30, 23, tzinfo=UTC).timestamp()
    assert parse_since("2026-12-01", "Europe/Berlin", now=now) == berlin_midnight
    assert parse_since("2026-12-01T00:00", "Europe/Berlin", now=now) == berlin_midnight
    assert parse_since("2026-12-01T00:00+00:00", "Europe/Berlin", now=now) == (
        berlin_midnight + HOUR
    )


@pytest.mark.usefixtures("logging_kept")
def test_json_is_a_list_of_groups_with_explicit_fields(
    recorded: float, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _usage(capsys, "--by", "model", "--json")
    assert code == 0, err
    groups = json.loads(out)
    assert [g["key"] for g in groups] == [SONNET, LOCAL]
    sonnet, local = groups
    assert sonnet == {
        "by": "model",
        "key": SONNET,
        "name": None,
        "calls": 3,
        "input_tokens": 1_310_000,
        "output_tokens": 100_000,
        "cache_read_tokens": 100_000,
        "cache_write_tokens": 400,
        # Ada's 5.13, and the bot's 9,600 fresh at 3 and 400 cache writes at 3.75.
        "cost": pytest.approx(5.13 + 0.0288 + 0.0015),
        "currency": "USD",
        "unpriced_calls": 0,
    }
    assert local["cost"] is None and local["unpriced_calls"] == 1 and local["calls"] == 1
    _, out, _ = _usage(capsys, "--by", "person", "--json")
    assert {g["key"]: g["name"] for g in json.loads(out)} == {"U1": "Ada", "U2": None, "": None}


@pytest.mark.usefixtures("logging_kept")
def test_an_empty_ledger_is_one_sentence(
    isolated_env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    isolated_env.mkdir(parents=True, exist_ok=True)
    asyncio.run(_record(isolated_env, [], names={}))
    code, out, err = _usage(capsys)
    assert (code, out, err) == (0, "No model calls recorded.\n", "")
    code, out, _ = _usage(capsys, "--json")
    assert code == 0 and json.loads(out) == []


@pytest.mark.usefixtures("logging_kept")
def test_a_broken_price_list_is_one_line_naming_it(
    recorded: float, isolated_env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (isolated_env / "prices.toml").write_text('currency = "dollars"\n')
    code, out, err = _usage(capsys)
    assert code == 2 and out == ""
    assert err.startswith("raven-bot: ") and "prices.toml" in err and "currency" in err, err


@pytest.mark.usefixtures("logging_kept")
def test_calls_priced_in_an_earlier_currency_are_pointed_out(
    recorded: float, isolated_env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (isolated_env / "prices.toml").write_text(
        'currency = "EUR"\n[models."anthropic:*"]\ninput = 2\noutput = 10\n'
    )
    euro = _call(SONNET, "U1", ADA_ROOM, recorded - 10, input_tokens=1_000_000)
    asyncio.run(_record(isolated_env, [euro], names={}))
    code, out, err = _usage(capsys, "--by", "model")
    assert code == 0 and "EUR" in _rows(out)["TOTAL"][-1], out
    assert err.startswith("raven-bot: some of these calls were priced in USD, before the "), err
    changed = datetime.fromtimestamp(recorded - 30, UTC).isoformat()
    code, out, err = _usage(capsys, "--by", "model", "--since", changed)
    assert (code, err) == (0, ""), err
    assert _rows(out)["TOTAL"][0] == "1" and _rows(out)["TOTAL"][-1] == "2.00 EUR", out
