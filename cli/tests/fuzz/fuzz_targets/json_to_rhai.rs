//! JSON -> Rhai -> JSON never panics and keeps every value JSON can hold exactly
//! (integers that fit i64, strings, bools, null, arrays, objects).
#![no_main]

#[path = "../checks/json_to_rhai.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::check(data));
