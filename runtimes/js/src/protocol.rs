//! The lines the host and a worker exchange: one JSON object per line, on the
//! worker's stdin (requests) and stdout (replies). Scripts cannot write to the
//! worker's stdout (the engine has no output but `console`, which becomes `log`
//! replies), so a script cannot forge a reply.

use codeact_runtime::{LimitKind, Limits, ScriptError};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `argv[1]` that makes a binary run as a JavaScript worker; `argv[2]` is then the
/// session's limits as JSON and `argv[3]` the host's process id (the worker dies
/// with that process, and refuses to start if its parent is another).
pub const WORKER_ARG: &str = "__codeact-js-worker";

/// Set in a worker's environment. A process that has it and is about to start a
/// worker itself is an app whose `main` did not call `run_worker_if_requested`
/// first: it refuses, so a misbuilt app fails with the fix named instead of
/// starting copies of itself without end.
pub const WORKER_ENV: &str = "CODEACT_JS_WORKER";

/// Namespace objects by name, each mapping members to tools' flat names.
pub(crate) type Namespaces =
    std::collections::BTreeMap<String, std::collections::BTreeMap<String, String>>;

/// Host to worker.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub(crate) enum Request {
    /// Run a script. A fresh worker's first run also carries the session's
    /// namespace objects (`codeact_runtime::namespaces`), defined before it.
    Run {
        script: String,
        #[serde(default, skip_serializing_if = "Namespaces::is_empty")]
        namespaces: Namespaces,
    },
    /// The answers to the worker's pending batch of calls, in its order.
    ToolResults { results: Vec<ToolAnswer> },
    /// The answer to the worker's pending tool call.
    ToolResult {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        ok: Option<Value>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        err: Option<String>,
    },
}

/// Worker to host.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub(crate) enum Reply {
    /// The script called a tool; the worker waits for a `tool_result`.
    ToolCall { name: String, args: Value },
    /// The script waits on several calls at once; the worker waits for a
    /// `tool_results`.
    ToolCalls {
        calls: Vec<codeact_runtime::ToolCall>,
    },
    /// The script printed (already cut to the run's output cap).
    Log { text: String },
    /// The script finished: its JSON completion value, or why there is none.
    Done {
        completion: Result<Value, Failure>,
        dropped_log_bytes: usize,
    },
    /// The worker cannot go on.
    Fatal { message: String },
}

impl Request {
    /// The answer to a tool call: its value, or its error's message.
    pub(crate) fn tool_result(result: Result<Value, String>) -> Self {
        match result {
            Ok(value) => Request::ToolResult {
                ok: Some(value),
                err: None,
            },
            Err(message) => Request::ToolResult {
                ok: None,
                err: Some(message),
            },
        }
    }
}

/// One call's answer in a batch: its value, or its error's message.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct ToolAnswer {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ok: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub err: Option<String>,
}

impl ToolAnswer {
    pub(crate) fn from_result(result: Result<Value, String>) -> Self {
        match result {
            Ok(value) => Self {
                ok: Some(value),
                err: None,
            },
            Err(message) => Self {
                ok: None,
                err: Some(message),
            },
        }
    }
}

impl Reply {
    pub(crate) fn fatal(message: &str) -> Self {
        Reply::Fatal {
            message: message.to_string(),
        }
    }
}

/// Why a script has no completion value.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Failure {
    pub kind: FailureKind,
    /// The engine's message, for the model.
    pub message: String,
    /// The name of the error's native kind (`ReferenceError`), where the
    /// engine gave one apart from the message.
    #[serde(default)]
    pub name: Option<String>,
    /// The 1-based line and column in the script, read before the message
    /// lost the positions it does not show.
    #[serde(default)]
    pub line: Option<u32>,
    #[serde(default)]
    pub column: Option<u32>,
}

/// Which kind of failure, so the host maps it without reading the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum FailureKind {
    /// The script did not parse.
    Syntax,
    /// The script threw.
    Thrown,
    /// The script ended on `undefined`.
    NoValue,
    /// The value has no JSON form.
    Unrepresentable,
    /// Boa's loop-iteration limit.
    OperationLimit,
    /// Boa's recursion or stack limit.
    CallDepthLimit,
}

impl Failure {
    pub(crate) fn new(kind: FailureKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            name: None,
            line: None,
            column: None,
        }
    }

    /// The same failure, naming the error's native kind, placed where the
    /// engine's full text (`raw`, before the prelude's frames went) puts it.
    pub(crate) fn named(mut self, name: Option<&str>, raw: &str) -> Self {
        let facts = codeact_runtime::js_errors::facts(name, raw, "script");
        self.name = name.map(str::to_string);
        self.line = facts.line;
        self.column = facts.column;
        self
    }

    /// The error the host reports for this failure under `limits`.
    pub(crate) fn into_script_error(self, limits: &Limits) -> ScriptError {
        let Failure {
            kind,
            message,
            name,
            line,
            column,
        } = self;
        let facts = || {
            let facts = codeact_runtime::js_errors::facts(name.as_deref(), &message, "script");
            match line {
                Some(_) => facts.at_line(line).at_column(column),
                None => facts,
            }
        };
        match kind {
            FailureKind::Syntax => {
                let facts = facts();
                ScriptError::syntax(message).with_facts(facts)
            }
            FailureKind::Unrepresentable => ScriptError::Unrepresentable { message },
            FailureKind::OperationLimit => {
                ScriptError::limit(LimitKind::Operations, limits, Some(message))
            }
            FailureKind::CallDepthLimit => {
                ScriptError::limit(LimitKind::CallDepth, limits, Some(message))
            }
            FailureKind::Thrown => {
                let facts = facts();
                ScriptError::thrown(message).with_facts(facts)
            }
            FailureKind::NoValue => ScriptError::NoValue { message },
        }
    }
}
