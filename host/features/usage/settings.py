"""Budgets' own settings: read from `.env` and the environment like every setting,
declared here so the capability's knobs live in its folder.

A light module (pydantic only): the bot reads every feature's `settings` module to list and
check its variables before anything else is imported (`bot.settings`).
"""

from __future__ import annotations

import re
from decimal import Decimal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

# `50000` (tokens) or `2.50USD` / `2.50 USD` (a currency amount, ISO code).
_TOKENS = re.compile(r"^\d{1,12}$")
_MONEY = re.compile(r"^(\d{1,9}(?:\.\d{1,6})?)\s?([A-Za-z]{3})$")
BUDGET_FORMS = "a number of tokens (50000) or an amount and currency (2.50USD)"


def budget_problem(text: str) -> str | None:
    """Why `text` is not a budget (None when it is one)."""
    entry = text.strip()
    if _TOKENS.match(entry) or _MONEY.match(entry):
        return None
    return f"{text!r} is not a budget: write {BUDGET_FORMS}"


def parse_budget(text: str) -> tuple[Decimal, str]:
    """A budget as (amount, unit): unit `tokens` or an upper-case currency code."""
    entry = text.strip()
    if _TOKENS.match(entry):
        return Decimal(int(entry)), "tokens"
    money = _MONEY.match(entry)
    if money is None:
        raise ValueError(budget_problem(text))
    return Decimal(money.group(1)), money.group(2).upper()


class UsageSettings(BaseSettings):
    """Daily model budgets: what one person, and one channel, may spend in a day (the
    team's day, RAVEN_TIMEZONE). Empty: no limit."""

    model_config = SettingsConfigDict(
        env_file=".env", env_file_encoding="utf-8", extra="ignore", populate_by_name=True
    )

    budget_person_day: str = Field(
        default="",
        validation_alias="RAVEN_BUDGET_PERSON_DAY",
        description="What one person's requests, scheduled tasks and campaigns may spend on "
        "models per day: tokens (50000) or an amount (2.50USD). Admins set per-person "
        "overrides with `budget @person …`. Empty: no limit.",
    )
    budget_channel_day: str = Field(
        default="",
        validation_alias="RAVEN_BUDGET_CHANNEL_DAY",
        description="What all work in one channel may spend on models per day: tokens "
        "(200000) or an amount (10USD). Empty: no limit.",
    )

    @field_validator("budget_person_day", "budget_channel_day")
    @classmethod
    def _a_budget(cls, value: str) -> str:
        if value.strip() and (problem := budget_problem(value)) is not None:
            raise ValueError(problem)
        return value.strip()
