//! The work on runs: starting one, continuing one after an approval or with a
//! chat's next message, cancelling one. Each piece of work is a task that loads
//! the configured agent afresh (its own session, its own temporary working
//! directory), journals every event into the store as it happens, and stores how
//! it ended. Nothing but the journal carries a run from one piece of work to the
//! next, so a run continued after a restart continues the same way.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::CancellationToken;

use super::config::{OfferedAgent, ServeConfig};
use super::store::{Ended, RunRecord, Status, Store};
use crate::agent::approval::{ApprovalDecision, Approver};
use crate::agent::driver::{Agent, AgentError, RunResult};
use crate::agent::events::{Event, Listener};
use crate::agent::outcome::Outcome;
use crate::agent::resume::ResumePoint;
use crate::agent::team::{Team, TeamOutcome, TeamRun};
use crate::agent::team_config::load_team;
use crate::output::spec::OutputSpec;

/// What a piece of work on a run does.
#[derive(Debug)]
pub(crate) enum Job {
    /// Run the task from the start (a chat: its first turn).
    Start,
    /// Go on from the journal with a decision for the call the run waits on.
    Decide {
        tool: String,
        args: Value,
        decision: ApprovalDecision,
    },
    /// A chat's next turn, from the journal.
    Message(String),
}

/// The runs this server works on, the store they live in, and who to tell when a
/// journal grows.
pub(crate) struct Runs {
    pub store: Store,
    pub config: Arc<ServeConfig>,
    /// The cancel token of every run a task works on now.
    live: Mutex<HashMap<String, CancellationToken>>,
    /// The id of a run whose journal or status just changed (SSE viewers wait on
    /// it; a viewer that lags reads the store again, which is the truth anyway).
    changed: broadcast::Sender<String>,
}

impl std::fmt::Debug for Runs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runs").finish_non_exhaustive()
    }
}

impl Runs {
    pub(crate) fn new(store: Store, config: Arc<ServeConfig>) -> Arc<Self> {
        let (changed, _) = broadcast::channel(1024);
        Arc::new(Self {
            store,
            config,
            live: Mutex::new(HashMap::new()),
            changed,
        })
    }

    /// Hears the ids of runs that changed.
    pub(crate) fn subscribe(&self) -> broadcast::Receiver<String> {
        self.changed.subscribe()
    }

    fn notify(&self, id: &str) {
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

    /// Starts `job` on `run`, which the caller has set `running`.
    pub(crate) fn spawn(self: &Arc<Self>, run: RunRecord, job: Job) {
        let cancel = CancellationToken::new();
        self.live
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(run.id.clone(), cancel.clone());
        let runs = self.clone();
        tokio::spawn(async move {
            let id = run.id.clone();
            runs.work(run, job, cancel).await;
            runs.live
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&id);
            runs.notify(&id);
        });
    }

    /// Does `job`, journalling as it goes, then stores how it ended: after the
    /// last event is written, so a viewer that sees the end has seen every event.
    async fn work(self: &Arc<Self>, run: RunRecord, job: Job, cancel: CancellationToken) {
        let first = match self.store.last_seq(&run.id).await {
            Ok(last) => last + 1,
            Err(e) => {
                tracing::error!("run {}: {e}", run.id);
                return self.store_end(&run.id, failed(e.to_string())).await;
            }
        };
        let (sender, receiver) = mpsc::unbounded_channel::<(String, Event)>();
        let writer = tokio::spawn(write_journal(self.clone(), run.id.clone(), first, receiver));
        // The sender is taken out when the work ends: a script a cancel cut short
        // may take a moment to stop (a JavaScript worker notices within 10 ms),
        // holding the listener, and must neither keep the journal open nor write
        // to it after the run's end.
        let sender = Arc::new(Mutex::new(Some(sender)));
        let slot = sender.clone();
        let listener: Listener = Arc::new(move |agent: &str, event: &Event| {
            if let Some(sender) = slot.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
                let _ = sender.send((agent.to_string(), event.clone()));
            }
        });
        let ended = match self.config.agents.get(&run.agent).cloned() {
            Some(offered) => {
                // What resumes a run is its journal, read here, on the server's
                // runtime, where the store lives.
                let journal = match &job {
                    Job::Start => Ok(Vec::new()),
                    Job::Decide { .. } | Job::Message(_) => self.store.journal(&run.id).await,
                };
                match journal {
                    Ok(journal) => {
                        let work = Work {
                            run: run.clone(),
                            offered,
                            limits: self.config.limits.clone(),
                            tool_timeout: self.config.tool_timeout,
                            job,
                            journal,
                            cancel,
                            listener,
                        };
                        work.on_its_own_thread().await
                    }
                    Err(e) => failed(e.to_string()),
                }
            }
            None => failed(format!(
                "the agent '{}' is no longer configured on this server",
                run.agent
            )),
        };
        sender.lock().unwrap_or_else(|p| p.into_inner()).take();
        let _ = writer.await;
        self.store_end(&run.id, ended).await;
    }

    async fn store_end(&self, id: &str, ended: Ended) {
        if let Err(e) = self.store.finish(id, &ended).await {
            tracing::error!("run {id}: cannot store its end: {e}");
        }
    }
}

