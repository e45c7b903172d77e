//! Resuming an interrupted run from its transcript: where it stopped and what its
//! scripts did; the tool dispatch that serves recorded results instead of calling
//! the tools again is [`HostTools`](super::host_tools::HostTools).
//!
//! A transcript holds every message, every script ([`Event::ScriptStarted`]) and
//! every tool call with its answer ([`Event::ToolCall`], written once the answer is
//! in). [`ResumePoint::from_events`] replays them into the conversation so far and
//! the loop's counters (by the loop's own rules), and collects the scripts to
//! re-run. The driver then re-runs each finished script in a fresh session with
//! its recorded tool results (a script may not call a tool the transcript does not
//! hold for it), which rebuilds the session's variables, and goes on from the next
//! step. A step cut short (the process was killed while its script ran) runs
//! again: its recorded tool calls are served from the transcript, and the calls
//! after them (the one in progress when the process died included) are made for
//! real.

use serde_json::Value;

use super::approval::PendingApproval;
use super::decide::Progress;
use super::events::{Event, ToolCallOutcome};
use super::outcome::Outcome;
use crate::chat::{ContentBlock, Message, ModelResponse, Role, StopReason, Usage};

/// Why a transcript cannot be resumed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ResumeError {
    /// No run started in it (empty, or not a transcript).
    #[error("the transcript holds no run (no run_started event and no task)")]
    NoRun,
    /// The run already ended; there is nothing to continue.
    #[error("the run already finished ({outcome}); there is nothing to resume")]
    Finished {
        /// How it ended, as its `outcome` tag.
        outcome: String,
    },
    /// The transcript is a team's (it has handovers): only single-agent runs resume.
    #[error("the transcript is a team run with handovers; only single-agent runs can be resumed")]
    Team,
}

/// One tool call as the transcript recorded it.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedCall {
    /// The tool.
    pub name: String,
    /// Its arguments.
    pub args: Value,
    /// What the script got back.
    pub outcome: ToolCallOutcome,
}

/// A script the interrupted run started, with the tool calls it made.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedScript {
    /// Its step.
    pub step: usize,
    /// The code.
    pub code: String,
    /// Its tool calls, in order.
    pub calls: Vec<RecordedCall>,
}

/// Where an interrupted run stopped, read from its transcript.
#[derive(Debug, Clone, PartialEq)]
pub struct ResumePoint {
    /// The model's label in the transcript (`openai:NAME`, `replay:FILE`, …).
    pub model: Option<String>,
    /// The runtime's name in the transcript.
    pub runtime: Option<String>,
    /// The conversation so far, task first.
    pub messages: Vec<Message>,
    /// Model replies received.
    pub steps: usize,
    /// Tokens used.
    pub usage: Usage,
    /// Errors in a row at the end.
    pub consecutive_errors: usize,
    /// Final results refused.
    pub refusals: usize,
    /// The steps before the last chat turn began (0 for a plain run): the step
    /// limit counts from here.
    pub turn_start_step: usize,
    /// Where each chat turn's user message is in `messages`.
    pub turn_starts: Vec<usize>,
    /// The model's replies dropped from `messages` with a chat's oldest turns.
    pub dropped_replies: usize,
    /// The coaching rules that held a result back in the run (or chat turn).
    pub held_rules: Vec<String>,
    /// The coaching rules that added advice in the run (or chat turn).
    pub noted_rules: Vec<String>,
    /// The last rewrite a step's feedback proposed, with that step.
    pub proposed_rewrite: Option<(usize, crate::agent::events::CoachDecision)>,
    /// Scripts that finished, in order: re-run to rebuild the session.
    pub finished_scripts: Vec<RecordedScript>,
    /// The last reply, when the run stopped before its step was over (its script
    /// did not finish, or did not start): it is handled again.
    pub pending_reply: Option<ModelResponse>,
    /// The tool calls the pending reply's script made before the run stopped.
    pub pending_calls: Vec<RecordedCall>,
    /// The call the run stopped to await approval for, if it did.
    pub pending_approval: Option<PendingApproval>,
    /// A chat's turns so far (0 for a plain run).
    pub turns: usize,
    /// A chat's last turn did not finish: it is finished first on resume.
    pub turn_open: bool,
    /// The id the run kept its session snapshots under (from its last
    /// [`Event::SnapshotKept`]), when it kept any: a resume with the snapshot
    /// directory looks there for the one of the last finished script's step,
    /// and goes on keeping them under this id.
    pub snapshot_run_id: Option<String>,
}

impl ResumePoint {
    /// Reads the events of a transcript (see [`read_transcript`](super::read_transcript)).
    /// The conversation and its counters are the events replayed by the loop's
    /// own rules ([`Progress::replayed`]); what is read here is only where the run
    /// stands: its scripts and their tool calls, and the reply of a step cut short.
    pub fn from_events(events: &[Event]) -> Result<Self, ResumeError> {
        Self::read(events, false)
    }

    /// The same for a chat's transcript ([`Agent::resume_chat`](crate::Agent::resume_chat)),
    /// where each turn ends with its own `finished` line: the chat goes on after
    /// the last one, or finishes the turn that was cut short.
    pub fn from_chat_events(events: &[Event]) -> Result<Self, ResumeError> {
        Self::read(events, true)
    }

