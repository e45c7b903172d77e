//! Where runs and their journals live, through `sqlx` (runtime queries only, so
//! nothing needs a database at build time): an embedded SQLite file, the default,
//! for one process; or PostgreSQL, shared by any number of `serve` front ends and
//! `codeact worker` processes, which then also holds the queue of work (see
//! [`queue`](super::queue)). Each schema is applied from `migrations/sqlite/` or
//! `migrations/postgres/`, embedded in the binary. One row per run, one row per
//! event; the event rows are the journal a resumed run, a chat's next turn and
//! every SSE viewer read back.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde::Serialize;
use serde_json::Value;
use sqlx::Row;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions};

use codeact::agent::Event;
use codeact::output::rfc3339_utc;

/// The store could not be opened or answer.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StoreError {
    /// The `--store` value is not one this build knows.
    #[error("--store '{0}' must be sqlite:PATH or postgres://USER@HOST:PORT/DATABASE")]
    Url(String),
    /// The database failed.
    #[error("the store failed: {0}")]
    Database(#[from] sqlx::Error),
    /// The schema could not be brought up to date.
    #[error("the store's schema could not be applied: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
}

/// Where a run stands. Stored as its snake_case name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Status {
    /// Waiting for a worker (PostgreSQL stores only: SQLite runs start at once).
    Queued,
    /// A task is working on it.
    Running,
    /// It stopped on a call that waits for `POST /runs/{id}/approvals/{call}`.
    AwaitingApproval,
    /// A chat whose turn ended: `POST /runs/{id}/messages` sends the next.
    AwaitingMessage,
    /// It ended with an outcome (a final result, a budget, a refusal…).
    Finished,
    /// `POST /runs/{id}/cancel` stopped it.
    Cancelled,
    /// The model or the host failed; `error` says how.
    Failed,
    /// The server stopped while it ran, or a team run lost its worker.
    Interrupted,
}

impl Status {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Status::Queued => "queued",
            Status::Running => "running",
            Status::AwaitingApproval => "awaiting_approval",
            Status::AwaitingMessage => "awaiting_message",
            Status::Finished => "finished",
            Status::Cancelled => "cancelled",
            Status::Failed => "failed",
            Status::Interrupted => "interrupted",
        }
    }

    fn parse(text: &str) -> Status {
        match text {
            "queued" => Status::Queued,
            "running" => Status::Running,
            "awaiting_approval" => Status::AwaitingApproval,
            "awaiting_message" => Status::AwaitingMessage,
            "finished" => Status::Finished,
            "cancelled" => Status::Cancelled,
            "failed" => Status::Failed,
            _ => Status::Interrupted,
        }
    }

    /// Queued or running: work on it is pending or going on.
    pub(crate) fn is_active(self) -> bool {
        matches!(self, Status::Queued | Status::Running)
    }
}

/// One run as stored.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct RunRecord {
    pub id: String,
    pub tenant: String,
    pub agent: String,
    pub task: String,
    pub chat: bool,
    /// The request level of the output spec, as the client gave it.
    pub output: Option<Value>,
    pub status: Status,
    pub outcome: Option<Value>,
    pub final_output: Option<Value>,
    pub usage: Option<Value>,
    pub steps: i64,
    pub error: Option<String>,
    pub created_at: String,
    pub updated_at: String,
    /// How many times a worker resumed the run from its journal after another
    /// was lost or handed it back (PostgreSQL only; not shown when 0).
    #[serde(skip_serializing_if = "is_zero")]
    pub takeovers: i64,
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

/// How a piece of work on a run ended, to be stored with its status.
#[derive(Debug, Clone)]
pub(crate) struct Ended {
    pub status: Status,
    pub outcome: Option<Value>,
    pub final_output: Option<Value>,
    pub usage: Option<Value>,
    pub steps: usize,
    pub error: Option<String>,
}

/// One stored event.
#[derive(Debug, Clone)]
pub(crate) struct StoredEvent {
    pub seq: i64,
    /// The event's JSON, with `"agent"` added: a transcript line.
    pub line: String,
}

/// How many runs may be queued or running at once (backpressure): a create past
/// either is refused with 429. Runs awaiting an approval or a message count in
/// neither.
#[derive(Debug, Clone, Copy)]
pub(crate) struct QueueLimits {
    pub total: u32,
    pub per_tenant: u32,
}