/// One piece of work on a run, with everything it needs: it runs on a thread
/// of its own, on a single-threaded runtime, where a script runs on the blocking
/// pool rather than in place. A cancel ends the run at once even while a script
/// is going on (the script is interrupted as at its time limit), and nothing it
/// does after the cancel is journalled.
struct Work {
    run: RunRecord,
    offered: OfferedAgent,
    limits: codeact_runtime::Limits,
    tool_timeout: std::time::Duration,
    job: Job,
    /// The run's journal so far (empty for a new run).
    journal: Vec<Event>,
    cancel: CancellationToken,
    listener: Listener,
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
                let ended = runtime.block_on(self.drive());
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
            journal,
            cancel,
            listener,
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
        let loaded = load_team(&offered.team, &limits, tool_timeout, |builder| {
            builder
                .stream(true)
                .listener(agent_listener.clone())
                .on_approval(approver.clone())
        });
        let loaded = match loaded {
            Ok(loaded) => loaded,
            Err(e) => return failed(e.to_string()),
        };
        if offered.single {
            let agent = match loaded.builder.into_agent(&offered.entry) {
                Ok(agent) => agent,
                Err(e) => return failed(e.to_string()),
            };
            drive_agent(&run, &agent, job, &journal, spec, cancel).await
        } else {
            let team = match loaded.builder.team_listener(listener).build() {
                Ok(team) => team,
                Err(e) => return failed(e.to_string()),
            };
            drive_team(&run, &team, &offered.entry, job, spec, cancel).await
        }
    }
}

async fn drive_agent(
    run: &RunRecord,
    agent: &Agent,
    job: Job,
    journal: &[Event],
    spec: OutputSpec,
    cancel: CancellationToken,
) -> Ended {
    if run.chat {
        let chat = match job {
            Job::Start => agent.chat().map(|chat| (chat, None::<String>)),
            Job::Message(message) => {
                let point = match ResumePoint::from_chat_events(journal) {
                    Ok(point) => point,
                    Err(e) => return failed(format!("cannot continue the chat: {e}")),
                };
                // A turn cut short (a cancel, a restart) is finished first,
                // then the message is the next turn.
                agent
                    .resume_chat(&point)
                    .await
                    .map(|(chat, _)| (chat, Some(message)))
            }
            Job::Decide { .. } => {
                return failed("a conversation does not wait for approvals".into());
            }
        };
        let (mut chat, message) = match chat {
            Ok(started) => started,
            Err(e) => return failed(e.to_string()),
        };
        chat.cancel_on(cancel);
        let message = message.unwrap_or_else(|| run.task.clone());
        return ended_agent(chat.send(&message).await, true);
    }
    let point;
    let request = match job {
        Job::Start => agent.request(run.task.clone()),
        Job::Decide {
            tool,
            args,
            decision,
        } => {
            point = match ResumePoint::from_events(journal) {
                Ok(point) => point,
                Err(e) => return failed(format!("cannot resume the run: {e}")),
            };
            agent.resume_request(&point).grant(tool, args, decision)
        }
        Job::Message(_) => return failed("only a chat takes messages".into()),
    };
    ended_agent(request.output(spec).cancel_on(cancel).run().await, false)
}

async fn drive_team(
    run: &RunRecord,
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
        | Outcome::TokenBudget { .. }
        | Outcome::DeadlineExceeded { .. } => {
            if chat {
                Status::AwaitingMessage
            } else {
                Status::Finished
            }
        }
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
        Some(value) => serde_json::from_value::<super::api::OutputRequest>(value.clone())
            .map(super::api::OutputRequest::into_spec)
            .map_err(|e| format!("the stored output spec is unreadable: {e}")),
    }
}

/// Writes the events `receiver` gets into the run's journal, numbered from
/// `first`, telling viewers after each. A write that fails is logged and the
/// event skipped; the run goes on.
async fn write_journal(
    runs: Arc<Runs>,
    id: String,
    first: i64,
    mut receiver: mpsc::UnboundedReceiver<(String, Event)>,
) {
    let mut seq = first;
    while let Some((agent, event)) = receiver.recv().await {
        match runs.store.append(&id, seq, &agent, &event).await {
            Ok(()) => seq += 1,
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
