"""The README's budgets in a thread, as a person meets them: the real `raven-bot chat` in a
terminal (pty) with a model key for the loopback Anthropic fake, a small
RAVEN_BUDGET_PERSON_DAY and the console's user as the admin (RAVEN_ADMINS). They type
`budget`, set someone's limit in tokens and in money, look at it, return it to the default;
a turn then spends their day and the next is refused before any model call, with the
figures. What the terminal shows is checked as read (rendered, no log lines)."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest

from tests.acceptance.harness import Console, noise, product_env, project_dir
from tests.fakes.anthropic_server import FakeAnthropic

pytestmark = pytest.mark.slow

# The README's chat examples (`@person` stands for whoever is meant: here `bob`).
OWN = "budget"
LOOK = "budget @person"
IN_TOKENS = "budget @person 100000"
IN_MONEY = "budget @person 2.50USD"
BACK = "budget @person default"
README_EXAMPLES = [OWN, LOOK, IN_TOKENS, IN_MONEY, BACK, "RAVEN_BUDGET_PERSON_DAY", "RAVEN_ADMINS"]

KEY = "sk-ant-acceptance-budgets-0123456789"
ADMIN = "ada"  # the console's user is the login name (bot/console/adapter.py `_local_user`)
DAY = 5000
# The one answered turn spends more than the day.
SPENT = {"input_tokens": 6000, "output_tokens": 12}


def _typed(example: str) -> str:
    return example.replace("@person", "@bob")


def _flat(text: str) -> str:
    """Screen text as one line (a long reply wraps at the terminal's width)."""
    return " ".join(text.split())


def _answer(body: dict[str, Any]) -> dict[str, Any]:
    return {"content": "Hello, Ada.", "usage": SPENT}


async def test_budgets_from_the_console(tmp_path: Path) -> None:
    home = tmp_path / "raven-home"
    home.mkdir()
    project = project_dir(tmp_path / "project")
    async with FakeAnthropic(api_key=KEY) as model:
        model.responder = _answer
        env = product_env(
            home,
            ANTHROPIC_API_KEY=KEY,
            ANTHROPIC_BASE_URL=model.base_url,
            RAVEN_BUDGET_PERSON_DAY=str(DAY),
            RAVEN_ADMINS=ADMIN,
            USER=ADMIN,
            LOGNAME=ADMIN,
        )
        console = Console(env, project)
        try:
            await asyncio.to_thread(_session, console, model)
            code = await asyncio.to_thread(console.end)
        finally:
            await asyncio.to_thread(console.close)
    assert code == 0, console.transcript
    assert not noise(console.transcript), noise(console.transcript)
    assert "<@" not in console.transcript  # people are named, never mentioned


def _say(console: Console, line: str, reply: str) -> str:
    """Type `line`; the bot's reply up to the end of the regex `reply` (flattened)."""
    console.type(line)
    return _flat(console.expect(rf"raven> {reply}"))


def _session(console: Console, model: FakeAnthropic) -> None:
    own = _say(console, OWN, r"You have spent[\s\S]*?limit of[\s\S]*?tokens\.")
    assert own.endswith(
        "raven> You have spent 0 tokens in 0 model calls today; a daily limit of 5,000 tokens."
    ), own

    tokens = _say(console, _typed(IN_TOKENS), r"bob's daily model budget[\s\S]*?tokens\.")
    assert tokens.endswith("raven> bob's daily model budget is now 100,000 tokens."), tokens
    money = _say(console, _typed(IN_MONEY), r"bob's daily model budget[\s\S]*?USD\.")
    assert money.endswith("raven> bob's daily model budget is now 2.50 USD."), money
    looked = _say(console, _typed(LOOK), r"bob has spent[\s\S]*?USD\.")
    assert looked.endswith(
        "raven> bob has spent 0 tokens in 0 model calls today; a daily limit of 2.50 USD."
    ), looked
    euros = _say(console, "budget @bob 3EUR", r"Budgets in money[\s\S]*?tokens\.")
    assert euros.endswith(
        "raven> Budgets in money are counted in USD (prices.toml): write 3USD or a number of "
        "tokens."
    ), euros
    back = _say(console, _typed(BACK), r"bob's daily budget is back[\s\S]*?\)\.")
    assert back.endswith("raven> bob's daily budget is back to the default (5,000 tokens)."), back
    assert not model.requests  # every budget line was a command, not a model call

    _say(console, "hello", r"Hello, Ada\.")
    calls = len(model.requests)
    assert calls == 1

    refused = _say(console, "hello again", r"⛔ Your daily model budget is spent[\s\S]*?midnight")
    figures = re.search(r"spent: ([\d,]+) tokens of 5,000 tokens today\.", refused)
    assert figures is not None, refused
    assert int(figures[1].replace(",", "")) >= SPENT["input_tokens"] + SPENT["output_tokens"]
    assert len(model.requests) == calls  # refused before any model call

    # Their day as `budget` tells it: at least what the refusal said (the answered turn's
    # memory write may be counted after it), in calls and money.
    own = _say(console, OWN, r"You have spent[\s\S]*?limit of[\s\S]*?tokens\.")
    day = re.search(
        r"You have spent ([\d,]+) tokens in \d+ model calls? \([\d.]+ USD\) today; ", own
    )
    assert day is not None, own
    assert int(day[1].replace(",", "")) >= int(figures[1].replace(",", "")), own
    assert own.endswith("a daily limit of 5,000 tokens."), own
