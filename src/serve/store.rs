//! Where runs and their journals live: an embedded SQLite file through `sqlx`
//! (runtime queries only, so nothing needs a database at build time), its schema
//! applied from `migrations/sqlite/` embedded in the binary. One row per run, one
//! row per event; the event rows are the journal a resumed run, a chat's next
//! turn and every SSE viewer read back.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde::Serialize;
use serde_json::Value;
use sqlx::Row;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions};

use crate::agent::events::Event;
use crate::output::final_output::rfc3339_utc;

/// The store could not be opened or answer.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StoreError {
    /// The `--store` value is not one this build knows.
    #[error("--store '{0}' must be sqlite:PATH")]
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
    /// The server stopped while it ran.
    Interrupted,
}

impl Status {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
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
            "running" => Status::Running,
            "awaiting_approval" => Status::AwaitingApproval,
            "awaiting_message" => Status::AwaitingMessage,
            "finished" => Status::Finished,
            "cancelled" => Status::Cancelled,
            "failed" => Status::Failed,
            _ => Status::Interrupted,
        }
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

/// The store: a pool of connections to one SQLite file.
#[derive(Clone, Debug)]
pub(crate) struct Store {
    pool: SqlitePool,
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

fn now() -> String {
    rfc3339_utc(SystemTime::now())
}

fn json_text(value: &Option<Value>) -> Option<String> {
    value.as_ref().map(Value::to_string)
}

fn parse_json(text: Option<String>) -> Option<Value> {
    text.and_then(|t| serde_json::from_str(&t).ok())
}

/// The columns of a run, for queries that must stay literal SQL (`sqlx` takes
/// only `&'static str` queries without an audit).
macro_rules! run_columns {
    () => {
        "id, tenant, agent, task, chat, output, status, outcome, final_output, \
         usage, steps, error, created_at, updated_at"
    };
}

impl Store {
    /// Opens (creating it and its folder when missing) the store `url` names,
    /// `sqlite:PATH`, and brings its schema up to date. Writes go through SQLite's
    /// write-ahead log, so readers (SSE viewers) never wait for a writer.
    pub(crate) async fn open(url: &str) -> Result<Self, StoreError> {
        let path = url
            .strip_prefix("sqlite:")
            .filter(|p| !p.is_empty())
            .ok_or_else(|| StoreError::Url(url.to_string()))?;
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
        Ok(Self { pool })
    }

    /// Whether the database answers.
    pub(crate) async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    /// Marks every run a previous server left `running` as `interrupted`; returns
    /// how many.
    pub(crate) async fn interrupt_leftovers(&self) -> Result<u64, StoreError> {
        let done = sqlx::query(
            "UPDATE runs SET status = 'interrupted', error = 'the server stopped while the run was going on', updated_at = ? WHERE status = 'running'",
        )
        .bind(now())
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected())
    }

    /// Stores a new run, `running`.
    pub(crate) async fn create(
        &self,
        id: &str,
        tenant: &str,
        agent: &str,
        task: &str,
        chat: bool,
        output: Option<&Value>,
    ) -> Result<RunRecord, StoreError> {
        let at = now();
        sqlx::query(
            "INSERT INTO runs (id, tenant, agent, task, chat, output, status, created_at, updated_at) \
             VALUES (?, ?, ?, ?, ?, ?, 'running', ?, ?)",
        )
        .bind(id)
        .bind(tenant)
        .bind(agent)
        .bind(task)
        .bind(chat)
        .bind(output.map(Value::to_string))
        .bind(&at)
        .bind(&at)
        .execute(&self.pool)
        .await?;
        Ok(RunRecord {
            id: id.into(),
            tenant: tenant.into(),
            agent: agent.into(),
            task: task.into(),
            chat,
            output: output.cloned(),
            status: Status::Running,
            outcome: None,
            final_output: None,
            usage: None,
            steps: 0,
            error: None,
            created_at: at.clone(),
            updated_at: at,
        })
    }

