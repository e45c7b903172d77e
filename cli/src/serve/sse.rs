//! `GET /runs/{id}/events`: a run's journal as Server-Sent Events, from the start
//! (or after `Last-Event-ID`), then live until the run stops working.
//!
//! Each event's `id` is its number in the journal and its data the transcript
//! line (`{"agent": …, "event": "script_started", …}`). When the run is no longer
//! queued or running and every event has been sent, a last event named `end` carries the
//! status (`{"status": "finished"}`) and the stream closes; a run that goes on
//! later (an approval, a chat's next message) is followed by connecting again
//! with the last id seen. The stream reads the store, not the task, so any
//! viewer, connected at any time, sees the same events in the same order. On
//! PostgreSQL the journal is written by whichever worker runs the run: a front
//! end hears of new rows by `LISTEN` (see [`queue`](super::queue)), and reads the
//! store anyway every [`POLL`] when no notice came.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use futures_util::Stream;
use serde_json::json;
use tokio::sync::broadcast;

use super::api::{ApiError, visible_run};
use super::config::Caller;
use super::runs::Runs;

/// Events read from the store at a time.
const BATCH: u32 = 256;
/// How long a viewer waits for news before reading the store anyway (a missed
/// notice costs at most this much delay): 2 s.
const POLL: Duration = Duration::from_secs(2);

struct Viewer {
    runs: Arc<Runs>,
    id: String,
    after: i64,
    changed: broadcast::Receiver<String>,
    ready: VecDeque<SseEvent>,
    done: bool,
}

pub(crate) async fn events(
    State(runs): State<Arc<Runs>>,
    caller: Caller,
    path: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
) -> Result<Sse<impl Stream<Item = Result<SseEvent, Infallible>>>, ApiError> {
    let Path(id) = path?;
    visible_run(&runs, &caller, &id).await?;
    let after = match headers.get("last-event-id") {
        None => 0,
        Some(value) => value
            .to_str()
            .ok()
            .and_then(|v| v.trim().parse::<i64>().ok())
            .filter(|n| *n >= 0)
            .ok_or_else(|| ApiError::bad_request("Last-Event-ID must be an event's number"))?,
    };
    // Subscribed before the first read, so no change between the two is missed.
    let changed = runs.subscribe();
    let viewer = Viewer {
        runs,
        id,
        after,
        changed,
        ready: VecDeque::new(),
        done: false,
    };
    let stream = futures_util::stream::unfold(viewer, |mut viewer| async move {
        let event = viewer.next().await?;
        Some((Ok(event), viewer))
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}

impl Viewer {
    /// The next event to send; `None` once the `end` event has gone.
    async fn next(&mut self) -> Option<SseEvent> {
        loop {
            if let Some(event) = self.ready.pop_front() {
                return Some(event);
            }
            if self.done {
                return None;
            }
            // The status first: a run stores its end only after its last event,
            // so a status read as ended means the events read next are all there.
            let status = match self.runs.store.get(&self.id).await {
                Ok(Some(run)) => run.status,
                Ok(None) | Err(_) => return None,
            };
            let events = match self
                .runs
                .store
                .events_after(&self.id, self.after, BATCH)
                .await
            {
                Ok(events) => events,
                Err(_) => return None,
            };
            if let Some(last) = events.last() {
                self.after = last.seq;
                self.ready.extend(
                    events
                        .into_iter()
                        .map(|e| SseEvent::default().id(e.seq.to_string()).data(e.line)),
                );
                continue;
            }
            if !status.is_active() {
                self.done = true;
                return Some(
                    SseEvent::default()
                        .event("end")
                        .data(json!({ "status": status }).to_string()),
                );
            }
            self.wait().await;
        }
    }

    /// Until this run changes (or another lags the channel), at most [`POLL`].
    async fn wait(&mut self) {
        let id = self.id.clone();
        let changed = &mut self.changed;
        let _ = tokio::time::timeout(POLL, async move {
            loop {
                match changed.recv().await {
                    Ok(changed) if changed == id => return,
                    Ok(_) => {}
                    Err(broadcast::error::RecvError::Lagged(_)) => return,
                    Err(broadcast::error::RecvError::Closed) => {
                        std::future::pending::<()>().await;
                    }
                }
            }
        })
        .await;
    }
}
