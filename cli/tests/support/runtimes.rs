//! Runtimes by name for the integration tests.

use std::sync::Arc;

use codeact::{JsRuntime, Limits, Runtime, ScriptOutput, ScriptSession, runtime_by_name};
use serde_json::json;

/// Every runtime, for the tests that hold on each.
pub const EVERY_RUNTIME: [&str; 9] = [
    "rhai",
    "js",
    "js-in-process",
    "wasm:js",
    "wasm:js-stdio",
    "wasm:micropython",
    "wasm:python",
    "wasm:rhai",
    "wasm:boa",
];

/// The runtime called `name` (see `codeact::exec::RUNTIME_NAMES`) under `limits`.
/// JavaScript workers are the codeact binary: a test binary cannot serve as one.
pub fn runtime(name: &str, limits: Limits) -> Result<Arc<dyn Runtime>, String> {
    match name {
        "js" => Ok(Arc::new(
            JsRuntime::new(limits).with_worker(env!("CARGO_BIN_EXE_codeact")),
        )),
        other => runtime_by_name(other, limits).map_err(|e| format!("{other}: {e}")),
    }
}

/// Whether `session` still runs a trivial script after whatever came before;
/// otherwise what it gave instead, shortened.
pub async fn still_runs(session: &mut ScriptSession) -> Result<(), String> {
    let after = session
        .run("final_result(\"alive\")")
        .await
        .map_err(|e| format!("host failed: {e}"))?;
    if after.output == ScriptOutput::final_result(json!("alive")) {
        return Ok(());
    }
    let shown: String = after.output.to_string().chars().take(200).collect();
    Err(format!("the session is unusable afterwards: {shown}"))
}
