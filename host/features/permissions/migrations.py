"""The permission gate's tables: remembered allows and the audit."""

from __future__ import annotations

from core.store import Migration

MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        package="permissions",
        version=1,
        legacy=9,
        name="permissions: remembered allows and the permission audit",
        sql="""
CREATE TABLE permission_allows (
    conversation_id TEXT NOT NULL,
    tool            TEXT NOT NULL,
    subject         TEXT NOT NULL,
    created_at      REAL NOT NULL,
    PRIMARY KEY (conversation_id, tool, subject)
);
CREATE TABLE permission_audit (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    at              REAL NOT NULL,
    conversation_id TEXT NOT NULL,
    requester       TEXT NOT NULL,
    workspace       TEXT NOT NULL,
    tool            TEXT NOT NULL,
    subject         TEXT NOT NULL,
    allowed         INTEGER NOT NULL,
    tier            TEXT NOT NULL,
    reason          TEXT NOT NULL,
    rule            TEXT
);
CREATE INDEX permission_audit_by_conversation ON permission_audit(conversation_id, id)
""",
    ),
)
