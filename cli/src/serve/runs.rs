//! The work on runs: starting one, continuing one after an approval or with a
//! chat's next message, cancelling one. Each piece of work is a task that loads
//! the configured agent afresh (its own session, its own temporary working
//! directory), journals every event into the store as it happens, and stores how
//! it ended. Nothing but the journal carries a run from one piece of work to the
//! next, so a run continued after a restart continues the same way.
//!
//! On PostgreSQL the same work is done by workers (`codeact worker`, see
//! [`worker`](super::worker)) on runs they claimed from the queue: their journal
//! writes and the stored end count only while they hold the run's lease, and a
//! run taken over from a lost worker goes on from its journal, its recorded tool
//! calls served from it rather than made again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;
use tracing::field::Empty;

use super::config::{OfferedAgent, ServeConfig};
use super::store::{Ended, Status, Store, StoredRun};
use codeact::agent::Outcome;
use codeact::agent::ResumePoint;
use codeact::agent::{Agent, AgentError, RunResult};
use codeact::agent::{ApprovalDecision, Approver};
use codeact::agent::{Event, Listener};
use codeact::agent::{Team, TeamOutcome, TeamRun};
use codeact::agent::{load_team, load_team_for_run};
use codeact::output::OutputSpec;

/// What a piece of work on a run does; on PostgreSQL, stored as JSON in the
/// run's `job` column until a worker does it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub(crate) enum Job {
    /// Run the task from the start (a chat: its first turn); a run whose journal
    /// is not empty (its worker was lost) goes on from it.
    Start,
    /// Go on from the journal with a decision for the call the run waits on.
    Decide {
        tool: String,
        args: Value,
        approved: bool,
        reason: Option<String>,
        /// Who decided, for the record.
        by: String,
    },
    /// A chat's next turn, from the journal.
    Message { message: String },
}

impl Job {
    /// Its kind, as the `run` span and the metrics name it.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Job::Start => "start",
            Job::Decide { .. } => "decide",
            Job::Message { .. } => "message",
        }
    }

    pub(crate) fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| "{\"kind\":\"start\"}".into())
    }
}

/// The runs this server works on, the store they live in, and who to tell when a
/// journal grows.
pub(crate) struct Runs {
    pub store: Store,
    pub config: Arc<ServeConfig>,
    /// This process's name as a worker on PostgreSQL: it holds the leases of
    /// the runs it works on. `None` on SQLite.
    pub owner: Option<String>,
    /// The cancel token of every run a task works on now.
    live: Mutex<HashMap<String, CancellationToken>>,
    /// The id of a run whose journal or status just changed (SSE viewers wait on
    /// it; a viewer that lags reads the store again, which is the truth anyway).
    changed: broadcast::Sender<String>,
    /// Requests, runs and the queue, for OpenTelemetry (no-ops without export).
    pub metrics: super::telemetry::Metrics,
}

impl std::fmt::Debug for Runs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runs").finish_non_exhaustive()
    }
}

impl Runs {
    pub(crate) fn new(store: Store, config: Arc<ServeConfig>, owner: Option<String>) -> Arc<Self> {
        let (changed, _) = broadcast::channel(1024);
        Arc::new(Self {
            store,
            config,
            owner,
            live: Mutex::new(HashMap::new()),
            changed,
            metrics: super::telemetry::Metrics::new(),
        })
    }

    /// Hears the ids of runs that changed.
    pub(crate) fn subscribe(&self) -> broadcast::Receiver<String> {
        self.changed.subscribe()
    }

    pub(crate) fn notify(&self, id: &str) {
        let _ = self.changed.send(id.to_string());
    }

    /// Cancels the work going on for `id`; false when none is.
    pub(crate) fn cancel(&self, id: &str) -> bool {
        let live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        match live.get(id) {
            Some(token) => {
                token.cancel();
                true
            }
            None => false,
        }
    }

    /// Tells viewers that `id` changed outside a task (a cancel of a waiting run).
    pub(crate) fn touched(&self, id: &str) {
        self.notify(id);
    }

    /// The ids of the runs this process works on now.
    pub(crate) fn live_ids(&self) -> Vec<String> {
        let live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        live.keys().cloned().collect()
    }

