//! Runtimes by name, as users select them (`--runtime rhai`).

use std::sync::Arc;

use codeact_js::JsRuntime;
use codeact_rhai::RhaiRuntime;
use codeact_runtime::{Limits, Runtime};

/// The runtime names this build knows, for help texts and errors.
pub const RUNTIME_NAMES: &[&str] = &["rhai", "js", "js-in-process"];

/// A runtime name that this build does not know.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown runtime '{name}'; available: {}", RUNTIME_NAMES.join(", "))]
pub struct UnknownRuntime {
    /// The name asked for.
    pub name: String,
}

/// Builds the runtime called `name` with `limits`.
pub fn runtime_by_name(name: &str, limits: Limits) -> Result<Arc<dyn Runtime>, UnknownRuntime> {
    match name {
        "rhai" => Ok(Arc::new(RhaiRuntime::new(limits))),
        // Workers are this executable, which must call `run_worker_if_requested`
        // first thing (the codeact binary does).
        "js" | "javascript" => Ok(Arc::new(JsRuntime::new(limits))),
        // Opt-in, without the worker's guarantees: see JsMode::InProcess.
        "js-in-process" => Ok(Arc::new(JsRuntime::in_process(limits))),
        _ => Err(UnknownRuntime { name: name.into() }),
    }
}
