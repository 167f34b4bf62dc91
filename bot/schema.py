"""The one order every Store of raven.db is opened with: the Host's own migrations, then each
installed feature's.

A feature declares its tables' migrations itself (`migrations` on its class) and the packages
they must follow (`migrations_after`), so a capability with a table adds no line here.
"""

from __future__ import annotations

from collections.abc import Sequence

from core.store import Migration
from host.features.feature import FeatureKind
from host.graph.migrations import MIGRATIONS as GRAPH
from host.prompts.migrations import MIGRATIONS as PROMPTS
from host.runtime.migrations import MIGRATIONS as CONVERSATIONS

# The Host's own tables, before any feature's: conversations first (other packages' tables
# refer to them, and memory's scope migration reads their messages).
HOST_MIGRATIONS: tuple[Migration, ...] = (*CONVERSATIONS, *PROMPTS, *GRAPH)


def all_migrations(features: Sequence[FeatureKind] | None = None) -> tuple[Migration, ...]:
    """The migrations of every package owning tables in raven.db: the Host's, then those of
    `features` (default: the features the bot installs, as one-shot commands open the store
    the serving bot opens)."""
    if features is None:
        # Imported here: the assembly root imports this module to open its store.
        from bot.app import FEATURES

        features = FEATURES
    return (*HOST_MIGRATIONS, *feature_migrations(features, HOST_MIGRATIONS))


def feature_migrations(
    features: Sequence[FeatureKind], before: Sequence[Migration] = ()
) -> tuple[Migration, ...]:
    """Each feature's migrations, in the order the features are listed, except that a feature
    waits for the installed packages its `migrations_after` names (`before`: those already
    applied ahead of every feature).

    ValueError when two features own one package, or features wait for each other.
    """
    owners: dict[str, str] = {}
    for kind in features:
        for package in {m.package for m in kind.migrations}:
            if package in owners or package in {m.package for m in before}:
                first = owners.get(package, "the Host")
                raise ValueError(
                    f"{_name(kind)} and {first} both declare migrations of package "
                    f"{package!r}: a package's tables have one owner"
                )
            owners[package] = _name(kind)
    done = {m.package for m in before}
    ordered: list[Migration] = []
    pending = list(features)
    while pending:
        ready = next((k for k in pending if _waits_for(k, owners) <= done), None)
        if ready is None:
            waiting = ", ".join(
                f"{_name(k)} after {sorted(_waits_for(k, owners) - done)}" for k in pending
            )
            raise ValueError(f"feature migrations wait for each other: {waiting}")
        pending.remove(ready)
        ordered.extend(ready.migrations)
        done |= {m.package for m in ready.migrations}
    return tuple(ordered)


def _waits_for(kind: FeatureKind, owners: dict[str, str]) -> set[str]:
    # A package no installed feature owns is no reason to wait: its tables are absent.
    return {p for p in kind.migrations_after if p in owners}


def _name(kind: FeatureKind) -> str:
    return getattr(kind, "__name__", repr(kind))