    /// Goes on with `job` on a run that waits (an approval, a chat's next
    /// message) if its status is one of `from`: started here on SQLite, queued
    /// for a worker on PostgreSQL. False when the run was in none of them.
    pub(crate) async fn go_on(
        self: &Arc<Self>,
        run: StoredRun,
        from: &[Status],
        job: Job,
    ) -> Result<bool, super::store::StoreError> {
        if self.store.is_shared() {
            return self.store.requeue(&run.id, from, &job.to_json()).await;
        }
        if !self.store.claim(&run.id, from).await? {
            return Ok(false);
        }
        self.spawn(run, job, false);
        Ok(true)
    }

    /// Starts `job` on `run`, which the caller has set `running` (or claimed
    /// from the queue; `retake`: after another worker had it).
    pub(crate) fn spawn(self: &Arc<Self>, run: StoredRun, job: Job, retake: bool) {
        self.spawn_holding(run, job, retake, None);
    }

    /// [`Runs::spawn`], holding `slot` (a worker's) until the work ends.
    pub(crate) fn spawn_holding(
        self: &Arc<Self>,
        run: StoredRun,
        job: Job,
        retake: bool,
        slot: Option<tokio::sync::OwnedSemaphorePermit>,
    ) {
        let cancel = CancellationToken::new();
        self.live
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(run.id.clone(), cancel.clone());
        let runs = self.clone();
        tokio::spawn(async move {
            let id = run.id.clone();
            runs.work(run, job, retake, cancel).await;
            runs.live
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&id);
            runs.notify(&id);
            drop(slot);
        });
    }

    /// Does `job`, journalling as it goes, then stores how it ended: after the
    /// last event is written, so a viewer that sees the end has seen every event.
    /// The work is one `run` span (the root of its trace) and counts in the
    /// run metrics (see [`telemetry`](super::telemetry)).
    async fn work(
        self: &Arc<Self>,
        run: StoredRun,
        job: Job,
        retake: bool,
        cancel: CancellationToken,
    ) {
        // The root of this piece of work's trace (see `telemetry`): the
        // loop's spans open beneath it, on the run's own thread.
        let span = tracing::info_span!(
            "run",
            codeact.run.id = %run.id,
            codeact.agent = %run.agent,
            codeact.tenant = %run.tenant,
            codeact.run.job = job.kind(),
            codeact.run.resumed = Empty,
            codeact.runtime = Empty,
            codeact.status = Empty,
            codeact.outcome = Empty,
            codeact.steps = Empty,
            gen_ai.usage.input_tokens = Empty,
            gen_ai.usage.output_tokens = Empty,
            otel.status_code = Empty,
            error.message = Empty,
        );
        let started = std::time::Instant::now();
        self.metrics.run_started(&run.agent, job.kind());
        let id = run.id.clone();
        let agent = run.agent.clone();
        let ended = self
            .journal_and_drive(run, job, retake, cancel, span.clone())
            .await;
        record_end(&span, &ended);
        let outcome = outcome_kind(&ended);
        self.metrics
            .run_finished(&agent, ended.status.as_str(), outcome, started.elapsed());
        self.store_end(&id, ended).await;
    }

    /// [`Runs::work`] within the run's `span`: how the work ended, once the
    /// last event is journalled.
    async fn journal_and_drive(
        self: &Arc<Self>,
        run: StoredRun,
        job: Job,
        retake: bool,
        cancel: CancellationToken,
        span: tracing::Span,
    ) -> Ended {
        // What resumes a run is its journal, read here, on the server's runtime,
        // where the store lives (a new run's is empty).
        let (journal, last) = match self.store.journal(&run.id).await {
            Ok(read) => read,
            Err(e) => {
                tracing::error!("run {}: {e}", run.id);
                return failed(e.to_string());
            }
        };
        span.record("codeact.run.resumed", !journal.is_empty());
        if let Some(runtime) = journal.iter().find_map(|e| match e {
            Event::RunStarted { runtime, .. } => Some(runtime.clone()),
            _ => None,
        }) {
            span.record("codeact.runtime", runtime.as_str());
        }
        let (sender, receiver) = mpsc::unbounded_channel::<(String, Event)>();
        let writer = tokio::spawn(write_journal(
            self.clone(),
            run.id.clone(),
            last + 1,
            receiver,
            cancel.clone(),
        ));
        // The sender is taken out when the work ends: a script a cancel cut short
        // may take a moment to stop (a JavaScript worker notices within 10 ms),
        // holding the listener, and must neither keep the journal open nor write
        // to it after the run's end.
        let sender = Arc::new(Mutex::new(Some(sender)));
        let slot = sender.clone();
        // The runtime, for the run's span: the listener keeps no handle on the
        // span, which would hold it open as long as a script a cancel cut short
        // keeps the listener.
        let runtime = Arc::new(std::sync::OnceLock::new());
        let started = runtime.clone();
        let listener: Listener = Arc::new(move |agent: &str, event: &Event| {
            if let Event::RunStarted { runtime, .. } = event {
                let _ = started.set(runtime.clone());
            }
            if let Some(sender) = slot.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
                let _ = sender.send((agent.to_string(), event.clone()));
            }
        });
        let ended = match self.config.agents.get(&run.agent).cloned() {
            Some(offered) => {
                let work = Work {
                    run: run.clone(),
                    offered,
                    limits: self.config.limits.clone(),
                    tool_timeout: self.config.tool_timeout,
                    job,
                    retake,
                    journal,
                    cancel,
                    listener,
                    span: span.clone(),
                };
                work.on_its_own_thread().await
            }
            None => failed(format!(
                "the agent '{}' is no longer configured on this server",
                run.agent
            )),
        };
        sender.lock().unwrap_or_else(|p| p.into_inner()).take();
        let _ = writer.await;
        if let Some(runtime) = runtime.get() {
            span.record("codeact.runtime", runtime.as_str());
        }
        ended
    }

    async fn store_end(&self, id: &str, ended: Ended) {
        match self.store.finish(id, &ended, self.owner.as_deref()).await {
            Ok(true) => {}
            Ok(false) => tracing::warn!("run {id}: its lease was lost; its end here is dropped"),
            Err(e) => tracing::error!("run {id}: cannot store its end: {e}"),
        }
    }
}

