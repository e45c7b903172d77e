//! What a run reports as it goes, and the JSONL transcript built from it.

use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::outcome::Outcome;
use crate::chat::{Message, StopReason, Usage};
use crate::output::final_output::FinalOutput;
use crate::output::spec::RefusedBy;

/// One thing that happened in a run. Every message of the conversation is an
/// [`Event::Message`], so the events alone rebuild the transcript.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Event {
    /// A run began (the agent's name is given with every event).
    RunStarted {
        /// The model's label.
        model: String,
        /// The runtime's name.
        runtime: String,
        /// The system prompt sent with every request.
        system_prompt: String,
    },
    /// The policy ([`AgentBuilder::policy`](crate::AgentBuilder::policy)) decided
    /// on a tool call (`tool` names it) or, without `tool`, on a script.
    PolicyVerdict {
        /// The step.
        step: usize,
        /// The tool called, or `None` for a script's `check_code`.
        tool: Option<String>,
        /// Whether it may go ahead.
        allowed: bool,
        /// Why not, in the policy's words (or why it could not decide).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// A call that needed approval was approved or denied
    /// ([`Approver`](crate::Approver)).
    ApprovalDecided {
        /// The step whose script made the call.
        step: usize,
        /// The tool.
        tool: String,
        /// The arguments it was asked about.
        args: Value,
        /// Whether it ran.
        approved: bool,
        /// Why, when one was given.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
        /// Who or what decided (`terminal`, `policy: deny`, a user…).
        decided_by: String,
        /// When, RFC 3339 in UTC.
        decided_at: String,
    },
    /// An approver deferred its decision on a call: the run stops, awaiting it
    /// ([`Outcome::AwaitingApproval`]).
    ApprovalAwaited {
        /// The step whose script made the call.
        step: usize,
        /// The call's id, e.g. `s2c1`: `codeact run --resume T --approve-call s2c1`.
        id: String,
        /// The tool.
        tool: String,
        /// The arguments a decision is for.
        args: Value,
        /// The script that made the call.
        script: String,
    },
    /// Images a script showed joined the feedback of its step (the last message):
    /// each as a picture for a model that sees images, else as a line of text.
    /// The transcript keeps each one's path, type, size and digest, not its bytes.
    ImagesShown {
        /// The step.
        step: usize,
        /// The blocks added to the feedback.
        blocks: Vec<crate::chat::ContentBlock>,
    },
    /// A chat's history outgrew
    /// [`LoopConfig::max_history_bytes`](crate::LoopConfig::max_history_bytes) as a
    /// turn began: its oldest whole turns were dropped, and the first message kept
    /// now starts by saying so.
    HistoryCompacted {
        /// Turns dropped.
        dropped_turns: usize,
        /// Messages dropped, from the first.
        dropped_messages: usize,
    },
    /// A chat's user turn began ([`Chat::send`](crate::Chat::send)); its message
    /// follows. The error and refusal counts start again, and the step limit
    /// counts from here.
    TurnStarted {
        /// The turn, from 1.
        turn: usize,
    },
    /// A message joined the conversation (the task, a reply, feedback).
    Message {
        /// The message.
        message: Message,
    },
    /// The conversation is being sent to the model.
    ModelRequest {
        /// The step (1-based) this request starts.
        step: usize,
        /// Messages sent.
        messages: usize,
    },
    /// Text streamed in from the model.
    TextDelta {
        /// The step.
        step: usize,
        /// The new text.
        text: String,
    },
    /// The model's reply is complete.
    ModelReply {
        /// The step.
        step: usize,
        /// Why it stopped.
        stop_reason: StopReason,
    },
    /// Tokens used by this call, and so far.
    Usage {
        /// The step.
        step: usize,
        /// This call.
        call: Usage,
        /// The run so far.
        total: Usage,
    },
    /// A script is about to run.
    ScriptStarted {
        /// The step.
        step: usize,
        /// The script.
        code: String,
    },
    /// A script called a tool and the host answered (written when the answer is
    /// in, so a run killed during a call has no line for it). Only the host
    /// emits these: a script that fakes a tool result in its own code (a
    /// shadowed `call_tool`, a printed line) produces none. A resumed run
    /// replays them instead of calling the tools again.
    ToolCall {
        /// The step whose script made the call.
        step: usize,
        /// The tool.
        name: String,
        /// Its arguments.
        args: Value,
        /// What the script got back.
        outcome: ToolCallOutcome,
    },
    /// A script started a cell (`start_cell`, see [`CellLimits`](crate::CellLimits)):
    /// a script of its own that runs on while the run goes on.
    CellStarted {
        /// The step whose script started it.
        step: usize,
        /// The cell's id, e.g. `cell-1`: what `start_cell` returned.
        id: String,
        /// The cell's script.
        code: String,
    },
    /// A cell reported progress (`notify`); the next poll returns it.
    CellProgress {
        /// The run's step when it was reported.
        step: usize,
        /// The cell.
        id: String,
        /// What it said, cut to `CellLimits::max_note_chars`.
        message: String,
    },
    /// A cell ended: its script finished or failed, it was cancelled, or its
    /// run ended first.
    CellEnded {
        /// The run's step when it ended.
        step: usize,
        /// The cell.
        id: String,
        /// How it ended.
        state: crate::agent::CellState,
        /// Its error, for a failed cell (a limit says which), or why the host
        /// stopped it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// The run was resumed from its transcript (`codeact run --resume`): the
    /// events above are the interrupted run's, the ones below its continuation.
    Resumed {
        /// Model calls the interrupted run had made.
        steps: usize,
        /// Scripts re-run, with their recorded tool results, to rebuild the
        /// session's state.
        replayed_scripts: usize,
        /// Tool results served from the transcript instead of calling the tools.
        replayed_tool_calls: usize,
        /// How the session was rebuilt: by re-running the finished scripts, or
        /// from a snapshot. Transcripts written before snapshots read as
        /// replayed.
        #[serde(default)]
        session: ResumedSession,
    },
    /// The session's snapshot after `step` was kept in the snapshot directory
    /// (`codeact run --snapshot-dir`), replacing the run's earlier one: a resume
    /// after this step can restore it instead of re-running the scripts.
    SnapshotKept {
        /// The step whose script the snapshot follows.
        step: usize,
        /// Its file's name in the snapshot directory (`RUN.step-N.snapshot`).
        file: String,
    },
    /// The session's snapshot after `step` could not be kept: the runtime cannot
    /// snapshot its sessions (then no later step tries), a variable holds a value
    /// a snapshot cannot keep, or the file could not be written. The run goes on;
    /// a resume replays the scripts.
    SnapshotFailed {
        /// The step.
        step: usize,
        /// Why, in the runtime's or the file system's words.
        reason: String,
    },
    /// A script returned an observation.
    Observation {
        /// The step.
        step: usize,
        /// The value.
        value: Value,
        /// What it printed.
        logs: String,
    },
    /// A step ended in an error fed back to the model (a script error, a reply
    /// without code, an unknown transfer target).
    Error {
        /// The step.
        step: usize,
        /// The error.
        message: String,
        /// What the script printed, if one ran.
        logs: String,
    },
    /// The run's [`Coach`](super::coach::Coach) advised: a hold (with the
    /// [`Event::ResultRefused`] that counts it), a rewrite that ran in place of
    /// the model's script, or advice added to the feedback. A resumed run reads
    /// these back, so it decides as the first one did.
    Coached {
        /// The step.
        step: usize,
        /// The rule ([`Rule::name`](super::coach::Rule::name), or a custom
        /// coach's own name for it).
        rule: String,
        /// What it decided.
        decision: CoachDecision,
    },
    /// A submitted final result was refused by the output spec's checks (or for
    /// an artifact path, or by the coach); the reason went back to the model.
    ResultRefused {
        /// The step.
        step: usize,
        /// Which check refused it.
        by: RefusedBy,
        /// Why.
        reason: String,
        /// Refusals in the run so far, this one included.
        refusals: usize,
    },
    /// A final result was accepted; the record of it (flagged when a broken
    /// validator let it through unchecked).
    FinalOutput {
        /// The record.
        output: FinalOutput,
    },
    /// The run ended.
    Finished {
        /// How.
        outcome: Outcome,
        /// Model calls made.
        steps: usize,
        /// Tokens used.
        usage: Usage,
    },
    /// An agent handed the task to another (emitted by a [`Team`](super::Team)).
    Handover {
        /// Who handed over.
        from: String,
        /// To whom.
        to: String,
        /// The messages carried over, oldest first.
        carried: Vec<Message>,
    },
    /// The run failed: the model or the host could not go on.
    Failed {
        /// The step in progress.
        step: usize,
        /// Why.
        error: String,
    },
}

/// What a coach decided ([`Event::Coached`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
#[non_exhaustive]
pub enum CoachDecision {
    /// A final result was held back, as a refusal with this reason.
    Held {
        /// Why, in the host's words.
        reason: String,
    },
    /// The host ran `run` in place of the script the model `sent`.
    Rewrote {
        /// The script in the model's reply.
        sent: String,
        /// The script that ran.
        run: String,
    },
    /// Advice joined the step's feedback.
    Advised,
    /// The step's feedback proposed `run` as a rewrite of the failed script
    /// `failed`: sent again, that script runs as the rewrite.
    Proposed {
        /// The failed script.
        failed: String,
        /// The rewrite.
        run: String,
        /// The failed script's lines rewritten (1-based, inclusive), when the
        /// rewrite is of lines.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        lines: Option<(usize, usize)>,
        /// Whether it was carried over from a step that ran as it without
        /// failing.
        #[serde(default)]
        carried: bool,
    },
}

/// How a resumed run rebuilt its session ([`Event::Resumed`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "by", rename_all = "snake_case")]
#[non_exhaustive]
pub enum ResumedSession {
    /// The finished scripts ran again with their recorded tool results.
    Replay {
        /// Why a snapshot was not restored instead, when a snapshot directory
        /// was given and there were scripts to rebuild from (none, or not of the
        /// last finished step, or refused by the runtime); `None` otherwise.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        fallback: Option<String>,
    },
    /// The session was restored from the snapshot kept after `step`, the
    /// transcript's last finished step: no script ran again.
    Snapshot {
        /// The step the snapshot follows.
        step: usize,
        /// Its file's name in the snapshot directory.
        file: String,
    },
}

impl Default for ResumedSession {
    fn default() -> Self {
        Self::Replay { fallback: None }
    }
}

/// What a tool call gave the script: `{"ok": value}` or `{"error": message}` on
/// the wire, as in the guest protocol.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolCallOutcome {
    /// The tool's value.
    Ok(Value),
    /// The tool's error message.
    Error(String),
}

