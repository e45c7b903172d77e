//! The thin async driver: asks the model, runs scripts, checks results and
//! reports what [`Conversation`](super::decide::Conversation) decided, which
//! decides everything else. Its jobs live apart: building an agent
//! ([`builder`]), the ways to start a run (`entry`), the loop itself (`drive`),
//! and rebuilding a resumed run's session (`rebuild`).

use std::path::PathBuf;
use std::sync::Arc;

use codeact_runtime::{HostError, Runtime};

use super::decide::LoopConfig;
use super::events::{Event, Listener};
use super::outcome::Outcome;
use crate::chat::{Message, Usage};
use crate::model::{ModelClient, ModelError};
use crate::output::final_output::FinalOutput;
use crate::output::spec::{ExtraCheck, OutputContract, OutputSpec, OutputSpecError};
use crate::prompts::{PromptError, Prompts, TransferTarget, render_system_prompt_with};
use crate::tools::toolbox::ToolBox;

mod builder;
mod chat;
mod drive;
mod entry;
mod rebuild;

pub use builder::AgentBuilder;
pub use chat::Chat;
pub use entry::{RunItem, RunRequest};

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
#[derive(Clone)]
pub struct Agent {
    name: String,
    description: String,
    instructions: String,
    targets: Vec<TransferTarget>,
    model: Arc<dyn ModelClient>,
    runtime: Arc<dyn Runtime>,
    tools: Arc<ToolBox>,
    /// What the prompt lists when the catalog is searched instead (the discovery
    /// tools); `None`: every tool is listed.
    listed_tools: Option<Vec<codeact_runtime::ToolSpec>>,
    config: LoopConfig,
    coach: Arc<dyn crate::agent::coach::Coach>,
    /// Put to every tool call and script first; `None`: no policy.
    policy: Option<Arc<codeact_rhai::RhaiPolicy>>,
    /// Which calls wait for approval, and who decides.
    approvals: Arc<crate::agent::approval::Approvals>,
    /// Where scripts' files are, and the images they show.
    files: Option<crate::files::FileArea>,
    /// Whether shown images go to the model as pictures.
    see_images: bool,
    /// How many cells a run may start and run; `None`: scripts start none.
    cells: Option<crate::agent::CellLimits>,
    output: OutputSpec,
    contract: OutputContract,
    working_dir: Option<PathBuf>,
    system_prompt: String,
    /// The templates of the host's words: system prompt and feedback.
    prompts: Prompts,
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
    /// Stops the run when cancelled; `None`: runs until it finishes.
    pub cancel: Option<tokio_util::sync::CancellationToken>,
    /// Listeners of this run only (the event stream), after the agent's own.
    pub listeners: Vec<Listener>,
    /// Decisions made ahead for exact calls (a resumed run awaiting approval).
    pub grants: Vec<crate::agent::approval::Grant>,
    /// Where the session's snapshots are kept after each step, and looked for
    /// on resume; `None`: none.
    pub snapshots: Option<crate::agent::snapshots::SnapshotDir>,
}

impl RequestOutput {
    fn is_empty(&self) -> bool {
        self.spec.is_empty() && self.extra.is_none()
    }
}

/// A run could not finish: the model or the host failed. Script errors never end
/// up here; they are fed back to the model.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
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
    /// The system prompt every request carries.
    pub fn system_prompt(&self) -> &str {
        &self.system_prompt
    }

    /// The templates this agent's system prompt and feedback are rendered from.
    pub fn prompts(&self) -> &Prompts {
        &self.prompts
    }

    /// The agent's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The most bytes of an artifact the host reads to describe it: the run's
    /// disk limit, [`DEFAULT_MAX_DISK_BYTES`](crate::files::DEFAULT_MAX_DISK_BYTES)
    /// without files of its own.
    fn artifact_cap(&self) -> u64 {
        self.files
            .as_ref()
            .map_or(crate::files::DEFAULT_MAX_DISK_BYTES, |area| {
                area.max_disk_bytes()
            })
    }

    /// Builds an event of the driver's own only when someone listens: events
    /// clone messages and values, which a run without listeners should not pay
    /// for.
    fn emit(&self, event: impl FnOnce() -> Event) {
        if self.listeners.is_empty() {
            return;
        }
        self.report(&[event()]);
    }

    /// Passes on what happened, as the conversation decided it, in order.
    fn report(&self, events: &[Event]) {
        for event in events {
            for listener in &self.listeners {
                listener(&self.name, event);
            }
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

    /// Folds a team's stage spec into this agent's own (the stage level of the
    /// cascade), reloading the contract and the system prompt.
    pub(crate) fn apply_stage(&mut self, stage: &OutputSpec) -> Result<(), AgentError> {
        if stage.is_empty() {
            return Ok(());
        }
        let output = self.output.overlaid_with(stage);
        let contract = output.load()?;
        self.system_prompt = self.render_prompt(&self.targets, &output)?;
        self.output = output;
        self.contract = contract;
        Ok(())
    }

    /// The system prompt for `targets` and the output spec `spec`: the one place
    /// it is rendered (when the agent is built, when a team folds in its stage,
    /// and for a run whose targets or spec differ from the agent's own).
    fn render_prompt(
        &self,
        targets: &[TransferTarget],
        spec: &OutputSpec,
    ) -> Result<String, AgentError> {
        let listed = match &self.listed_tools {
            Some(listed) => listed.as_slice(),
            None => codeact_runtime::ToolDispatch::specs(&*self.tools),
        };
        Ok(render_system_prompt_with(
            &self.prompts,
            &*self.runtime,
            listed,
            targets,
            &self.instructions,
            &spec.render_with(&self.prompts)?,
            self.cells
                .as_ref()
                .map(|limits| (limits, codeact_runtime::ToolDispatch::specs(&*self.tools))),
        )?)
    }
}
