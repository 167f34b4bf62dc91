"""Numbered schema migrations; applied in order, each exactly once, at startup."""

from __future__ import annotations

MIGRATIONS: tuple[tuple[int, str, str], ...] = (
    (
        1,
        "conversations, turns, messages, dedup",
        """
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
    (
        2,
        "interactive prompts and their audit log",
        """
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
    (
        3,
        "graph runs, nodes, agent instances, dispatch ledger, conversation flags",
        """
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
    (
        4,
        "inbound messages cancelled by stop are marked stopped",
        """
ALTER TABLE messages ADD COLUMN stopped INTEGER NOT NULL DEFAULT 0
""",
    ),
    (
        5,
        "oncall campaigns: rounds, append-only measurements, the wake-up ledger, decisions",
        """
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
    (
        6,
        "memory: users, archive notes and profile sections, episodes with facts and foresight,"
        " agent cases, the verdict ledger, round summaries, outcome entries",
        """
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
    (
        7,
        "group memory: rounds await their close verdicts, then one reassessment",
        """
ALTER TABLE round_summaries ADD COLUMN phase TEXT NOT NULL DEFAULT 'released';
ALTER TABLE round_summaries ADD COLUMN nodes TEXT NOT NULL DEFAULT '[]';
ALTER TABLE round_summaries ADD COLUMN library TEXT NOT NULL DEFAULT '';
CREATE INDEX round_summaries_pending ON round_summaries(conversation_id, phase)
""",
    ),
    (
        8,
        "turns: whether a completed user turn reached memory (recovered after a crash)",
        """
ALTER TABLE turns ADD COLUMN remembered INTEGER NOT NULL DEFAULT 1;
CREATE INDEX turns_unremembered ON turns(remembered) WHERE remembered = 0
""",
    ),
    (
        9,
        "skills and permissions: experience-derived skills with their intent clusters, the "
        "skills injected per turn, remembered allows and the permission audit",
        """
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
    (
        10,
        "agent cases: whether a case has been through skill revision (offline cases wait)",
        """
ALTER TABLE agent_cases ADD COLUMN revised INTEGER NOT NULL DEFAULT 0;
CREATE INDEX agent_cases_unrevised ON agent_cases(revised) WHERE revised = 0
""",
    ),
    (
        11,
        "memory scopes: a round's host library is DM-scoped when its conversation is a DM "
        "(earlier DM rounds moved to the DM partition); erasures (`forget everything`) are "
        "recorded until finished, so a crash mid-way is completed at the next start",
        """
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
