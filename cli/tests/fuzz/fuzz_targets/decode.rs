//! `ScriptOutput::decode` never panics, and what it produces survives its own wire
//! format unchanged.
#![no_main]

#[path = "../checks/decode.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::check(data));