/// What a create did.
#[derive(Debug)]
pub(crate) enum Created {
    /// Stored: queued on PostgreSQL, running on SQLite.
    Run(Box<RunRecord>),
    /// Refused: this many runs of the tenant, or of everyone, are active already.
    Full { tenant: bool, limit: u32 },
}

/// The store: a pool of connections to one SQLite file, or to PostgreSQL.
#[derive(Clone, Debug)]
pub(crate) enum Store {
    Sqlite(SqlitePool),
    Postgres(PgPool),
}

/// Where the store lives without `--store`: `$XDG_STATE_HOME/codeact/serve.sqlite`,
/// else `~/.local/state/codeact/serve.sqlite`, else `./codeact-serve.sqlite`.
pub(crate) fn default_store_path() -> PathBuf {
    let state = std::env::var_os("XDG_STATE_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| std::env::var_os("HOME").map(|home| Path::new(&home).join(".local/state")));
    match state {
        Some(dir) => dir.join("codeact").join("serve.sqlite"),
        None => PathBuf::from("codeact-serve.sqlite"),
    }
}

pub(super) fn now() -> String {
    rfc3339_utc(SystemTime::now())
}

fn json_text(value: &Option<Value>) -> Option<String> {
    value.as_ref().map(Value::to_string)
}

fn parse_json(text: Option<String>) -> Option<Value> {
    text.and_then(|t| serde_json::from_str(&t).ok())
}

fn names(statuses: &[Status]) -> Vec<String> {
    statuses.iter().map(|s| s.as_str().to_string()).collect()
}

/// The columns of a run, for queries that must stay literal SQL (`sqlx` takes
/// only `&'static str` queries without an audit).
macro_rules! run_columns {
    () => {
        "id, tenant, agent, task, chat, output, status, outcome, final_output, \
         usage, steps, error, created_at, updated_at"
    };
}
pub(super) use run_columns;

/// Connections each process keeps to PostgreSQL: 10. A worker's runs share
/// them (a journal write holds one for one statement).
const PG_POOL: u32 = 10;

impl Store {
    /// Opens the store `url` names and brings its schema up to date.
    ///
    /// `sqlite:PATH`: the file is created (with its folder) when missing; writes
    /// go through SQLite's write-ahead log, so readers (SSE viewers) never wait
    /// for a writer. `postgres://…` (or `postgresql://…`): the database must
    /// exist; its tables are created or migrated.
    pub(crate) async fn open(url: &str) -> Result<Self, StoreError> {
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            let options: PgConnectOptions =
                url.parse().map_err(|_| StoreError::Url(redact(url)))?;
            let pool = PgPoolOptions::new()
                .max_connections(PG_POOL)
                .acquire_timeout(Duration::from_secs(10))
                .connect_with(options.application_name("codeact"))
                .await?;
            sqlx::migrate!("./migrations/postgres").run(&pool).await?;
            return Ok(Store::Postgres(pool));
        }
        let path = url
            .strip_prefix("sqlite:")
            .filter(|p| !p.is_empty())
            .ok_or_else(|| StoreError::Url(redact(url)))?;
        let path = path.strip_prefix("//").unwrap_or(path);
        if let Some(parent) = Path::new(path).parent()
            && !parent.as_os_str().is_empty()
        {
            let _ = std::fs::create_dir_all(parent);
        }
        let options = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .busy_timeout(Duration::from_secs(10))
            .foreign_keys(true);
        let pool = SqlitePoolOptions::new()
            .max_connections(8)
            .connect_with(options)
            .await?;
        sqlx::migrate!("./migrations/sqlite").run(&pool).await?;
        Ok(Store::Sqlite(pool))
    }

    /// Whether the store is shared by several processes (PostgreSQL): runs are
    /// then queued for workers rather than run by the process that took them.
    pub(crate) fn is_shared(&self) -> bool {
        matches!(self, Store::Postgres(_))
    }

    /// Whether the database answers.
    pub(crate) async fn ping(&self) -> Result<(), StoreError> {
        match self {
            Store::Sqlite(pool) => {
                sqlx::query("SELECT 1").execute(pool).await?;
            }
            Store::Postgres(pool) => {
                sqlx::query("SELECT 1").execute(pool).await?;
            }
        }
        Ok(())
    }

    /// Marks every run a previous server left `running` as `interrupted`; returns
    /// how many. SQLite only: on PostgreSQL a running run belongs to a worker's
    /// lease, and one whose worker is gone is resumed by another.
    pub(crate) async fn interrupt_leftovers(&self) -> Result<u64, StoreError> {
        let Store::Sqlite(pool) = self else {
            return Ok(0);
        };
        let done = sqlx::query(
            "UPDATE runs SET status = 'interrupted', error = 'the server stopped while the run was going on', updated_at = ? WHERE status = 'running'",
        )
        .bind(now())
        .execute(pool)
        .await?;
        Ok(done.rows_affected())
    }

    /// Stores a new run unless `limits` are reached: `running` on SQLite (the
    /// caller starts it), `queued` with the job `{"kind":"start"}` on PostgreSQL,
    /// where idle workers are woken by a notice. The count and the insert are one
    /// statement.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn create(
        &self,
        id: &str,
        tenant: &str,
        agent: &str,
        task: &str,
        chat: bool,
        output: Option<&Value>,
        limits: QueueLimits,
    ) -> Result<Created, StoreError> {
        let at = now();
        let output_text = output.map(Value::to_string);
        let status = if self.is_shared() {
            Status::Queued
        } else {
            Status::Running
        };
        let inserted = match self {
            Store::Sqlite(pool) => sqlx::query(
                "INSERT INTO runs (id, tenant, agent, task, chat, output, status, created_at, updated_at) \
                 SELECT ?1, ?2, ?3, ?4, ?5, ?6, 'running', ?7, ?7 \
                 WHERE (SELECT COUNT(*) FROM runs WHERE status = 'running') < ?8 \
                   AND (SELECT COUNT(*) FROM runs WHERE status = 'running' AND tenant = ?2) < ?9",
            )
            .bind(id)
            .bind(tenant)
            .bind(agent)
            .bind(task)
            .bind(chat)
            .bind(output_text)
            .bind(&at)
            .bind(i64::from(limits.total))
            .bind(i64::from(limits.per_tenant))
            .execute(pool)
            .await?
            .rows_affected(),
            Store::Postgres(pool) => {
                sqlx::query(
                    "WITH inserted AS ( \
                       INSERT INTO runs (id, tenant, agent, task, chat, output, status, job, created_at, updated_at) \
                       SELECT $1, $2, $3, $4, $5, $6, 'queued', '{\"kind\":\"start\"}', $7, $7 \
                       WHERE (SELECT COUNT(*) FROM runs WHERE status IN ('queued', 'running')) < $8 \
                         AND (SELECT COUNT(*) FROM runs WHERE status IN ('queued', 'running') AND tenant = $2) < $9 \
                       RETURNING id) \
                     SELECT pg_notify('codeact_queue', id) FROM inserted",
                )
                .bind(id)
                .bind(tenant)
                .bind(agent)
                .bind(task)
                .bind(chat)
                .bind(output_text)
                .bind(&at)
                .bind(i64::from(limits.total))
                .bind(i64::from(limits.per_tenant))
                .fetch_all(pool)
                .await?
                .len() as u64
            }
        };
        if inserted == 0 {
            let tenant_full = self.active(Some(tenant)).await? >= i64::from(limits.per_tenant);
            return Ok(Created::Full {
                tenant: tenant_full,
                limit: if tenant_full {
                    limits.per_tenant
                } else {
                    limits.total
                },
            });
        }
        Ok(Created::Run(Box::new(RunRecord {
            id: id.into(),
            tenant: tenant.into(),
            agent: agent.into(),
            task: task.into(),
            chat,
            output: output.cloned(),
            status,
            outcome: None,
            final_output: None,
            usage: None,
            steps: 0,
            error: None,
            created_at: at.clone(),
            updated_at: at,
            takeovers: 0,
        })))
    }

    /// How many runs are queued or running, of `tenant` when given.
    pub(crate) async fn active(&self, tenant: Option<&str>) -> Result<i64, StoreError> {
        Ok(match self {
            Store::Sqlite(pool) => {
                sqlx::query_scalar(
                    "SELECT COUNT(*) FROM runs WHERE status IN ('queued', 'running') AND (?1 IS NULL OR tenant = ?1)",
                )
                .bind(tenant)
                .fetch_one(pool)
                .await?
            }
            Store::Postgres(pool) => {
                sqlx::query_scalar(
                    "SELECT COUNT(*) FROM runs WHERE status IN ('queued', 'running') AND ($1::TEXT IS NULL OR tenant = $1)",
                )
                .bind(tenant)
                .fetch_one(pool)
                .await?
            }
        })
    }

    /// How many runs are queued, and how many running, all tenants together
    /// (the `codeact.queue.depth` metric).
    pub(crate) async fn counts_by_status(&self) -> Result<(u64, u64), StoreError> {
        const COUNTS: &str = "SELECT status, COUNT(*) FROM runs WHERE status IN ('queued', 'running') GROUP BY status";
        let rows: Vec<(String, i64)> = match self {
            Store::Sqlite(pool) => sqlx::query_as(COUNTS).fetch_all(pool).await?,
            Store::Postgres(pool) => sqlx::query_as(COUNTS).fetch_all(pool).await?,
        };
        let count = |status: Status| {
            rows.iter()
                .find(|(s, _)| s == status.as_str())
                .map_or(0, |(_, n)| u64::try_from(*n).unwrap_or(0))
        };
        Ok((count(Status::Queued), count(Status::Running)))
    }

    /// The run `id`, if stored.
    pub(crate) async fn get(&self, id: &str) -> Result<Option<RunRecord>, StoreError> {
        Ok(match self {
            Store::Sqlite(pool) => sqlx::query(concat!(
                "SELECT ",
                run_columns!(),
                " FROM runs WHERE id = ?"
            ))
            .bind(id)
            .fetch_optional(pool)
            .await?
            .map(|row| record(&row)),
            Store::Postgres(pool) => sqlx::query(concat!(
                "SELECT ",
                run_columns!(),
                ", takeovers FROM runs WHERE id = $1"
            ))
            .bind(id)
            .fetch_optional(pool)
            .await?
            .map(|row| record(&row)),
        })
    }

    /// Up to `limit` runs, newest first, older than the run `after` when given;
    /// only `tenant`'s when given.
    pub(crate) async fn list(
        &self,
        tenant: Option<&str>,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<RunRecord>, StoreError> {
        Ok(match self {
            Store::Sqlite(pool) => sqlx::query(concat!(
                "SELECT ",
                run_columns!(),
                " FROM runs \
                 WHERE (?1 IS NULL OR tenant = ?1) \
                   AND (?2 IS NULL OR n < (SELECT n FROM runs WHERE id = ?2)) \
                 ORDER BY n DESC LIMIT ?3"
            ))
            .bind(tenant)
            .bind(after)
            .bind(i64::from(limit))
            .fetch_all(pool)
            .await?
            .iter()
            .map(record)
            .collect(),
            Store::Postgres(pool) => sqlx::query(concat!(
                "SELECT ",
                run_columns!(),
                ", takeovers FROM runs \
                 WHERE ($1::TEXT IS NULL OR tenant = $1) \
                   AND ($2::TEXT IS NULL OR n < (SELECT n FROM runs WHERE id = $2)) \
                 ORDER BY n DESC LIMIT $3"
            ))
            .bind(tenant)
            .bind(after)
            .bind(i64::from(limit))
            .fetch_all(pool)
            .await?
            .iter()
            .map(record)
            .collect(),
        })
    }

    /// Sets the run `running` if its status is one of `from`; false when it was
    /// not (another request got there first, or it moved on). SQLite only: on
    /// PostgreSQL work is handed to workers with [`Store::requeue`].
    pub(crate) async fn claim(&self, id: &str, from: &[Status]) -> Result<bool, StoreError> {
        self.set_status(id, from, Status::Running).await
    }

    /// Moves the run from one of `from` to `to`; false when it was in none.
    pub(crate) async fn set_status(
        &self,
        id: &str,
        from: &[Status],
        to: Status,
    ) -> Result<bool, StoreError> {
        let done = match self {
            Store::Sqlite(pool) => sqlx::query(
                "UPDATE runs SET status = ?, updated_at = ? \
                 WHERE id = ? AND status IN (SELECT value FROM json_each(?))",
            )
            .bind(to.as_str())
            .bind(now())
            .bind(id)
            .bind(serde_json::to_string(&names(from)).unwrap_or_default())
            .execute(pool)
            .await?
            .rows_affected(),
            Store::Postgres(pool) => sqlx::query(
                "WITH moved AS ( \
                   UPDATE runs SET status = $1, updated_at = $2, job = NULL \
                   WHERE id = $3 AND status = ANY($4) RETURNING id) \
                 SELECT pg_notify('codeact_run', id) FROM moved",
            )
            .bind(to.as_str())
            .bind(now())
            .bind(id)
            .bind(names(from))
            .fetch_all(pool)
            .await?
            .len() as u64,
        };
        Ok(done == 1)
    }

    /// Stores how a piece of work on the run ended. With `owner` (a worker on
    /// PostgreSQL), only while that worker still holds the run's lease, which it
    /// gives up: false when it no longer held it (another worker took the run
    /// over, and the end written here would be a stale one).
    pub(crate) async fn finish(
        &self,
        id: &str,
        ended: &Ended,
        owner: Option<&str>,
    ) -> Result<bool, StoreError> {
        let steps = i64::try_from(ended.steps).unwrap_or(i64::MAX);
        let done = match self {
            Store::Sqlite(pool) => sqlx::query(
                "UPDATE runs SET status = ?, outcome = ?, final_output = ?, usage = ?, steps = ?, \
                 error = ?, updated_at = ? WHERE id = ?",
            )
            .bind(ended.status.as_str())
            .bind(json_text(&ended.outcome))
            .bind(json_text(&ended.final_output))
            .bind(json_text(&ended.usage))
            .bind(steps)
            .bind(&ended.error)
            .bind(now())
            .bind(id)
            .execute(pool)
            .await?
            .rows_affected(),
            Store::Postgres(pool) => sqlx::query(
                "WITH ended AS ( \
                   UPDATE runs SET status = $1, outcome = $2, final_output = $3, usage = $4, \
                     steps = $5, error = $6, updated_at = $7, job = NULL, lease_owner = NULL, \
                     lease_until = NULL, cancel_requested = FALSE \
                   WHERE id = $8 AND lease_owner IS NOT DISTINCT FROM $9 RETURNING id) \
                 SELECT pg_notify('codeact_run', id) FROM ended",
            )
            .bind(ended.status.as_str())
            .bind(json_text(&ended.outcome))
            .bind(json_text(&ended.final_output))
            .bind(json_text(&ended.usage))
            .bind(steps)
            .bind(&ended.error)
            .bind(now())
            .bind(id)
            .bind(owner)
            .fetch_all(pool)
            .await?
            .len() as u64,
        };
        Ok(done == 1)
    }

    /// Appends event `seq` of the run; false when `owner` (a worker on
    /// PostgreSQL) no longer holds the run's lease, and nothing was written.
    ///
    /// The lease is read `FOR KEY SHARE`: a worker claiming the run meanwhile
    /// waits for this write, or this write waits for the claim and then sees
    /// the new owner. So a worker that lost a run cannot slip an event into the
    /// journal after the worker that took it over has read it.
    pub(crate) async fn append(
        &self,
        id: &str,
        seq: i64,
        agent: &str,
        event: &Event,
        owner: Option<&str>,
    ) -> Result<bool, StoreError> {
        let body = serde_json::to_string(event).unwrap_or_else(|_| "{}".into());
        let done = match self {
            Store::Sqlite(pool) => sqlx::query(
                "INSERT INTO events (run_id, seq, agent, body, created_at) VALUES (?, ?, ?, ?, ?)",
            )
            .bind(id)
            .bind(seq)
            .bind(agent)
            .bind(body)
            .bind(now())
            .execute(pool)
            .await?
            .rows_affected(),
            Store::Postgres(pool) => sqlx::query(
                "WITH held AS ( \
                   SELECT id FROM runs WHERE id = $1 AND lease_owner IS NOT DISTINCT FROM $6 \
                   FOR KEY SHARE), \
                 written AS ( \
                   INSERT INTO events (run_id, seq, agent, body, created_at) \
                   SELECT id, $2, $3, $4, $5 FROM held RETURNING run_id) \
                 SELECT pg_notify('codeact_run', run_id) FROM written",
            )
            .bind(id)
            .bind(seq)
            .bind(agent)
            .bind(body)
            .bind(now())
            .bind(owner)
            .fetch_all(pool)
            .await?
            .len() as u64,
        };
        Ok(done == 1)
    }

    /// Up to `limit` events of the run after number `after`, in order.
    pub(crate) async fn events_after(
        &self,
        id: &str,
        after: i64,
        limit: u32,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        let rows: Vec<(i64, String, String)> = match self {
            Store::Sqlite(pool) => sqlx::query_as(
                "SELECT seq, agent, body FROM events WHERE run_id = ? AND seq > ? ORDER BY seq LIMIT ?",
            )
            .bind(id)
            .bind(after)
            .bind(i64::from(limit))
            .fetch_all(pool)
            .await?,
            Store::Postgres(pool) => sqlx::query_as(
                "SELECT seq, agent, body FROM events WHERE run_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
            )
            .bind(id)
            .bind(after)
            .bind(i64::from(limit))
            .fetch_all(pool)
            .await?,
        };
        Ok(rows
            .into_iter()
            .map(|(seq, agent, body)| StoredEvent {
                seq,
                line: transcript_line(&agent, &body),
            })
            .collect())
    }

    /// The run's whole journal as events, for resuming it, and the last event's
    /// number (0 when there is none), after which the run's next events go. A
    /// row that no longer parses ends the events, as a transcript's cut-off line
    /// does.
    pub(crate) async fn journal(&self, id: &str) -> Result<(Vec<Event>, i64), StoreError> {
        let rows: Vec<(i64, String)> = match self {
            Store::Sqlite(pool) => {
                sqlx::query_as("SELECT seq, body FROM events WHERE run_id = ? ORDER BY seq")
                    .bind(id)
                    .fetch_all(pool)
                    .await?
            }
            Store::Postgres(pool) => {
                sqlx::query_as("SELECT seq, body FROM events WHERE run_id = $1 ORDER BY seq")
                    .bind(id)
                    .fetch_all(pool)
                    .await?
            }
        };
        let last = rows.last().map_or(0, |(seq, _)| *seq);
        let mut events = Vec::with_capacity(rows.len());
        for (_, body) in &rows {
            match serde_json::from_str::<Event>(body) {
                Ok(event) => events.push(event),
                Err(_) => break,
            }
        }
        Ok((events, last))
    }
}

