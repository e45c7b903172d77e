//! The loop's rules and their defaults.

use crate::output::final_output::DEFAULT_CONTENT_CAP;

use super::DEFAULT_MAX_JOURNAL_BYTES;

/// The loop's rules, with their defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct LoopConfig {
    /// Model calls per run; the run ends with [`Outcome::StepLimit`](crate::Outcome::StepLimit) after this
    /// many. Default: 12.
    pub max_steps: usize,
    /// Errors in a row (script errors, replies without code) before the run ends
    /// with [`Outcome::ErrorBudget`](crate::Outcome::ErrorBudget). Default: 4.
    pub max_consecutive_errors: usize,
    /// Characters of one piece of feedback (a value, a message, the logs) kept;
    /// longer ones lose their middle. Default: 8,000.
    pub feedback_limit: usize,
    /// Characters of a model reply kept in the conversation; a longer reply loses
    /// its middle in the history (its code runs whole). Default: 32,000.
    pub reply_limit: usize,
    /// Final results refused by the output spec's checks in one run; the refusal
    /// that reaches this count ends the run with [`Outcome::RefusalBudget`](crate::Outcome::RefusalBudget)
    /// instead of going back to the model. Refusals do not count as errors.
    /// Default: 3.
    pub max_refusals: usize,
    /// Bytes of an accepted result's content kept in its
    /// [`FinalOutput`](crate::FinalOutput) record; longer content is cut at a
    /// character boundary and flagged. Default: 256 KiB.
    pub max_output_content_bytes: usize,
    /// What a script whose last value is not a result helper's gets (a bare
    /// `7.8`, a list, a map without `type`). Default: [`BareValues::Observe`].
    pub bare_values: BareValues,
    /// The sampling temperature of the model call after a reply that repeated
    /// a failing script (or a reply without code) word for word: at a low
    /// temperature a small model answers the same error with the same script
    /// until the run ends. Used only when higher than the agent's own
    /// temperature. Default: 0.7.
    pub retry_temperature: f32,
    /// Tool calls in one run, all its scripts together: the call past it is
    /// refused (a catchable tool error) and the run ends with
    /// [`Outcome::ToolCallBudget`](crate::Outcome::ToolCallBudget) once that script is done. Default: none.
    pub max_tool_calls: Option<usize>,
    /// Tool calls one script may make: the call past it is refused with a tool
    /// error listing the calls the script made (tool, arguments shortened,
    /// outcome), so the model can go on from them; the run goes on. Default:
    /// none.
    pub max_tool_calls_per_script: Option<usize>,
    /// Bytes of tool-call arguments and results one run records (in its
    /// transcript, a server's journal): the call after the one that passes it
    /// is refused (a catchable tool error) and the run ends with
    /// [`Outcome::JournalBudget`](crate::Outcome::JournalBudget) once that script is done. Counted only when
    /// something listens to the run's events. Default: 64 MiB.
    pub max_journal_bytes: Option<u64>,
    /// Input (prompt) tokens over the run, as the provider counts them: the run
    /// ends with [`Outcome::TokenBudget`](crate::Outcome::TokenBudget) after the reply that passes it.
    /// Default: none.
    pub max_input_tokens: Option<u64>,
    /// Output tokens over the run; likewise. Default: none.
    pub max_output_tokens: Option<u64>,
    /// Wall-clock time for the whole run: a model call or script still going at
    /// the deadline is abandoned (a script's own time limit still ends it) and
    /// the run ends with [`Outcome::DeadlineExceeded`](crate::Outcome::DeadlineExceeded). Default: none.
    pub max_run_time: Option<std::time::Duration>,
    /// Characters of each tool result shown with a script's error: the feedback
    /// of a script that failed after its tool calls returned shows what they
    /// returned (up to four distinct calls, each cut in the middle to this
    /// length), since a small model that reads a tool's data in the same script
    /// that fetched it has never seen that data. 0: never shown. Default: 1,500.
    pub tool_results_on_error: usize,
    /// The history a chat carries into a new turn, in bytes of message text
    /// (about four per token): past it, the oldest whole turns are dropped when
    /// the next turn starts, and the first message kept says so. A message is
    /// never cut, and the turn being started is always kept, so a single turn
    /// larger than this still ends at the model's context window. Variables and
    /// functions from dropped turns stay defined. Default: 256 KiB.
    pub max_history_bytes: Option<usize>,
    /// Characters of feedback the model is shown over the whole run: script
    /// values, errors and printed output with the host's words around them.
    /// Past it, each value, error or printed output is cut to
    /// [`FEEDBACK_FLOOR`] characters (in the middle), and the model is told
    /// once, so a run that prints a lot cannot fill the model's context.
    /// `None`: no cap. Default: 100,000 (about 25,000 tokens).
    pub max_feedback_chars: Option<usize>,
}

/// What each piece of feedback is cut to once the run's
/// [`LoopConfig::max_feedback_chars`] is spent: enough for an error's first
/// line and its last.
pub const FEEDBACK_FLOOR: usize = 400;

/// What the loop does with a script's bare last value (one that is not
/// `observation(...)`, `final_result(...)`, `error(...)` or a transfer). Either
/// way [`ScriptOutput::decode`](crate::output::script_output::ScriptOutput::decode) keeps its contract; this is the loop's reading.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum BareValues {
    /// Show it to the model as an observation, with a line saying how to finish
    /// with it, as smolagents and a REPL do: models end scripts with a bare
    /// value often, and refusing it cost them a turn and, at temperature 0,
    /// often the run.
    #[default]
    Observe,
    /// Refuse it as an error that says what to end a script with.
    Refuse,
}

impl Default for LoopConfig {
    fn default() -> Self {
        Self {
            max_steps: 12,
            max_consecutive_errors: 4,
            feedback_limit: 8_000,
            reply_limit: 32_000,
            max_refusals: 3,
            max_output_content_bytes: DEFAULT_CONTENT_CAP,
            bare_values: BareValues::Observe,
            retry_temperature: 0.7,
            max_tool_calls: None,
            max_tool_calls_per_script: None,
            max_journal_bytes: Some(DEFAULT_MAX_JOURNAL_BYTES),
            max_input_tokens: None,
            max_output_tokens: None,
            max_run_time: None,
            max_history_bytes: Some(256 * 1024),
            tool_results_on_error: 1_500,
            max_feedback_chars: Some(100_000),
        }
    }
}
