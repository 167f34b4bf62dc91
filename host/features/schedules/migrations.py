"""The scheduled tasks' tables: each task with its approved schedule and state, and one row
per firing (the idempotency key: a task fires once per scheduled time)."""

from __future__ import annotations

from core.store import Migration

MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        package="schedules",
        version=1,
        name="scheduled tasks and their firings",
        sql="""
CREATE TABLE scheduled_tasks (
    id              TEXT PRIMARY KEY,
    conversation_id TEXT NOT NULL,
    channel_key     TEXT NOT NULL,
    owner           TEXT NOT NULL,
    owner_name      TEXT NOT NULL,
    owner_roles     TEXT NOT NULL DEFAULT '[]',
    schedule        TEXT NOT NULL,
    grants          TEXT NOT NULL DEFAULT '[]',
    anchor          TEXT NOT NULL,
    state           TEXT NOT NULL,
    next_due        TEXT,
    fired           INTEGER NOT NULL DEFAULT 0,
    prompt_id       TEXT,
    approved_by     TEXT,
    last_digest     TEXT,
    run_now         INTEGER NOT NULL DEFAULT 0,
    created_at      REAL NOT NULL,
    updated_at      REAL NOT NULL
);
CREATE INDEX scheduled_tasks_by_conversation ON scheduled_tasks(conversation_id);
CREATE INDEX scheduled_tasks_by_owner ON scheduled_tasks(owner, state);
CREATE INDEX scheduled_tasks_by_update ON scheduled_tasks(updated_at);
CREATE TABLE scheduled_firings (
    task_id         TEXT NOT NULL REFERENCES scheduled_tasks(id),
    due             TEXT NOT NULL,
    channel_key     TEXT NOT NULL,
    outcome         TEXT NOT NULL,
    late_seconds    REAL NOT NULL,
    fired_at        REAL NOT NULL,
    PRIMARY KEY (task_id, due)
);
CREATE INDEX scheduled_firings_by_channel ON scheduled_firings(channel_key, fired_at);
""",
    ),
    Migration(
        package="schedules",
        version=2,
        name="scheduled tasks: muted, snoozed until",
        sql="""
ALTER TABLE scheduled_tasks ADD COLUMN muted INTEGER NOT NULL DEFAULT 0;
ALTER TABLE scheduled_tasks ADD COLUMN snoozed_until TEXT;
""",
    ),
    Migration(
        package="schedules",
        version=3,
        name="nudges: what scheduled tasks and checks said, for caps and dedup",
        sql="""
CREATE TABLE nudges (
    conversation_id TEXT NOT NULL,
    channel_key     TEXT NOT NULL,
    owner           TEXT NOT NULL,
    digest          TEXT NOT NULL,
    at              REAL NOT NULL
);
CREATE INDEX nudges_by_channel ON nudges(channel_key, at);
CREATE INDEX nudges_by_owner ON nudges(owner, at);
CREATE INDEX nudges_by_digest ON nudges(conversation_id, digest, at);
""",
    ),
    Migration(
        package="schedules",
        version=4,
        name="scheduled tasks: changed by the operator (the running bot applies it)",
        sql="""
ALTER TABLE scheduled_tasks ADD COLUMN operator_changed INTEGER NOT NULL DEFAULT 0;
DROP INDEX scheduled_tasks_by_update;
""",
    ),
)
