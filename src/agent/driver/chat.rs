//! A chat: one agent, one script session and one conversation over many user
//! turns. Each [`Chat::send`] runs the loop until a final result (or a transfer,
//! a budget); the next send goes on with the same variables, functions and
//! history, as smolagents' `run(task, reset=False)`.

use std::path::PathBuf;
use std::sync::Arc;

use super::drive::Turn;
use super::{Agent, AgentError, RunResult};
use crate::agent::decide::{Conversation, Progress};
use crate::agent::events::Event;
use crate::agent::host_tools::HostTools;
use crate::agent::resume::ResumePoint;
use crate::chat::Message;
use crate::exec::session::ScriptSession;

/// A conversation with an agent over many turns; made by [`Agent::chat`].
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::sync::Arc;
/// use codeact::model::ReplayModel;
/// use codeact::{Agent, Limits, Outcome, RhaiRuntime};
///
/// let model = ReplayModel::new([
///     "```rhai\nlet total = 40;\nfinal_result(total)\n```",
///     "```rhai\nfinal_result(total + 2)\n```",
/// ]);
/// let agent = Agent::builder(Arc::new(model), Arc::new(RhaiRuntime::new(Limits::default()))).build()?;
/// let mut chat = agent.chat()?;
/// chat.send("Start a total at 40.").await?;
/// let second = chat.send("Add 2 to it.").await?;
/// assert_eq!(second.outcome, Outcome::FinalResult { value: serde_json::json!(42) });
/// # Ok(())
/// # }
/// ```
pub struct Chat<'a> {
    agent: &'a Agent,
    conversation: Conversation,
    session: ScriptSession,
    tools: Arc<HostTools>,
    /// Ends the chat's cells when the chat is dropped.
    cells: crate::agent::cells::CellsGuard,
    working_dir: PathBuf,
    turns: usize,
    /// Stops the turn under way when cancelled.
    cancel: Option<tokio_util::sync::CancellationToken>,
}

impl std::fmt::Debug for Chat<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Chat")
            .field("agent", &self.agent.name)
            .field("turns", &self.turns)
            .finish_non_exhaustive()
    }
}

impl Agent {
    /// Starts a chat: a script session that lives as long as the chat, and a
    /// conversation that every [`Chat::send`] continues. The budgets of
    /// [`LoopConfig`](crate::LoopConfig) hold per turn (steps, errors in a row,
    /// refusals, the deadline) except the tool-call budget, which holds for the
    /// chat. A history past
    /// [`max_history_bytes`](crate::LoopConfig::max_history_bytes) loses its oldest
    /// whole turns as the next one starts, and the model is told.
    pub fn chat(&self) -> Result<Chat<'_>, AgentError> {
        let (tools, cells) = self.host_tools(None, Vec::new());
        let session = ScriptSession::start_with_files(
            &*self.runtime,
            tools.clone(),
            self.files.as_ref().map(|area| area.view()).as_ref(),
        )?;
        self.chat_in(session, tools, cells)
    }

    /// A chat in `session`, whose scripts call `tools`, and whose cells end
    /// with it.
    fn chat_in(
        &self,
        session: ScriptSession,
        tools: Arc<HostTools>,
        cells: crate::agent::cells::CellsGuard,
    ) -> Result<Chat<'_>, AgentError> {
        let working_dir = match &self.working_dir {
            Some(dir) => dir.clone(),
            None => std::env::current_dir().map_err(|e| {
                AgentError::Setup(format!("cannot read the working directory: {e}"))
            })?,
        };
        let conversation = self.chat_conversation(Progress::default());
        Ok(Chat {
            agent: self,
            conversation,
            session,
            tools,
            cells,
            working_dir,
            turns: 0,
            cancel: None,
        })
    }

    /// A chat's conversation from `progress`, knowing the agent's transfer
    /// targets and tools.
    fn chat_conversation(&self, progress: Progress) -> Conversation {
        let specs = codeact_runtime::ToolDispatch::specs(&*self.tools);
        Conversation::resumed(
            progress,
            self.runtime.info().fence_tags,
            self.config.clone(),
        )
        .with_transfer_targets(
            self.targets.iter().map(|t| t.name.clone()).collect(),
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
        .with_language(self.runtime.info().language)
    }

    /// Continues a chat from its transcript (read with
    /// [`ResumePoint::from_chat_events`]): the session is rebuilt by running the
    /// finished scripts again with their recorded tool results, and the history
    /// and counts are the transcript's. A turn that was cut short (a crash, a
    /// cancel, an approval deferred) is finished first; its result comes back
    /// beside the chat. The next [`Chat::send`] is the next turn.
    pub async fn resume_chat<'a>(
        &'a self,
        point: &ResumePoint,
    ) -> Result<(Chat<'a>, Option<RunResult>), AgentError> {
        let (tools, cells) = self.host_tools(None, Vec::new());
        let session = self.rebuild(point, &tools, None).await?;
        let mut chat = self.chat_in(session, tools, cells)?;
        chat.conversation = self.chat_conversation(point.progress());
        chat.turns = point.turns;
        let cut_short = if point.turn_open || point.pending_reply.is_some() {
            let decision = chat.conversation.resume(point.pending_reply.as_ref());
            Some(chat.finish_turn(decision).await?)
        } else {
            None
        };
        Ok((chat, cut_short))
    }
}

