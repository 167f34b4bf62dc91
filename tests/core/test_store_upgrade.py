"""Upgrades: a raven.db from the previous release (global migration numbers) opens with the
per-package ledger, keeps its rows, and ends with the schema a fresh database gets."""

from __future__ import annotations

import logging
import shutil
import sqlite3
import threading
from contextlib import closing
from pathlib import Path

import pytest

from bot.schema import all_migrations
from core.ids import ConversationRef
from core.store import Migration, MigrationError, Store
from host.features.skills.store import ExperienceStore
from host.graph.run_store import RunStore
from host.runtime.conversation_log import ConversationLog
from memory.archive import Archive, user_owner
from memory.group_store import GroupStore
from oncall.store import CampaignStore
from tests.helpers import TEST_DATA, eventually

# Built by 74ad39f's code (tests/data/README.md says how).
PREVIOUS_RELEASE = TEST_DATA / "raven-74ad39f.db"
CONV = ConversationRef("slack", "T1", "C1", "1700000000.000100")
OWNER = user_owner("slack", "T1", "U1")


def schema(path: Path) -> list[tuple[str, str, str, str]]:
    """sqlite_master without page numbers, in name order, whitespace runs collapsed."""
    with closing(sqlite3.connect(path)) as db:
        rows = db.execute("SELECT type, name, tbl_name, sql FROM sqlite_master").fetchall()
    return sorted(
        (kind, name, table, " ".join((sql or "").split())) for kind, name, table, sql in rows
    )


async def fresh_schema(tmp_path: Path) -> list[tuple[str, str, str, str]]:
    store = Store(tmp_path / "fresh" / "raven.db", all_migrations())
    await store.open()
    await store.close()
    return schema(store.path)


def previous_release_copy(tmp_path: Path) -> Path:
    path = tmp_path / "old" / "raven.db"
    path.parent.mkdir()
    shutil.copyfile(PREVIOUS_RELEASE, path)
    return path


def legacy_database(path: Path, upto: int) -> None:
    """A database as a release numbering migrations globally left it at version `upto`
    (built from the migrations' own record of those numbers)."""
    script = [
        "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY,"
        " description TEXT NOT NULL, applied_at REAL NOT NULL)"
    ]
    for number in range(1, upto + 1):
        script += [m.sql for m in all_migrations() if m.legacy == number]
        script.append(f"INSERT INTO schema_migrations VALUES ({number}, 'old', 1.0)")
    with closing(sqlite3.connect(path)) as db:
        db.executescript(";\n".join(["BEGIN", *script, "COMMIT"]))


async def test_previous_release_database_upgrades_in_place(tmp_path: Path) -> None:
    path = previous_release_copy(tmp_path)
    store = Store(path, all_migrations())
    await store.open()
    try:
        # Everything it had was applied by the old code: recorded, not run again.
        assert await store.migrate() == []
        ledger = await store.fetchall("SELECT package, version, applied_at FROM schema_ledger")
        assert sorted((r["package"], r["version"]) for r in ledger) == sorted(
            m.key for m in all_migrations()
        )
        assert all(r["applied_at"] > 0 for r in ledger)

        log = ConversationLog(store)
        assert [conv for conv, _ in await log.recent_conversations("slack", since=0)] == [CONV]
        history = await log.history(CONV.id, limit=10)
        assert [(m.direction, m.text) for m in history] == [
            ("in", "what is the loss trend?"),
            ("out", "It falls steadily."),
        ]
        turn = await log.turn("turn-1")
        assert turn is not None and turn.status == "completed"
        notes = await Archive(store).notes(OWNER)
        assert [n.text for n in notes] == ["prefers plots in log scale"]
        campaign = await CampaignStore(store).get("camp-1")
        assert campaign is not None and campaign.spec.command == "python train.py"
        run = await RunStore(store).run("run-1")
        assert run is not None and run.state == "completed"
        assert [n.node_id for n in await RunStore(store).nodes_of_run("run-1")] == ["n1"]
        (pending,) = await GroupStore(store).pending(CONV.id, "awaiting_close")
        assert pending.run_id == "run-1"
        ((agent, case),) = await ExperienceStore(store).unrevised()
        assert (agent, case.intent) == ("writer", "summarise")
    finally:
        await store.close()
    assert schema(path) == await fresh_schema(tmp_path)


async def test_a_second_open_applies_nothing(tmp_path: Path) -> None:
    path = previous_release_copy(tmp_path)
    for _ in range(2):
        store = Store(path, all_migrations())
        await store.open()
        assert await store.migrate() == []
        await store.close()
    fresh = Store(tmp_path / "fresh.db", all_migrations())
    await fresh.open()
    try:
        assert await fresh.migrate() == []
    finally:
        await fresh.close()
    reopened = Store(fresh.path, all_migrations())
    await reopened.open()
    try:
        assert await reopened.migrate() == []
    finally:
        await reopened.close()


