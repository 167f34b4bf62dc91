"""The conversation log's tables: conversations, turns, messages, event dedup."""

from __future__ import annotations

from core.store import Migration

MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        package="conversations",
        version=1,
        legacy=1,
        name="conversations, turns, messages, dedup",
        sql="""
        CREATE TABLE conversations (
            id          TEXT PRIMARY KEY,
            platform    TEXT NOT NULL,
            workspace   TEXT NOT NULL,
            channel     TEXT NOT NULL,
            thread      TEXT NOT NULL,
            created_at  REAL NOT NULL,
            updated_at  REAL NOT NULL
        );
        CREATE TABLE turns (
            id              TEXT PRIMARY KEY,
            conversation_id TEXT NOT NULL REFERENCES conversations(id),
            kind            TEXT NOT NULL CHECK (kind IN ('user', 'system')),
            author_id       TEXT NOT NULL,
            author_name     TEXT NOT NULL,
            status          TEXT NOT NULL CHECK (status IN
                                ('running', 'completed', 'failed', 'interrupted', 'cancelled')),
            error           TEXT,
            model_calls     INTEGER NOT NULL DEFAULT 0,
            input_tokens    INTEGER NOT NULL DEFAULT 0,
            output_tokens   INTEGER NOT NULL DEFAULT 0,
            transcript      TEXT NOT NULL DEFAULT '[]',
            started_at      REAL NOT NULL,
            finished_at     REAL,
            reported        INTEGER NOT NULL DEFAULT 0
        );
        CREATE INDEX turns_by_conversation ON turns(conversation_id, started_at);
        CREATE INDEX turns_by_status ON turns(status);
        CREATE TABLE messages (
            id                  INTEGER PRIMARY KEY AUTOINCREMENT,
            conversation_id     TEXT NOT NULL REFERENCES conversations(id),
            turn_id             TEXT REFERENCES turns(id),
            direction           TEXT NOT NULL CHECK (direction IN ('in', 'out')),
            author_id           TEXT NOT NULL,
            author_name         TEXT NOT NULL,
            text                TEXT NOT NULL,
            idempotency_key     TEXT NOT NULL UNIQUE,
            delivery            TEXT NOT NULL DEFAULT 'none'
                                CHECK (delivery IN ('none', 'pending', 'sent', 'failed')),
            platform_message_id TEXT,
            payload             TEXT,
            handled             INTEGER NOT NULL DEFAULT 1,
            created_at          REAL NOT NULL
        );
        CREATE INDEX messages_unhandled ON messages(handled) WHERE handled = 0;
        CREATE INDEX messages_by_conversation ON messages(conversation_id, id);
        CREATE INDEX messages_undelivered ON messages(delivery)
            WHERE delivery IN ('pending', 'failed');
        CREATE TABLE dedup (
            key         TEXT PRIMARY KEY,
            expires_at  REAL NOT NULL
        );
        CREATE INDEX dedup_expiry ON dedup(expires_at);
        """,
    ),
    Migration(
        package="conversations",
        version=2,
        legacy=4,
        name="inbound messages cancelled by stop are marked stopped",
        sql="""
ALTER TABLE messages ADD COLUMN stopped INTEGER NOT NULL DEFAULT 0
""",
    ),
    Migration(
        package="conversations",
        version=3,
        legacy=8,
        name="turns: whether a completed user turn reached memory (recovered after a crash)",
        sql="""
ALTER TABLE turns ADD COLUMN remembered INTEGER NOT NULL DEFAULT 1;
CREATE INDEX turns_unremembered ON turns(remembered) WHERE remembered = 0
""",
    ),
    Migration(
        package="conversations",
        version=4,
        name="admission_audit: work the bot's own timers would start, refused for its owner",
        sql="""
CREATE TABLE admission_audit (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    at              REAL NOT NULL,
    origin          TEXT NOT NULL,
    subject         TEXT NOT NULL,
    owner           TEXT NOT NULL,
    conversation_id TEXT NOT NULL,
    outcome         TEXT NOT NULL CHECK (outcome IN ('refused', 'skipped')),
    reason          TEXT NOT NULL
);
CREATE INDEX admission_audit_by_subject ON admission_audit(subject, at)
""",
    ),
    Migration(
        package="conversations",
        version=5,
        name="turns: a follow-up the Host chose not to answer (no reply posted)",
        sql="""
ALTER TABLE turns ADD COLUMN no_reply INTEGER NOT NULL DEFAULT 0
""",
    ),
    Migration(
        package="conversations",
        version=6,
        name="messages: an outgoing record may be a file to attach (its JSON), sent after text",
        sql="""
ALTER TABLE messages ADD COLUMN file TEXT
""",
    ),
)
