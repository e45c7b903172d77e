//! Resuming an interrupted run from its transcript: where it stopped, what its
//! scripts did, and the tool dispatch that serves recorded results instead of
//! calling the tools again.
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

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use codeact_runtime::text::json_len;
use codeact_runtime::{ToolDispatch, ToolError, ToolSpec};
use serde_json::Value;

use super::approval::{
    ApprovalDecision, ApprovalReason, ApprovalRequest, Approvals, Grant, PendingApproval,
};
use super::decide::Progress;
use super::events::{Event, Listener, ToolCallOutcome};
use super::feedback::{FailedCall, ToolResultSeen};
use super::outcome::Outcome;
use crate::chat::{ContentBlock, Message, ModelResponse, Role, StopReason, Usage};
use crate::tools::toolbox::wait_for_decision;

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
                | Event::SnapshotFailed { .. } => {}
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

/// Tool results of one script kept for its error's feedback, which shows fewer.
const SCRIPT_RESULTS_KEPT: usize = 16;

/// The tools as the driver hands them to a session: every call a script makes
/// goes through here, is reported as an [`Event::ToolCall`] once answered, and,
/// while a resumed run is rebuilt, is served from the transcript instead.
pub(crate) struct HostTools {
    inner: Arc<dyn ToolDispatch>,
    agent: String,
    listeners: Vec<Listener>,
    step: AtomicUsize,
    /// Recorded calls to serve, in order, before any real one.
    recorded: Mutex<VecDeque<RecordedCall>>,
    /// While true (re-running a finished script), a call the transcript does not
    /// hold is an error rather than a real call.
    replay_only: AtomicBool,
    /// While true (re-running the script a run stopped in to await approval), a
    /// call other than the next recorded one is an error rather than the end of
    /// the record: the script must take the path it took before, up to that call.
    strict_prefix: AtomicBool,
    replayed: AtomicUsize,
    /// The run's and one script's tool-call budgets (`LoopConfig`).
    budgets: CallBudgets,
    /// Calls made in the run, recorded ones served on resume included.
    calls: AtomicUsize,
    /// The calls of the running script, described for a refusal.
    script_calls: Mutex<Vec<String>>,
    /// What the running script's calls returned, the first
    /// [`SCRIPT_RESULTS_KEPT`] of them: a failing script's feedback shows them.
    script_results: Mutex<Vec<ToolResultSeen>>,
    /// The running script's calls its tools failed, the first of each tool: a
    /// failing script's feedback says what was wrong with their arguments.
    script_failures: Mutex<Vec<FailedCall>>,
    /// Whether calls are remembered for a failing script's feedback
    /// (`LoopConfig::tool_results_on_error` above 0), which costs a copy of
    /// each call's arguments and result. Default: false.
    keep_results: bool,
    /// Set when a call was refused for the run's budget: the run ends after
    /// the script that made it.
    run_budget_spent: AtomicBool,
    /// Bytes of arguments and results reported in events so far.
    journaled: AtomicU64,
    /// Set when a call was refused for the journal budget.
    journal_budget_spent: AtomicBool,
    /// Asked before every call the script makes (`check_call`); `None`: none.
    policy: Option<Arc<codeact_rhai::RhaiPolicy>>,
    /// Which calls wait for approval, and who decides.
    approvals: Arc<Approvals>,
    /// The running script, for an approval request.
    script: Mutex<String>,
    /// Ends a wait for approval when the run is cancelled.
    cancel: Option<tokio_util::sync::CancellationToken>,
    /// Decisions made ahead for exact calls, each taken once.
    grants: Mutex<Vec<Grant>>,
    /// Calls the running script made (for call ids).
    script_call_count: AtomicUsize,
    /// The call whose approval was deferred: the script's later calls are
    /// refused, and the run stops after it.
    awaited: Mutex<Option<PendingApproval>>,
    /// The span of the script making the calls now, the parent of their `tool`
    /// spans (the script may run on another thread than the one that opened
    /// it); `Span::none()` between scripts, so that it closes when its script
    /// ends.
    parent: Mutex<tracing::Span>,
}

