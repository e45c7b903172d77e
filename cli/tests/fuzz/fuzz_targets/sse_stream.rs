//! The streamed-reply folds (OpenAI chunks, Anthropic events) behind the SSE parser
//! never panic, give the same reply or fault however the body is cut into network
//! chunks, and hand the caller exactly the text they return: the deltas joined are
//! the reply's text, and a complete reply ends with one `Final` then `Done`.
#![no_main]

#[path = "../checks/sse_stream.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::check(data));