/// A store URL without its password, for messages.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let userinfo = &url[scheme + 3..at];
            match userinfo.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..scheme + 3], &url[at..]),
                None => url.to_string(),
            }
        }
        _ => url.to_string(),
    }
}

/// `{"agent": …, <the event's fields>}`, as a transcript line.
fn transcript_line(agent: &str, body: &str) -> String {
    match serde_json::from_str::<Value>(body) {
        Ok(Value::Object(fields)) => {
            let mut line = serde_json::Map::with_capacity(fields.len() + 1);
            line.insert("agent".into(), Value::String(agent.into()));
            line.extend(fields);
            Value::Object(line).to_string()
        }
        _ => body.to_string(),
    }
}

/// A run from a row of either database (the same columns; `takeovers` only on
/// PostgreSQL).
pub(super) fn record<R: RunRow>(row: &R) -> RunRecord {
    let text = |column: &str| row.text(column);
    RunRecord {
        id: text("id").unwrap_or_default(),
        tenant: text("tenant").unwrap_or_default(),
        agent: text("agent").unwrap_or_default(),
        task: text("task").unwrap_or_default(),
        chat: row.flag("chat"),
        output: parse_json(text("output")),
        status: Status::parse(&text("status").unwrap_or_default()),
        outcome: parse_json(text("outcome")),
        final_output: parse_json(text("final_output")),
        usage: parse_json(text("usage")),
        steps: row.number("steps"),
        error: text("error"),
        created_at: text("created_at").unwrap_or_default(),
        updated_at: text("updated_at").unwrap_or_default(),
        takeovers: row.number("takeovers"),
    }
}

/// The three kinds of column a run has, read from either database's row.
pub(super) trait RunRow {
    fn text(&self, column: &str) -> Option<String>;
    fn flag(&self, column: &str) -> bool;
    /// An integer column; 0 when missing or NULL.
    fn number(&self, column: &str) -> i64;
}

impl RunRow for sqlx::sqlite::SqliteRow {
    fn text(&self, column: &str) -> Option<String> {
        self.try_get::<Option<String>, _>(column).ok().flatten()
    }
    fn flag(&self, column: &str) -> bool {
        self.try_get::<bool, _>(column).unwrap_or(false)
    }
    fn number(&self, column: &str) -> i64 {
        self.try_get::<i64, _>(column).unwrap_or(0)
    }
}

impl RunRow for sqlx::postgres::PgRow {
    fn text(&self, column: &str) -> Option<String> {
        self.try_get::<Option<String>, _>(column).ok().flatten()
    }
    fn flag(&self, column: &str) -> bool {
        self.try_get::<bool, _>(column).unwrap_or(false)
    }
    fn number(&self, column: &str) -> i64 {
        self.try_get::<i64, _>(column)
            .or_else(|_| self.try_get::<i32, _>(column).map(i64::from))
            .unwrap_or(0)
    }
}