impl From<&Result<Value, codeact_runtime::ToolError>> for ToolCallOutcome {
    fn from(result: &Result<Value, codeact_runtime::ToolError>) -> Self {
        match result {
            Ok(value) => Self::Ok(value.clone()),
            Err(error) => Self::Error(error.message.clone()),
        }
    }
}

impl ToolCallOutcome {
    /// Back to what the script gets.
    pub fn to_result(&self) -> Result<Value, codeact_runtime::ToolError> {
        match self {
            Self::Ok(value) => Ok(value.clone()),
            Self::Error(message) => Err(codeact_runtime::ToolError::new(message.clone())),
        }
    }
}

/// Something that wants to hear about events, with the name of the agent each
/// happened in. Called on the run's task, in order; keep it quick.
pub type Listener = Arc<dyn Fn(&str, &Event) + Send + Sync>;

/// One transcript line: the agent, then the event's own fields.
#[derive(Serialize)]
struct Line<'a> {
    agent: &'a str,
    #[serde(flatten)]
    event: &'a Event,
}

/// Appends every event to a JSONL file as it happens, one line each (the event's
/// fields plus `"agent"`), written through at once (no buffer), so a crash loses
/// nothing already done.
#[derive(Clone)]
pub struct Transcript {
    file: Arc<Mutex<Box<dyn Write + Send>>>,
}

