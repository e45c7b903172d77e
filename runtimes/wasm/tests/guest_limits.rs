//! Limits on the real interpreter guests (fetched by guests/fetch-guests.sh).

use std::sync::Arc;

use codeact_runtime::{Limits, NoTools, Runtime};
use codeact_wasm::WasmRuntime;

/// Regression: MicroPython takes a heap the size of the memory limit as it starts,
/// and a limit of 512 MiB or more used to exceed what a guest could grow to while
/// starting, so the session could not start at all.
#[test]
fn a_micropython_session_starts_under_a_memory_limit_of_512_mib() {
    let limits = Limits {
        max_memory_bytes: 512 << 20,
        ..Limits::default()
    };
    let runtime = WasmRuntime::by_name("wasm:micropython", limits).expect("the guest loads");
    let mut session = runtime
        .new_session(Arc::new(NoTools))
        .expect("the session starts");
    let outcome = session.run("final_result(1)").expect("the run finishes");
    assert_eq!(
        outcome.completion.expect("a value"),
        serde_json::json!({"type": "final_result", "value": 1})
    );
}
