"""Memory's tables: users, notes, episodes, facts, and group memory's ledgers."""

from __future__ import annotations

from core.store import Migration

MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        package="memory",
        version=1,
        legacy=6,
        name="memory: users, archive notes and profile sections, episodes with facts and"
        " foresight, the verdict ledger, round summaries, outcome entries",
        sql="""
CREATE TABLE memory_users (
    owner           TEXT PRIMARY KEY,
    name            TEXT NOT NULL,
    created_at      REAL NOT NULL,
    updated_at      REAL NOT NULL
);
CREATE TABLE memory_notes (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    owner           TEXT NOT NULL,
    kind            TEXT NOT NULL,
    tag             TEXT NOT NULL DEFAULT '',
    text            TEXT NOT NULL,
    scope           TEXT NOT NULL DEFAULT 'any',
    conversation_id TEXT,
    source_turn     TEXT,
    created_at      REAL NOT NULL,
    updated_at      REAL NOT NULL
);
CREATE INDEX memory_notes_by_owner ON memory_notes(owner, kind, id);
CREATE TABLE memory_episodes (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    owner           TEXT NOT NULL,
    conversation_id TEXT,
    scope           TEXT NOT NULL DEFAULT 'any',
    narrative       TEXT NOT NULL,
    source_turns    TEXT NOT NULL DEFAULT '[]',
    started_at      REAL,
    ended_at        REAL,
    created_at      REAL NOT NULL
);
CREATE INDEX memory_episodes_by_owner ON memory_episodes(owner, id);
CREATE TABLE memory_facts (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    episode_id      INTEGER NOT NULL REFERENCES memory_episodes(id) ON DELETE CASCADE,
    owner           TEXT NOT NULL,
    kind            TEXT NOT NULL,
    text            TEXT NOT NULL,
    valid_from      REAL,
    valid_until     REAL,
    created_at      REAL NOT NULL
);
CREATE INDEX memory_facts_by_episode ON memory_facts(episode_id);
CREATE INDEX memory_facts_by_owner ON memory_facts(owner, id);
CREATE TABLE verdicts (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    author          TEXT NOT NULL,
    subject_agent   TEXT NOT NULL,
    run_id          TEXT,
    round           INTEGER,
    phase           TEXT NOT NULL,
    outcome         TEXT NOT NULL,
    body            TEXT NOT NULL,
    covered_nodes   TEXT NOT NULL DEFAULT '[]',
    conversation_id TEXT,
    created_at      REAL NOT NULL
);
CREATE INDEX verdicts_by_agent ON verdicts(subject_agent, id);
CREATE TABLE round_summaries (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id          TEXT NOT NULL UNIQUE,
    conversation_id TEXT,
    outcome         TEXT NOT NULL,
    summary         TEXT NOT NULL,
    created_at      REAL NOT NULL
);
CREATE TABLE outcome_entries (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id          TEXT NOT NULL,
    node_id         TEXT NOT NULL,
    agent           TEXT NOT NULL,
    outcome         TEXT NOT NULL,
    detail          TEXT NOT NULL DEFAULT '',
    created_at      REAL NOT NULL,
    UNIQUE (run_id, node_id)
)
""",
    ),
    Migration(
        package="memory",
        version=2,
        legacy=7,
        name="group memory: rounds await their close verdicts, then one reassessment",
        sql="""
ALTER TABLE round_summaries ADD COLUMN phase TEXT NOT NULL DEFAULT 'released';
ALTER TABLE round_summaries ADD COLUMN nodes TEXT NOT NULL DEFAULT '[]';
ALTER TABLE round_summaries ADD COLUMN library TEXT NOT NULL DEFAULT '';
CREATE INDEX round_summaries_pending ON round_summaries(conversation_id, phase)
""",
    ),
    # Reads the conversation log's `messages` (is the conversation a DM?): the assembly lists
    # the conversations package's migrations before memory's.
    Migration(
        package="memory",
        version=3,
        legacy=11,
        name="memory scopes: a round's host library is DM-scoped when its conversation is a"
        " DM (earlier DM rounds moved to the DM partition); erasures (`forget everything`)"
        " are recorded until finished, so a crash mid-way is completed at the next start",
        sql="""
ALTER TABLE round_summaries ADD COLUMN scope TEXT NOT NULL DEFAULT 'any';
UPDATE round_summaries SET scope = 'dm', library = CASE WHEN library = '' THEN ''
    ELSE library || '#dm' END
    WHERE conversation_id IN (SELECT conversation_id FROM messages WHERE direction = 'in'
        AND CASE WHEN json_valid(payload) THEN json_extract(payload, '$.is_dm') END = 1);
CREATE TABLE memory_erasures (
    owner           TEXT PRIMARY KEY,
    requested_at    REAL NOT NULL,
    finished_at     REAL
)
""",
    ),
)
