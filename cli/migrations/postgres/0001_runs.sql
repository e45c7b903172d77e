-- `codeact serve` and `codeact worker` on PostgreSQL: runs, each run's journal of
-- events as rows, and the queue workers claim runs from (columns of `runs`).
-- Embedded in the binary with `sqlx::migrate!`; applied when a process opens the
-- store (sqlx takes an advisory lock, so processes starting together apply it once).

CREATE TABLE runs (
    -- Creation order: the cursor of `GET /runs?after=` and the queue's order.
    n            BIGSERIAL PRIMARY KEY,
    id           TEXT NOT NULL UNIQUE,
    -- The token name the run is attributed to.
    tenant       TEXT NOT NULL,
    agent        TEXT NOT NULL,
    task         TEXT NOT NULL,
    -- A conversation that takes further messages.
    chat         BOOLEAN NOT NULL,
    -- The request level of the output spec, as JSON; NULL when none.
    output       TEXT,
    -- queued, running, awaiting_approval, awaiting_message, finished, cancelled,
    -- failed, interrupted
    status       TEXT NOT NULL,
    -- The outcome (or a team's outcome), the final output record and usage, as JSON.
    outcome      TEXT,
    final_output TEXT,
    usage        TEXT,
    steps        BIGINT NOT NULL DEFAULT 0,
    error        TEXT,
    created_at   TEXT NOT NULL,
    updated_at   TEXT NOT NULL,
    -- The work a worker is to do (queued) or does (running), as JSON:
    -- {"kind": "start"}, {"kind": "decide", …}, {"kind": "message", …}.
    job          TEXT,
    -- The worker holding the run while it runs, and until when: a worker renews
    -- it by heartbeat; past it, another worker may claim the run and resume it.
    lease_owner  TEXT,
    lease_until  TIMESTAMPTZ,
    -- POST /runs/{id}/cancel on a running run: the owning worker sees it.
    cancel_requested BOOLEAN NOT NULL DEFAULT FALSE,
    -- Claims of the current job (a takeover after a lost worker counts again).
    attempts     INTEGER NOT NULL DEFAULT 0,
    -- Claims over the run's life that resumed it from its journal after its
    -- worker was lost or handed it back.
    takeovers    INTEGER NOT NULL DEFAULT 0
);

CREATE INDEX runs_by_tenant ON runs (tenant, n);
-- What a claim scans: only runs waiting for or holding a worker.
CREATE INDEX runs_active ON runs (n) WHERE status IN ('queued', 'running');

CREATE TABLE events (
    run_id     TEXT NOT NULL REFERENCES runs (id),
    -- From 1, without gaps within a run: the SSE event id.
    seq        BIGINT NOT NULL,
    agent      TEXT NOT NULL,
    -- The event as JSON, as a transcript line holds it (without "agent").
    body       TEXT NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (run_id, seq)
);
