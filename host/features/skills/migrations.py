"""The experience store's tables: agent cases, experience skills, clusters, injections."""

from __future__ import annotations

from core.store import Migration

MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        package="skills",
        version=1,
        legacy=6,
        name="agent cases",
        sql="""
CREATE TABLE agent_cases (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    agent           TEXT NOT NULL,
    run_id          TEXT,
    node_id         TEXT,
    intent          TEXT NOT NULL,
    approach        TEXT NOT NULL,
    insight         TEXT NOT NULL,
    quality         REAL,
    created_at      REAL NOT NULL
);
""",
    ),
    Migration(
        package="skills",
        version=2,
        legacy=9,
        name="skills: experience-derived skills with their intent clusters, the skills"
        " injected per turn",
        sql="""
CREATE TABLE experience_skills (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    agent           TEXT NOT NULL,
    name            TEXT NOT NULL,
    description     TEXT NOT NULL,
    body            TEXT NOT NULL,
    confidence      REAL NOT NULL DEFAULT 0.5,
    lineage         TEXT NOT NULL DEFAULT '[]',
    cluster_id      INTEGER,
    created_at      REAL NOT NULL,
    updated_at      REAL NOT NULL,
    UNIQUE (agent, name)
);
CREATE TABLE skill_clusters (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    agent           TEXT NOT NULL,
    centroid        BLOB NOT NULL,
    count           INTEGER NOT NULL,
    members         TEXT NOT NULL DEFAULT '[]',
    previews        TEXT NOT NULL DEFAULT '[]',
    updated_at      REAL NOT NULL
);
CREATE INDEX skill_clusters_by_agent ON skill_clusters(agent);
CREATE TABLE skill_injections (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    turn_id         TEXT NOT NULL,
    conversation_id TEXT NOT NULL,
    position        INTEGER NOT NULL,
    qid             TEXT NOT NULL,
    name            TEXT NOT NULL,
    created_at      REAL NOT NULL
);
CREATE INDEX skill_injections_by_turn ON skill_injections(turn_id);
""",
    ),
    Migration(
        package="skills",
        version=3,
        legacy=10,
        name="agent cases: whether a case has been through skill revision (offline cases wait)",
        sql="""
ALTER TABLE agent_cases ADD COLUMN revised INTEGER NOT NULL DEFAULT 0;
CREATE INDEX agent_cases_unrevised ON agent_cases(revised) WHERE revised = 0
""",
    ),
)
