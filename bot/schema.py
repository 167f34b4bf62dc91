"""The one order every Store of raven.db is opened with: the Host's own migrations, then each
feature's.

A feature declares its tables' migrations itself, in its folder's `migrations.py`, and its
class refers to them (`migrations`, with the packages they must follow: `migrations_after`),
so a capability with a table adds no line here. The serving bot collects them from the
features it installs; one-shot commands, which must not import the runtime to list a table,
read the same folders (a test keeps the two equal).
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, NamedTuple

import host.features
from core.store import Migration
from host.graph.migrations import MIGRATIONS as GRAPH
from host.nudges.migrations import MIGRATIONS as NUDGES
from host.prompts.migrations import MIGRATIONS as PROMPTS
from host.runtime.migrations import MIGRATIONS as CONVERSATIONS

if TYPE_CHECKING:  # the feature classes import the runtime; this module must not
    from host.features.feature import FeatureKind

# The Host's own tables, before any feature's: conversations first (other packages' tables
# refer to them, and memory's scope migration reads their messages).
HOST_MIGRATIONS: tuple[Migration, ...] = (*CONVERSATIONS, *PROMPTS, *GRAPH)


class Declared(NamedTuple):
    """One feature's tables: who declares them, their migrations, the packages to follow."""

    name: str
    migrations: Sequence[Migration]
    after: Collection[str]


def folder_declarations() -> tuple[Declared, ...]:
    """Each feature folder's `MIGRATIONS` (host/features/<name>/migrations.py), without
    importing any feature; and the nudge policy's, whose feature sits in host/nudges/."""
    declared: list[Declared] = []
    for package in pkgutil.iter_modules(host.features.__path__, "host.features."):
        name = f"{package.name}.migrations"
        if package.ispkg and importlib.util.find_spec(name) is not None:
            module = importlib.import_module(name)
            declared.append(
                Declared(name, module.MIGRATIONS, getattr(module, "MIGRATIONS_AFTER", ()))
            )
    # As NudgesFeature declares: its first version keeps the table schedules 3 made.
    declared.append(Declared("host.nudges.migrations", NUDGES, frozenset({"schedules"})))
    return tuple(declared)


def all_migrations(features: Sequence[FeatureKind] | None = None) -> tuple[Migration, ...]:
    """The migrations of every package owning tables in raven.db: the Host's, then those of
    `features` (default: every feature folder's, as one-shot commands open the store)."""
    if features is None:
        declared = folder_declarations()
    else:
        declared = tuple(Declared(_name(k), k.migrations, k.migrations_after) for k in features)
    return (*HOST_MIGRATIONS, *ordered(declared, HOST_MIGRATIONS))


def feature_migrations(
    features: Sequence[FeatureKind], before: Sequence[Migration] = ()
) -> tuple[Migration, ...]:
    """The migrations of `features` in the order `ordered` gives."""
    return ordered([Declared(_name(k), k.migrations, k.migrations_after) for k in features], before)


def ordered(
    declared: Sequence[Declared], before: Sequence[Migration] = ()
) -> tuple[Migration, ...]:
    """Each declaration's migrations, in the order listed, except that one waits for the
    declared packages its `after` names (`before`: those applied ahead of every feature).

    ValueError when two declare one package, or they wait for each other.
    """
    owners: dict[str, str] = {m.package: "the Host" for m in before}
    for item in declared:
        for package in {m.package for m in item.migrations}:
            if package in owners:
                raise ValueError(
                    f"{item.name} and {owners[package]} both declare migrations of package "
                    f"{package!r}: a package's tables have one owner"
                )
            owners[package] = item.name
    done = {m.package for m in before}
    result: list[Migration] = []
    pending = list(declared)
    while pending:
        ready = next((d for d in pending if _waits_for(d, owners) <= done), None)
        if ready is None:
            waiting = ", ".join(
                f"{d.name} after {sorted(_waits_for(d, owners) - done)}" for d in pending
            )
            raise ValueError(f"feature migrations wait for each other: {waiting}")
        pending.remove(ready)
        result.extend(ready.migrations)
        done |= {m.package for m in ready.migrations}
    return tuple(result)


def _waits_for(item: Declared, owners: dict[str, str]) -> set[str]:
    # A package nobody declares is no reason to wait: its tables are absent.
    return {p for p in item.after if p in owners}


def _name(kind: FeatureKind) -> str:
    return getattr(kind, "__name__", repr(kind))
