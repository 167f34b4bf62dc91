"""The usage ledger (one row per answered model call) and admins' per-person budgets."""

from __future__ import annotations

from core.store import Migration

MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        package="usage",
        version=1,
        name="usage: model calls and per-person budgets",
        sql="""
CREATE TABLE model_calls (
    id                 INTEGER PRIMARY KEY AUTOINCREMENT,
    at                 REAL NOT NULL,
    day                TEXT NOT NULL,
    role               TEXT NOT NULL,
    model              TEXT NOT NULL,
    person             TEXT NOT NULL,
    conversation       TEXT NOT NULL,
    channel            TEXT NOT NULL,
    run_id             TEXT NOT NULL,
    node_id            TEXT NOT NULL,
    input_tokens       INTEGER NOT NULL,
    output_tokens      INTEGER NOT NULL,
    cache_read_tokens  INTEGER NOT NULL,
    cache_write_tokens INTEGER NOT NULL,
    cost_micros        INTEGER,
    currency           TEXT
);
CREATE INDEX model_calls_by_person ON model_calls(person, day);
CREATE INDEX model_calls_by_channel ON model_calls(channel, day);
CREATE INDEX model_calls_by_conversation ON model_calls(conversation, day);
CREATE INDEX model_calls_by_day ON model_calls(day);
CREATE TABLE budget_overrides (
    person  TEXT PRIMARY KEY,
    budget  TEXT NOT NULL,
    set_by  TEXT NOT NULL,
    set_at  REAL NOT NULL
)
""",
    ),
)
