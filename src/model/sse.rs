//! Streamed replies: server-sent events folded into one [`ModelResponse`].
//!
//! Each provider's stream is a [`StreamFold`]: a pure state machine fed one event
//! at a time, with no I/O, so the same code serves the network path
//! ([`super::http`] reads events off the response with an idle timeout), tests and
//! the fuzzer ([`fold_sse_bytes`] reads them off bytes already in memory).

use std::convert::Infallible;

use eventsource_stream::{Event, EventStreamError, Eventsource};
use futures_util::{FutureExt, Stream, StreamExt};

use crate::chat::{ModelResponse, StreamEvent};

/// How a streamed reply went wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamFault {
    /// An event that cannot be read. Asking again would get the same answer, so
    /// the call is not retried.
    Malformed(String),
    /// The stream stopped, broke or carried an error before the reply was complete.
    /// Retried while no text has reached the caller.
    Broken(String),
}

impl std::fmt::Display for StreamFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StreamFault::Malformed(reason) | StreamFault::Broken(reason) => f.write_str(reason),
        }
    }
}

/// Whether a fold wants more events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// Keep reading.
    More,
    /// The provider said the reply is complete; later events are ignored.
    Complete,
}

/// One provider's streamed reply, folded event by event.
pub trait StreamFold {
    /// Takes one event: its type (`message` when the server named none) and data.
    /// Text deltas go to `on_event` as they arrive.
    fn event(
        &mut self,
        name: &str,
        data: &str,
        on_event: &mut dyn FnMut(StreamEvent),
    ) -> Result<Flow, StreamFault>;

    /// The reply, once the events ended (after [`Flow::Complete`] or at the end of
    /// the stream); a reply the provider never finished is [`StreamFault::Broken`].
    /// Sends the closing events to `on_event`.
    fn finish(self, on_event: &mut dyn FnMut(StreamEvent)) -> Result<ModelResponse, StreamFault>;

    /// Whether any text has reached the caller (after which a retry would repeat it).
    fn emitted(&self) -> bool;
}

/// Folds a stream already in memory, cut into `chunks` as it arrived off the wire,
/// through the same SSE parser as the network path. The fold's answer must not
/// depend on where the cuts fall.
pub fn fold_sse_bytes<F, C>(
    mut fold: F,
    chunks: impl IntoIterator<Item = C>,
    on_event: &mut dyn FnMut(StreamEvent),
) -> Result<ModelResponse, StreamFault>
where
    F: StreamFold,
    C: AsRef<[u8]>,
{
    let chunks = futures_util::stream::iter(chunks.into_iter().map(Ok::<C, Infallible>));
    let mut events = std::pin::pin!(sse_events(chunks));
    // Every chunk is already here, so each poll is ready at once.
    while let Some(Some(event)) = events.next().now_or_never() {
        let event = event.map_err(|e| StreamFault::Broken(format!("the stream broke: {e}")))?;
        if fold.event(&event.event, &event.data, on_event)? == Flow::Complete {
            break;
        }
    }
    fold.finish(on_event)
}

/// One event's data read as JSON; an unreadable one is [`StreamFault::Malformed`],
/// quoting it (shortened) after `what` ("chunk", "event").
pub(crate) fn parse_data<T: serde::de::DeserializeOwned>(
    data: &str,
    what: &str,
) -> Result<T, StreamFault> {
    serde_json::from_str(data).map_err(|e| {
        StreamFault::Malformed(format!(
            "bad stream {what} ({e}): {}",
            codeact_runtime::text::shorten(data, 200)
        ))
    })
}

const BYTE_ORDER_MARK: &[u8] = "\u{feff}".as_bytes();

