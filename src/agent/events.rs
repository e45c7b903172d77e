//! What a run reports as it goes, and the JSONL transcript built from it.

use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::decide::Outcome;
use crate::chat::{Message, StopReason, Usage};
use crate::{FinalOutput, RefusedBy};

/// One thing that happened in a run. Every message of the conversation is an
/// [`Event::Message`], so the events alone rebuild the transcript.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
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
    /// A submitted final result was refused by the output spec's checks (or for
    /// an artifact path); the reason went back to the model.
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
#[derive(Debug, Clone)]
pub struct Transcript {
    file: Arc<Mutex<File>>,
}

impl Transcript {
    /// Creates (or truncates) the transcript at `path`.
    pub fn create(path: impl AsRef<Path>) -> std::io::Result<Self> {
        Ok(Self {
            file: Arc::new(Mutex::new(File::create(path)?)),
        })
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
                Ok(mut file) => file.write_all(&line),
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

/// Parses transcript text, stopping at the first line that is not an event.
pub fn parse_transcript(text: &str) -> Vec<Event> {
    text.lines()
        .map_while(|line| serde_json::from_str::<Event>(line).ok())
        .collect()
}
