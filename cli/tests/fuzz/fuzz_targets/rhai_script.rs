//! Any script, in a session with small limits, ends in an outcome: no panic, no
//! hang past the limits, and the session still runs a trivial script afterwards.
#![no_main]

#[path = "../checks/rhai_script.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::check(data));
