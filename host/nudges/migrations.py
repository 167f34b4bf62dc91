"""The nudge policy's tables: what was said on the bot's own (caps and dedup count it), and
posts held by quiet hours until they end."""

from __future__ import annotations

from core.store import Migration

MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        package="nudges",
        version=1,
        name="nudges said (for caps and dedup) and posts held by quiet hours",
        # `nudges` was first created by the schedules package (v3), before the policy covered
        # campaigns: kept as it is where it exists.
        sql="""
CREATE TABLE IF NOT EXISTS nudges (
    conversation_id TEXT NOT NULL,
    channel_key     TEXT NOT NULL,
    owner           TEXT NOT NULL,
    digest          TEXT NOT NULL,
    at              REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS nudges_by_channel ON nudges(channel_key, at);
CREATE INDEX IF NOT EXISTS nudges_by_owner ON nudges(owner, at);
CREATE INDEX IF NOT EXISTS nudges_by_digest ON nudges(conversation_id, digest, at);
CREATE TABLE held_posts (
    key             TEXT PRIMARY KEY,
    conversation_id TEXT NOT NULL,
    recipient       TEXT NOT NULL,
    text            TEXT NOT NULL,
    release_at      REAL NOT NULL,
    held_at         REAL NOT NULL
);
CREATE INDEX held_posts_by_release ON held_posts(release_at);
""",
    ),
    Migration(
        package="nudges",
        version=2,
        name="nudges: what the caps held back (until its summary posts), explicit runs' grants",
        sql="""
CREATE TABLE held_back (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    conversation_id TEXT NOT NULL,
    recipient       TEXT NOT NULL,
    source          TEXT NOT NULL,
    line            TEXT NOT NULL,
    why             TEXT NOT NULL,
    held_at         REAL NOT NULL,
    release_at      REAL NOT NULL,
    summary_key     TEXT
);
CREATE INDEX held_back_by_conversation ON held_back(conversation_id, summary_key, release_at);
CREATE TABLE nudge_grants (
    source          TEXT PRIMARY KEY,
    granted_at      REAL NOT NULL
);
""",
    ),
)
