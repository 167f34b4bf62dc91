"""The prompt broker's tables: interactive prompts and their audit log."""

from __future__ import annotations

from core.store import Migration

MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        package="prompts",
        version=1,
        legacy=2,
        name="interactive prompts and their audit log",
        sql="""
        CREATE TABLE prompts (
            id                  TEXT PRIMARY KEY,
            nonce               TEXT NOT NULL,
            kind                TEXT NOT NULL CHECK (kind IN ('approval', 'choice', 'free_text')),
            question            TEXT NOT NULL,
            options             TEXT NOT NULL DEFAULT '[]',
            requester           TEXT NOT NULL,
            allowed_responders  TEXT NOT NULL DEFAULT '[]',
            conversation_id     TEXT NOT NULL REFERENCES conversations(id),
            platform            TEXT NOT NULL,
            workspace           TEXT NOT NULL,
            channel             TEXT NOT NULL,
            thread              TEXT NOT NULL,
            created_at          REAL NOT NULL,
            expires_at          REAL NOT NULL,
            state               TEXT NOT NULL DEFAULT 'pending' CHECK (state IN
                                    ('pending', 'answered', 'expired', 'cancelled')),
            answer              TEXT,
            answered_by         TEXT,
            decided_at          REAL,
            purpose             TEXT NOT NULL DEFAULT 'ask_user',
            payload             TEXT NOT NULL DEFAULT '{}',
            message_id          TEXT,
            handled             INTEGER NOT NULL DEFAULT 0
        );
        CREATE INDEX prompts_by_state_expiry ON prompts(state, expires_at);
        CREATE INDEX prompts_by_conversation ON prompts(conversation_id);
        CREATE INDEX prompts_unhandled ON prompts(handled) WHERE handled = 0;
        CREATE TABLE prompt_audit (
            id          INTEGER PRIMARY KEY AUTOINCREMENT,
            prompt_id   TEXT NOT NULL REFERENCES prompts(id),
            at          REAL NOT NULL,
            actor       TEXT NOT NULL,
            action      TEXT NOT NULL CHECK (action IN ('created', 'shown', 'answered', 'refused',
                            'expired', 'cancelled', 'duplicate', 'handled')),
            detail      TEXT
        );
        CREATE INDEX prompt_audit_by_prompt ON prompt_audit(prompt_id, id);
        """,
    ),
    Migration(
        package="prompts",
        version=2,
        name="prompt reminders and held prompts",
        # The audit table is rebuilt: SQLite cannot change its CHECK in place.
        sql="""
        ALTER TABLE prompts ADD COLUMN reminded_at REAL;
        ALTER TABLE prompts ADD COLUMN held_at REAL;
        CREATE TABLE prompt_audit_v2 (
            id          INTEGER PRIMARY KEY AUTOINCREMENT,
            prompt_id   TEXT NOT NULL REFERENCES prompts(id),
            at          REAL NOT NULL,
            actor       TEXT NOT NULL,
            action      TEXT NOT NULL CHECK (action IN ('created', 'shown', 'answered', 'refused',
                            'expired', 'cancelled', 'duplicate', 'handled', 'reminded',
                            'held')),
            detail      TEXT
        );
        INSERT INTO prompt_audit_v2 (id, prompt_id, at, actor, action, detail)
            SELECT id, prompt_id, at, actor, action, detail FROM prompt_audit;
        DROP TABLE prompt_audit;
        ALTER TABLE prompt_audit_v2 RENAME TO prompt_audit;
        CREATE INDEX prompt_audit_by_prompt ON prompt_audit(prompt_id, id);
        """,
    ),
)
