//! Any script, in a session with small limits, ends in an outcome: no panic, no
//! hang past the limits, and the session still runs a trivial script afterwards.
//!
//! Shared by the fuzz target of the same name and by `cli/tests/suite/adversarial.rs`,
//! which replays the seeds under `fixtures/fuzz/` on every `cargo test`.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use codeact_rhai::RhaiRuntime;
use codeact_runtime::{Limits, NoTools, Session};

fn runtime() -> &'static RhaiRuntime {
    static RUNTIME: OnceLock<RhaiRuntime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        RhaiRuntime::new(Limits {
            wall_time: Duration::from_millis(100),
            max_operations: 100_000,
            max_memory_bytes: 1 << 20,
            ..Limits::default()
        })
    })
}

/// Checks one input (libFuzzer's bytes; only UTF-8 is tried, as `fuzz_target!`
/// does for `&str`).
pub fn check(data: &[u8]) {
    let Ok(script) = std::str::from_utf8(data) else {
        return;
    };
    let mut session = runtime().session(Arc::new(NoTools));
    session
        .run(script)
        .expect("the host never fails on a script");
    let after = session
        .run("final_result(1)")
        .expect("the host never fails on a script");
    assert!(
        after.completion.is_ok(),
        "the session is wedged: {:?}",
        after.completion
    );
}
