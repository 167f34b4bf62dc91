"""Which environment variable names hold secrets, for every scrubber of a child's
environment (agent commands, ACP agents, checks, campaign rounds): names that look like
credentials, and every name the bot's settings declare secret (each adapter's and
feature's too), whatever it is called."""

from __future__ import annotations

import re
from collections.abc import Iterable
from contextvars import ContextVar
from typing import Final

SECRET_NAME: Final = re.compile(r"TOKEN|SECRET|KEY|PASSWORD|^SLACK_|^DISCORD_|^ANTHROPIC_", re.I)
# Set by the process that read the settings, before it starts children: the layers that
# scrub cannot ask the settings themselves, and a context variable reaches every task and
# worker thread started afterwards.
_DECLARED_SECRETS: Final[ContextVar[frozenset[str]]] = ContextVar(
    "declared_secret_names", default=frozenset()
)


def withhold_secret_names(names: Iterable[str]) -> None:
    """From now on (in this context and those started from it), `looks_secret` is true for
    `names` too. Names are only added: a secret once declared stays withheld."""
    _DECLARED_SECRETS.set(_DECLARED_SECRETS.get() | {name.upper() for name in names})


def looks_secret(name: str) -> bool:
    """True for variable names that may hold credentials: a name the settings declare secret,
    or one that looks like it (tokens, keys, chat/model secrets)."""
    return name.upper() in _DECLARED_SECRETS.get() or SECRET_NAME.search(name) is not None
