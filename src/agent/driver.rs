//! The thin async driver: asks the model, runs scripts, reports events, and lets
//! [`Conversation`] decide everything else.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use codeact_runtime::{HostError, Runtime};
use serde_json::Value;
use tracing::Instrument;

use super::decide::{Conversation, LoopConfig, Next};
use super::events::{Event, Listener};
use super::outcome::Outcome;
use super::resume::{HostTools, ResumePoint};
use crate::chat::{Message, ModelRequest, StreamEvent, Usage};
use crate::exec::session::ScriptSession;
use crate::model::{ModelClient, ModelError};
use crate::output::answer::FinalAnswer;
use crate::output::final_output::{FinalOutput, Validation, artifact_path};
use crate::output::script_output::ScriptOutput;
use crate::output::spec::{
    Check, OutputContract, OutputSpec, OutputSpecError, RefusedBy, content_text,
};
use crate::output::spec::{ExtraCheck, structured};
use crate::prompts::{PromptError, TransferTarget, render_system_prompt};
use crate::tools::toolbox::ToolBox;

/// A CodeAct agent: a model, a runtime, tools, and the loop's rules.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::sync::Arc;
/// use codeact::{Agent, Limits, Outcome, RhaiRuntime, Tool};
/// use codeact::model::ReplayModel;
///
/// let model = ReplayModel::new(["```rhai\nfinal_result(call_tool(\"add\", #{a: 2, b: 2}))\n```"]);
/// let add = Tool::from_fn("add", "Adds a and b.", |args| {
///     Ok(serde_json::json!(args["a"].as_i64().unwrap_or(0) + args["b"].as_i64().unwrap_or(0)))
/// });
/// let agent = Agent::builder(Arc::new(model), Arc::new(RhaiRuntime::new(Limits::default())))
///     .tool(add)
///     .build()?;
/// let run = agent.run("Add 2 and 2.").await?;
/// assert_eq!(run.outcome, Outcome::FinalResult { value: serde_json::json!(4) });
/// # Ok(())
/// # }
/// ```
pub struct Agent {
    name: String,
    description: String,
    instructions: String,
    targets: Vec<TransferTarget>,
    model: Arc<dyn ModelClient>,
    runtime: Arc<dyn Runtime>,
    tools: Arc<ToolBox>,
    config: LoopConfig,
    output: OutputSpec,
    contract: OutputContract,
    working_dir: Option<PathBuf>,
    system_prompt: String,
    max_tokens: u32,
    temperature: Option<f32>,
    stream: bool,
    pub(crate) listeners: Vec<Listener>,
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent")
            .field("name", &self.name)
            .field("model", &self.model.label())
            .field("runtime", &self.runtime.info().name)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// Builds an [`Agent`]; every setting has a default.
pub struct AgentBuilder {
    name: String,
    description: String,
    targets: Vec<TransferTarget>,
    model: Arc<dyn ModelClient>,
    runtime: Arc<dyn Runtime>,
    tools: Vec<crate::tools::toolbox::Tool>,
    config: LoopConfig,
    instructions: String,
    output: OutputSpec,
    working_dir: Option<PathBuf>,
    max_tokens: u32,
    temperature: Option<f32>,
    stream: bool,
    listeners: Vec<Listener>,
}

impl AgentBuilder {
    /// The agent's name, in events and transcripts. Default: `main`.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// What this agent does, for other agents' prompts. Default: empty.
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = description.into();
        self
    }

    /// An agent a script may hand over to; the run ends on the transfer (a
    /// [`Team`](super::Team) then starts that agent). Default: none.
    pub fn transfer_target(mut self, target: TransferTarget) -> Self {
        self.targets.push(target);
        self
    }

    /// Adds a tool.
    pub fn tool(mut self, tool: crate::tools::toolbox::Tool) -> Self {
        self.tools.push(tool);
        self
    }

    /// Adds tools.
    pub fn tools(mut self, tools: impl IntoIterator<Item = crate::tools::toolbox::Tool>) -> Self {
        self.tools.extend(tools);
        self
    }

    /// Extra instructions for this agent, added to the system prompt. Default: none.
    pub fn instructions(mut self, instructions: impl Into<String>) -> Self {
        self.instructions = instructions.into();
        self
    }