/// One piece of work on a run, with everything it needs: it runs on a thread
/// of its own, on a single-threaded runtime, where a script runs on the blocking
/// pool rather than in place. A cancel ends the run at once even while a script
/// is going on (the script is interrupted as at its time limit), and nothing it
/// does after the cancel is journalled.
struct Work {
    run: StoredRun,
    offered: OfferedAgent,
    limits: codeact_runtime::Limits,
    tool_timeout: std::time::Duration,
    job: Job,
    /// The job was claimed before by a worker that was lost or handed it back.
    retake: bool,
    /// The run's journal so far (empty for a new run).
    journal: Vec<Event>,
    cancel: CancellationToken,
    listener: Listener,
    /// The run's span, entered whenever the work is polled.
    span: tracing::Span,
}

impl Work {
    async fn on_its_own_thread(self) -> Ended {
        let (done, ended) = tokio::sync::oneshot::channel();
        let spawned = std::thread::Builder::new()
            .name("codeact-run".into())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime,
                    Err(e) => {
                        let _ = done.send(failed(format!("cannot start the run's runtime: {e}")));
                        return;
                    }
                };
                let span = self.span.clone();
                let ended = runtime.block_on(self.drive().instrument(span));
                let _ = done.send(ended);
                // A script a cancel interrupted may still be stopping on the
                // blocking pool: the runtime is not waited for.
                runtime.shutdown_background();
            });
        if let Err(e) = spawned {
            return failed(format!("cannot start the run's thread: {e}"));
        }
        ended
            .await
            .unwrap_or_else(|_| failed("the run's thread stopped without an outcome".into()))
    }

    async fn drive(self) -> Ended {
        let Work {
            run,
            offered,
            limits,
            tool_timeout,
            job,
            retake,
            journal,
            cancel,
            listener,
            span: _,
        } = self;
        let spec = match request_spec(run.output.as_ref()) {
            Ok(spec) => spec,
            Err(message) => return failed(message),
        };
        // Only a single agent outside a chat can stop on a call and be resumed
        // with a decision; elsewhere a call that needs approval is denied, saying
        // why, and the script can go on without it.
        let approver = if !offered.single {
            Approver::deny_all("calls that need approval are denied in team runs on this server")
        } else if run.chat {
            Approver::deny_all(
                "calls that need approval are denied in conversations on this server",
            )
        } else {
            Approver::defer_all()
        };
        let agent_listener = listener.clone();
        let configure = |builder: codeact::agent::AgentBuilder| {
            builder
                .stream(true)
                .listener(agent_listener.clone())
                .on_approval(approver.clone())
        };
        let loaded = if offered.shared_workdir {
            load_team(&offered.team, &limits, tool_timeout, configure)
        } else {
            load_team_for_run(&offered.team, &limits, tool_timeout, &run.id, configure)
        };
        let loaded = match loaded {
            Ok(loaded) => loaded,
            Err(e) => return failed(e.to_string()),
        };
        if offered.single {
            let agent = match loaded.builder.into_agent(&offered.entry) {
                Ok(agent) => agent,
                Err(e) => return failed(e.to_string()),
            };
            drive_agent(&run, &agent, job, retake, &journal, spec, cancel).await
        } else {
            let team = match loaded.builder.team_listener(listener).build() {
                Ok(team) => team,
                Err(e) => return failed(e.to_string()),
            };
            if !journal.is_empty() {
                return Ended {
                    status: Status::Interrupted,
                    error: Some(
                        "a team run cannot be resumed after its worker was lost or stopped".into(),
                    ),
                    ..failed(String::new())
                };
            }
            drive_team(&run, &team, &offered.entry, job, spec, cancel).await
        }
    }
}

