//! Runtimes by name for the integration tests.

use std::sync::Arc;

use codeact::{JsRuntime, Limits, Runtime, runtime_by_name};

/// The runtime called `name` (see `codeact::RUNTIME_NAMES`) under `limits`.
/// JavaScript workers are the codeact binary: a test binary cannot serve as one.
pub fn runtime(name: &str, limits: Limits) -> Result<Arc<dyn Runtime>, String> {
    match name {
        "js" => Ok(Arc::new(
            JsRuntime::new(limits).with_worker(env!("CARGO_BIN_EXE_codeact")),
        )),
        other => runtime_by_name(other, limits).map_err(|e| format!("{other}: {e}")),
    }
}
