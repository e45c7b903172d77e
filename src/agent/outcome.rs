//! How a run ends: the one type the loop, the events, teams and the CLI share.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::output::script_output::ScriptOutput;

/// How a run ended. Matched exhaustively: a new way to end is a compile error
/// wherever outcomes are handled.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Outcome {
    /// A script returned `final_result(value)`.
    FinalResult {
        /// The answer.
        value: Value,
    },
    /// A script handed over to a declared transfer target.
    Transfer {
        /// The target.
        agent_name: String,
    },
    /// The step limit ran out first.
    StepLimit {
        /// Model calls made.
        steps: usize,
    },
    /// Too many errors in a row.
    ErrorBudget {
        /// Errors in a row when the run stopped.
        consecutive_errors: usize,
        /// The last one.
        last_error: String,
    },
    /// Final results were refused by the output spec's checks as often as
    /// [`LoopConfig::max_refusals`](super::LoopConfig::max_refusals) allows.
    RefusalBudget {
        /// Refusals in the run.
        refusals: usize,
        /// The reason given for the last one.
        last_reason: String,
    },
    /// The model declined to answer.
    Refused {
        /// What it said.
        text: String,
    },
    /// The conversation outgrew the model's context window.
    ContextWindowExceeded,
    /// The run's scripts made all the tool calls
    /// [`LoopConfig::max_tool_calls`](super::LoopConfig::max_tool_calls) allows;
    /// the script that tried one more was refused it and the run ended after it.
    ToolCallBudget {
        /// Tool calls made in the run (the refused one not counted).
        calls: usize,
    },
    /// The run used the tokens
    /// [`LoopConfig::max_input_tokens`](super::LoopConfig::max_input_tokens) or
    /// [`max_output_tokens`](super::LoopConfig::max_output_tokens) allows; the
    /// reply that passed the budget is not acted on.
    TokenBudget {
        /// Input (prompt) tokens the run used.
        input_tokens: u64,
        /// Output tokens the run used.
        output_tokens: u64,
    },
    /// The run took the time
    /// [`LoopConfig::max_run_time`](super::LoopConfig::max_run_time) allows; a
    /// model call or script still going then was abandoned.
    DeadlineExceeded {
        /// The time allowed, in milliseconds.
        limit_ms: u64,
    },
    /// What the run's tool calls returned passed
    /// [`LoopConfig::max_journal_bytes`](super::LoopConfig::max_journal_bytes):
    /// the call past it was refused and the run ended after that script.
    JournalBudget {
        /// Bytes of tool-call arguments and results the run recorded.
        bytes: u64,
        /// The budget.
        limit: u64,
    },
    /// The run's [`CancellationToken`](tokio_util::sync::CancellationToken) was
    /// cancelled (Ctrl-C in `codeact run`): a waiting model call was dropped, a
    /// running script was left to end at its own time limit. The transcript can
    /// be resumed.
    Cancelled,
    /// A call waits for an approval the approver deferred
    /// ([`ApprovalDecision::defer`](crate::ApprovalDecision::defer)): the run
    /// stopped inside that call's script, which did not go on. Resuming the
    /// transcript with a decision for it ([`RunRequest::grant`](crate::RunRequest::grant),
    /// `codeact run --resume T --approve-call ID`) runs that script again from the
    /// start, its earlier calls answered from the transcript.
    AwaitingApproval {
        /// The call's id in the transcript, e.g. `s2c1` (step 2, its first call).
        id: String,
        /// The tool.
        tool: String,
        /// The arguments the decision is for.
        args: serde_json::Value,
    },
}

impl Outcome {
    /// The `ScriptOutput` that ended the run, for the two outcomes a script chose.
    pub fn script_output(&self) -> Option<ScriptOutput> {
        match self {
            Outcome::FinalResult { value } => Some(ScriptOutput::final_result(value.clone())),
            Outcome::Transfer { agent_name } => Some(ScriptOutput::TransferToAgent {
                agent_name: agent_name.clone(),
            }),
            Outcome::StepLimit { .. }
            | Outcome::ErrorBudget { .. }
            | Outcome::RefusalBudget { .. }
            | Outcome::Refused { .. }
            | Outcome::ContextWindowExceeded
            | Outcome::ToolCallBudget { .. }
            | Outcome::JournalBudget { .. }
            | Outcome::TokenBudget { .. }
            | Outcome::DeadlineExceeded { .. }
            | Outcome::Cancelled
            | Outcome::AwaitingApproval { .. } => None,
        }
    }
}
