//! The ways to start a run (a task, a task with a request-level output spec, a
//! typed answer, a transcript to resume), and what every run does around the
//! loop: load the contract, pick the system prompt, build the conversation,
//! report the start and the end.

use std::sync::Arc;

use serde_json::Value;

use super::{Agent, AgentError, RequestOutput, RunResult, TypedRun};
use crate::agent::approval::ApprovalDecision;
use crate::agent::decide::Conversation;
use crate::agent::events::Event;
use crate::agent::outcome::Outcome;
use crate::agent::resume::ResumePoint;
use crate::output::answer::FinalAnswer;
use crate::output::spec::{OutputSpec, structured};
use crate::prompts::TransferTarget;

/// How a run begins: with a task, or where a transcript left off.
#[derive(Clone, Copy)]
enum Start<'a> {
    Fresh(&'a str),
    Resume(&'a ResumePoint),
}

/// One run of an agent, with its options: what it starts from (a task, or a
/// transcript to resume), the request level of the output spec, and a token that
/// cancels it. Made by [`Agent::request`] or [`Agent::resume_request`]; the
/// shorthands [`Agent::run`], [`Agent::run_with_output`], [`Agent::run_typed`] and
/// [`Agent::resume`] are requests without the options they do not name.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::sync::Arc;
/// use codeact::model::ReplayModel;
/// use codeact::{Agent, CancellationToken, Limits, Outcome, OutputSpec, RhaiRuntime};
///
/// let model = ReplayModel::new(["```rhai\nfinal_result(\"4\")\n```"]);
/// let agent = Agent::builder(Arc::new(model), Arc::new(RhaiRuntime::new(Limits::default()))).build()?;
/// let cancel = CancellationToken::new(); // cancel() it from anywhere to stop the run
/// let run = agent
///     .request("Add 2 and 2.")
///     .output(OutputSpec { format: Some("text".into()), ..OutputSpec::default() })
///     .cancel_on(cancel.clone())
///     .run()
///     .await?;
/// assert_eq!(run.outcome, Outcome::FinalResult { value: serde_json::json!("4") });
/// # Ok(())
/// # }
/// ```
#[must_use = "a request does nothing until `.run()` or `.typed()` is awaited"]
pub struct RunRequest<'a> {
    agent: &'a Agent,
    start: OwnedStart<'a>,
    options: RequestOutput,
}

/// What [`RunRequest::events`] yields: each event as it happens (with the agent
/// that reported it), then the run's result, last.
#[derive(Debug)]
#[non_exhaustive]
pub enum RunItem {
    /// Something happened in the run.
    Event {
        /// The agent that reported it.
        agent: String,
        /// What happened.
        event: Event,
    },
    /// The run ended: the last item.
    Finished(Result<RunResult, AgentError>),
}

enum OwnedStart<'a> {
    Fresh(String),
    Resume(&'a ResumePoint),
}

impl<'a> RunRequest<'a> {
    /// The request level of the output spec: it overrides the agent's (and
    /// stage's) spec field by field, and is loaded (schema and validator compiled)
    /// before the first model call. Default: none.
    pub fn output(mut self, spec: OutputSpec) -> Self {
        self.options.spec = spec;
        self
    }

    /// Stops the run when `token` is cancelled, with [`Outcome::Cancelled`]: at
    /// once when it waits for the model (the call is dropped) or between steps; a
    /// script already running ends first, at the latest at its time limit. The
    /// transcript can be resumed. Default: none.
    pub fn cancel_on(mut self, token: tokio_util::sync::CancellationToken) -> Self {
        self.options.cancel = Some(token);
        self
    }

    /// A decision made ahead for a call of `tool` with exactly `args`: when the
    /// run's script makes that call, it takes this decision instead of asking the
    /// approver (once). For resuming a run that stopped with
    /// [`Outcome::AwaitingApproval`]: pass the pending call's tool and arguments
    /// (from [`ResumePoint::pending_approval`](crate::ResumePoint::pending_approval))
    /// and the decision; a call with other arguments is asked about again.
    /// Default: none.
    pub fn grant(
        mut self,
        tool: impl Into<String>,
        args: serde_json::Value,
        decision: ApprovalDecision,
    ) -> Self {
        self.options.grants.push(crate::agent::approval::Grant {
            tool: tool.into(),
            args,
            decision,
        });
        self
    }