    /// What this agent's final results must look like: the agent level of the
    /// cascade agent → stage → request (see [`OutputSpec`]). Its schema and
    /// validator are compiled by [`build`](Self::build). Default: empty.
    pub fn output(mut self, spec: OutputSpec) -> Self {
        self.output = spec;
        self
    }

    /// The directory artifact paths of a final result are relative to; a path
    /// escaping it gets the result refused. Default: the process's working
    /// directory when the run starts.
    pub fn working_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.working_dir = Some(dir.into());
        self
    }

    /// The loop's rules. Default: [`LoopConfig::default`].
    pub fn config(mut self, config: LoopConfig) -> Self {
        self.config = config;
        self
    }

    /// Output token limit per reply. Default: 2,048.
    pub fn max_tokens(mut self, max_tokens: u32) -> Self {
        self.max_tokens = max_tokens;
        self
    }

    /// Sampling temperature. Default: none sent, so the server's default applies
    /// (set 0 for the most repeatable answers of a local model).
    pub fn temperature(mut self, temperature: f32) -> Self {
        self.temperature = Some(temperature);
        self
    }

    /// Stream replies, reporting text as it arrives. Default: true.
    pub fn stream(mut self, stream: bool) -> Self {
        self.stream = stream;
        self
    }

    /// Calls `listener` with every event of every run.
    pub fn on_event(mut self, listener: impl Fn(&Event) + Send + Sync + 'static) -> Self {
        self.listeners
            .push(Arc::new(move |_agent: &str, event: &Event| listener(event)));
        self
    }

    /// Adds a shared listener (e.g. [`Transcript::listener`](super::Transcript::listener)).
    pub fn listener(mut self, listener: Listener) -> Self {
        self.listeners.push(listener);
        self
    }

    /// Checks the tools, loads the output spec (compiling its schema and
    /// validator) and renders the system prompt once.
    pub fn build(self) -> Result<Agent, AgentError> {
        let tools = ToolBox::new(self.tools).map_err(|e| AgentError::Setup(e.to_string()))?;
        let contract = self.output.load()?;
        let system_prompt = render_system_prompt(
            &*self.runtime,
            codeact_runtime::ToolDispatch::specs(&tools),
            &self.targets,
            &self.instructions,
            &self.output.render()?,
        )?;
        Ok(Agent {
            name: self.name,
            description: self.description,
            instructions: self.instructions,
            targets: self.targets,
            model: self.model,
            runtime: self.runtime,
            tools: Arc::new(tools),
            config: self.config,
            output: self.output,
            contract,
            working_dir: self.working_dir,
            system_prompt,
            max_tokens: self.max_tokens,
            temperature: self.temperature,
            stream: self.stream,
            listeners: self.listeners,
        })
    }
}