async fn drive_agent(
    run: &StoredRun,
    agent: &Agent,
    job: Job,
    retake: bool,
    journal: &[Event],
    spec: OutputSpec,
    cancel: CancellationToken,
) -> Ended {
    if run.chat {
        return drive_chat(run, agent, job, retake, journal, cancel).await;
    }
    // Nothing done yet that a fresh start would repeat (a worker lost right
    // after the run started): the run starts over.
    let acted = journal
        .iter()
        .any(|e| matches!(e, Event::ScriptStarted { .. } | Event::ToolCall { .. }));
    if journal.is_empty() || (!acted && matches!(job, Job::Start)) {
        return match job {
            Job::Start => ended_agent(
                agent
                    .request(run.task.clone())
                    .output(spec)
                    .cancel_on(cancel)
                    .run()
                    .await,
                false,
            ),
            Job::Decide { .. } => failed("the run has no journal to resume".into()),
            Job::Message { .. } => failed("only a chat takes messages".into()),
        };
    }
    // A journal: the run stopped on an approval, or its worker was lost. Its
    // finished scripts are re-run with their recorded tool results, and it
    // goes on from there.
    // Taken over from a worker lost after the run ended but before it stored
    // that: the end is the journal's (unless that end is the wait for the
    // decision this job carries).
    if retake
        && let Some(ended) = journalled_end(journal)
        && ended.status != Status::AwaitingApproval
    {
        return ended;
    }
    let point = match ResumePoint::from_events(journal) {
        Ok(point) => point,
        Err(e) => return failed(format!("cannot resume the run: {e}")),
    };
    let request = agent.resume_request(&point);
    let request = match job {
        Job::Decide {
            tool,
            args,
            approved,
            reason,
            by,
        } if point.pending_approval.is_some() => {
            let decision = if approved {
                ApprovalDecision::approve()
            } else {
                ApprovalDecision::deny(reason.unwrap_or_else(|| "denied".into()))
            };
            request.grant(tool, args, decision.by(by))
        }
        // Taken over after the decision was journalled (its call made, or
        // refused), or a run that never stopped on one.
        Job::Decide { .. } | Job::Start => request,
        Job::Message { .. } => return failed("only a chat takes messages".into()),
    };
    ended_agent(request.output(spec).cancel_on(cancel).run().await, false)
}

async fn drive_chat(
    run: &StoredRun,
    agent: &Agent,
    job: Job,
    retake: bool,
    journal: &[Event],
    cancel: CancellationToken,
) -> Ended {
    if matches!(job, Job::Decide { .. }) {
        return failed("a conversation does not wait for approvals".into());
    }
    if journal.is_empty() {
        let message = match job {
            Job::Message { message } => message,
            _ => run.task.clone(),
        };
        return match agent.chat() {
            Ok(mut chat) => {
                chat.cancel_on(cancel);
                ended_agent(chat.send(&message).await, true)
            }
            Err(e) => failed(e.to_string()),
        };
    }
    let point = match ResumePoint::from_chat_events(journal) {
        Ok(point) => point,
        Err(e) => return failed(format!("cannot continue the chat: {e}")),
    };
    // A turn cut short (a cancel, a restart, a lost worker) is finished first.
    // Taken over, that turn is this job's own (its message was journalled before
    // the worker was lost), and it is the answer; otherwise the message is the
    // next turn.
    let (mut chat, cut_short) = match agent.resume_chat(&point).await {
        Ok(resumed) => resumed,
        Err(e) => return failed(e.to_string()),
    };
    let message = match job {
        Job::Message { message } => message,
        _ => {
            return match cut_short {
                Some(result) => ended_agent(Ok(result), true),
                None => failed("the first turn ended before its worker was lost".into()),
            };
        }
    };
    if retake && let Some(result) = cut_short {
        return ended_agent(Ok(result), true);
    }
    chat.cancel_on(cancel);
    ended_agent(chat.send(&message).await, true)
}

