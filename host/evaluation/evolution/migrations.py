"""Evolution's tables: runs, the harnesses they created, every scored attempt, the rounds'
samples and proposals, and each decision (so a restart redoes nothing finished)."""

from __future__ import annotations

from core.store import Migration

MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        package="evolution",
        version=1,
        name="evolution runs, harnesses, attempts, rounds and decisions",
        sql="""
CREATE TABLE evo_runs (
    id          TEXT PRIMARY KEY,
    agent       TEXT NOT NULL,
    settings    TEXT NOT NULL,
    state       TEXT NOT NULL,
    result      TEXT,
    created_at  REAL NOT NULL
);
CREATE TABLE evo_harnesses (
    run_id      TEXT NOT NULL,
    id          TEXT NOT NULL,
    seq         INTEGER NOT NULL,
    parent_id   TEXT,
    round       INTEGER,
    cell        TEXT,
    spec        TEXT NOT NULL,
    proposal    TEXT,
    invalid     TEXT,
    PRIMARY KEY (run_id, id)
);
CREATE TABLE evo_attempts (
    run_id      TEXT NOT NULL,
    harness_id  TEXT NOT NULL,
    phase       TEXT NOT NULL,
    task_id     TEXT NOT NULL,
    attempt     INTEGER NOT NULL,
    score       REAL NOT NULL,
    valid       INTEGER NOT NULL,
    events      TEXT NOT NULL,
    trace       TEXT NOT NULL,
    tries       INTEGER NOT NULL,
    PRIMARY KEY (run_id, harness_id, phase, task_id, attempt)
);
CREATE TABLE evo_rounds (
    run_id      TEXT NOT NULL,
    round       INTEGER NOT NULL,
    parent_id   TEXT NOT NULL,
    subset      TEXT NOT NULL,
    proposals   TEXT NOT NULL,
    decisions   TEXT,
    PRIMARY KEY (run_id, round)
);
""",
    ),
    Migration(
        package="evolution",
        version=2,
        name="harness versions: evolved harnesses, their lineage, and which one is active",
        sql="""
CREATE TABLE harness_versions (
    agent        TEXT NOT NULL,
    version      INTEGER NOT NULL,
    spec         TEXT NOT NULL,
    lineage      TEXT NOT NULL,
    result       TEXT NOT NULL,
    state        TEXT NOT NULL,
    replaced     INTEGER,
    created_at   REAL NOT NULL,
    decided_by   TEXT,
    decided_at   REAL,
    PRIMARY KEY (agent, version)
);
""",
    ),
    Migration(
        package="evolution",
        version=3,
        name="evolution runs started from chat: where to report and who asked",
        sql="""
CREATE TABLE evo_chat_runs (
    run_id        TEXT PRIMARY KEY,
    conversation  TEXT NOT NULL,
    requested_by  TEXT NOT NULL,
    agent         TEXT NOT NULL,
    tasks         TEXT NOT NULL,
    settings      TEXT NOT NULL,
    state         TEXT NOT NULL,
    created_at    REAL NOT NULL
);
""",
    ),
)
