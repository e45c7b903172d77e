-- `codeact serve`'s store: runs, and each run's journal of events as rows.
-- Embedded in the binary with `sqlx::migrate!`; applied when the store opens.

CREATE TABLE runs (
    -- Creation order: the cursor of `GET /runs?after=`.
    n            INTEGER PRIMARY KEY AUTOINCREMENT,
    id           TEXT NOT NULL UNIQUE,
    -- The token name the run is attributed to.
    tenant       TEXT NOT NULL,
    agent        TEXT NOT NULL,
    task         TEXT NOT NULL,
    -- 1: a conversation that takes further messages.
    chat         INTEGER NOT NULL,
    -- The request level of the output spec, as JSON; NULL when none.
    output       TEXT,
    -- running, awaiting_approval, awaiting_message, finished, cancelled, failed, interrupted
    status       TEXT NOT NULL,
    -- The outcome (or a team's outcome), the final output record and usage, as JSON.
    outcome      TEXT,
    final_output TEXT,
    usage        TEXT,
    steps        INTEGER NOT NULL DEFAULT 0,
    error        TEXT,
    created_at   TEXT NOT NULL,
    updated_at   TEXT NOT NULL
);

CREATE INDEX runs_by_tenant ON runs (tenant, n);

CREATE TABLE events (
    run_id     TEXT NOT NULL REFERENCES runs (id),
    -- From 1, without gaps within a run: the SSE event id.
    seq        INTEGER NOT NULL,
    agent      TEXT NOT NULL,
    -- The event as JSON, as a transcript line holds it (without "agent").
    body       TEXT NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (run_id, seq)
) WITHOUT ROWID;