async fn drive_team(
    run: &StoredRun,
    team: &Team,
    entry: &str,
    job: Job,
    spec: OutputSpec,
    cancel: CancellationToken,
) -> Ended {
    if !matches!(job, Job::Start) {
        return failed("a team run takes neither approvals nor messages".into());
    }
    let request = team
        .request(entry, &run.task)
        .output(spec)
        .cancel_on(cancel);
    match request.run().await {
        Ok(TeamRun {
            outcome,
            steps,
            usage,
            final_output,
            ..
        }) => {
            let status = match &outcome {
                TeamOutcome::Finished { outcome, .. } => status_of(outcome, false),
                TeamOutcome::TransferLimit { .. } => Status::Finished,
                // An ending the library adds later: the run is over either way.
                _ => Status::Finished,
            };
            Ended {
                status,
                outcome: serde_json::to_value(&outcome).ok(),
                final_output: final_output.and_then(|f| serde_json::to_value(f).ok()),
                usage: serde_json::to_value(usage).ok(),
                steps,
                error: None,
            }
        }
        Err(e) => failed(e.to_string()),
    }
}

/// The kind of outcome a piece of work ended with (`final_result`,
/// `awaiting_approval`, `step_limit`…), `none` without one (a failure).
fn outcome_kind(ended: &Ended) -> &str {
    ended
        .outcome
        .as_ref()
        .and_then(|o| o.get("outcome"))
        .and_then(Value::as_str)
        .unwrap_or("none")
}

/// Records how a piece of work ended in its `run` span.
fn record_end(span: &tracing::Span, ended: &Ended) {
    if span.is_disabled() {
        return;
    }
    span.record("codeact.status", ended.status.as_str());
    span.record("codeact.outcome", outcome_kind(ended));
    span.record("codeact.steps", codeact::agent::spans::int(ended.steps));
    let tokens = |field: &str| {
        ended
            .usage
            .as_ref()
            .and_then(|usage| usage.get(field))
            .and_then(Value::as_u64)
    };
    if let Some(n) = tokens("input_tokens") {
        span.record("gen_ai.usage.input_tokens", codeact::agent::spans::int(n));
    }
    if let Some(n) = tokens("output_tokens") {
        span.record("gen_ai.usage.output_tokens", codeact::agent::spans::int(n));
    }
    if let Some(error) = &ended.error {
        codeact::agent::spans::record_error(span, error);
    }
}

/// How a plain run ended, from a journal whose last event is its `finished`.
fn journalled_end(journal: &[Event]) -> Option<Ended> {
    let Some(Event::Finished {
        outcome,
        steps,
        usage,
    }) = journal.last()
    else {
        return None;
    };
    let final_output = journal.iter().rev().find_map(|e| match e {
        Event::FinalOutput { output } => serde_json::to_value(output).ok(),
        _ => None,
    });
    Some(Ended {
        status: status_of(outcome, false),
        outcome: serde_json::to_value(outcome).ok(),
        final_output,
        usage: serde_json::to_value(usage).ok(),
        steps: *steps,
        error: None,
    })
}

/// The status a run's outcome leaves it in.
fn status_of(outcome: &Outcome, chat: bool) -> Status {
    match outcome {
        Outcome::AwaitingApproval { .. } => Status::AwaitingApproval,
        Outcome::Cancelled => Status::Cancelled,
        Outcome::FinalResult { .. }
        | Outcome::Transfer { .. }
        | Outcome::StepLimit { .. }
        | Outcome::ErrorBudget { .. }
        | Outcome::RefusalBudget { .. }
        | Outcome::Refused { .. }
        | Outcome::ContextWindowExceeded
        | Outcome::ToolCallBudget { .. }
        | Outcome::JournalBudget { .. }
        | Outcome::TokenBudget { .. }
        | Outcome::DeadlineExceeded { .. } => {
            if chat {
                Status::AwaitingMessage
            } else {
                Status::Finished
            }
        }
        _ => Status::Finished,
    }
}

