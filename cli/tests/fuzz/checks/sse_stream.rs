//! The streamed-reply folds (OpenAI chunks, Anthropic events) behind the SSE parser
//! never panic, give the same reply or fault however the body is cut into network
//! chunks, and hand the caller exactly the text they return: the deltas joined are
//! the reply's text, and a complete reply ends with one `Final` then `Done`.
//!
//! Shared by the fuzz target of the same name and by `cli/tests/suite/adversarial.rs`,
//! which replays the seeds under `fixtures/fuzz/` on every `cargo test`.

use codeact::chat::{ContentBlock, ModelResponse, StreamEvent};
use codeact::model::{AnthropicStream, OpenAiStream, StreamFault, StreamFold, fold_sse_bytes};

type Folded = (Result<ModelResponse, StreamFault>, Vec<StreamEvent>);

fn fold<F: StreamFold>(fold: F, chunks: &[&[u8]]) -> Folded {
    let mut events = Vec::new();
    let result = fold_sse_bytes(fold, chunks, &mut |event| events.push(event));
    (result, events)
}

fn folded(anthropic: bool, chunks: &[&[u8]]) -> Folded {
    if anthropic {
        fold(AnthropicStream::new("fallback"), chunks)
    } else {
        fold(OpenAiStream::new("fallback"), chunks)
    }
}

fn check_events((result, events): &Folded) {
    let deltas: String = events
        .iter()
        .filter_map(|event| match event {
            StreamEvent::TextDelta { text } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    let Ok(response) = result else {
        return;
    };
    let text: String = response
        .content
        .iter()
        .filter_map(|block| match block {
            ContentBlock::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(deltas, text, "the deltas sent are not the reply's text");
    let finals = events
        .iter()
        .filter(|event| matches!(event, StreamEvent::Final { .. }))
        .count();
    assert_eq!(finals, 1, "a complete reply has one Final event");
    assert_eq!(events.last(), Some(&StreamEvent::Done), "Done comes last");
}

/// Checks one input.
pub fn check(data: &[u8]) {
    let Some((&choice, body)) = data.split_first() else {
        return;
    };
    let anthropic = choice & 1 == 1;
    let size = usize::from((choice >> 1) % 17) + 1;
    let whole = folded(anthropic, &[body]);
    check_events(&whole);
    let pieces: Vec<&[u8]> = body.chunks(size).collect();
    let cut = folded(anthropic, &pieces);
    assert_eq!(cut, whole, "chunks of {size} differ");
}
