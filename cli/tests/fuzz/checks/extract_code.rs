//! Code extraction never panics on any reply, and extracted code is made of the
//! reply's own lines.
//!
//! Shared by the fuzz target of the same name and by `cli/tests/suite/adversarial.rs`,
//! which replays the seeds under `fixtures/fuzz/` on every `cargo test`.

use codeact::agent::{Extraction, extract_code};

/// Checks one input (libFuzzer's bytes; only UTF-8 is tried, as `fuzz_target!`
/// does for `&str`).
pub fn check(data: &[u8]) {
    let Ok(reply) = std::str::from_utf8(data) else {
        return;
    };
    if let Extraction::Code { code, .. } = extract_code(reply, &["rhai", "js"]) {
        for line in code.lines() {
            assert!(reply.contains(line));
        }
    }
}
