//! `ScriptOutput::decode` never panics, and what it produces survives its own wire
//! format unchanged.
//!
//! Shared by the fuzz target of the same name and by `cli/tests/suite/adversarial.rs`,
//! which replays the seeds under `fixtures/fuzz/` on every `cargo test`.

use codeact::ScriptOutput;

/// Checks one input.
pub fn check(data: &[u8]) {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    let output = ScriptOutput::decode(value);
    let wire = output.to_string();
    let back: serde_json::Value = serde_json::from_str(&wire).expect("the wire line is JSON");
    assert_eq!(ScriptOutput::decode(back), output);
}