fn ended_agent(result: Result<RunResult, AgentError>, chat: bool) -> Ended {
    match result {
        Ok(run) => Ended {
            status: status_of(&run.outcome, chat),
            outcome: serde_json::to_value(&run.outcome).ok(),
            final_output: run.final_output.and_then(|f| serde_json::to_value(f).ok()),
            usage: serde_json::to_value(run.usage).ok(),
            steps: run.steps,
            error: None,
        },
        Err(e) => failed(e.to_string()),
    }
}

fn failed(error: String) -> Ended {
    Ended {
        status: Status::Failed,
        outcome: None,
        final_output: None,
        usage: None,
        steps: 0,
        error: Some(error),
    }
}

/// The request level of the output spec from what the client gave (checked when
/// the run was created, so this fails only if the stored row was altered).
fn request_spec(output: Option<&Value>) -> Result<OutputSpec, String> {
    match output {
        None => Ok(OutputSpec::default()),
        Some(value) => serde_json::from_value::<OutputRequest>(value.clone())
            .map(OutputRequest::into_spec)
            .map_err(|e| format!("the stored output spec is unreadable: {e}")),
    }
}

/// Writes the events `receiver` gets into the run's journal, numbered from
/// `first`, telling viewers after each. A write that fails is logged and the
/// event skipped; the run goes on. A write refused because this worker lost
/// the run's lease cancels the work: another worker has the run now.
async fn write_journal(
    runs: Arc<Runs>,
    id: String,
    first: i64,
    mut receiver: mpsc::UnboundedReceiver<(String, Event)>,
    cancel: CancellationToken,
) {
    let mut seq = first;
    while let Some((agent, event)) = receiver.recv().await {
        match runs
            .store
            .append(&id, seq, &agent, &event, runs.owner.as_deref())
            .await
        {
            Ok(true) => seq += 1,
            Ok(false) => {
                tracing::warn!("run {id}: its lease was lost; stopping the work on it here");
                cancel.cancel();
            }
            Err(e) => tracing::error!("run {id}: cannot journal an event: {e}"),
        }
        runs.notify(&id);
    }
}

/// The JSON body of a call awaited, from a stored outcome.
pub(crate) fn awaited_call(outcome: Option<&Value>) -> Option<(String, String, Value)> {
    let outcome = outcome?;
    if outcome.get("outcome")? != &json!("awaiting_approval") {
        return None;
    }
    Some((
        outcome.get("id")?.as_str()?.to_string(),
        outcome.get("tool")?.as_str()?.to_string(),
        outcome.get("args").cloned().unwrap_or(Value::Null),
    ))
}

/// The request level of the output spec a client may give: what a final result
/// must look like. No validator: that is a file on the server, which only its
/// config names.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct OutputRequest {
    /// A format label shown to the model; `json` means it must parse as JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    format: Option<String>,
    /// What the result should contain, in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    instructions: Option<String>,
    /// An example result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    example: Option<String>,
    /// A JSON Schema the result must match (no remote `$ref`s are fetched).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    schema: Option<Value>,
}

impl OutputRequest {
    pub(crate) fn into_spec(self) -> OutputSpec {
        OutputSpec {
            format: self.format,
            instructions: self.instructions,
            example: self.example,
            schema: self.schema,
            ..OutputSpec::default()
        }
    }
}

/// How often `codeact.queue.depth` is read from the store while exporting: 10 s.
pub(crate) const QUEUE_SAMPLE_EVERY: Duration = Duration::from_secs(10);

/// Reads the store's queue depth into `codeact.queue.depth` every
/// [`QUEUE_SAMPLE_EVERY`], from the start; runs only while exporting (one
/// `COUNT` query per sample).
pub(crate) async fn sample_queue(runs: Arc<Runs>) {
    loop {
        match runs.store.counts_by_status().await {
            Ok((queued, running)) => runs.metrics.queue_depth(queued, running),
            Err(e) => tracing::debug!("telemetry: cannot read the queue depth: {e}"),
        }
        tokio::time::sleep(QUEUE_SAMPLE_EVERY).await;
    }
}
