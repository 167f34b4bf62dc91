"""The store's schema is collected from the features listed: the same migrations as the hand
list it replaced, a database that list made upgrades as it did, and a feature's own tables
arrive with the feature alone."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from collections.abc import Sequence
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pytest

from bot.app import FEATURES
from bot.schema import all_migrations, feature_migrations
from core.store import Migration, Store
from host.evaluation.evolution.migrations import MIGRATIONS as EVOLUTION
from host.features.feature import BaseFeature, FeatureKind, HostParts
from host.features.permissions.migrations import MIGRATIONS as PERMISSIONS
from host.features.schedules.migrations import MIGRATIONS as SCHEDULES
from host.features.skills.migrations import MIGRATIONS as SKILLS
from host.features.usage.migrations import MIGRATIONS as USAGE
from host.graph.migrations import MIGRATIONS as GRAPH
from host.nudges.migrations import MIGRATIONS as NUDGES
from host.prompts.migrations import MIGRATIONS as PROMPTS
from host.runtime.migrations import MIGRATIONS as CONVERSATIONS
from memory.migrations import MIGRATIONS as MEMORY
from oncall.migrations import MIGRATIONS as ONCALL

ROOT = Path(__file__).resolve().parents[2]

# The list bot/schema.py kept by hand before features declared their own migrations (and
# the tables of features added since, at the end).
HAND_LIST: tuple[Migration, ...] = (
    *CONVERSATIONS,
    *PROMPTS,
    *GRAPH,
    *ONCALL,
    *MEMORY,
    *SKILLS,
    *PERMISSIONS,
    *SCHEDULES,
    *NUDGES,
    *EVOLUTION,
    *USAGE,
)


def schema(path: Path) -> list[tuple[str, str, str]]:
    """sqlite_master's tables and indexes with their SQL, whitespace runs collapsed."""
    with closing(sqlite3.connect(path)) as db:
        rows = db.execute("SELECT type, name, sql FROM sqlite_master").fetchall()
    return sorted((kind, name, " ".join((sql or "").split())) for kind, name, sql in rows)


def ledger(path: Path) -> list[tuple[str, int, str]]:
    """The ledger's rows (none before the first open)."""
    with closing(sqlite3.connect(path)) as db:
        try:
            rows = db.execute("SELECT package, version, name FROM schema_ledger").fetchall()
        except sqlite3.OperationalError:
            return []
    return sorted((str(p), int(v), str(n)) for p, v, n in rows)


async def opened(path: Path, migrations: Sequence[Migration]) -> list[tuple[str, int, str]]:
    """Open the store at `path` with `migrations`; the ledger rows the open added."""
    before = ledger(path)
    store = Store(path, migrations)
    await store.open()
    await store.close()
    return [row for row in ledger(path) if row not in before]


def by_package(migrations: Sequence[Migration]) -> dict[str, list[Migration]]:
    packages: dict[str, list[Migration]] = {}
    for m in migrations:
        packages.setdefault(m.package, []).append(m)
    return packages


@pytest.mark.parametrize("source", ["installed features", "feature folders"])
def test_the_features_declare_exactly_the_migrations_of_the_hand_list(source: str) -> None:
    # The serving bot collects them from its features; one-shot commands from the folders.
    collected = all_migrations(FEATURES if source == "installed features" else None)
    assert sorted(collected, key=lambda m: m.key) == sorted(HAND_LIST, key=lambda m: m.key)
    # Same ids, names, SQL and legacy numbers, each package's in the same order.
    assert by_package(collected) == by_package(HAND_LIST)
    packages = [m.package for m in collected]
    assert packages.index("conversations") == 0
    assert packages.index("nudges") > max(i for i, p in enumerate(packages) if p == "schedules")


def test_one_shot_commands_open_the_store_without_importing_the_runtime() -> None:
    probe = (
        "from bot.schema import all_migrations; all_migrations(); import sys; "
        "print(' '.join(m for m in ('bot.app', 'host.features.feature', 'anthropic') "
        "if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert done.stdout.split() == []


async def test_a_database_the_hand_list_made_upgrades_to_the_same_schema(tmp_path: Path) -> None:
    # An older database: each package's last migration not yet applied (the hand list's
    # order, as a release before this one opened it).
    last = {package: ms[-1] for package, ms in by_package(HAND_LIST).items()}
    older = [m for m in HAND_LIST if m is not last[m.package]]
    old_path = tmp_path / "old" / "raven.db"
    old_path.parent.mkdir()
    assert len(await opened(old_path, older)) == len(older)

    applied = await opened(old_path, all_migrations())
    assert applied == sorted((m.package, m.version, m.name) for m in last.values())

    reference = tmp_path / "reference" / "raven.db"
    reference.parent.mkdir()
    await opened(reference, HAND_LIST)
    assert schema(old_path) == schema(reference)
    assert ledger(old_path) == ledger(reference)
    # A database the hand list made whole gets nothing more.
    assert await opened(reference, all_migrations()) == []


@dataclass(frozen=True)
class NoSettings:
    pass


class ToyFeature(BaseFeature):
    """A feature kind that brings only tables."""

    Section: ClassVar[type[NoSettings]] = NoSettings

    def __init__(self, parts: HostParts, section: NoSettings) -> None:
        pass


def toy_migration(package: str, table: str) -> Migration:
    return Migration(package, 1, f"{table} table", f"CREATE TABLE {table} (id INTEGER)")


class NotesFeature(ToyFeature):
    migrations = (toy_migration("notes", "toy_notes"),)


class NoteTagsFeature(ToyFeature):
    # Its table refers to the notes feature's: listed first, it still runs after it.
    migrations = (
        Migration(
            "note_tags",
            1,
            "tags",
            "CREATE TABLE toy_note_tags (note INTEGER REFERENCES toy_notes(id))",
        ),
    )
    migrations_after = frozenset({"notes"})


async def test_a_listed_feature_brings_its_tables_and_runs_after_what_it_names(
    tmp_path: Path,
) -> None:
    kinds: tuple[FeatureKind, ...] = (*FEATURES, NoteTagsFeature, NotesFeature)
    migrations = all_migrations(kinds)
    packages = [m.package for m in migrations]
    assert packages[-2:] == ["notes", "note_tags"]
    await opened(tmp_path / "raven.db", migrations)
    tables = {name for kind, name, _ in schema(tmp_path / "raven.db") if kind == "table"}
    assert {"toy_notes", "toy_note_tags"} <= tables


def test_waiting_for_a_package_no_feature_installs_is_no_wait() -> None:
    assert [m.package for m in feature_migrations((NoteTagsFeature,))] == ["note_tags"]


def test_features_waiting_for_each_other_are_refused() -> None:
    class Chicken(ToyFeature):
        migrations = (toy_migration("chicken", "chickens"),)
        migrations_after = frozenset({"egg"})

    class Egg(ToyFeature):
        migrations = (toy_migration("egg", "eggs"),)
        migrations_after = frozenset({"chicken"})

    with pytest.raises(ValueError, match=r"wait for each other: Chicken after \['egg'\]"):
        feature_migrations((Chicken, Egg))


def test_two_owners_of_one_package_are_refused() -> None:
    class MoreNotes(ToyFeature):
        migrations = (toy_migration("notes", "more_notes"),)

    class Conversations(ToyFeature):
        migrations = (toy_migration("conversations", "again"),)

    with pytest.raises(ValueError, match=r"MoreNotes and NotesFeature both declare .* 'notes'"):
        feature_migrations((NotesFeature, MoreNotes))
    with pytest.raises(ValueError, match="Conversations and the Host both declare"):
        all_migrations((Conversations,))