impl Chat<'_> {
    /// Sends the user's next message and runs the loop until it decides to stop
    /// (a final result, a transfer, a budget); the result's counts are the chat's
    /// so far. A failure (the model or the host) ends this turn only: the next
    /// send goes on from the conversation as it stands.
    pub async fn send(&mut self, message: &str) -> Result<RunResult, AgentError> {
        let agent = self.agent;
        if self.turns == 0 {
            agent.emit(|| Event::RunStarted {
                model: agent.model.label(),
                runtime: agent.runtime.info().name.to_string(),
                system_prompt: agent.system_prompt.clone(),
            });
        }
        self.turns += 1;
        let decision = self.conversation.next_turn(self.turns, message);
        self.finish_turn(decision).await
    }

    /// Drives the turn from `decision` to its end.
    async fn finish_turn(
        &mut self,
        decision: crate::agent::decide::Decision,
    ) -> Result<RunResult, AgentError> {
        let agent = self.agent;
        let turn = Turn {
            session: &mut self.session,
            tools: &self.tools,
            cells: &self.cells,
            system_prompt: &agent.system_prompt,
            contract: &agent.contract,
            working_dir: &self.working_dir,
            cancel: self.cancel.as_ref(),
            snapshots: None,
        };
        let result = agent
            .drive_turn(&mut self.conversation, decision, turn)
            .await;
        if let Err(error) = &result {
            agent.emit(|| self.conversation.failed(error.to_string()));
        }
        let (outcome, final_output) = result?;
        agent.emit(|| self.conversation.finished(outcome.clone()));
        Ok(RunResult {
            outcome,
            steps: self.conversation.steps(),
            usage: self.conversation.usage(),
            messages: self.conversation.messages().to_vec(),
            final_output,
        })
    }

    /// Stops the turns sent from now on when `token` is cancelled: the turn under
    /// way ends with [`Outcome::Cancelled`](crate::Outcome::Cancelled) at once when
    /// it waits for the model or between steps (a running script ends first, at
    /// the latest at its time limit), and the chat goes on with the next
    /// [`send`](Self::send). A cancelled token cancels every later turn at once:
    /// give a new one to cancel one turn. Default: none.
    pub fn cancel_on(&mut self, token: tokio_util::sync::CancellationToken) {
        self.cancel = Some(token);
    }

    /// The user turns sent so far.
    pub fn turns(&self) -> usize {
        self.turns
    }

    /// The conversation so far, first user message first.
    pub fn messages(&self) -> &[Message] {
        self.conversation.messages()
    }
}
