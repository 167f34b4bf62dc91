"""The graph runtime's tables: runs, nodes, agent instances, dispatches, flags."""

from __future__ import annotations

from core.store import Migration

MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        package="graph",
        version=1,
        legacy=3,
        name="graph runs, nodes, agent instances, dispatch ledger, conversation flags",
        sql="""
CREATE TABLE graph_runs (
    id              TEXT PRIMARY KEY,
    conversation_id TEXT NOT NULL REFERENCES conversations(id),
    task_summary    TEXT NOT NULL,
    background      INTEGER NOT NULL,
    state           TEXT NOT NULL,
    submitted_by    TEXT NOT NULL,
    submission      TEXT NOT NULL,
    run_dir         TEXT NOT NULL,
    replaces_run    TEXT,
    status_message  TEXT,
    reported        INTEGER NOT NULL DEFAULT 0,
    created_at      REAL NOT NULL,
    finished_at     REAL
);
CREATE INDEX graph_runs_by_conversation ON graph_runs(conversation_id, created_at);
CREATE TABLE graph_nodes (
    conversation_id TEXT NOT NULL REFERENCES conversations(id),
    node_id         TEXT NOT NULL,
    run_id          TEXT NOT NULL REFERENCES graph_runs(id),
    agent           TEXT NOT NULL,
    instance        TEXT,
    summary         TEXT NOT NULL DEFAULT '',
    template        TEXT NOT NULL,
    deps            TEXT NOT NULL DEFAULT '[]',
    state           TEXT NOT NULL,
    attempts        INTEGER NOT NULL DEFAULT 0,
    max_attempts    INTEGER NOT NULL,
    continuation    TEXT,
    output_path     TEXT,
    error           TEXT,
    verdict         TEXT,
    deadline        REAL,
    model_calls     INTEGER NOT NULL DEFAULT 0,
    input_tokens    INTEGER NOT NULL DEFAULT 0,
    output_tokens   INTEGER NOT NULL DEFAULT 0,
    judge_calls     INTEGER NOT NULL DEFAULT 0,
    judge_tokens    INTEGER NOT NULL DEFAULT 0,
    seconds         REAL NOT NULL DEFAULT 0,
    started_at      REAL,
    finished_at     REAL,
    PRIMARY KEY (conversation_id, node_id)
);
CREATE INDEX graph_nodes_by_run ON graph_nodes(run_id);
CREATE TABLE agent_instances (
    conversation_id TEXT NOT NULL REFERENCES conversations(id),
    handle          TEXT NOT NULL,
    agent           TEXT NOT NULL,
    history         TEXT NOT NULL DEFAULT '[]',
    updated_at      REAL NOT NULL,
    PRIMARY KEY (conversation_id, handle)
);
CREATE TABLE dispatches (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    conversation_id TEXT NOT NULL,
    at              REAL NOT NULL,
    count           INTEGER NOT NULL
);
CREATE INDEX dispatches_by_conversation ON dispatches(conversation_id, at);
CREATE TABLE conversation_flags (
    conversation_id TEXT NOT NULL,
    flag            TEXT NOT NULL,
    value           TEXT NOT NULL,
    PRIMARY KEY (conversation_id, flag)
);
""",
    ),
    Migration(
        package="graph",
        version=2,
        name="graph runs: the scheduled task a run fires for",
        sql="ALTER TABLE graph_runs ADD COLUMN for_task TEXT;",
    ),
    Migration(
        package="graph",
        version=3,
        name="graph nodes: which fallback model answered a node, and why",
        sql="ALTER TABLE graph_nodes ADD COLUMN fallback TEXT;",
    ),
)
