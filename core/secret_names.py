"""Which environment variable names hold secrets, for every scrubber of a child's
environment (agent commands, ACP agents, checks, campaign rounds): names that look like
credentials, and every name the bot's settings declare secret (each adapter's and
feature's too), whatever it is called.

The declared names are a value the assembly root builds from the settings once and hands to
each scrubber: a scrubber built without them is a type error, not a silent leak."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

SECRET_NAME: Final = re.compile(r"TOKEN|SECRET|KEY|PASSWORD|^SLACK_|^DISCORD_|^ANTHROPIC_", re.I)


@dataclass(frozen=True)
class SecretNames:
    """The variable names the settings declare secret (upper-cased), plus the pattern."""

    declared: frozenset[str] = frozenset()

    @classmethod
    def of(cls, names: Iterable[str]) -> SecretNames:
        """The names the settings declare secret (any case); `SecretNames()`: none, the
        pattern only."""
        return cls(frozenset(name.upper() for name in names))

    def looks_secret(self, name: str) -> bool:
        """True for variable names that may hold credentials: a name declared secret, or
        one that looks like it (tokens, keys, chat/model secrets)."""
        return name.upper() in self.declared or SECRET_NAME.search(name) is not None
