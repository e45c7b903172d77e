//! What a script's tool calls gave, as the loop keeps it for its feedback and
//! the data checks: read by `feedback` and `data_paths` alike.

use serde_json::Value;

/// A tool call a script made and what it returned, shown with the script's
/// error ([`tool_results`](super::feedback::tool_results)).
#[derive(Debug, Clone, PartialEq)]
pub struct ToolResultSeen {
    /// The tool's name.
    pub tool: String,
    /// The arguments the script passed.
    pub args: Value,
    /// What the tool returned.
    pub value: Value,
}

/// A tool call the tool failed, for the script's error to say what was wrong
/// with its arguments ([`missing_arguments`](super::feedback::missing_arguments),
/// [`made_up_arguments`](super::feedback::made_up_arguments)).
#[derive(Debug, Clone, PartialEq)]
pub struct FailedCall {
    /// The tool's name.
    pub tool: String,
    /// The arguments the script passed.
    pub args: Value,
    /// Each argument the tool requires that the call left out, as the tool's
    /// signature shows it (name, type).
    pub missing: Vec<(String, String)>,
}
