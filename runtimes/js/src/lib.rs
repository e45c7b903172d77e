//! The JavaScript backend of codeact: boa_engine in a supervised worker process.
//!
//! Boa runs in-process fast, but it cannot be stopped inside native builtins (a
//! catastrophic regex, `join` of a huge array) and has no heap cap. So each
//! session's context lives in a worker process, the host binary started again with
//! [`WORKER_ARG`]. The host kills the worker at the run's deadline, and the worker
//! caps its own memory with `RLIMIT_DATA`; either way the host survives, the model
//! is told which limit stopped the script, and the next run starts a fresh worker
//! (earlier variables are gone, and the model is told so). Starting a worker costs
//! a few milliseconds, once per session and after each such stop.
//!
//! A binary that hosts JavaScript sessions calls [`run_worker_if_requested`] first
//! thing in `main`; the `codeact` binary does.

mod hoist;
mod protocol;
mod session;
mod worker;

use std::path::PathBuf;
use std::sync::Arc;

use codeact_runtime::{
    Enforcement, HostError, LimitKind, Limits, Runtime, RuntimeInfo, Session, ToolDispatch,
    ToolSpec,
};

pub use protocol::WORKER_ARG;
pub use session::JsSession;
pub use worker::run_worker_if_requested;

const ENFORCEMENT: &[Enforcement] = &[
    Enforcement {
        limit: LimitKind::WallTime,
        how: "the host kills the worker process at the deadline (loops in callbacks and regex backtracking included); the session restarts",
    },
    Enforcement {
        limit: LimitKind::Operations,
        how: "Boa's loop-iteration limit, counted per call frame: a backstop, the deadline is the real bound",
    },
    Enforcement {
        limit: LimitKind::Memory,
        how: "RLIMIT_DATA on the worker process (the limit plus 48 MiB for the engine); an allocation past it ends the worker, the session restarts",
    },
    Enforcement {
        limit: LimitKind::CallDepth,
        how: "Boa's recursion limit (8 frames per unit of the limit, at most 512)",
    },
    Enforcement {
        limit: LimitKind::NestingDepth,
        how: "checked when the completion value is encoded to JSON",
    },
    Enforcement {
        limit: LimitKind::Variables,
        how: "not enforced separately: bounded by the memory limit",
    },
    Enforcement {
        limit: LimitKind::Functions,
        how: "not enforced separately: bounded by the memory limit",
    },
    Enforcement {
        limit: LimitKind::Output,
        how: "console output past the cap is counted in the worker and never sent",
    },
];

static INFO: RuntimeInfo = RuntimeInfo {
    name: "js",
    language: "JavaScript",
    fence_tags: &["js", "javascript"],
    card_template: include_str!("../../../prompts/js.md"),
    enforcement: ENFORCEMENT,
};

/// The JavaScript runtime: sessions run in worker processes started from
/// `worker_path` (default: this executable).
#[derive(Debug, Clone)]
pub struct JsRuntime {
    limits: Arc<Limits>,
    worker_path: PathBuf,
}

impl JsRuntime {
    /// A runtime whose workers are this executable (which must call
    /// [`run_worker_if_requested`]).
    pub fn new(limits: Limits) -> Self {
        let worker_path = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("codeact"));
        Self {
            limits: Arc::new(limits),
            worker_path,
        }
    }

    /// The same runtime with workers started from `path`.
    pub fn with_worker(mut self, path: impl Into<PathBuf>) -> Self {
        self.worker_path = path.into();
        self
    }
}

impl Runtime for JsRuntime {
    fn info(&self) -> &RuntimeInfo {
        &INFO
    }

    fn limits(&self) -> &Limits {
        &self.limits
    }

    fn tool_signature(&self, tool: &ToolSpec) -> String {
        let fields: Vec<String> = tool
            .argument_names()
            .into_iter()
            .map(|(name, ty)| format!("{name}: {ty}"))
            .collect();
        format!("tools.{}({{{}}})", tool.name, fields.join(", "))
    }

    fn new_session(&self, tools: Arc<dyn ToolDispatch>) -> Result<Box<dyn Session>, HostError> {
        Ok(Box::new(JsSession::new(
            self.worker_path.clone(),
            self.limits.clone(),
            tools,
        )))
    }
}
