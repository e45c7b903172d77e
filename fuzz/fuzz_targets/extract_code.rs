//! Code extraction never panics on any reply, and extracted code is made of the
//! reply's own lines.
#![no_main]

use codeact::agent::{Extraction, extract_code};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|reply: &str| {
    if let Extraction::Code { code, .. } = extract_code(reply, &["rhai", "js"]) {
        for line in code.lines() {
            assert!(reply.contains(line));
        }
    }
});