    /// Keeps the session's snapshot in `dir` after each step whose script
    /// finished (for a runtime that can snapshot its sessions: see its
    /// capability table), as `RUN.step-N.snapshot`, the run's earlier one
    /// removed; each is recorded as an [`Event::SnapshotKept`], or an
    /// [`Event::SnapshotFailed`] saying why not. A resumed run
    /// ([`Agent::resume_request`]) restores its session from the snapshot of the
    /// transcript's last finished step instead of re-running the scripts, and
    /// falls back to re-running them when there is none, or the runtime refuses
    /// it (another runtime, guest or codeact version, a damaged file): its
    /// [`Event::Resumed`] says which way, and why. A snapshot costs a copy of
    /// the session's state and a file written per step (a wasm guest's whole
    /// linear memory, tens of MB for a session holding much data). Default:
    /// none.
    pub fn snapshot_dir(mut self, dir: crate::agent::snapshots::SnapshotDir) -> Self {
        self.options.snapshots = Some(dir);
        self
    }

    /// Runs to an outcome, yielding each event as it happens (text deltas,
    /// scripts, observations, tool calls: what a listener hears, in the same
    /// order) and last the run's result; for an app that forwards a run to a UI
    /// (SSE, a websocket) without callbacks or threads. The run makes progress
    /// only while the stream is polled.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::sync::Arc;
    /// use futures_util::StreamExt;
    /// use codeact::model::ReplayModel;
    /// use codeact::{Agent, Event, Limits, RhaiRuntime};
    /// use codeact::agent::RunItem;
    ///
    /// let model = ReplayModel::new(["```rhai\nfinal_result(4)\n```"]);
    /// let agent = Agent::builder(Arc::new(model), Arc::new(RhaiRuntime::new(Limits::default()))).build()?;
    /// let mut items = Box::pin(agent.request("Add 2 and 2.").events());
    /// let mut scripts = 0;
    /// while let Some(item) = items.next().await {
    ///     match item {
    ///         RunItem::Event { event: Event::ScriptStarted { .. }, .. } => scripts += 1,
    ///         RunItem::Finished(run) => assert_eq!(run?.steps, 1),
    ///         _ => {}
    ///     }
    /// }
    /// assert_eq!(scripts, 1);
    /// # Ok(())
    /// # }
    /// ```
    pub fn events(mut self) -> impl futures_util::Stream<Item = RunItem> + 'a {
        let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
        self.options
            .listeners
            .push(Arc::new(move |agent: &str, event: &Event| {
                let _ = sender.send(RunItem::Event {
                    agent: agent.to_string(),
                    event: event.clone(),
                });
            }));
        let run: std::pin::Pin<Box<dyn std::future::Future<Output = _> + Send + 'a>> =
            Box::pin(self.run());
        futures_util::stream::unfold(
            (Some(run), receiver, None),
            |(mut run, mut receiver, mut finished)| async move {
                loop {
                    // What happened first, then how it ended, then nothing.
                    if let Ok(item) = receiver.try_recv() {
                        return Some((item, (run, receiver, finished)));
                    }
                    if let Some(result) = finished.take() {
                        return Some((RunItem::Finished(result), (None, receiver, None)));
                    }
                    let running = run.as_mut()?;
                    tokio::select! {
                        biased;
                        Some(item) = receiver.recv() => {
                            return Some((item, (run, receiver, finished)));
                        }
                        result = running => {
                            run = None;
                            finished = Some(result);
                        }
                    }
                }
            },
        )
    }

    /// Runs to an outcome.
    pub async fn run(self) -> Result<RunResult, AgentError> {
        let agent = self.agent;
        let start = match &self.start {
            OwnedStart::Fresh(task) => Start::Fresh(task),
            OwnedStart::Resume(point) => Start::Resume(point),
        };
        agent.run_from(start, &agent.targets, &self.options).await
    }

    /// Runs for an answer of type `T`: the request asks for format `json` with
    /// `T`'s generated JSON Schema (replacing any [`output`](Self::output)), and a
    /// result that does not deserialize into `T` is refused like one that fails
    /// the schema.
    pub async fn typed<T: FinalAnswer + 'static>(mut self) -> Result<TypedRun<T>, AgentError> {
        self.options.spec = OutputSpec {
            format: Some("json".into()),
            schema: Some(T::answer_schema()),
            ..OutputSpec::default()
        };
        self.options.extra = Some(Arc::new(|value: &Value| {
            serde_json::from_value::<T>(value.clone())
                .map(|_| ())
                .map_err(|e| e.to_string())
        }));
        let run = self.run().await?;
        let answer = match &run.outcome {
            Outcome::FinalResult { value } => structured(value, true)
                .ok()
                .and_then(|value| serde_json::from_value(value).ok()),
            _ => None,
        };
        Ok(TypedRun { answer, run })
    }
}

