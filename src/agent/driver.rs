//! The thin async driver: asks the model, runs scripts, reports events, and lets
//! [`Conversation`] decide everything else.

use std::sync::Arc;

use codeact_runtime::{HostError, Runtime};
use tracing::Instrument;

use super::decide::{Conversation, LoopConfig, Next, Outcome};
use super::events::{Event, Listener};
use crate::chat::{Message, ModelRequest, StreamEvent, Usage};
use crate::model::{ModelClient, ModelError};
use crate::prompts::{PromptError, TransferTarget, render_system_prompt};
use crate::{ScriptOutput, ScriptSession, ToolBox};

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
    system_prompt: String,
    max_tokens: u32,
    temperature: f32,
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
    tools: Vec<crate::Tool>,
    config: LoopConfig,
    instructions: String,
    max_tokens: u32,
    temperature: f32,
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
    pub fn tool(mut self, tool: crate::Tool) -> Self {
        self.tools.push(tool);
        self
    }

    /// Adds tools.
    pub fn tools(mut self, tools: impl IntoIterator<Item = crate::Tool>) -> Self {
        self.tools.extend(tools);
        self
    }

    /// Extra instructions for this agent, added to the system prompt. Default: none.
    pub fn instructions(mut self, instructions: impl Into<String>) -> Self {
        self.instructions = instructions.into();
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

    /// Sampling temperature. Default: 0.
    pub fn temperature(mut self, temperature: f32) -> Self {
        self.temperature = temperature;
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

    /// Checks the tools and renders the system prompt once.
    pub fn build(self) -> Result<Agent, AgentError> {
        let tools = ToolBox::new(self.tools).map_err(|e| AgentError::Setup(e.to_string()))?;
        let system_prompt = render_system_prompt(
            &*self.runtime,
            codeact_runtime::ToolDispatch::specs(&tools),
            &self.targets,
            &self.instructions,
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
            system_prompt,
            max_tokens: self.max_tokens,
            temperature: self.temperature,
            stream: self.stream,
            listeners: self.listeners,
        })
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
            max_tokens: 2_048,
            temperature: 0.0,
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

    /// Runs `task` to an outcome in a fresh session.
    pub async fn run(&self, task: &str) -> Result<RunResult, AgentError> {
        self.run_with(task, &self.targets).await
    }

    /// Runs a conversation that opens with `first_message`, offering `targets` as
    /// the agents to hand over to (a team narrows them per handover; the system
    /// prompt is re-rendered only when they differ from the agent's own).
    pub(crate) async fn run_with(
        &self,
        first_message: &str,
        targets: &[TransferTarget],
    ) -> Result<RunResult, AgentError> {
        let system_prompt = if targets == self.targets.as_slice() {
            self.system_prompt.clone()
        } else {
            render_system_prompt(
                &*self.runtime,
                codeact_runtime::ToolDispatch::specs(&*self.tools),
                targets,
                &self.instructions,
            )?
        };
        let mut conversation = Conversation::new(
            first_message,
            self.runtime.info().fence_tags,
            self.config.clone(),
        )
        .with_transfer_targets(
            targets.iter().map(|t| t.name.clone()).collect(),
            self.name.clone(),
        );
        self.emit(|| Event::RunStarted {
            model: self.model.label(),
            runtime: self.runtime.info().name.to_string(),
            system_prompt: system_prompt.clone(),
        });
        let result = self.drive(&mut conversation, &system_prompt).await;
        if let Err(error) = &result {
            self.emit(|| Event::Failed {
                step: conversation.steps() + 1,
                error: error.to_string(),
            });
        }
        let outcome = result?;
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
        })
    }

    async fn drive(
        &self,
        conversation: &mut Conversation,
        system_prompt: &str,
    ) -> Result<Outcome, AgentError> {
        let mut session = ScriptSession::start(&*self.runtime, self.tools.clone())?;
        // Messages are reported as soon as they join the conversation: the task
        // here, the rest right after `on_reply` and `on_script`.
        let mut reported = 0;
        self.report_messages(conversation, &mut reported);
        let mut next = Next::CallModel;
        loop {
            let step = match next {
                Next::RunScript { .. } => conversation.steps(),
                _ => conversation.steps() + 1,
            };
            next = match next {
                Next::Finish(outcome) => return Ok(outcome),
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
                    let run = session
                        .run(code)
                        .instrument(tracing::info_span!("script", step))
                        .await?;
                    let logs = run.logs.render();
                    let next = conversation.on_script(&run.output, &run.logs);
                    self.report_messages(conversation, &mut reported);
                    match &run.output {
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

    async fn call_model(
        &self,
        conversation: &mut Conversation,
        system_prompt: &str,
        step: usize,
        reported: &mut usize,
    ) -> Result<Next, AgentError> {
        let mut request = ModelRequest::new(system_prompt, conversation.messages().to_vec());
        request.max_tokens = self.max_tokens;
        request.temperature = self.temperature;
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

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::model::ReplayModel;
    use crate::{Limits, RhaiRuntime};

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
