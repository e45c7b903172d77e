//! The guest protocol parser never panics, gives the same text and messages however
//! the guest's writes are cut, and never hands on a piece of text holding this
//! run's whole header (text pieces on either side of a message may, joined, spell
//! one: that is printed output, never parsed again).
//!
//! Shared by the fuzz target of the same name and by `cli/tests/suite/adversarial.rs`,
//! which replays the seeds under `fixtures/fuzz/` on every `cargo test`.

use codeact_wasm::protocol::{MARKER, OutputParser};

const NONCE: &str = "0123456789abcdef";

fn header() -> String {
    let mut header = String::from_utf8_lossy(MARKER).into_owned();
    header.push_str(NONCE);
    header.push(' ');
    header
}

fn parse(chunks: &[&[u8]]) -> (String, Vec<String>) {
    let header = header();
    let mut parser = OutputParser::new(NONCE, 1 << 20);
    let mut text = String::new();
    let mut messages = Vec::new();
    let mut keep = |t: &str| {
        assert!(
            !t.contains(&header),
            "a message header was handed on as text"
        );
        text.push_str(t);
    };
    for chunk in chunks {
        parser.feed(chunk, &mut keep, &mut messages);
    }
    parser.finish(&mut keep);
    (text, messages.iter().map(|m| format!("{m:?}")).collect())
}

/// Checks one input.
pub fn check(data: &[u8]) {
    let Some((&cut, rest)) = data.split_first() else {
        return;
    };
    let size = usize::from(cut % 17) + 1;
    let whole = parse(&[rest]);
    let pieces: Vec<&[u8]> = rest.chunks(size).collect();
    assert_eq!(parse(&pieces), whole, "chunks of {size} differ");
}
