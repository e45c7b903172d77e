//! `codeact worker`, and `codeact serve --work`: claims queued runs from a
//! PostgreSQL store and works on them (see [`queue`](super::queue) for the
//! claims, leases and notices, [`runs`](super::runs) for the work).
//!
//! A worker takes up to `concurrency` runs at once. Idle, it waits for a notice
//! that a run was queued, or [`WorkerSettings::poll`] at most. Every third of a
//! lease it renews the leases of all its runs in one statement, and learns which
//! it lost and which were cancelled. At SIGTERM it stops claiming, gives its
//! runs the shutdown grace to finish, and hands the rest back to the queue,
//! where the next worker resumes them from their journals.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use super::config::WorkerSettings;
use super::queue::{CANCEL_CHANNEL, Claimed, QUEUE_CHANNEL, RUN_CHANNEL};
use super::runs::{Job, Runs};
use super::store::{Ended, Status, Store};

/// What `codeact worker` was asked to do.
#[derive(Debug, Clone)]
pub(crate) struct WorkerOptions {
    /// The store, `postgres://…`.
    pub store: String,
    /// The config file, the same the front ends read (agents, limits, `[worker]`).
    pub config: PathBuf,
}

/// Loads the config, opens the store, prints `codeact worker: NAME working`
/// on stdout, and works until SIGTERM or Ctrl-C (then as the module says).
pub(crate) async fn worker(options: WorkerOptions) -> Result<(), String> {
    let config = super::load_config(options.config.clone()).await?;
    let store = Store::open(&options.store)
        .await
        .map_err(|e| e.to_string())?;
    if !store.is_shared() {
        return Err("a worker needs a postgres:// store, which front ends share".into());
    }
    let name = worker_name();
    let runs = Runs::new(store, Arc::new(config), Some(name.clone()));
    if super::telemetry::exporting() {
        tokio::spawn(super::telemetry::sample_queue(runs.clone()));
    }
    {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "codeact worker: {name} working");
        let _ = out.flush();
    }
    let stop = CancellationToken::new();
    let signalled = stop.clone();
    tokio::spawn(async move {
        super::stopped().await;
        signalled.cancel();
    });
    work_queue(runs, stop).await;
    Ok(())
}

/// This process's name in leases: host, process id and 32 random bits, so a
/// restarted process with the same id never passes for its predecessor.
pub(super) fn worker_name() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "host".into());
    let mut bytes = [0u8; 4];
    let _ = getrandom::fill(&mut bytes);
    format!(
        "{host}-{}-{}",
        std::process::id(),
        bytes.iter().map(|b| format!("{b:02x}")).collect::<String>()
    )
}

/// Claims and works on runs until `stop`, then stops as the module says.
pub(super) async fn work_queue(runs: Arc<Runs>, stop: CancellationToken) {
    let Some(owner) = runs.owner.clone() else {
        return;
    };
    let settings: WorkerSettings = runs.config.worker.clone();
    let wake = Arc::new(Notify::new());
    let listening = tokio::spawn(listen(runs.clone(), Some(wake.clone())));
    let beating = tokio::spawn(heartbeat(runs.clone(), owner.clone(), settings.lease));
    let slots = Arc::new(Semaphore::new(settings.concurrency));
    loop {
        let slot = tokio::select! {
            () = stop.cancelled() => break,
            slot = slots.clone().acquire_owned() => slot,
        };
        let Ok(slot) = slot else { break };
        match runs.store.claim_next(&owner, settings.lease).await {
            Ok(Some(claimed)) => {
                start(&runs, claimed, slot).await;
                continue;
            }
            Ok(None) => {}
            Err(e) => tracing::warn!("cannot claim a run: {e}"),
        }
        drop(slot);
        tokio::select! {
            () = stop.cancelled() => break,
            () = wake.notified() => {}
            () = tokio::time::sleep(settings.poll) => {}
        }
    }
    let deadline = Instant::now() + settings.shutdown_grace;
    while !runs.live_ids().is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    beating.abort();
    listening.abort();
    let left = runs.live_ids();
    if !left.is_empty() {
        match runs.store.hand_back(&owner, &left).await {
            Ok(n) => tracing::warn!("stopping: {n} run(s) handed back to the queue"),
            Err(e) => {
                tracing::error!("stopping: cannot hand runs back ({e}); their leases will run out")
            }
        }
        // Whatever they still do is refused by the store: they are not ours.
        for id in &left {
            runs.cancel(id);
        }
    }
}

/// Starts a claimed run, which holds `slot` until it ends.
async fn start(runs: &Arc<Runs>, claimed: Claimed, slot: OwnedSemaphorePermit) {
    let Claimed { run, job, attempts } = claimed;
    let retake = attempts > 1 || run.takeovers > 0;
    if retake {
        tracing::info!("run {}: taken over, resuming from its journal", run.id);
    }
    let job = match job.as_deref().map(serde_json::from_str::<Job>) {
        Some(Ok(job)) => job,
        Some(Err(e)) => {
            return end_unreadable(runs, &run.id, format!("its job is unreadable: {e}")).await;
        }
        None => return end_unreadable(runs, &run.id, "it has no job".into()).await,
    };
    runs.spawn_holding(run, job, retake, Some(slot));
}

async fn end_unreadable(runs: &Runs, id: &str, error: String) {
    let ended = Ended {
        status: Status::Failed,
        outcome: None,
        final_output: None,
        usage: None,
        steps: 0,
        error: Some(error),
    };
    if let Err(e) = runs.store.finish(id, &ended, runs.owner.as_deref()).await {
        tracing::error!("run {id}: {e}");
    }
}

/// Renews this worker's leases every third of `lease`; cancels here the runs it
/// lost or that were cancelled.
async fn heartbeat(runs: Arc<Runs>, owner: String, lease: Duration) {
    let every = lease / 3;
    loop {
        tokio::time::sleep(every).await;
        let ids = runs.live_ids();
        match runs.store.heartbeat(&owner, &ids, lease).await {
            Ok(held) => {
                for id in &ids {
                    if !held.iter().any(|(h, _)| h == id) && runs.cancel(id) {
                        tracing::warn!(
                            "run {id}: its lease was lost; stopping the work on it here"
                        );
                    }
                }
                for (id, cancel) in held {
                    if cancel {
                        runs.cancel(&id);
                    }
                }
            }
            Err(e) => tracing::warn!("cannot renew leases: {e}"),
        }
    }
}

/// Hears the store's notices and passes them on: a queued run wakes `wake`
/// (workers), a journal that grew wakes this process's SSE viewers, a cancel
/// reaches the run if it is worked on here. Reconnects after a second when the
/// connection is lost (notices meanwhile are missed; polls make up for them).
pub(super) async fn listen(runs: Arc<Runs>, wake: Option<Arc<Notify>>) {
    loop {
        let mut listener = match runs
            .store
            .listen(&[QUEUE_CHANNEL, RUN_CHANNEL, CANCEL_CHANNEL])
            .await
        {
            Ok(listener) => listener,
            Err(e) => {
                tracing::warn!("cannot listen for notices: {e}");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        loop {
            match listener.recv().await {
                Ok(notice) => match notice.channel() {
                    QUEUE_CHANNEL => {
                        if let Some(wake) = &wake {
                            wake.notify_one();
                        }
                    }
                    RUN_CHANNEL => runs.notify(notice.payload()),
                    CANCEL_CHANNEL => {
                        runs.cancel(notice.payload());
                    }
                    _ => {}
                },
                Err(e) => {
                    tracing::warn!("lost the notices' connection: {e}");
                    break;
                }
            }
        }
    }
}
