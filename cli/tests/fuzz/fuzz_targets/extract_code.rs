//! Code extraction never panics on any reply, and extracted code is made of the
//! reply's own lines.
#![no_main]

#[path = "../checks/extract_code.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::check(data));