/// Clears the tools' parent span when dropped ([`HostTools::parent_span`]).
pub(crate) struct ParentSpan<'a>(&'a HostTools);

impl Drop for ParentSpan<'_> {
    fn drop(&mut self) {
        *self.0.parent.lock().unwrap_or_else(|p| p.into_inner()) = tracing::Span::none();
    }
}

/// What the policy says about a call.
enum PolicyCheck {
    Allow,
    Ask,
    Refuse(ToolError),
}

/// How many tool calls a run and one of its scripts may make (`None`: no limit).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct CallBudgets {
    pub per_run: Option<usize>,
    pub per_script: Option<usize>,
    /// Bytes of arguments and results recorded in the run's events.
    pub journal_bytes: Option<u64>,
}

impl HostTools {
    pub(crate) fn new(
        inner: Arc<dyn ToolDispatch>,
        agent: impl Into<String>,
        listeners: Vec<Listener>,
    ) -> Self {
        Self {
            inner,
            agent: agent.into(),
            listeners,
            step: AtomicUsize::new(0),
            recorded: Mutex::new(VecDeque::new()),
            replay_only: AtomicBool::new(false),
            strict_prefix: AtomicBool::new(false),
            replayed: AtomicUsize::new(0),
            budgets: CallBudgets::default(),
            calls: AtomicUsize::new(0),
            script_calls: Mutex::new(Vec::new()),
            script_results: Mutex::new(Vec::new()),
            script_failures: Mutex::new(Vec::new()),
            keep_results: false,
            run_budget_spent: AtomicBool::new(false),
            journaled: AtomicU64::new(0),
            journal_budget_spent: AtomicBool::new(false),
            policy: None,
            approvals: Arc::new(Approvals::default()),
            script: Mutex::new(String::new()),
            cancel: None,
            grants: Mutex::new(Vec::new()),
            script_call_count: AtomicUsize::new(0),
            awaited: Mutex::new(None),
            parent: Mutex::new(tracing::Span::none()),
        }
    }

