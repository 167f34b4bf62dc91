"""What a model call costs: the shipped price list, with RAVEN_HOME/prices.toml's entries
replacing it model by model. Prices are per million tokens, in one currency."""

from __future__ import annotations

import fnmatch
import tomllib
from dataclasses import dataclass
from decimal import Decimal
from importlib.resources import files
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agents.models.types import Usage
from core.errors import ConfigError

PRICES_FILE = "prices.toml"
_MILLION = Decimal(1_000_000)
# Costs are stored as integers in millionths of the currency (no float drift in sums).
MICROS = Decimal(1_000_000)


class ModelPrice(BaseModel):
    """One model's prices per million tokens (cache prices default to the input price)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    input: Decimal = Field(ge=0)
    output: Decimal = Field(ge=0)
    cache_read: Decimal | None = Field(default=None, ge=0)
    cache_write: Decimal | None = Field(default=None, ge=0)

    def cost(self, usage: Usage) -> Decimal:
        """What `usage` costs at these prices."""
        read = self.input if self.cache_read is None else self.cache_read
        write = self.input if self.cache_write is None else self.cache_write
        total = (
            self.input * usage.fresh_input_tokens
            + self.output * usage.output_tokens
            + read * usage.cache_read_tokens
            + write * usage.cache_write_tokens
        )
        return total / _MILLION


class PriceFile(BaseModel):
    """prices.toml as written."""

    model_config = ConfigDict(extra="forbid")
    currency: str = Field(default="USD", pattern=r"^[A-Z]{3}$")
    models: dict[str, ModelPrice] = Field(default_factory=dict)


@dataclass(frozen=True)
class PriceTable:
    """Prices by model pattern, in `currency`."""

    currency: str
    models: dict[str, ModelPrice]

    def price(self, model: str) -> ModelPrice | None:
        """The entry for `model`: an exact key, else the matching pattern with the most
        literal characters (`anthropic:claude-sonnet-*` over `anthropic:*`)."""
        if model in self.models:
            return self.models[model]
        matches = [p for p in self.models if fnmatch.fnmatchcase(model, p)]
        if not matches:
            return None
        return self.models[max(matches, key=lambda p: len(p.replace("*", "")))]

    def cost_micros(self, model: str, usage: Usage) -> int | None:
        """What the call cost in millionths of `currency` (None: no price for `model`)."""
        price = self.price(model)
        if price is None:
            return None
        return int((price.cost(usage) * MICROS).to_integral_value())


def _parse(text: str, source: str) -> PriceFile:
    try:
        return PriceFile.model_validate(tomllib.loads(text))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{source}: not valid TOML ({exc}); fix the file or remove it") from None
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ConfigError(
            f"{source}: {where}: {first['msg']} (prices are numbers per million tokens: "
            "input, output, optional cache_read and cache_write; `currency` is a code like USD)"
        ) from None


def shipped_prices() -> PriceFile:
    """The price list shipped with raven-bot."""
    text = files(__package__).joinpath("default_prices.toml").read_text(encoding="utf-8")
    return _parse(text, "the shipped price list")


def load_prices(home: Path) -> PriceTable:
    """The shipped prices with RAVEN_HOME/prices.toml over them; a broken file is a
    ConfigError naming it and the fix. A file in another currency replaces the list."""
    shipped = shipped_prices()
    path = home / PRICES_FILE
    if not path.exists():
        return PriceTable(shipped.currency, dict(shipped.models))
    own = _parse(path.read_text(encoding="utf-8"), str(path))
    base: dict[str, Any] = dict(shipped.models) if own.currency == shipped.currency else {}
    return PriceTable(own.currency, {**base, **own.models})