/// The server-sent events in a byte stream.
///
/// The stream may start with a byte-order mark, which the SSE format says to skip.
/// `eventsource-stream` 0.2.3 skips it by slicing one *byte* off its first piece of
/// text, which panics on the three-byte mark (found by fuzzing), so the mark is
/// skipped here and the parser is handed an empty line first: an empty line before
/// any field dispatches nothing, and its first text then never starts with a mark.
pub(crate) fn sse_events<S, B, E>(
    bytes: S,
) -> impl Stream<Item = Result<Event, EventStreamError<E>>>
where
    S: Stream<Item = Result<B, E>>,
    B: AsRef<[u8]>,
{
    let undecided = Some(Vec::new());
    futures_util::stream::unfold(
        (Box::pin(bytes.fuse()), undecided),
        |(mut bytes, mut head)| async move {
            let Some(first) = head.as_mut() else {
                let item = bytes.next().await?;
                return Some((item.map(|piece| piece.as_ref().to_vec()), (bytes, None)));
            };
            loop {
                match bytes.next().await {
                    Some(Ok(piece)) => {
                        first.extend_from_slice(piece.as_ref());
                        if first.len() < BYTE_ORDER_MARK.len() && BYTE_ORDER_MARK.starts_with(first)
                        {
                            continue;
                        }
                    }
                    Some(Err(e)) => return Some((Err(e), (bytes, head))),
                    None => {}
                }
                let mut text = b"\n".to_vec();
                text.extend_from_slice(first.strip_prefix(BYTE_ORDER_MARK).unwrap_or(first));
                return Some((Ok(text), (bytes, None)));
            }
        },
    )
    .eventsource()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chat::{ContentBlock, StopReason};
    use crate::model::{AnthropicStream, OpenAiStream};

    const OPENAI: &str = "data: {\"model\":\"m\",\"choices\":[{\"delta\":{\"content\":\"héllo \"}}]}\r\n\r\n\
        : keep-alive\r\n\r\n\
        data: {\"choices\":[{\"delta\":{\"content\":\"wörld\"},\"finish_reason\":\"stop\"}]}\r\n\r\n\
        data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2}}\r\n\r\n\
        data: [DONE]\r\n\r\n";

    const ANTHROPIC: &str = "event: message_start\n\
        data: {\"type\":\"message_start\",\"message\":{\"model\":\"c\",\"usage\":{\"input_tokens\":4}}}\n\n\
        event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0}\n\n\
        event: content_block_delta\n\
        data: {\"type\":\"content_block_delta\",\"delta\":{\"text\":\"✓ done\"}}\n\n\
        event: message_delta\n\
        data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":6}}\n\n\
        event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";

    fn fold_openai(chunks: &[&[u8]]) -> (Result<ModelResponse, StreamFault>, Vec<StreamEvent>) {
        let mut events = Vec::new();
        let result = fold_sse_bytes(OpenAiStream::new("fallback"), chunks, &mut |e| {
            events.push(e)
        });
        (result, events)
    }

    #[test]
    fn an_openai_stream_cut_anywhere_folds_to_the_same_reply() {
        let (whole, events) = fold_openai(&[OPENAI.as_bytes()]);
        let reply = whole.clone().expect("a complete stream");
        assert_eq!(reply.content, vec![ContentBlock::text("héllo wörld")]);
        assert_eq!(reply.stop_reason, StopReason::EndTurn);
        assert_eq!(
            (reply.usage.input_tokens, reply.usage.output_tokens),
            (3, 2)
        );
        assert_eq!(reply.model, "m");
        assert_eq!(events.last(), Some(&StreamEvent::Done));
        let bytes = OPENAI.as_bytes();
        for cut in 1..bytes.len() {
            let (split, _) = fold_openai(&[&bytes[..cut], &bytes[cut..]]);
            assert_eq!(split, whole, "cut at byte {cut}");
        }
    }

    /// If this fails, a reasoning model's thinking is lost, or shown and searched
    /// for code as if it were the reply.
    #[test]
    fn reasoning_streamed_by_an_openai_compatible_server_is_kept_apart_from_the_text() {
        let stream = "data: {\"choices\":[{\"delta\":{\"reasoning_content\":\"Let me \"}}]}\n\n\
            data: {\"choices\":[{\"delta\":{\"reasoning_content\":\"think.\"}}]}\n\n\
            data: {\"choices\":[{\"delta\":{\"content\":\"42\"},\"finish_reason\":\"stop\"}]}\n\n\
            data: [DONE]\n\n";
        let (reply, events) = fold_openai(&[stream.as_bytes()]);
        let reply = reply.expect("a complete stream");
        assert_eq!(
            reply.content,
            vec![
                ContentBlock::Thinking {
                    thinking: "Let me think.".into()
                },
                ContentBlock::text("42")
            ]
        );
        assert_eq!(reply.text(), "42");
        let deltas: Vec<&StreamEvent> = events
            .iter()
            .filter(|e| matches!(e, StreamEvent::TextDelta { .. }))
            .collect();
        assert_eq!(deltas, [&StreamEvent::TextDelta { text: "42".into() }]);
    }

    /// If this fails, Claude's thinking is lost, or taken for the reply's text.
    #[test]
    fn an_anthropic_thinking_block_is_kept_apart_from_the_text() {
        let stream = "event: message_start\n\
            data: {\"type\":\"message_start\",\"message\":{\"model\":\"c\",\"usage\":{\"input_tokens\":4}}}\n\n\
            data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"thinking\",\"thinking\":\"\"}}\n\n\
            data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"Hmm.\"}}\n\n\
            data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"signature_delta\",\"signature\":\"xyz\"}}\n\n\
            data: {\"type\":\"content_block_stop\",\"index\":0}\n\n\
            data: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n\
            data: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"text_delta\",\"text\":\"42\"}}\n\n\
            data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":6}}\n\n\
            data: {\"type\":\"message_stop\"}\n\n";
        let mut deltas = Vec::new();
        let reply = fold_sse_bytes(
            AnthropicStream::new("fallback"),
            [stream.as_bytes()],
            &mut |e| {
                if let StreamEvent::TextDelta { text } = e {
                    deltas.push(text);
                }
            },
        )
        .expect("a complete stream");
        assert_eq!(
            reply.content,
            vec![
                ContentBlock::Thinking {
                    thinking: "Hmm.".into()
                },
                ContentBlock::text("42")
            ]
        );
        assert_eq!(deltas, ["42"]);
    }

    #[test]
    fn an_anthropic_stream_cut_anywhere_folds_to_the_same_reply() {
        let fold = |chunks: &[&[u8]]| {
            fold_sse_bytes(AnthropicStream::new("fallback"), chunks, &mut |_| {})
        };
        let bytes = ANTHROPIC.as_bytes();
        let whole = fold(&[bytes]).expect("a complete stream");
        assert_eq!(whole.content, vec![ContentBlock::text("✓ done")]);
        assert_eq!(
            (whole.usage.input_tokens, whole.usage.output_tokens),
            (4, 6)
        );
        for cut in 1..bytes.len() {
            assert_eq!(
                fold(&[&bytes[..cut], &bytes[cut..]]),
                Ok(whole.clone()),
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn a_stream_that_ends_before_its_end_marker_is_broken_not_a_reply() {
        let cut = &ANTHROPIC[..ANTHROPIC.find("event: message_stop").unwrap_or(0)];
        let result = fold_sse_bytes(AnthropicStream::new("m"), [cut], &mut |_| {});
        assert!(
            matches!(&result, Err(StreamFault::Broken(r)) if r.contains("message_stop")),
            "{result:?}"
        );
        let (result, _) =
            fold_openai(&[b"data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n"]);
        assert!(matches!(result, Err(StreamFault::Broken(_))), "{result:?}");
    }

    #[test]
    fn a_stream_starting_with_a_byte_order_mark_is_read_however_it_is_cut() {
        let marked = format!("\u{feff}{OPENAI}");
        let bytes = marked.as_bytes();
        let (whole, _) = fold_openai(&[bytes]);
        assert_eq!(whole, fold_openai(&[OPENAI.as_bytes()]).0);
        for cut in 1..8 {
            assert_eq!(
                fold_openai(&[&bytes[..cut], &bytes[cut..]]).0,
                whole,
                "cut at {cut}"
            );
        }
        // Only one mark is skipped: a second one is part of the first line's field
        // name, so that line is ignored, and the rest still reads.
        let twice = format!("\u{feff}\u{feff}{OPENAI}");
        assert_eq!(
            fold_openai(&[twice.as_bytes()]).0.map(|r| r.usage),
            whole.map(|r| r.usage)
        );
        let (empty, _) = fold_openai(&[b"\xef\xbb"]);
        assert!(matches!(empty, Err(StreamFault::Broken(_))), "{empty:?}");
    }

    #[test]
    fn an_error_mid_stream_is_broken_and_an_unreadable_chunk_is_malformed() {
        let (result, _) = fold_openai(&[b"data: {\"error\":{\"message\":\"overloaded\"}}\n\n"]);
        assert!(
            matches!(&result, Err(StreamFault::Broken(r)) if r.contains("overloaded")),
            "{result:?}"
        );
        let (result, _) = fold_openai(&[b"data: {\"choices\": [\n\n"]);
        assert!(
            matches!(&result, Err(StreamFault::Malformed(r)) if r.contains("bad stream chunk")),
            "{result:?}"
        );
    }
}