impl Agent {
    /// A run of `task` in a fresh session, to set options on and then run.
    pub fn request(&self, task: impl Into<String>) -> RunRequest<'_> {
        RunRequest {
            agent: self,
            start: OwnedStart::Fresh(task.into()),
            options: RequestOutput::default(),
        }
    }

    /// A run continuing where `point`'s transcript left off (see
    /// [`resume`](Self::resume)), to set options on and then run.
    pub fn resume_request<'a>(&'a self, point: &'a ResumePoint) -> RunRequest<'a> {
        RunRequest {
            agent: self,
            start: OwnedStart::Resume(point),
            options: RequestOutput::default(),
        }
    }

    /// Runs `task` to an outcome in a fresh session: `self.request(task).run()`.
    pub async fn run(&self, task: &str) -> Result<RunResult, AgentError> {
        self.request(task).run().await
    }

    /// Runs `task` with `request` as the request level of the output spec:
    /// `self.request(task).output(request.clone()).run()`.
    pub async fn run_with_output(
        &self,
        task: &str,
        request: &OutputSpec,
    ) -> Result<RunResult, AgentError> {
        self.request(task).output(request.clone()).run().await
    }

    /// Runs `task` for an answer of type `T`: `self.request(task).typed::<T>()`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::sync::Arc;
    /// use codeact::model::ReplayModel;
    /// use codeact::{Agent, FinalAnswer, Limits, RhaiRuntime, UntrustedText};
    ///
    /// #[derive(serde::Deserialize, schemars::JsonSchema, FinalAnswer)]
    /// struct Sum { total: i64, note: UntrustedText }
    ///
    /// let model = ReplayModel::new([
    ///     "```rhai\nfinal_result(#{total: \"4\"})\n```",
    ///     "```rhai\nfinal_result(#{total: 4, note: \"2 + 2\"})\n```",
    /// ]);
    /// let agent = Agent::builder(Arc::new(model), Arc::new(RhaiRuntime::new(Limits::default()))).build()?;
    /// let run = agent.run_typed::<Sum>("Add 2 and 2.").await?;
    /// let sum = run.answer.expect("the second result fits");
    /// assert_eq!((sum.total, sum.note.raw()), (4, "2 + 2"));
    /// # Ok(())
    /// # }
    /// ```
    pub async fn run_typed<T: FinalAnswer + 'static>(
        &self,
        task: &str,
    ) -> Result<TypedRun<T>, AgentError> {
        self.request(task).typed::<T>().await
    }

    /// Runs a conversation that opens with `first_message`, offering `targets` as
    /// the agents to hand over to (a team narrows them per handover), with
    /// `request` as the request level of the output spec. The system prompt is
    /// re-rendered only when targets or spec differ from the agent's own.
    pub(crate) async fn run_with(
        &self,
        first_message: &str,
        targets: &[TransferTarget],
        request: &RequestOutput,
    ) -> Result<RunResult, AgentError> {
        self.run_from(Start::Fresh(first_message), targets, request)
            .await
    }

    /// Continues the interrupted run `point` was read from (see
    /// [`ResumePoint`]): the finished scripts run again in a fresh session with
    /// their recorded tool results, without calling the tools, and the loop goes
    /// on from the step that was cut short, or the next one. Events continue the
    /// transcript: a [`Event::Resumed`] first, no second `RunStarted`. `request`
    /// is the request level of the output spec, as for
    /// [`run_with_output`](Self::run_with_output).
    pub async fn resume(
        &self,
        point: &ResumePoint,
        request: &OutputSpec,
    ) -> Result<RunResult, AgentError> {
        self.resume_request(point)
            .output(request.clone())
            .run()
            .await
    }

    async fn run_from(
        &self,
        start: Start<'_>,
        targets: &[TransferTarget],
        request: &RequestOutput,
    ) -> Result<RunResult, AgentError> {
        if request.listeners.is_empty() {
            return self.run_core(start, targets, request).await;
        }
        // The run's own listeners hear what the agent's do, after them.
        let mut agent = self.clone();
        agent.listeners.extend(request.listeners.iter().cloned());
        agent.run_core(start, targets, request).await
    }

    async fn run_core(
        &self,
        start: Start<'_>,
        targets: &[TransferTarget],
        request: &RequestOutput,
    ) -> Result<RunResult, AgentError> {
        let contract = if request.is_empty() {
            self.contract.clone()
        } else {
            let contract = self.output.overlaid_with(&request.spec).load()?;
            match &request.extra {
                Some(extra) => contract.with_extra_check(extra.clone()),
                None => contract,
            }
        };
        let system_prompt = if targets == self.targets.as_slice() && request.spec.is_empty() {
            self.system_prompt.clone()
        } else {
            self.render_prompt(targets, contract.spec())?
        };
        let working_dir = match &self.working_dir {
            Some(dir) => dir.clone(),
            None => std::env::current_dir().map_err(|e| {
                AgentError::Setup(format!("cannot read the working directory: {e}"))
            })?,
        };
        let tags = self.runtime.info().fence_tags;
        let (conversation, resume) = match start {
            Start::Fresh(first_message) => (
                Conversation::new(first_message, tags, self.config.clone()),
                None,
            ),
            Start::Resume(point) => (
                Conversation::resumed(point.progress(), tags, self.config.clone()),
                Some(point),
            ),
        };
        let specs = codeact_runtime::ToolDispatch::specs(&*self.tools);
        let mut conversation = conversation
            .with_transfer_targets(
                targets.iter().map(|t| t.name.clone()).collect(),
                self.name.clone(),
            )
            .with_tools(
                specs
                    .iter()
                    .map(|spec| (spec.name.clone(), self.runtime.tool_signature(spec))),
            )
            .with_tool_descriptions(
                specs
                    .iter()
                    .map(|spec| (spec.name.clone(), spec.description.clone())),
            )
            .with_prompts(self.prompts.clone())
            .with_coach(self.coach.clone())
            .with_language(self.runtime.info().language);
        if resume.is_none() {
            self.emit(|| Event::RunStarted {
                model: self.model.label(),
                runtime: self.runtime.info().name.to_string(),
                system_prompt: system_prompt.clone(),
            });
        }
        let result = self
            .drive(
                &mut conversation,
                &system_prompt,
                &contract,
                &working_dir,
                resume,
                request,
            )
            .await;
        if let Err(error) = &result {
            self.emit(|| conversation.failed(error.to_string()));
        }
        let (outcome, final_output) = result?;
        self.emit(|| conversation.finished(outcome.clone()));
        Ok(RunResult {
            outcome,
            steps: conversation.steps(),
            usage: conversation.usage(),
            messages: conversation.messages().to_vec(),
            final_output,
        })
    }
}
