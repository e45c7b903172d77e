//! The guest protocol parser never panics, gives the same text and messages however
//! the guest's writes are cut, and never lets this run's header through as text.
#![no_main]

use codeact_wasm::protocol::{MARKER, OutputParser};
use libfuzzer_sys::fuzz_target;

const NONCE: &str = "0123456789abcdef";

fn parse(chunks: &[&[u8]]) -> (String, Vec<String>) {
    let mut parser = OutputParser::new(NONCE);
    let mut text = String::new();
    let mut messages = Vec::new();
    for chunk in chunks {
        parser.feed(chunk, &mut |t| text.push_str(t), &mut messages);
    }
    parser.finish(&mut |t| text.push_str(t));
    (text, messages.iter().map(|m| format!("{m:?}")).collect())
}

fuzz_target!(|data: &[u8]| {
    let Some((&cut, rest)) = data.split_first() else {
        return;
    };
    let size = usize::from(cut % 17) + 1;
    let whole = parse(&[rest]);
    let pieces: Vec<&[u8]> = rest.chunks(size).collect();
    assert_eq!(parse(&pieces), whole, "chunks of {size} differ");
    let mut header = String::from_utf8_lossy(MARKER).into_owned();
    header.push_str(NONCE);
    header.push(' ');
    assert!(!whole.0.contains(&header), "a message header leaked into text");
});
