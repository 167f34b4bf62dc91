"""Campaign tables: campaigns, rounds, measurements, wake-ups, decisions."""

from __future__ import annotations

from core.store import Migration

MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        package="oncall",
        version=1,
        legacy=5,
        name="oncall campaigns: rounds, append-only measurements, the wake-up ledger, decisions",
        sql="""
CREATE TABLE campaigns (
    id              TEXT PRIMARY KEY,
    owner           TEXT NOT NULL,
    conversation_id TEXT NOT NULL REFERENCES conversations(id),
    spec            TEXT NOT NULL,
    state           TEXT NOT NULL,
    baseline        REAL,
    round           INTEGER NOT NULL DEFAULT 0,
    compute_seconds REAL NOT NULL DEFAULT 0,
    model_calls     INTEGER NOT NULL DEFAULT 0,
    status_message  TEXT,
    report          TEXT,
    error           TEXT,
    created_at      REAL NOT NULL,
    updated_at      REAL NOT NULL,
    closed_at       REAL
);
CREATE INDEX campaigns_by_state ON campaigns(state);
CREATE TABLE campaign_rounds (
    campaign_id     TEXT NOT NULL REFERENCES campaigns(id),
    round           INTEGER NOT NULL,
    state           TEXT NOT NULL,
    handle          TEXT,
    watch           TEXT,
    granted_seconds REAL,
    note            TEXT,
    started_at      REAL,
    ended_at        REAL,
    exit_code       INTEGER,
    wake_reason     TEXT,
    PRIMARY KEY (campaign_id, round)
);
CREATE TABLE campaign_measurements (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    campaign_id     TEXT NOT NULL REFERENCES campaigns(id),
    round           INTEGER NOT NULL,
    at              REAL NOT NULL,
    name            TEXT NOT NULL,
    value           REAL,
    source_line     TEXT NOT NULL
);
CREATE INDEX campaign_measurements_by_campaign ON campaign_measurements(campaign_id, id);
CREATE TABLE campaign_wakeups (
    id              TEXT PRIMARY KEY,
    campaign_id     TEXT NOT NULL REFERENCES campaigns(id),
    round           INTEGER NOT NULL,
    reason          TEXT NOT NULL,
    state           TEXT NOT NULL,
    due_at          REAL NOT NULL,
    fired_at        REAL,
    lateness        REAL
);
CREATE INDEX campaign_wakeups_by_campaign ON campaign_wakeups(campaign_id, due_at);
CREATE TABLE campaign_decisions (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    campaign_id     TEXT NOT NULL REFERENCES campaigns(id),
    round           INTEGER NOT NULL,
    at              REAL NOT NULL,
    action          TEXT NOT NULL,
    cite            INTEGER,
    reason          TEXT NOT NULL,
    detail          TEXT NOT NULL DEFAULT '{}'
)
""",
    ),
    Migration(
        package="oncall",
        version=2,
        name="oncall: measurements numbered per campaign from #1; the campaign's status message",
        # `number` is what people, reports and citations see (#1 is a campaign's first
        # value); `id` stays the global append order. `status_view` is what the
        # campaign's one status message shows (JSON; re-applied after a restart).
        sql="""
ALTER TABLE campaign_measurements ADD COLUMN number INTEGER;
UPDATE campaign_measurements SET number = (
    SELECT COUNT(*) FROM campaign_measurements AS earlier
    WHERE earlier.campaign_id = campaign_measurements.campaign_id
      AND earlier.id <= campaign_measurements.id
);
CREATE UNIQUE INDEX campaign_measurements_by_number
    ON campaign_measurements(campaign_id, number);
ALTER TABLE campaigns ADD COLUMN status_view TEXT;
""",
    ),
)
