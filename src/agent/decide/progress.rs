//! What a run's events add up to, and the compaction of a chat's history.

use minijinja::context;

use crate::agent::events::{CoachDecision, Event};
use crate::chat::{ContentBlock, Message, Role, Usage};
use crate::prompts::Prompts;

/// The oldest whole turns to drop so that the history fits `budget` bytes, as
/// the event that drops them; `None` when it fits, or when only the newest turn
/// is left. Turns are dropped from their user message up to the next turn's.
pub(super) fn compaction(progress: &Progress, budget: usize) -> Option<Event> {
    let sizes: Vec<usize> = progress
        .messages
        .iter()
        .map(|m| m.joined_text().len())
        .collect();
    let mut total: usize = sizes.iter().sum();
    if total <= budget {
        return None;
    }
    // Turns that may go: all but the newest, which just started. What comes
    // before the first turn goes with it.
    let starts = &progress.turn_starts;
    let mut dropped_turns = 0;
    let mut cut = 0;
    for &next_start in starts.iter().skip(1) {
        if total <= budget {
            break;
        }
        total -= sizes[cut..next_start].iter().sum::<usize>();
        cut = next_start;
        dropped_turns += 1;
    }
    (dropped_turns > 0).then_some(Event::HistoryCompacted {
        dropped_turns,
        dropped_messages: cut,
    })
}

/// The words the first message kept after a compaction starts with: the host's,
/// never fenced: the fixed template `compaction` (a resumed chat rebuilds it from
/// the recorded events, where no agent's [`Prompts`] are at hand).
pub(crate) fn compaction_marker(dropped_turns: usize) -> String {
    let marker = Prompts::render_builtin("compaction", context! { dropped_turns => dropped_turns });
    format!("{marker}\n\n")
}

/// What a run's events add up to: the conversation so far and the loop's
/// counters. A live [`Conversation`](super::Conversation) changes it only by applying the events it
/// reports, and a resumed run rebuilds it by applying the recorded ones
/// ([`Progress::replayed`]), so the two cannot count differently.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Progress {
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
    /// The steps taken before the current chat turn began (0 outside a chat):
    /// the step limit counts from here.
    pub turn_start_step: usize,
    /// Where each chat turn's user message is in `messages` (empty outside a
    /// chat), for dropping whole turns.
    pub turn_starts: Vec<usize>,
    /// The model's replies dropped from `messages` with the oldest turns.
    pub dropped_replies: usize,
    /// The coaching rules that held a final result back in this run (each
    /// built-in rule holds at most once a run).
    pub held_rules: Vec<String>,
    /// The coaching rules that added advice in this run (or chat turn).
    pub noted_rules: Vec<String>,
    /// The last rewrite a step's feedback proposed, with that step: a run
    /// resumed right after it runs the failed script, sent again, as it.
    pub proposed_rewrite: Option<(usize, CoachDecision)>,
}

impl Progress {
    /// The progress `events` (a run's, in order) add up to.
    pub fn replayed<'a>(events: impl IntoIterator<Item = &'a Event>) -> Self {
        let mut progress = Self::default();
        for event in events {
            progress.apply(event);
        }
        progress
    }

    /// Applies one event: the only place the counters change.
    pub fn apply(&mut self, event: &Event) {
        match event {
            Event::Message { message } => self.messages.push(message.clone()),
            Event::ModelReply { .. } => self.steps += 1,
            Event::Usage { total, .. } => self.usage = *total,
            Event::Observation { .. } => self.consecutive_errors = 0,
            Event::Error { .. } => self.consecutive_errors += 1,
            Event::ResultRefused { refusals, .. } => self.refusals = *refusals,
            Event::Coached {
                rule,
                decision: CoachDecision::Held { .. },
                ..
            } => {
                if !self.held_rules.contains(rule) {
                    self.held_rules.push(rule.clone());
                }
            }
            Event::Coached {
                rule,
                decision: CoachDecision::Advised,
                ..
            } => {
                if !self.noted_rules.contains(rule) {
                    self.noted_rules.push(rule.clone());
                }
            }
            Event::Coached {
                step,
                decision: decision @ CoachDecision::Proposed { .. },
                ..
            } => self.proposed_rewrite = Some((*step, decision.clone())),
            Event::Coached { .. } => {}
            Event::TurnStarted { .. } => {
                self.consecutive_errors = 0;
                self.refusals = 0;
                self.held_rules.clear();
                self.noted_rules.clear();
                self.turn_start_step = self.steps;
                self.turn_starts.push(self.messages.len());
            }
            Event::ImagesShown { blocks, .. } => {
                if let Some(last) = self.messages.last_mut()
                    && last.role == Role::User
                {
                    last.content.extend(blocks.iter().cloned());
                }
            }
            Event::HistoryCompacted {
                dropped_turns,
                dropped_messages,
            } => {
                let dropped = (*dropped_messages).min(self.messages.len());
                self.dropped_replies += self.messages[..dropped]
                    .iter()
                    .filter(|m| m.role == Role::Assistant)
                    .count();
                self.messages.drain(..dropped);
                self.turn_starts.retain(|&at| at >= dropped);
                for at in &mut self.turn_starts {
                    *at -= dropped;
                }
                if let Some(first) = self.messages.first_mut() {
                    first
                        .content
                        .insert(0, ContentBlock::text(compaction_marker(*dropped_turns)));
                }
            }
            Event::RunStarted { .. }
            | Event::ModelRequest { .. }
            | Event::TextDelta { .. }
            | Event::ScriptStarted { .. }
            | Event::ToolCall { .. }
            | Event::Resumed { .. }
            | Event::SnapshotKept { .. }
            | Event::SnapshotFailed { .. }
            | Event::CellStarted { .. }
            | Event::CellProgress { .. }
            | Event::CellEnded { .. }
            | Event::PolicyVerdict { .. }
            | Event::ApprovalDecided { .. }
            | Event::ApprovalAwaited { .. }
            | Event::FinalOutput { .. }
            | Event::Finished { .. }
            | Event::Handover { .. }
            | Event::Failed { .. } => {}
        }
    }

    /// Takes back the model's last reply, and its step, when the conversation
    /// ends with it: the run stopped before that step was over, so the reply is
    /// to be handled again.
    pub fn take_back_reply(&mut self) -> Option<Message> {
        if self
            .messages
            .last()
            .is_none_or(|m| m.role != Role::Assistant)
        {
            return None;
        }
        self.steps = self.steps.saturating_sub(1);
        self.messages.pop()
    }
}
