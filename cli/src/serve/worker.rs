//! `codeact worker`, and `codeact serve --work`: claims queued runs from a
//! PostgreSQL store and works on them (see [`queue`](super::queue) for the
//! claims, leases and notices, [`runs`](super::runs) for the work).
//!
//! A worker takes up to `concurrency` runs at once. Idle, it waits for a notice
//! that a run was queued, or [`WorkerSettings::poll`] at most. Every idle
//! worker hears every notice, so each would try to claim every queued run and
//! all but one would find nothing (N workers, N claims per run); instead a
//! woken worker first waits a random pause of up to its backoff, and claims only
//! if some run it heard of was not claimed meanwhile (claims are announced on
//! the same channel). A worker that finds its runs taken by others doubles its
//! backoff (from [`MIN_BACKOFF`] up to [`MAX_BACKOFF`]); one that claims halves
//! it, so a lone worker claims at once and a crowd settles on one quick
//! claimer, at the cost of up to [`MAX_BACKOFF`] of latency when that one is
//! busy. Every third of a
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
        tokio::spawn(super::runs::sample_queue(runs.clone()));
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

/// The shortest backoff a woken worker grows to once it lost a claim: 2 ms,
/// about a claim's round trip and its notice on a local network.
pub(super) const MIN_BACKOFF: Duration = Duration::from_millis(2);
/// The longest pause a woken worker takes before it claims: 50 ms.
pub(super) const MAX_BACKOFF: Duration = Duration::from_millis(50);

/// What the notices told an idle worker about the queue, between the listener
/// and the claim loop.
#[derive(Debug, Default)]
pub(super) struct Wake {
    notify: Notify,
    /// Runs heard queued and not heard claimed (an empty id: a notice without
    /// one, from an older process).
    unclaimed: std::sync::Mutex<std::collections::HashSet<String>>,
}

impl Wake {
    /// A `codeact_queue` notice: `claimed:ID`, or the id of a run queued.
    fn heard(&self, payload: &str) {
        let mut unclaimed = self.unclaimed.lock().unwrap_or_else(|p| p.into_inner());
        match payload.strip_prefix("claimed:") {
            Some(id) => {
                unclaimed.remove(id);
            }
            None => {
                unclaimed.insert(payload.to_string());
                drop(unclaimed);
                self.notify.notify_one();
            }
        }
    }

    fn any_unclaimed(&self) -> bool {
        !self
            .unclaimed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_empty()
    }

    /// Forgets `id` (claimed here), or everything (`None`: the queue was empty).
    fn forget(&self, id: Option<&str>) {
        let mut unclaimed = self.unclaimed.lock().unwrap_or_else(|p| p.into_inner());
        match id {
            Some(id) => {
                unclaimed.remove(id);
            }
            None => unclaimed.clear(),
        }
    }
}

/// A random pause of up to `backoff`.
fn jitter(backoff: Duration) -> Duration {
    let mut bytes = [0u8; 4];
    let _ = getrandom::fill(&mut bytes);
    backoff.mul_f64(f64::from(u32::from_le_bytes(bytes)) / f64::from(u32::MAX))
}

/// Claims and works on runs until `stop`, then stops as the module says.
pub(super) async fn work_queue(runs: Arc<Runs>, stop: CancellationToken) {
    let Some(owner) = runs.owner.clone() else {
        return;
    };
    let settings: WorkerSettings = runs.config.worker.clone();
    let wake = Arc::new(Wake::default());
    let listening = tokio::spawn(listen(runs.clone(), Some(wake.clone())));
    let beating = tokio::spawn(heartbeat(runs.clone(), owner.clone(), settings.lease));
    let slots = Arc::new(Semaphore::new(settings.concurrency));
    // Look whatever the notices said: at the start, at a poll, and after a
    // claim (the queue may hold more). Otherwise only for a run heard of and
    // not heard claimed.
    let mut look = true;
    let mut backoff = Duration::ZERO;
    loop {
        let slot = tokio::select! {
            () = stop.cancelled() => break,
            slot = slots.clone().acquire_owned() => slot,
        };
        let Ok(slot) = slot else { break };
        if look || wake.any_unclaimed() {
            match runs.store.claim_next(&owner, settings.lease).await {
                Ok(Some(claimed)) => {
                    wake.forget(Some(&claimed.run.id));
                    backoff /= 2;
                    start(&runs, claimed, slot).await;
                    look = true;
                    continue;
                }
                Ok(None) => {
                    wake.forget(None);
                    if !look {
                        backoff = (backoff * 2).clamp(MIN_BACKOFF, MAX_BACKOFF);
                    }
                }
                Err(e) => tracing::warn!("cannot claim a run: {e}"),
            }
        } else {
            // Woken for runs another worker claimed during the pause.
            backoff = (backoff * 2).clamp(MIN_BACKOFF, MAX_BACKOFF);
        }
        drop(slot);
        look = false;
        tokio::select! {
            () = stop.cancelled() => break,
            () = wake.notify.notified() => {
                tokio::select! {
                    () = stop.cancelled() => break,
                    () = tokio::time::sleep(jitter(backoff)) => {}
                }
            }
            () = tokio::time::sleep(settings.poll) => look = true,
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

/// Hears the store's notices and passes them on: a queued or claimed run goes
/// to `wake` (workers), a journal that grew wakes this process's SSE viewers, a cancel
/// reaches the run if it is worked on here. Reconnects after a second when the
/// connection is lost (notices meanwhile are missed; polls make up for them).
pub(super) async fn listen(runs: Arc<Runs>, wake: Option<Arc<Wake>>) {
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
                            wake.heard(notice.payload());
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

#[cfg(test)]
mod tests {
    use super::*;

    /// If this fails, idle workers look for runs another worker already
    /// claimed (the thundering herd is back), or ignore a notice without an id
    /// (from an older front end) and leave its run to the poll.
    #[test]
    fn a_run_heard_claimed_is_not_looked_for_and_one_without_an_id_is() {
        let wake = Wake::default();
        assert!(!wake.any_unclaimed());
        wake.heard("run_a");
        wake.heard("run_b");
        wake.heard("claimed:run_a");
        assert!(wake.any_unclaimed(), "run_b is still queued");
        wake.heard("claimed:run_b");
        assert!(!wake.any_unclaimed());
        wake.heard("");
        assert!(wake.any_unclaimed());
        wake.forget(None);
        assert!(!wake.any_unclaimed());
    }

    /// If this fails, a woken worker can pause longer than its backoff.
    #[test]
    fn the_pause_before_a_claim_stays_within_the_backoff() {
        assert_eq!(jitter(Duration::ZERO), Duration::ZERO);
        for _ in 0..100 {
            assert!(jitter(MAX_BACKOFF) <= MAX_BACKOFF);
        }
    }
}
