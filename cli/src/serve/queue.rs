//! The queue on PostgreSQL: a run waiting for a worker is `queued` with the work
//! to do in its `job` column; a worker claims the oldest one with
//! `FOR UPDATE SKIP LOCKED` (two workers never take the same row, and neither
//! waits for the other) and holds it with a lease it renews by heartbeat. A run
//! whose lease ran out (its worker died, or lost the database) is claimed again
//! by the next worker, which resumes it from its journal. Notices (`NOTIFY`)
//! wake idle workers (`codeact_queue`: the id of a run queued, or `claimed:ID`
//! when a worker took one, so the others woken for it need not look), tell a
//! worker a run of its was cancelled (`codeact_cancel`), and tell front ends a
//! journal grew (`codeact_run`); each is only a hint, so a missed one costs a
//! poll interval, never a run.

use std::time::Duration;

use sqlx::Row;
use sqlx::postgres::PgListener;

use super::store::{RunRecord, Status, Store, StoreError, now, record, run_columns};

/// Channels of the notices.
pub(crate) const QUEUE_CHANNEL: &str = "codeact_queue";
pub(crate) const RUN_CHANNEL: &str = "codeact_run";
pub(crate) const CANCEL_CHANNEL: &str = "codeact_cancel";

/// A run a worker claimed, with the work to do.
#[derive(Debug)]
pub(crate) struct Claimed {
    pub run: RunRecord,
    /// The job's JSON (see `runs::Job`).
    pub job: Option<String>,
    /// Claims of this job so far, this one included: more than 1 means another
    /// worker had it before, and the run goes on from its journal.
    pub attempts: i32,
}

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

impl Store {
    fn pg(&self) -> Result<&sqlx::PgPool, StoreError> {
        match self {
            Store::Postgres(pool) => Ok(pool),
            Store::Sqlite(_) => Err(StoreError::Database(sqlx::Error::Configuration(
                "a queue needs a postgres:// store".into(),
            ))),
        }
    }

    /// Queues `job` for the run if its status is one of `from` (an approval
    /// answered, a chat's next message), waking a worker; false when it was in
    /// none of them.
    pub(crate) async fn requeue(
        &self,
        id: &str,
        from: &[Status],
        job: &str,
    ) -> Result<bool, StoreError> {
        let from: Vec<String> = from.iter().map(|s| s.as_str().to_string()).collect();
        let rows = sqlx::query(
            "WITH queued AS ( \
               UPDATE runs SET status = 'queued', job = $1, attempts = 0, \
                 cancel_requested = FALSE, updated_at = $2 \
               WHERE id = $3 AND status = ANY($4) RETURNING id) \
             SELECT pg_notify('codeact_queue', id), pg_notify('codeact_run', id) FROM queued",
        )
        .bind(job)
        .bind(now())
        .bind(id)
        .bind(from)
        .fetch_all(self.pg()?)
        .await?;
        Ok(rows.len() == 1)
    }

    /// Asks the worker holding a running run to cancel it: a flag it reads at its
    /// next heartbeat, and a notice it hears at once. False when the run is not
    /// running.
    pub(crate) async fn request_cancel(&self, id: &str) -> Result<bool, StoreError> {
        let rows = sqlx::query(
            "WITH flagged AS ( \
               UPDATE runs SET cancel_requested = TRUE WHERE id = $1 AND status = 'running' \
               RETURNING id) \
             SELECT pg_notify('codeact_cancel', id) FROM flagged",
        )
        .bind(id)
        .fetch_all(self.pg()?)
        .await?;
        Ok(rows.len() == 1)
    }

    /// Claims the oldest run that is queued, or running under a lease that ran
    /// out, for `owner` until `lease` from now.
    pub(crate) async fn claim_next(
        &self,
        owner: &str,
        lease: Duration,
    ) -> Result<Option<Claimed>, StoreError> {
        // The claim is announced on the queue channel (`claimed:ID`), so that
        // idle workers woken for this run do not look for it too.
        let row = sqlx::query(concat!(
            "WITH next AS ( \
               SELECT id AS next_id FROM runs \
               WHERE status IN ('queued', 'running') \
                 AND (status = 'queued' OR lease_until IS NULL OR lease_until < now()) \
               ORDER BY n LIMIT 1 FOR UPDATE SKIP LOCKED), \
             claimed AS ( \
               UPDATE runs SET \
                 takeovers = takeovers + CASE WHEN attempts > 0 THEN 1 ELSE 0 END, \
                 status = 'running', lease_owner = $1, \
                 lease_until = now() + ($2::BIGINT * INTERVAL '1 millisecond'), \
                 attempts = attempts + 1, updated_at = $3 \
               FROM next WHERE id = next.next_id \
               RETURNING ",
            run_columns!(),
            ", takeovers, job, attempts) \
             SELECT claimed.* FROM claimed \
             LEFT JOIN LATERAL (SELECT pg_notify('codeact_queue', 'claimed:' || claimed.id)) AS told ON TRUE"
        ))
        .bind(owner)
        .bind(millis(lease))
        .bind(now())
        .fetch_optional(self.pg()?)
        .await?;
        Ok(row.map(|row| Claimed {
            run: record(&row),
            job: row.try_get::<Option<String>, _>("job").ok().flatten(),
            attempts: row.try_get::<i32, _>("attempts").unwrap_or(1),
        }))
    }

    /// Renews `owner`'s leases on `ids` until `lease` from now, in one statement;
    /// answers the ids still held, each with whether a cancel was asked. An id
    /// missing from the answer was lost (its lease ran out and another worker
    /// took it, or it ended).
    pub(crate) async fn heartbeat(
        &self,
        owner: &str,
        ids: &[String],
        lease: Duration,
    ) -> Result<Vec<(String, bool)>, StoreError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let rows: Vec<(String, bool)> = sqlx::query_as(
            "UPDATE runs SET lease_until = now() + ($2::BIGINT * INTERVAL '1 millisecond') \
             WHERE lease_owner = $1 AND id = ANY($3) RETURNING id, cancel_requested",
        )
        .bind(owner)
        .bind(millis(lease))
        .bind(ids)
        .fetch_all(self.pg()?)
        .await?;
        Ok(rows)
    }

    /// Gives `owner`'s runs among `ids` back to the queue (a stopping worker past
    /// its grace): the next worker resumes them from their journals at once,
    /// without waiting for the leases to run out. Answers how many.
    pub(crate) async fn hand_back(&self, owner: &str, ids: &[String]) -> Result<u64, StoreError> {
        if ids.is_empty() {
            return Ok(0);
        }
        let rows = sqlx::query(
            "WITH back AS ( \
               UPDATE runs SET status = 'queued', lease_owner = NULL, lease_until = NULL, \
                 updated_at = $3 \
               WHERE lease_owner = $1 AND id = ANY($2) AND status = 'running' RETURNING id) \
             SELECT pg_notify('codeact_queue', id) FROM back",
        )
        .bind(owner)
        .bind(ids)
        .bind(now())
        .fetch_all(self.pg()?)
        .await?;
        Ok(rows.len() as u64)
    }

    /// A connection listening on `channels`, for notices.
    pub(crate) async fn listen(&self, channels: &[&str]) -> Result<PgListener, StoreError> {
        let mut listener = PgListener::connect_with(self.pg()?).await?;
        listener.listen_all(channels.iter().copied()).await?;
        Ok(listener)
    }
}