    /// The run `id`, if stored.
    pub(crate) async fn get(&self, id: &str) -> Result<Option<RunRecord>, StoreError> {
        let row = sqlx::query(concat!(
            "SELECT ",
            run_columns!(),
            " FROM runs WHERE id = ?"
        ))
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(|row| record(&row)))
    }

    /// Up to `limit` runs, newest first, older than the run `after` when given;
    /// only `tenant`'s when given.
    pub(crate) async fn list(
        &self,
        tenant: Option<&str>,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<RunRecord>, StoreError> {
        let rows = sqlx::query(concat!(
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
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.iter().map(record).collect())
    }

    /// Sets the run `running` if its status is one of `from`; false when it was
    /// not (another request got there first, or it moved on).
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
        let from: Vec<&str> = from.iter().map(|s| s.as_str()).collect();
        let done = sqlx::query(
            "UPDATE runs SET status = ?, updated_at = ? \
             WHERE id = ? AND status IN (SELECT value FROM json_each(?))",
        )
        .bind(to.as_str())
        .bind(now())
        .bind(id)
        .bind(serde_json::to_string(&from).unwrap_or_default())
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Stores how a piece of work on the run ended.
    pub(crate) async fn finish(&self, id: &str, ended: &Ended) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE runs SET status = ?, outcome = ?, final_output = ?, usage = ?, steps = ?, \
             error = ?, updated_at = ? WHERE id = ?",
        )
        .bind(ended.status.as_str())
        .bind(json_text(&ended.outcome))
        .bind(json_text(&ended.final_output))
        .bind(json_text(&ended.usage))
        .bind(i64::try_from(ended.steps).unwrap_or(i64::MAX))
        .bind(&ended.error)
        .bind(now())
        .bind(id)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// The last event's number, 0 when there is none.
    pub(crate) async fn last_seq(&self, id: &str) -> Result<i64, StoreError> {
        let row = sqlx::query("SELECT COALESCE(MAX(seq), 0) FROM events WHERE run_id = ?")
            .bind(id)
            .fetch_one(&self.pool)
            .await?;
        Ok(row.try_get(0)?)
    }

    /// Appends event `seq` of the run.
    pub(crate) async fn append(
        &self,
        id: &str,
        seq: i64,
        agent: &str,
        event: &Event,
    ) -> Result<(), StoreError> {
        let body = serde_json::to_string(event).unwrap_or_else(|_| "{}".into());
        sqlx::query(
            "INSERT INTO events (run_id, seq, agent, body, created_at) VALUES (?, ?, ?, ?, ?)",
        )
        .bind(id)
        .bind(seq)
        .bind(agent)
        .bind(body)
        .bind(now())
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Up to `limit` events of the run after number `after`, in order.
    pub(crate) async fn events_after(
        &self,
        id: &str,
        after: i64,
        limit: u32,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        let rows = sqlx::query(
            "SELECT seq, agent, body FROM events WHERE run_id = ? AND seq > ? ORDER BY seq LIMIT ?",
        )
        .bind(id)
        .bind(after)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                let agent: String = row.try_get(1)?;
                let body: String = row.try_get(2)?;
                Ok::<_, StoreError>(StoredEvent {
                    seq: row.try_get(0)?,
                    line: transcript_line(&agent, &body),
                })
            })
            .collect()
    }

    /// The run's whole journal as events, for resuming it; a row that no longer
    /// parses ends it, as a transcript's cut-off line does.
    pub(crate) async fn journal(&self, id: &str) -> Result<Vec<Event>, StoreError> {
        let rows = sqlx::query("SELECT body FROM events WHERE run_id = ? ORDER BY seq")
            .bind(id)
            .fetch_all(&self.pool)
            .await?;
        let mut events = Vec::with_capacity(rows.len());
        for row in &rows {
            let body: String = row.try_get(0)?;
            match serde_json::from_str::<Event>(&body) {
                Ok(event) => events.push(event),
                Err(_) => break,
            }
        }
        Ok(events)
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

fn record(row: &sqlx::sqlite::SqliteRow) -> RunRecord {
    let text = |column: &str| row.try_get::<Option<String>, _>(column).ok().flatten();
    RunRecord {
        id: text("id").unwrap_or_default(),
        tenant: text("tenant").unwrap_or_default(),
        agent: text("agent").unwrap_or_default(),
        task: text("task").unwrap_or_default(),
        chat: row.try_get::<bool, _>("chat").unwrap_or(false),
        output: parse_json(text("output")),
        status: Status::parse(&text("status").unwrap_or_default()),
        outcome: parse_json(text("outcome")),
        final_output: parse_json(text("final_output")),
        usage: parse_json(text("usage")),
        steps: row.try_get::<i64, _>("steps").unwrap_or(0),
        error: text("error"),
        created_at: text("created_at").unwrap_or_default(),
        updated_at: text("updated_at").unwrap_or_default(),
    }
}