    fn read(events: &[Event], chat: bool) -> Result<Self, ResumeError> {
        let (mut model, mut runtime) = (None, None);
        let (mut turns, mut turn_open) = (0, false);
        let mut scripts: Vec<RecordedScript> = Vec::new();
        let mut last_stop = StopReason::EndTurn;
        let mut pending_approval = None;
        let mut snapshot_run_id = None;
        for event in events {
            match event {
                Event::RunStarted {
                    model: label,
                    runtime: name,
                    ..
                } => {
                    model.get_or_insert_with(|| label.clone());
                    runtime.get_or_insert_with(|| name.clone());
                }
                Event::ModelReply { stop_reason, .. } => last_stop = stop_reason.clone(),
                Event::ScriptStarted { step, code } => scripts.push(RecordedScript {
                    step: *step,
                    code: code.clone(),
                    calls: Vec::new(),
                }),
                Event::ToolCall {
                    step,
                    name,
                    args,
                    outcome,
                } => {
                    if let Some(script) = scripts.iter_mut().rev().find(|s| s.step == *step) {
                        script.calls.push(RecordedCall {
                            name: name.clone(),
                            args: args.clone(),
                            outcome: outcome.clone(),
                        });
                    }
                }
                // A cancelled run, or one awaiting an approval, stopped where it
                // was: it goes on from there.
                Event::Finished {
                    outcome: Outcome::Cancelled | Outcome::AwaitingApproval { .. },
                    ..
                } => {}
                Event::ApprovalAwaited { id, tool, args, .. } => {
                    pending_approval = Some(PendingApproval {
                        id: id.clone(),
                        tool: tool.clone(),
                        args: args.clone(),
                    });
                }
                // A chat's turn ended; the chat goes on.
                Event::Finished { .. } if chat => turn_open = false,
                Event::TurnStarted { .. } => {
                    turns += 1;
                    turn_open = true;
                }
                Event::Finished { outcome, .. } => {
                    let outcome = serde_json::to_value(outcome)
                        .ok()
                        .and_then(|v| v["outcome"].as_str().map(str::to_string))
                        .unwrap_or_default();
                    return Err(ResumeError::Finished { outcome });
                }
                Event::Handover { .. } => return Err(ResumeError::Team),
                Event::Message { .. }
                | Event::Usage { .. }
                | Event::Observation { .. }
                | Event::Error { .. }
                | Event::ResultRefused { .. }
                | Event::Coached { .. }
                | Event::ModelRequest { .. }
                | Event::TextDelta { .. }
                | Event::FinalOutput { .. }
                | Event::Failed { .. }
                | Event::Resumed { .. }
                | Event::PolicyVerdict { .. }
                | Event::HistoryCompacted { .. }
                | Event::ImagesShown { .. }
                | Event::SnapshotFailed { .. }
                | Event::CellStarted { .. }
                | Event::CellProgress { .. }
                | Event::CellEnded { .. } => {}
                Event::SnapshotKept { file, .. } => {
                    if let Some((run_id, _)) = super::snapshots::parse_file_name(file) {
                        snapshot_run_id = Some(run_id.to_string());
                    }
                }
                // A decision after the awaited call settles it.
                Event::ApprovalDecided { .. } => pending_approval = None,
            }
        }
        let mut progress = Progress::replayed(events);
        if progress
            .messages
            .first()
            .is_none_or(|m| m.role != Role::User)
        {
            return Err(ResumeError::NoRun);
        }
        // A conversation whose last message is the model's reply stopped inside
        // that reply's step: the reply is handled again, and its script's
        // recorded calls are served again.
        let step = progress.steps;
        let mut pending_calls = Vec::new();
        // A chat whose last turn finished ends with that turn's answer: nothing
        // is pending.
        let finished_chat = chat && !turn_open;
        let taken_back = if finished_chat {
            None
        } else {
            progress.take_back_reply()
        };
        let pending_reply = taken_back.map(|reply| {
            if scripts.last().is_some_and(|s| s.step == step)
                && let Some(script) = scripts.pop()
            {
                pending_calls = script.calls;
            }
            ModelResponse {
                content: vec![ContentBlock::text(reply.joined_text())],
                stop_reason: last_stop,
                usage: Usage::default(),
                model: model.clone().unwrap_or_default(),
            }
        });
        let Progress {
            messages,
            steps,
            usage,
            consecutive_errors,
            refusals,
            turn_start_step,
            turn_starts,
            dropped_replies,
            held_rules,
            noted_rules,
            proposed_rewrite,
        } = progress;
        Ok(ResumePoint {
            model,
            runtime,
            messages,
            steps,
            usage,
            consecutive_errors,
            refusals,
            turn_start_step,
            turn_starts,
            dropped_replies,
            held_rules,
            noted_rules,
            proposed_rewrite,
            finished_scripts: scripts,
            pending_reply,
            pending_calls,
            pending_approval,
            turns,
            turn_open,
            snapshot_run_id,
        })
    }

    /// The conversation and counters to go on from.
    pub(crate) fn progress(&self) -> Progress {
        Progress {
            messages: self.messages.clone(),
            steps: self.steps,
            usage: self.usage,
            consecutive_errors: self.consecutive_errors,
            refusals: self.refusals,
            turn_start_step: self.turn_start_step,
            turn_starts: self.turn_starts.clone(),
            dropped_replies: self.dropped_replies,
            held_rules: self.held_rules.clone(),
            noted_rules: self.noted_rules.clone(),
            proposed_rewrite: self.proposed_rewrite.clone(),
        }
    }

    /// The task: the first message's text.
    pub fn task(&self) -> String {
        self.messages
            .first()
            .map(Message::joined_text)
            .unwrap_or_default()
    }

    /// Tool results the rebuild and the pending step will take from the transcript.
    pub fn recorded_tool_calls(&self) -> usize {
        self.finished_scripts
            .iter()
            .map(|s| s.calls.len())
            .sum::<usize>()
            + self.pending_calls.len()
    }

    /// The step of the last script that finished, which a snapshot must follow
    /// to stand for the finished scripts; `None` when none did.
    pub fn last_finished_step(&self) -> Option<usize> {
        self.finished_scripts.last().map(|script| script.step)
    }
}

#[cfg(test)]
mod tests;