/// How a run begins: with a task, or where a transcript left off.
#[derive(Clone, Copy)]
enum Start<'a> {
    Fresh(&'a str),
    Resume(&'a ResumePoint),
}

/// What a finished run returns.
#[derive(Debug, Clone, PartialEq)]
pub struct RunResult {
    /// How it ended.
    pub outcome: Outcome,
    /// Model calls made.
    pub steps: usize,
    /// Tokens used.
    pub usage: Usage,
    /// The whole conversation, task first.
    pub messages: Vec<Message>,
    /// The record of the accepted final result, when the run ended with one.
    pub final_output: Option<FinalOutput>,
}

/// A run for a typed answer (see [`Agent::run_typed`]).
#[derive(Debug, Clone, PartialEq)]
pub struct TypedRun<T> {
    /// The answer, when the run ended with a final result (which then matched the
    /// type's schema and deserialized).
    pub answer: Option<T>,
    /// The run itself.
    pub run: RunResult,
}

/// The request level of a run's output spec, plus a check the caller adds.
#[derive(Clone, Default)]
pub(crate) struct RequestOutput {
    pub spec: OutputSpec,
    pub extra: Option<ExtraCheck>,
}

impl RequestOutput {
    fn is_empty(&self) -> bool {
        self.spec.is_empty() && self.extra.is_none()
    }
}

/// A run could not finish: the model or the host failed. Script errors never end
/// up here; they are fed back to the model.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The model call failed after its retries.
    #[error(transparent)]
    Model(#[from] ModelError),
    /// The runtime failed.
    #[error(transparent)]
    Host(#[from] HostError),
    /// A prompt template failed to render.
    #[error(transparent)]
    Prompt(#[from] PromptError),
    /// The agent is misconfigured (e.g. two tools with one name).
    #[error("the agent cannot be built: {0}")]
    Setup(String),
    /// An output spec cannot be used (its validator file or schema is broken).
    #[error(transparent)]
    Output(#[from] OutputSpecError),
}

impl Agent {
    /// Starts building an agent around `model` and `runtime`.
    pub fn builder(model: Arc<dyn ModelClient>, runtime: Arc<dyn Runtime>) -> AgentBuilder {
        AgentBuilder {
            name: "main".into(),
            description: String::new(),
            targets: Vec::new(),
            model,
            runtime,
            tools: Vec::new(),
            config: LoopConfig::default(),
            instructions: String::new(),
            output: OutputSpec::default(),
            working_dir: None,
            max_tokens: 2_048,
            temperature: None,
            stream: true,
            listeners: Vec::new(),
        }
    }

    /// The system prompt every request carries.
    pub fn system_prompt(&self) -> &str {
        &self.system_prompt
    }

    /// The agent's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Builds the event only when someone listens: events clone messages and
    /// values, which a run without listeners should not pay for.
    fn emit(&self, event: impl FnOnce() -> Event) {
        if self.listeners.is_empty() {
            return;
        }
        let event = event();
        for listener in &self.listeners {
            listener(&self.name, &event);
        }
    }

    /// What this agent does.
    pub fn description(&self) -> &str {
        &self.description
    }

    /// The agents it may hand over to.
    pub fn transfer_targets(&self) -> &[TransferTarget] {
        &self.targets
    }

    /// The output spec this agent's results are checked against (with the stage
    /// level folded in, once the agent joined a team that declares one).
    pub fn output(&self) -> &OutputSpec {
        &self.output
    }

    /// Runs `task` to an outcome in a fresh session.
    pub async fn run(&self, task: &str) -> Result<RunResult, AgentError> {
        self.run_with(task, &self.targets, &RequestOutput::default())
            .await
    }

    /// Runs `task` with `request` as the request level of the output spec: it
    /// overrides the agent's (and stage's) spec field by field, and is loaded
    /// (schema and validator compiled) before the first model call.
    pub async fn run_with_output(
        &self,
        task: &str,
        request: &OutputSpec,
    ) -> Result<RunResult, AgentError> {
        let request = RequestOutput {
            spec: request.clone(),
            extra: None,
        };
        self.run_with(task, &self.targets, &request).await
    }

    /// Runs `task` for an answer of type `T`: the request asks for format `json`
    /// with `T`'s generated JSON Schema, and a result that does not deserialize
    /// into `T` is refused like one that fails the schema.
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
        let request = RequestOutput {
            spec: OutputSpec {
                format: Some("json".into()),
                schema: Some(T::answer_schema()),
                ..OutputSpec::default()
            },
            extra: Some(Arc::new(|value: &Value| {
                serde_json::from_value::<T>(value.clone())
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            })),
        };
        let run = self.run_with(task, &self.targets, &request).await?;
        let answer = match &run.outcome {
            Outcome::FinalResult { value } => structured(value, true)
                .ok()
                .and_then(|value| serde_json::from_value(value).ok()),
            _ => None,
        };
        Ok(TypedRun { answer, run })
    }

    /// Folds a team's stage spec into this agent's own (the stage level of the
    /// cascade), reloading the contract and the system prompt.
    pub(crate) fn apply_stage(&mut self, stage: &OutputSpec) -> Result<(), AgentError> {
        if stage.is_empty() {
            return Ok(());
        }
        let output = self.output.overlaid_with(stage);
        let contract = output.load()?;
        self.system_prompt = render_system_prompt(
            &*self.runtime,
            codeact_runtime::ToolDispatch::specs(&*self.tools),
            &self.targets,
            &self.instructions,
            &output.render()?,
        )?;
        self.output = output;
        self.contract = contract;
        Ok(())
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
        let request = RequestOutput {
            spec: request.clone(),
            extra: None,
        };
        self.run_from(Start::Resume(point), &self.targets, &request)
            .await
    }

    async fn run_from(
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
            render_system_prompt(
                &*self.runtime,
                codeact_runtime::ToolDispatch::specs(&*self.tools),
                targets,
                &self.instructions,
                &contract.spec().render()?,
            )?
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
                Conversation::resumed(point, tags, self.config.clone()),
                Some(point),
            ),
        };
        let mut conversation = conversation
            .with_transfer_targets(
                targets.iter().map(|t| t.name.clone()).collect(),
                self.name.clone(),
            )
            .with_tools(
                codeact_runtime::ToolDispatch::specs(&*self.tools)
                    .iter()
                    .map(|spec| (spec.name.clone(), self.runtime.tool_signature(spec))),
            );
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
            )
            .await;
        if let Err(error) = &result {
            self.emit(|| Event::Failed {
                step: conversation.steps() + 1,
                error: error.to_string(),
            });
        }
        let (outcome, final_output) = result?;
        self.emit(|| Event::Finished {
            outcome: outcome.clone(),
            steps: conversation.steps(),
            usage: conversation.usage(),
        });
        Ok(RunResult {
            outcome,
            steps: conversation.steps(),
            usage: conversation.usage(),
            messages: conversation.messages().to_vec(),
            final_output,
        })
    }

    async fn drive(
        &self,
        conversation: &mut Conversation,
        system_prompt: &str,
        contract: &OutputContract,
        working_dir: &Path,
        resume: Option<&ResumePoint>,
    ) -> Result<(Outcome, Option<FinalOutput>), AgentError> {
        let tools = Arc::new(HostTools::new(
            self.tools.clone(),
            self.name.clone(),
            self.listeners.clone(),
        ));
        let mut session = ScriptSession::start(&*self.runtime, tools.clone())?;
        // Messages are reported as soon as they join the conversation: the task
        // here, the rest right after `on_reply` and `on_script`.
        let mut reported = 0;
        let mut next = Next::CallModel;
        match resume {
            None => self.report_messages(conversation, &mut reported),
            Some(point) => {
                next = self
                    .rebuild(point, conversation, &mut session, &tools)
                    .await?;
                // Everything up to the interrupted reply is in the transcript.
                reported = point.messages.len() + usize::from(point.pending_reply.is_some());
                self.report_messages(conversation, &mut reported);
            }
        }
        let mut final_output = None;
        loop {
            let step = match next {
                Next::RunScript { .. } | Next::CheckResult { .. } => conversation.steps(),
                _ => conversation.steps() + 1,
            };
            next = match next {
                Next::Finish(outcome) => return Ok((outcome, final_output)),
                Next::CheckResult { value, artifacts } => {
                    let (check, artifacts) =
                        check_result(contract, working_dir, &value, &artifacts).await;
                    let next = conversation.on_check(value.clone(), &check);
                    self.report_messages(conversation, &mut reported);
                    if let Check::Refused { by, .. } = &check {
                        self.emit(|| Event::ResultRefused {
                            step,
                            by: *by,
                            reason: check.refusal_text().unwrap_or_default(),
                            refusals: conversation.refusals(),
                        });
                    }
                    if let Next::Finish(Outcome::FinalResult { .. }) = &next {
                        let validation = match check {
                            Check::Unchecked { reason } => Validation::BrokenValidator { reason },
                            _ if contract.is_empty() => Validation::NotRequired,
                            _ => Validation::Passed,
                        };
                        let output = FinalOutput::new(
                            &content_text(&value),
                            self.config.max_output_content_bytes,
                            contract.spec().format.clone(),
                            &self.name,
                            artifacts,
                            validation,
                        );
                        self.emit(|| Event::FinalOutput {
                            output: output.clone(),
                        });
                        final_output = Some(output);
                    }
                    next
                }
                Next::CallModel => {
                    self.call_model(conversation, system_prompt, step, &mut reported)
                        .instrument(tracing::info_span!("model", step))
                        .await?
                }
                Next::RunScript { code } => {
                    self.emit(|| Event::ScriptStarted {
                        step,
                        code: code.clone(),
                    });
                    tools.set_step(step);
                    let run = session
                        .run(code)
                        .instrument(tracing::info_span!("script", step))
                        .await?;
                    let logs = run.logs.render();
                    let (next, output) = conversation.on_completion(&run.completion, &run.logs);
                    self.report_messages(conversation, &mut reported);
                    match &output {
                        ScriptOutput::Observation { value } => self.emit(|| Event::Observation {
                            step,
                            value: value.clone(),
                            logs,
                        }),
                        ScriptOutput::Error { message } => self.emit(|| Event::Error {
                            step,
                            message: message.clone(),
                            logs,
                        }),
                        ScriptOutput::TransferToAgent { .. }
                            if !matches!(next, Next::Finish(_)) =>
                        {
                            self.emit(|| Event::Error {
                                step,
                                message: conversation.last_error().unwrap_or_default().to_string(),
                                logs,
                            })
                        }
                        ScriptOutput::FinalResult { .. } | ScriptOutput::TransferToAgent { .. } => {
                        }
                    }
                    next
                }
            };
        }
    }

    /// Re-runs the finished scripts of `point` with their recorded tool results
    /// (their outputs are already in the conversation and are dropped), queues
    /// the recorded calls of the step that was cut short, and says what comes
    /// next.
    async fn rebuild(
        &self,
        point: &ResumePoint,
        conversation: &mut Conversation,
        session: &mut ScriptSession,
        tools: &HostTools,
    ) -> Result<Next, AgentError> {
        for script in &point.finished_scripts {
            tools.set_step(script.step);
            tools.serve_recorded(script.calls.clone(), true);
            let run = session
                .run(script.code.as_str())
                .instrument(tracing::info_span!("replay", step = script.step))
                .await?;
            tracing::debug!(step = script.step, output = %run.output, "replayed a script");
        }
        tools.serve_recorded(point.pending_calls.clone(), false);
        self.emit(|| Event::Resumed {
            steps: point.steps,
            replayed_scripts: point.finished_scripts.len(),
            replayed_tool_calls: tools.replayed(),
        });
        Ok(match &point.pending_reply {
            Some(reply) => conversation.on_reply(reply),
            None if point.steps >= self.config.max_steps => {
                Next::Finish(Outcome::StepLimit { steps: point.steps })
            }
            None => Next::CallModel,
        })
    }

    async fn call_model(
        &self,
        conversation: &mut Conversation,
        system_prompt: &str,
        step: usize,
        reported: &mut usize,
    ) -> Result<Next, AgentError> {
        let mut request = ModelRequest::new(system_prompt, conversation.messages().to_vec());
        request.max_tokens = self.max_tokens;
        request.temperature = conversation.temperature(self.temperature);
        self.emit(|| Event::ModelRequest {
            step,
            messages: request.messages.len(),
        });
        let response = if self.stream {
            let mut on_event = |event: StreamEvent| {
                if let StreamEvent::TextDelta { text } = event {
                    self.emit(|| Event::TextDelta { step, text });
                }
            };
            self.model.stream(&request, &mut on_event).await?
        } else {
            self.model.complete(&request).await?
        };
        self.emit(|| Event::ModelReply {
            step,
            stop_reason: response.stop_reason.clone(),
        });
        let before = conversation.messages().len();
        let next = conversation.on_reply(&response);
        self.report_messages(conversation, reported);
        self.emit(|| Event::Usage {
            step,
            call: response.usage,
            total: conversation.usage(),
        });
        // A reply that could not run (no code, cut off) was answered with feedback
        // at once: that is this step's error.
        if conversation.messages().len() > before + 1 {
            self.emit(|| Event::Error {
                step,
                message: conversation.last_error().unwrap_or_default().to_string(),
                logs: String::new(),
            });
        }
        Ok(next)
    }

    fn report_messages(&self, conversation: &Conversation, reported: &mut usize) {
        for message in &conversation.messages()[*reported..] {
            self.emit(|| Event::Message {
                message: message.clone(),
            });
        }
        *reported = conversation.messages().len();
    }
}