async def test_an_older_numbered_database_gets_the_rest(tmp_path: Path) -> None:
    # Version 7 predates turns.remembered (8), skills and permissions (9, 10) and scopes (11).
    path = tmp_path / "raven.db"
    legacy_database(path, upto=7)
    with closing(sqlite3.connect(path, isolation_level=None)) as db:
        db.execute("INSERT INTO conversations VALUES ('dm', 'slack', 'T', 'D', 't', 0, 0)")
        db.execute(
            "INSERT INTO messages (conversation_id, direction, author_id, author_name, text,"
            " idempotency_key, payload, created_at) VALUES ('dm', 'in', 'U', 'U', 'hi', 'k',"
            " '{\"is_dm\": true}', 0)"
        )
        db.execute(
            "INSERT INTO round_summaries (run_id, conversation_id, outcome, summary, created_at,"
            " library) VALUES ('r', 'dm', '{}', 's', 0, 'host:u')"
        )
    store = Store(path, all_migrations())
    await store.open()
    try:
        ran_now = await store.fetchall(
            "SELECT package, version FROM schema_ledger WHERE applied_at > 1"
        )
        assert sorted((r["package"], r["version"]) for r in ran_now) == sorted(
            # The numbered ones after 7, and every one written since the ledger.
            m.key
            for m in all_migrations()
            if m.legacy is None or m.legacy > 7
        )
        assert await store.schema_versions() == {m.package: m.version for m in all_migrations()}
        row = await store.fetchone("SELECT scope, library FROM round_summaries")
        assert row is not None and (row["scope"], row["library"]) == ("dm", "host:u#dm")
    finally:
        await store.close()
    assert schema(path) == await fresh_schema(tmp_path)


async def test_open_logs_what_it_applied(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "raven.db"
    legacy_database(path, upto=10)
    caplog.set_level(logging.INFO, logger="core.store")
    store = Store(path, all_migrations())
    await store.open()
    await store.close()
    since = [str(m) for m in all_migrations() if m.legacy is None or m.legacy > 10]
    assert "memory 3" in since
    assert f"applied migrations {since} to" in caplog.text


async def test_an_unknown_numbered_version_fails_clearly(tmp_path: Path) -> None:
    path = previous_release_copy(tmp_path)
    with closing(sqlite3.connect(path, isolation_level=None)) as db:
        db.execute("INSERT INTO schema_migrations VALUES (12, 'from the future', 1.0)")
    before = set(threading.enumerate())
    store = Store(path, all_migrations())
    with pytest.raises(MigrationError, match="schema version 12, which this release cannot"):
        await store.open()
    await eventually(lambda: not set(threading.enumerate()) - before, within=5)
    # Nothing changed: the old table is still there for the release that made it.
    with closing(sqlite3.connect(path)) as db:
        assert db.execute("SELECT MAX(version) FROM schema_migrations").fetchone() == (12,)


async def test_ledger_rows_of_a_newer_release_are_left_alone(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # As before the ledger, a migration this code does not know does not stop it.
    path = tmp_path / "raven.db"
    store = Store(path, all_migrations())
    await store.open()
    await store.execute("INSERT INTO schema_ledger VALUES ('memory', 99, 'future', 1.0)")
    await store.close()
    reopened = Store(path, all_migrations())
    await reopened.open()
    try:
        assert await reopened.migrate() == []
        assert (await reopened.schema_versions())["memory"] == 99
    finally:
        await reopened.close()
    assert "migrations this code does not know: [('memory', 99)]" in caplog.text


def _m(package: str, version: int, sql: str) -> Migration:
    return Migration(package, version, f"{package} {version}", sql)


async def test_a_package_adding_a_migration_gets_it_applied_next_open(tmp_path: Path) -> None:
    path = tmp_path / "raven.db"
    first = [_m("a", 1, "CREATE TABLE a (x)")]
    store = Store(path, first)
    await store.open()
    await store.close()
    later = [*first, _m("b", 1, "CREATE TABLE b (y)"), _m("a", 2, "ALTER TABLE a ADD COLUMN z")]
    store = Store(path, later)
    await store.open()
    try:
        assert await store.schema_versions() == {"a": 2, "b": 1}
        assert await store.fetchall("SELECT x, z FROM a") == []
    finally:
        await store.close()


def test_out_of_order_migrations_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"a 2 .* out of order: a 1 comes next"):
        Store(tmp_path / "raven.db", [_m("a", 2, "SELECT 1")])
    with pytest.raises(ValueError, match="out of order: a 2 comes next"):
        Store(tmp_path / "raven.db", [_m("a", 1, "SELECT 1"), _m("a", 1, "SELECT 1")])