    /// Makes `span` (a script's) the parent of the calls' spans until the guard
    /// is dropped.
    pub(crate) fn parent_span(&self, span: tracing::Span) -> ParentSpan<'_> {
        *self.parent.lock().unwrap_or_else(|p| p.into_inner()) = span;
        ParentSpan(self)
    }

    /// The same tools with decisions made ahead for exact calls.
    pub(crate) fn with_grants(self, grants: Vec<Grant>) -> Self {
        *self.grants.lock().unwrap_or_else(|p| p.into_inner()) = grants;
        self
    }

    /// The call whose approval was deferred, once one was.
    pub(crate) fn awaited(&self) -> Option<PendingApproval> {
        self.awaited
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// A decision made ahead for exactly this call, taken (once).
    fn take_grant(&self, name: &str, args: &Value) -> Option<ApprovalDecision> {
        let mut grants = self.grants.lock().unwrap_or_else(|p| p.into_inner());
        let at = grants
            .iter()
            .position(|g| g.tool == name && &g.args == args)?;
        Some(grants.remove(at).decision)
    }

    /// The same tools with these approvals; a wait for one ends when `cancel` is
    /// cancelled.
    pub(crate) fn with_approvals(
        mut self,
        approvals: Arc<Approvals>,
        cancel: Option<tokio_util::sync::CancellationToken>,
    ) -> Self {
        self.approvals = approvals;
        self.cancel = cancel;
        self
    }

    /// The script making the calls now, as `set_script` last recorded it.
    fn running_script(&self) -> String {
        self.script
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Tells every listener.
    fn report(&self, event: &Event) {
        for listener in &self.listeners {
            listener(&self.agent, event);
        }
    }

    /// The script whose calls come next, for approval requests.
    pub(crate) fn set_script(&self, code: &str) {
        if self.approvals.is_empty() {
            return;
        }
        let mut script = self.script.lock().unwrap_or_else(|p| p.into_inner());
        script.clear();
        script.push_str(code);
    }

    /// Whether `name` may run once approval was asked for where needed: `None`
    /// when it may, else the denial as the script will see it.
    fn approval_refusal(
        &self,
        name: &str,
        args: &Value,
        reason: ApprovalReason,
    ) -> Option<ToolError> {
        let step = self.step.load(Ordering::Relaxed);
        let call_index = self.script_call_count.load(Ordering::Relaxed);
        let decision = match (self.take_grant(name, args), &self.approvals.approver) {
            (Some(granted), _) => granted,
            (None, None) => ApprovalDecision::deny("this host has no one to ask").by("no approver"),
            (None, Some(approver)) => {
                let request = ApprovalRequest {
                    agent: self.agent.clone(),
                    step,
                    tool: name.to_string(),
                    args: args.clone(),
                    script: self.running_script(),
                    reason,
                };
                wait_for_decision(approver.decide(request), self.cancel.as_ref())
            }
        };
        if decision.deferred {
            let pending = PendingApproval {
                id: format!("s{step}c{call_index}"),
                tool: name.to_string(),
                args: args.clone(),
            };
            let event = Event::ApprovalAwaited {
                step,
                id: pending.id.clone(),
                tool: name.to_string(),
                args: args.clone(),
                script: self.running_script(),
            };
            self.report(&event);
            let id = pending.id.clone();
            *self.awaited.lock().unwrap_or_else(|p| p.into_inner()) = Some(pending);
            return Some(ToolError::new(format!(
                "the call of '{name}' waits for approval ({id}); the run stops here"
            )));
        }
        let event = Event::ApprovalDecided {
            step,
            tool: name.to_string(),
            args: args.clone(),
            approved: decision.approved,
            reason: decision.reason.clone(),
            decided_by: decision.decided_by.clone(),
            decided_at: crate::output::final_output::rfc3339_utc(std::time::SystemTime::now()),
        };
        self.report(&event);
        if decision.approved {
            return None;
        }
        let why = decision.reason.unwrap_or_else(|| "no reason given".into());
        Some(ToolError::new(format!(
            "the call of '{name}' was denied by {}: {why}",
            decision.decided_by
        )))
    }

    /// The same tools with every call first put to `policy`'s `check_call`.
    pub(crate) fn with_policy(mut self, policy: Option<Arc<codeact_rhai::RhaiPolicy>>) -> Self {
        self.policy = policy;
        self
    }

    /// What the policy says about this call. It fails closed: a rule that
    /// throws or runs past its limits refuses; `"ask"` routes the call to
    /// approval.
    fn policy_check(&self, name: &str, args: &Value) -> PolicyCheck {
        use codeact_rhai::Verdict;
        let Some(verdict) = self
            .policy
            .as_ref()
            .and_then(|policy| policy.check_call(name, args))
        else {
            return PolicyCheck::Allow;
        };
        let event = Event::PolicyVerdict {
            step: self.step.load(Ordering::Relaxed),
            tool: Some(name.to_string()),
            allowed: verdict == Verdict::Valid,
            reason: verdict.reason().map(str::to_string),
        };
        self.report(&event);
        let message = match verdict {
            Verdict::Valid => return PolicyCheck::Allow,
            Verdict::Invalid { reason } if reason.trim() == "ask" => {
                if self.approvals.approver.is_some() {
                    return PolicyCheck::Ask;
                }
                format!(
                    "the host's policy wants a person to approve this call of '{name}', and this host has no one to ask, so it is refused"
                )
            }
            Verdict::Invalid { reason } => {
                format!("the host's policy refused this call of '{name}': {reason}")
            }
            Verdict::Unusable { reason } => format!(
                "the host's policy could not decide on this call of '{name}' ({reason}), so it is refused"
            ),
        };
        PolicyCheck::Refuse(ToolError::new(message))
    }

    /// Why this call may not run (the policy's refusal, or a denied approval),
    /// if it may not.
    fn refusal(&self, name: &str, args: &Value) -> Option<ToolError> {
        let ask = match self.policy_check(name, args) {
            PolicyCheck::Refuse(refusal) => return Some(refusal),
            PolicyCheck::Ask => Some(ApprovalReason::Policy),
            PolicyCheck::Allow if self.approvals.marks(name, args) => Some(ApprovalReason::Marked),
            PolicyCheck::Allow => None,
        };
        self.approval_refusal(name, args, ask?)
    }

    /// The same tools under these tool-call budgets.
    pub(crate) fn with_budgets(mut self, budgets: CallBudgets) -> Self {
        self.budgets = budgets;
        self
    }

    /// The same tools, remembering each script's calls for its feedback should
    /// it fail (what they returned, the arguments they left out).
    pub(crate) fn with_results_kept(mut self, keep: bool) -> Self {
        self.keep_results = keep;
        self
    }

    /// The step whose script makes the next calls (a new script: its calls
    /// count from zero).
    pub(crate) fn set_step(&self, step: usize) {
        self.step.store(step, Ordering::Relaxed);
        self.script_call_count.store(0, Ordering::Relaxed);
        self.script_calls
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
        self.script_results
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
        self.script_failures
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }

    /// The running script's calls its tools failed (the first of each tool),
    /// taken.
    pub(crate) fn take_failed_calls(&self) -> Vec<FailedCall> {
        std::mem::take(
            &mut *self
                .script_failures
                .lock()
                .unwrap_or_else(|p| p.into_inner()),
        )
    }

    /// What the running script's tool calls returned (the calls that failed
    /// left out: their errors reach the script), taken.
    pub(crate) fn take_script_results(&self) -> Vec<ToolResultSeen> {
        std::mem::take(
            &mut *self
                .script_results
                .lock()
                .unwrap_or_else(|p| p.into_inner()),
        )
    }

    /// The run's tool calls, once a call was refused for the run's budget.
    pub(crate) fn run_budget_spent(&self) -> Option<usize> {
        self.run_budget_spent
            .load(Ordering::Relaxed)
            .then(|| self.calls.load(Ordering::Relaxed))
    }

    /// The bytes recorded and the budget, once a call was refused for the
    /// run's journal budget.
    pub(crate) fn journal_budget_spent(&self) -> Option<(u64, u64)> {
        let limit = self.budgets.journal_bytes?;
        self.journal_budget_spent
            .load(Ordering::Relaxed)
            .then(|| (self.journaled.load(Ordering::Relaxed), limit))
    }

    /// Adds a reported call's arguments and result to the bytes recorded.
    fn journal(&self, args: &Value, result: &Result<Value, ToolError>) {
        if self.budgets.journal_bytes.is_none() {
            return;
        }
        let outcome = match result {
            Ok(value) => json_len(value),
            Err(e) => e.message.len() as u64,
        };
        self.journaled
            .fetch_add(json_len(args).saturating_add(outcome), Ordering::Relaxed);
    }

    /// A refusal when `name` would pass a budget; otherwise `None`.
    fn over_budget(&self, name: &str) -> Option<ToolError> {
        if let Some(limit) = self.budgets.journal_bytes
            && self.journaled.load(Ordering::Relaxed) > limit
        {
            self.journal_budget_spent.store(true, Ordering::Relaxed);
            return Some(ToolError::new(format!(
                "'{name}' was not called: what the run's tool calls returned passed its journal budget of {limit} bytes, and the run ends after this script"
            )));
        }
        if let Some(max) = self.budgets.per_run
            && self.calls.load(Ordering::Relaxed) >= max
        {
            self.run_budget_spent.store(true, Ordering::Relaxed);
            return Some(ToolError::new(format!(
                "'{name}' was not called: the run's budget of {max} tool calls is spent, and the run ends after this script"
            )));
        }
        let max = self.budgets.per_script?;
        let script_calls = self.script_calls.lock().unwrap_or_else(|p| p.into_inner());
        (script_calls.len() >= max).then(|| {
            ToolError::new(format!(
                "'{name}' was not called: one script may make {max} tool calls, and this one made them:\n{}\nUse their results, and make further calls in the next script.",
                script_calls.join("\n")
            ))
        })
    }

    /// Remembers a call the tool failed (not one the host refused), the first
    /// of each tool, with the arguments its schema requires that it left out.
    fn note_failure(&self, name: &str, args: &Value) {
        if !self.keep_results {
            return;
        }
        let mut failures = self
            .script_failures
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if failures.iter().any(|seen| seen.tool == name) {
            return;
        }
        failures.push(FailedCall {
            tool: name.to_string(),
            args: args.clone(),
            missing: self.missing_arguments(name, args),
        });
    }

    /// The arguments `name`'s schema requires that `args` (an object) left out,
    /// as (shown name, type); none when `args` is not an object.
    fn missing_arguments(&self, name: &str, args: &Value) -> Vec<(String, String)> {
        let Some(given) = args.as_object() else {
            return Vec::new();
        };
        let Some(spec) = self.inner.specs().iter().find(|spec| spec.name == name) else {
            return Vec::new();
        };
        // The same arguments in the same order: raw names to look up, shown
        // ones (safe in a prompt) to name.
        spec.argument_names()
            .into_iter()
            .zip(spec.signature_fields())
            .filter(|((raw, _), field)| field.required && !given.contains_key(raw))
            .map(|(_, field)| (field.name, field.ty))
            .collect()
    }

    /// Counts a call made (or served from the transcript) and remembers it for a
    /// later refusal's list.
    fn count(&self, name: &str, args: &Value, result: &Result<Value, ToolError>) {
        self.calls.fetch_add(1, Ordering::Relaxed);
        if let Ok(value) = result {
            let mut results = self
                .script_results
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            if results.len() < SCRIPT_RESULTS_KEPT {
                results.push(ToolResultSeen {
                    tool: name.to_string(),
                    args: args.clone(),
                    value: value.clone(),
                });
            }
        }
        if self.budgets.per_script.is_none() {
            // Described only for a refusal to list: costs nothing without one.
            return;
        }
        let outcome = match result {
            Ok(value) => codeact_runtime::text::shorten(&value.to_string(), 80),
            Err(e) => format!("error: {}", codeact_runtime::text::shorten(&e.message, 80)),
        };
        self.script_calls
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(format!(
                "- {name}({}) -> {outcome}",
                codeact_runtime::text::shorten(&args.to_string(), 80)
            ));
    }

    /// Serves `calls` first; with `replay_only`, nothing else.
    pub(crate) fn serve_recorded(&self, calls: Vec<RecordedCall>, replay_only: bool) {
        *self.recorded.lock().unwrap_or_else(|p| p.into_inner()) = calls.into();
        self.replay_only.store(replay_only, Ordering::Relaxed);
        self.strict_prefix.store(false, Ordering::Relaxed);
    }

    /// Serves `calls` first, each of which the script must make in order (a
    /// different call is refused as a divergence), then real calls.
    pub(crate) fn serve_recorded_strictly(&self, calls: Vec<RecordedCall>) {
        self.serve_recorded(calls, false);
        self.strict_prefix.store(true, Ordering::Relaxed);
    }

    /// Counts the tool calls of the finished scripts a restored snapshot stands
    /// for, as re-running them would have: the run's tool-call budget covers the
    /// calls made before it was interrupted either way.
    pub(crate) fn count_restored(&self, calls: usize) {
        self.calls.fetch_add(calls, Ordering::Relaxed);
    }

    /// Recorded results served so far.
    pub(crate) fn replayed(&self) -> usize {
        self.replayed.load(Ordering::Relaxed)
    }

    fn recorded_answer(&self, name: &str, args: &Value) -> Option<Result<Value, ToolError>> {
        let mut recorded = self.recorded.lock().unwrap_or_else(|p| p.into_inner());
        match recorded.front() {
            Some(call) if call.name == name && &call.args == args => {
                let result = call.outcome.to_result();
                recorded.pop_front();
                self.replayed.fetch_add(1, Ordering::Relaxed);
                Some(result)
            }
            Some(call) if self.replay_only.load(Ordering::Relaxed) => {
                Some(Err(ToolError::new(format!(
                    "resume: the script called '{name}' where the transcript recorded '{}' with other arguments; the call is not made again",
                    call.name
                ))))
            }
            None if self.replay_only.load(Ordering::Relaxed) => Some(Err(ToolError::new(format!(
                "resume: the transcript records no call of '{name}' here; the call is not made again"
            )))),
            Some(call) if self.strict_prefix.load(Ordering::Relaxed) => {
                Some(Err(ToolError::new(format!(
                    "resume: the script called '{name}' where the run it resumes called '{}' with other arguments; it took another path than before the approval it waited for, so the call is not made",
                    call.name
                ))))
            }
            // The script went another way than recorded: the rest of the record no
            // longer applies.
            Some(_) => {
                recorded.clear();
                None
            }
            None => None,
        }
    }
}

impl ToolDispatch for HostTools {
    fn specs(&self) -> &[ToolSpec] {
        self.inner.specs()
    }

    /// Every call in a `tool` span (see [`crate::agent::spans`]), the child of
    /// the running script's.
    fn call(&self, name: &str, args: Value) -> Result<Value, ToolError> {
        let parent = self
            .parent
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let step = self.step.load(Ordering::Relaxed);
        let span = crate::agent::spans::tool(&parent, step, name, &args);
        let result = span.in_scope(|| self.call_in_span(name, args));
        crate::agent::spans::tool_ended(&span, &result);
        result
    }

    /// Only when no call may wait for an approval (none is configured, and no
    /// policy could answer "ask"), and the tool itself answers at once.
    fn is_immediate(&self, name: &str) -> bool {
        self.policy.is_none() && self.approvals.is_empty() && self.inner.is_immediate(name)
    }
}

impl HostTools {
    fn call_in_span(&self, name: &str, args: Value) -> Result<Value, ToolError> {
        self.script_call_count.fetch_add(1, Ordering::Relaxed);
        if let Some(pending) = self.awaited() {
            // Nothing runs after the call the run waits on; nor is it recorded,
            // so a resumed run makes these calls for real.
            return Err(ToolError::new(format!(
                "'{name}' was not called: the run waits for approval of an earlier call ({})",
                pending.id
            )));
        }
        if let Some(refusal) = self.over_budget(name) {
            return Err(refusal);
        }
        if let Some(result) = self.recorded_answer(name, &args) {
            tracing::Span::current().record("codeact.tool.replayed", true);
            self.count(name, &args, &result);
            return result;
        }
        let refusal = self.refusal(name, &args);
        if refusal.is_none()
            && self.listeners.is_empty()
            && self.budgets.per_script.is_none()
            && !self.keep_results
        {
            // Nothing will read the arguments after the call: no copy of them.
            let result = self.inner.call(name, args);
            self.calls.fetch_add(1, Ordering::Relaxed);
            return result;
        }
        let result = match refusal {
            Some(refusal) => Err(refusal),
            None => {
                let result = self.inner.call(name, args.clone());
                if result.is_err() {
                    self.note_failure(name, &args);
                }
                result
            }
        };
        if self.awaited().is_some() {
            // The deferred call itself: not made, and not recorded as made.
            return result;
        }
        self.count(name, &args, &result);
        if self.listeners.is_empty() {
            return result;
        }
        self.journal(&args, &result);
        let event = Event::ToolCall {
            step: self.step.load(Ordering::Relaxed),
            name: name.to_string(),
            args,
            outcome: ToolCallOutcome::from(&result),
        };
        self.report(&event);
        result
    }
}

#[cfg(test)]
mod tests;