/// Checks a submitted result: its artifact paths first (relative to
/// `working_dir`, normalised), then the output contract, on a thread allowed to
/// block (a validator may run up to its time limit).
async fn check_result(
    contract: &OutputContract,
    working_dir: &Path,
    value: &Value,
    declared: &[String],
) -> (Check, Vec<PathBuf>) {
    let mut artifacts = Vec::with_capacity(declared.len());
    for path in declared {
        match artifact_path(working_dir, path) {
            Ok(path) => artifacts.push(path),
            Err(error) => {
                let refused = Check::Refused {
                    by: RefusedBy::Artifact,
                    reason: error.host_words().to_string(),
                    quoted: error.quoted(),
                };
                return (refused, Vec::new());
            }
        }
    }
    if contract.is_empty() {
        return (Check::Passed, artifacts);
    }
    let panicked = |what: String| Check::Refused {
        by: RefusedBy::BrokenValidator,
        reason: format!("the check failed inside the host: {what}"),
        quoted: None,
    };
    let in_place = tokio::runtime::Handle::try_current()
        .is_ok_and(|handle| handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
    let check = if in_place {
        tokio::task::block_in_place(|| {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| contract.check(value)))
        })
        .unwrap_or_else(|_| panicked("it panicked".into()))
    } else {
        let (contract, value) = (contract.clone(), value.clone());
        tokio::task::spawn_blocking(move || contract.check(&value))
            .await
            .unwrap_or_else(|e| panicked(e.to_string()))
    };
    (check, artifacts)
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::model::ReplayModel;
    use codeact_rhai::RhaiRuntime;
    use codeact_runtime::Limits;

    fn recorded(replies: &[&str], config: LoopConfig) -> (Agent, Arc<Mutex<Vec<Event>>>) {
        let events = Arc::new(Mutex::new(Vec::new()));
        let seen = events.clone();
        let agent = Agent::builder(
            Arc::new(ReplayModel::new(replies.iter().copied())),
            Arc::new(RhaiRuntime::new(Limits::default())),
        )
        .config(config)
        .on_event(move |event| seen.lock().expect("not poisoned").push(event.clone()))
        .build()
        .expect("agent builds");
        (agent, events)
    }

    #[tokio::test]
    async fn a_reply_without_code_is_reported_as_an_error_of_its_step() {
        let (agent, events) = recorded(
            &["I think it is 4.", "```rhai\nfinal_result(4)\n```"],
            LoopConfig::default(),
        );
        let run = agent.run("2 + 2?").await.expect("run finishes");
        assert_eq!(run.steps, 2);
        let events = events.lock().expect("not poisoned");
        assert!(events.iter().any(|e| matches!(e, Event::Error { step: 1, message, .. } if message.contains("no code block"))));
    }

    #[tokio::test]
    async fn the_event_stream_records_every_message_once_in_order() {
        let (agent, events) = recorded(
            &[
                "```rhai\nobservation(1)\n```",
                "```rhai\nfinal_result(2)\n```",
            ],
            LoopConfig::default(),
        );
        let run = agent.run("Go.").await.expect("run finishes");
        let events = events.lock().expect("not poisoned");
        let messages: Vec<&Message> = events
            .iter()
            .filter_map(|e| match e {
                Event::Message { message } => Some(message),
                _ => None,
            })
            .collect();
        let expected: Vec<&Message> = run.messages.iter().collect();
        assert_eq!(messages, expected);
        assert!(matches!(events.first(), Some(Event::RunStarted { .. })));
        assert!(matches!(
            events.last(),
            Some(Event::Finished { steps: 2, .. })
        ));
    }

    #[tokio::test]
    async fn a_model_failure_is_reported_before_the_error_returns() {
        let (agent, events) = recorded(&["```rhai\nobservation(1)\n```"], LoopConfig::default());
        let err = agent.run("Go.").await.expect_err("the replay runs out");
        assert!(matches!(
            err,
            AgentError::Model(ModelError::ReplayExhausted {
                replies: 1,
                asked: 2
            })
        ));
        let events = events.lock().expect("not poisoned");
        assert!(matches!(events.last(), Some(Event::Failed { step: 2, .. })));
    }
}