impl std::fmt::Debug for Transcript {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transcript").finish_non_exhaustive()
    }
}

impl Transcript {
    /// Creates (or truncates) the transcript at `path`.
    pub fn create(path: impl AsRef<Path>) -> std::io::Result<Self> {
        Ok(Self::to_writer(File::create(path)?))
    }

    /// Writes the transcript's lines to `writer` (stdout, for `codeact run
    /// --events jsonl`), each as it happens.
    pub fn to_writer(writer: impl Write + Send + 'static) -> Self {
        Self {
            file: Arc::new(Mutex::new(Box::new(writer))),
        }
    }

    /// Opens the transcript at `path` to go on writing after its last whole event
    /// (for a resumed run). A last line cut short by a crash is removed first, so
    /// the lines appended after it can be read back.
    pub fn append(path: impl AsRef<Path>) -> std::io::Result<Self> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path)?;
        let keep = valid_prefix_len(&text);
        let mut file = std::fs::OpenOptions::new().write(true).open(path)?;
        file.set_len(keep as u64)?;
        std::io::Seek::seek(&mut file, std::io::SeekFrom::End(0))?;
        Ok(Self::to_writer(file))
    }

    /// A listener writing to this transcript. A write error is reported once on
    /// stderr and does not stop the run.
    pub fn listener(&self) -> Listener {
        let file = self.file.clone();
        let failed = Arc::new(std::sync::atomic::AtomicBool::new(false));
        Arc::new(move |agent: &str, event: &Event| {
            let Ok(mut line) = serde_json::to_vec(&Line { agent, event }) else {
                return;
            };
            line.push(b'\n');
            let result = match file.lock() {
                Ok(mut file) => file.write_all(&line).and_then(|()| file.flush()),
                Err(_) => return,
            };
            if let Err(e) = result
                && !failed.swap(true, std::sync::atomic::Ordering::Relaxed)
            {
                tracing::error!("cannot write the transcript: {e}");
            }
        })
    }
}

/// Reads a transcript back, one event per line; a line that does not parse (a line
/// cut short by a crash) ends the reading.
pub fn read_transcript(path: impl AsRef<Path>) -> std::io::Result<Vec<Event>> {
    Ok(parse_transcript(&std::fs::read_to_string(path)?))
}

/// Bytes of `text` up to and including the last line of its readable prefix.
fn valid_prefix_len(text: &str) -> usize {
    let mut end = 0;
    for line in text.split_inclusive('\n') {
        if !line.ends_with('\n') || serde_json::from_str::<Event>(line).is_err() {
            break;
        }
        end += line.len();
    }
    end
}

/// Parses transcript text, stopping at the first line that is not an event.
pub fn parse_transcript(text: &str) -> Vec<Event> {
    text.lines()
        .map_while(|line| serde_json::from_str::<Event>(line).ok())
        .collect()
}
