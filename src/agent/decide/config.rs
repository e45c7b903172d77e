//! The loop's rules and their defaults.

use crate::output::final_output::DEFAULT_CONTENT_CAP;

use super::DEFAULT_MAX_JOURNAL_BYTES;

/// The loop's rules, with their defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct LoopConfig {
    /// Model calls per run; the run ends with [`Outcome::StepLimit`] after this
    /// many. Default: 12.
    pub max_steps: usize,
    /// Errors in a row (script errors, replies without code) before the run ends
    /// with [`Outcome::ErrorBudget`]. Default: 4.
    pub max_consecutive_errors: usize,
    /// Characters of one piece of feedback (a value, a message, the logs) kept;
    /// longer ones lose their middle. Default: 8,000.
    pub feedback_limit: usize,
    /// Characters of a model reply kept in the conversation; a longer reply loses
    /// its middle in the history (its code runs whole). Default: 32,000.
    pub reply_limit: usize,
    /// Final results refused by the output spec's checks in one run; the refusal
    /// that reaches this count ends the run with [`Outcome::RefusalBudget`]
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
    /// [`Outcome::ToolCallBudget`] once that script is done. Default: none.
    pub max_tool_calls: Option<usize>,
    /// Tool calls one script may make: the call past it is refused with a tool
    /// error listing the calls the script made (tool, arguments shortened,
    /// outcome), so the model can go on from them; the run goes on. Default:
    /// none.
    pub max_tool_calls_per_script: Option<usize>,
    /// Bytes of tool-call arguments and results one run records (in its
    /// transcript, a server's journal): the call after the one that passes it
    /// is refused (a catchable tool error) and the run ends with
    /// [`Outcome::JournalBudget`] once that script is done. Counted only when
    /// something listens to the run's events. Default: 64 MiB.
    pub max_journal_bytes: Option<u64>,
    /// Input (prompt) tokens over the run, as the provider counts them: the run
    /// ends with [`Outcome::TokenBudget`] after the reply that passes it.
    /// Default: none.
    pub max_input_tokens: Option<u64>,
    /// Output tokens over the run; likewise. Default: none.
    pub max_output_tokens: Option<u64>,
    /// Wall-clock time for the whole run: a model call or script still going at
    /// the deadline is abandoned (a script's own time limit still ends it) and
    /// the run ends with [`Outcome::DeadlineExceeded`]. Default: none.
    pub max_run_time: Option<std::time::Duration>,
    /// Whether a Rhai script's final result resting on a common mistake
    /// (`1..N` between literals meant to include N, `A^B` meant as a power) is
    /// held back once as an error naming it; sent again, it is accepted. It
    /// costs a step where the script meant it (`1..100` for "below 100").
    /// Default: true.
    pub hold_rhai_pitfalls: bool,
    /// Whether a final result that cannot have come from the tools is held
    /// back once: the session has tools, and the result holds a word the
    /// script typed that is found nowhere in the conversation (an invented
    /// `["item1", "item3"]`) nor, when tools were called, in anything they
    /// returned (`"Laptop"` answered after a reading of sales.csv that found
    /// nothing). Sent again, it is accepted, so an answer that needs no tool
    /// costs one step. Default: true.
    pub hold_unfounded_results: bool,
    /// Whether a final result that is a tool's number in another unit than the
    /// task asks for is held back once: the tool's description names the unit
    /// ("in euros"), the task another one of the same kind ("in US dollars"),
    /// and the result is the number as the tool returned it. The feedback names
    /// both units and the tools that convert. Sent again, it is accepted.
    /// Default: true.
    pub hold_results_in_other_units: bool,
    /// Whether a final result that is the ids a tool returned (an integer, or
    /// a list of them) is held back once when the task does not ask for an id
    /// and another tool takes one: the feedback writes the call with the id
    /// (`get_user(user_id=42)`). Sent again, it is accepted. Default: true.
    pub hold_ids_as_results: bool,
    /// Whether a final result that is a whole map a tool returned (the
    /// result, or an item of a list it returned) is held back once when the
    /// task names exactly one of its keys ("What is the email of …?"
    /// answered with the whole user) and does not ask for a map. A map the
    /// script built itself is its own answer. Sent again, it is accepted.
    /// Default: true.
    pub hold_whole_maps: bool,
    /// Whether a final result is held back once when its script's tool call
    /// returned nothing (`[]`, `{}`, `""`, `null`) for its one argument, an
    /// optional one whose value appears nowhere in what the model read (a
    /// customer it made up): the feedback rewrites the line without it. Sent
    /// again, it is accepted. Default: true.
    pub hold_results_from_made_up_filters: bool,
    /// Whether a final result is held back once when it looks like nothing
    /// was found (`null`, `[]`, `{}`, `""`, `0`, `false`, or a whole text the
    /// script split) and its script looks for, or splits on, a text that
    /// occurs nowhere in what its tools returned or in its own other strings
    /// (`startsWith('ERROR:')` over lines that read `ERROR E42`): the
    /// feedback quotes a line of the data that holds the text's word (see
    /// `agent::absent_patterns`). Sent again, it is accepted. After an error
    /// the same account is added to the feedback whatever this says.
    /// Default: true.
    pub hold_results_from_absent_patterns: bool,
    /// Whether a final result is held back once when its script is nothing but
    /// `final_result(<number>)`, written after an observation of a list or a
    /// map of numbers, and the number is none of them: the model added or
    /// counted the data in its head (the local model answered 40.8 for
    /// 23.5 + 8.25 + 19.0, and 4 for a count of 3). The feedback asks for the
    /// number worked out by a script. Sent again, it is accepted. Default:
    /// true.
    pub hold_hand_computed_results: bool,
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
}

/// What the loop does with a script's bare last value (one that is not
/// `observation(...)`, `final_result(...)`, `error(...)` or a transfer). Either
/// way [`ScriptOutput::decode`] keeps its contract; this is the loop's reading.
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
            hold_rhai_pitfalls: true,
            hold_unfounded_results: true,
            hold_results_in_other_units: true,
            hold_ids_as_results: true,
            hold_whole_maps: true,
            hold_results_from_made_up_filters: true,
            hold_results_from_absent_patterns: true,
            hold_hand_computed_results: true,
        }
    }
}
