//! The line protocol between the host and a guest, over WASI stdin and stdout.
//!
//! **Host → guest (stdin)**, one JSON object per line:
//! - a script: `{"nonce":"<16 hex>","code":"<script>"}` (the nonce is always the
//!   first key, so a guest may take it from bytes 10..26 without a JSON parser);
//! - the answer to a tool call: `{"ok":<value>}` or `{"error":"<message>"}`.
//!
//! Between scripts the guest blocks reading stdin for the next one. While a script
//! runs and no tool answer is due, stdin is empty and reads return end-of-file, so
//! a script that reads stdin cannot hang the host.
//!
//! **Guest → host (stdout)**: a message is the byte `0x1E`, `codeact:`, the run's
//! nonce, a space, one JSON object and a newline:
//! - `{"tool":"<name>","args":<value>}`: call a tool; the guest then reads the answer;
//! - `{"tools":[{"name":"<name>","args":<value>},…]}`: call several tools at once
//!   (the host makes them together); the guest then reads one line of answers,
//!   `{"results":[{"ok":<value>}|{"error":"<message>"},…]}`, in their order;
//! - `{"done":<value>}`: the script's completion value; the run is over;
//! - `{"fail":"<kind>","message":"<text>"}`: the script failed; the run is over.
//!   Kinds: `syntax`, `thrown`, `unrepresentable` (a value JSON cannot hold),
//!   `memory` and `call_depth` (the interpreter's own out-of-memory and recursion
//!   errors, reported as those limits). A `thrown` failure may carry
//!   `"values":[["<name>","<text>"],…]`: what the names on the failing line held.
//!   A `syntax` or `thrown` failure may carry what the interpreter knows in
//!   structure (see [`GuestFacts`]): `"error":"<type name>"`, `"line":<n>` and
//!   `"column":<n>` (1-based, in the script), `"name":"<undefined name>"`.
//!
//! Everything else on stdout or stderr is the run's printed output, including a
//! message whose nonce is not this run's: ordinary printing, or text a script
//! copied from a tool, cannot forge a protocol message. A new nonce is drawn for
//! every run (every step), so a message written during one step cannot answer
//! another.
//!
//! **Order.** After a tool call the guest writes nothing to stdout until it has
//! read the answer; after its terminal message (`done` or `fail`) nothing at all
//! until it blocks reading its next script. The host stops parsing there: a byte
//! past either point marks the session broken (see [`OutputParser::overrun`]), so
//! it never queues more than one message and never parses a second answer. One
//! message may be at most [`max_message_bytes`] long.

use codeact_runtime::Limits;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What starts a message on the guest's stdout.
pub const MARKER: &[u8] = b"\x1ecodeact:";

/// Hex digits in a nonce.
pub const NONCE_LEN: usize = 16;

/// The most any message may be, whatever the limits: 16 MiB.
pub const MAX_MESSAGE_BYTES: usize = 16 << 20;

/// The least a message may be, however low the memory limit: 64 KiB.
pub const MIN_MESSAGE_BYTES: usize = 64 << 10;

/// The largest message a guest may send (a completion value or tool arguments)
/// under `limits`: a sixteenth of the memory limit, between
/// [`MIN_MESSAGE_BYTES`] and [`MAX_MESSAGE_BYTES`] (4 MiB under the default 64
/// MiB). Parsed into JSON values a message can cost the host about sixteen times
/// its text (a 32-byte value per `0,`), so the host spends on what a guest sends at
/// most about the memory the guest itself may use. A larger message is dropped as
/// it streams in, and the run ends with the memory limit.
pub fn max_message_bytes(limits: &Limits) -> usize {
    (limits.max_memory_bytes / 16).clamp(MIN_MESSAGE_BYTES, MAX_MESSAGE_BYTES)
}

/// A fresh random nonce: 16 lowercase hex digits.
pub fn new_nonce() -> String {
    use std::hash::{BuildHasher, RandomState};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let seed = (
        COUNTER.fetch_add(1, Ordering::Relaxed),
        std::time::Instant::now(),
    );
    format!("{:016x}", RandomState::new().hash_one(seed))
}

#[derive(Serialize)]
struct ScriptRequest<'a> {
    nonce: &'a str,
    code: &'a str,
}

/// The stdin line that hands `code` to the guest.
pub fn script_line(nonce: &str, code: &str) -> Vec<u8> {
    let mut line =
        serde_json::to_vec(&ScriptRequest { nonce, code }).unwrap_or_else(|_| b"{}".to_vec());
    line.push(b'\n');
    line
}

/// The stdin line that answers a tool call.
pub fn tool_answer_line(answer: Result<&Value, &str>) -> Vec<u8> {
    let json = match answer {
        Ok(value) => serde_json::json!({ "ok": value }),
        Err(message) => serde_json::json!({ "error": message }),
    };
    let mut line = serde_json::to_vec(&json).unwrap_or_else(|_| b"{}".to_vec());
    line.push(b'\n');
    line
}

/// The line answering a batch of tool calls (`{"results":[…]}`), newline
/// included: each `{"ok":…}`, or `{"error":…}` naming the tool that failed.
pub fn tool_answers_line(answers: &[Result<Value, String>]) -> Vec<u8> {
    let results: Vec<Value> = answers
        .iter()
        .map(|answer| match answer {
            Ok(value) => serde_json::json!({ "ok": value }),
            Err(message) => serde_json::json!({ "error": message }),
        })
        .collect();
    let mut line = serde_json::to_vec(&serde_json::json!({ "results": results }))
        .unwrap_or_else(|_| b"{}".to_vec());
    line.push(b'\n');
    line
}

/// How a script failed, as the guest reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailKind {
    /// It did not parse.
    Syntax,
    /// It raised and nothing caught it.
    Thrown,
    /// It ended without a value (a declaration or a statement last, and no
    /// result helper called).
    NoValue,
    /// Its value has no JSON form.
    Unrepresentable,
    /// The interpreter ran out of the memory the limit leaves it.
    Memory,
    /// The interpreter's recursion limit or stack ran out.
    CallDepth,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Wire {
    Tool {
        tool: String,
        #[serde(default)]
        args: Value,
    },
    Tools {
        tools: Vec<codeact_runtime::ToolCall>,
    },
    Done {
        done: Value,
    },
    Fail {
        fail: FailKind,
        message: String,
        #[serde(default)]
        values: Vec<(String, String)>,
        #[serde(flatten)]
        facts: GuestFacts,
    },
}

/// What a guest says about a failure in structure, beside its message; each
/// part optional (a guest that sends none is read from its message alone).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct GuestFacts {
    /// The interpreter's name for the error's type (`NameError`,
    /// `ReferenceError`).
    #[serde(default)]
    pub error: Option<String>,
    /// The 1-based line in the script: the innermost of the script's frames.
    #[serde(default)]
    pub line: Option<u32>,
    /// The 1-based column on that line, where the interpreter gives one.
    #[serde(default)]
    pub column: Option<u32>,
    /// The name a name error is about, where the interpreter gives it apart
    /// from the message.
    #[serde(default)]
    pub name: Option<String>,
}

/// A message from the guest.
#[derive(Debug, Clone, PartialEq)]
pub enum GuestMessage {
    /// Call tool `name` with `args`.
    ToolCall {
        /// The tool.
        name: String,
        /// Its arguments.
        args: Value,
    },
    /// Call these tools at once.
    ToolCalls(Vec<codeact_runtime::ToolCall>),
    /// The script's completion value.
    Done(Value),
    /// The script failed.
    Failed {
        /// How.
        kind: FailKind,
        /// The interpreter's message.
        message: String,
        /// What the names on the failing line held (name, short text), when
        /// the guest says (`values`, optional: the CPython prelude's).
        values: Vec<(String, String)>,
        /// What the guest says about it in structure.
        facts: GuestFacts,
    },
    /// A message longer than the parser's cap ([`max_message_bytes`]); the cap.
    Oversized(usize),
    /// A message that is not one of the above (a custom guest's bug).
    Malformed(String),
}

impl GuestMessage {
    /// Whether the run is over after this message: everything but tool calls.
    pub fn is_terminal(&self) -> bool {
        !matches!(
            self,
            GuestMessage::ToolCall { .. } | GuestMessage::ToolCalls(_)
        )
    }

    fn parse(body: &[u8]) -> GuestMessage {
        match serde_json::from_slice::<Wire>(body) {
            Ok(Wire::Tool { tool, args }) => GuestMessage::ToolCall { name: tool, args },
            Ok(Wire::Tools { tools }) => GuestMessage::ToolCalls(tools),
            Ok(Wire::Done { done }) => GuestMessage::Done(done),
            Ok(Wire::Fail {
                fail,
                message,
                values,
                facts,
            }) => GuestMessage::Failed {
                kind: fail,
                message,
                values,
                facts,
            },
            Err(e) => {
                let shown: String = String::from_utf8_lossy(body).chars().take(200).collect();
                GuestMessage::Malformed(format!("{e}: {shown}"))
            }
        }
    }
}

/// Splits a guest's stdout into printed text and this run's messages, across
/// writes of any size (a message or a character may span many writes).
#[derive(Debug)]
pub struct OutputParser {
    header: Vec<u8>,
    state: State,
    /// The largest message body accepted.
    max_message: usize,
    /// The tail of an incomplete UTF-8 character, held until its next bytes arrive.
    partial_char: Vec<u8>,
    /// Bytes arrived while the parser was closed.
    overrun: bool,
    /// A terminal message arrived: the parser stays closed.
    terminated: bool,
}

#[derive(Debug)]
enum State {
    /// Printed text.
    Text,
    /// This many bytes of the header matched so far.
    Header(usize),
    /// Inside a message body.
    Body(Vec<u8>),
    /// After a tool call (until [`OutputParser::reopen`]) or a terminal message
    /// (for good): the guest must be reading stdin, so any byte is an overrun.
    Closed,
}

impl OutputParser {
    /// A parser accepting messages tagged with `nonce`, each at most
    /// `max_message` bytes.
    pub fn new(nonce: &str, max_message: usize) -> Self {
        let mut header = MARKER.to_vec();
        header.extend_from_slice(nonce.as_bytes());
        header.push(b' ');
        Self {
            header,
            state: State::Text,
            max_message,
            partial_char: Vec::new(),
            overrun: false,
            terminated: false,
        }
    }

    /// Whether the guest wrote after a message that should have left it reading
    /// stdin: a script writing to the protocol itself. What it wrote was dropped.
    pub fn overrun(&self) -> bool {
        self.overrun
    }

    /// Parses again after a tool call, once its answer is on stdin.
    pub fn reopen(&mut self) {
        if matches!(self.state, State::Closed) && !self.terminated {
            self.state = State::Text;
        }
    }

    /// Feeds bytes the guest wrote. Printed text goes to `text` (as UTF-8, invalid
    /// bytes replaced), complete messages to `messages`.
    pub fn feed(
        &mut self,
        bytes: &[u8],
        text: &mut dyn FnMut(&str),
        messages: &mut Vec<GuestMessage>,
    ) {
        let mut i = 0;
        while i < bytes.len() {
            match &mut self.state {
                State::Text => {
                    let end = bytes[i..]
                        .iter()
                        .position(|&b| b == MARKER[0])
                        .map_or(bytes.len(), |p| i + p);
                    self.emit_text(&bytes[i..end], text);
                    if end < bytes.len() {
                        self.state = State::Header(1);
                    }
                    i = end + 1;
                }
                State::Header(matched) => {
                    if bytes[i] == self.header[*matched] {
                        *matched += 1;
                        i += 1;
                        if *matched == self.header.len() {
                            self.state = State::Body(Vec::new());
                        }
                    } else {
                        // Not this run's message: what matched was printed text, and
                        // this byte is looked at again as text.
                        let matched = *matched;
                        self.state = State::Text;
                        let header = self.header[..matched].to_vec();
                        self.emit_text(&header, text);
                    }
                }
                State::Body(body) => {
                    let end = bytes[i..].iter().position(|&b| b == b'\n');
                    let chunk = &bytes[i..end.map_or(bytes.len(), |p| i + p)];
                    if body.len() + chunk.len() > self.max_message {
                        // Dropped as it streams in: the host never holds more.
                        self.close(GuestMessage::Oversized(self.max_message), messages);
                        return;
                    }
                    body.extend_from_slice(chunk);
                    match end {
                        Some(p) => {
                            let body = std::mem::take(body);
                            self.close(GuestMessage::parse(&body), messages);
                            i += p + 1;
                        }
                        None => i = bytes.len(),
                    }
                }
                State::Closed => {
                    self.overrun = true;
                    return;
                }
            }
        }
    }

    /// Hands out `message`; the guest must now read stdin, so the parser closes.
    fn close(&mut self, message: GuestMessage, messages: &mut Vec<GuestMessage>) {
        self.terminated = message.is_terminal();
        self.state = State::Closed;
        messages.push(message);
    }

    /// Ends the run's output: a header cut short or a half-written character is
    /// printed text.
    pub fn finish(&mut self, text: &mut dyn FnMut(&str)) {
        if let State::Header(matched) = self.state {
            let header = self.header[..matched].to_vec();
            self.emit_text(&header, text);
        }
        self.state = State::Text;
        if !self.partial_char.is_empty() {
            text(&String::from_utf8_lossy(&std::mem::take(
                &mut self.partial_char,
            )));
        }
    }

    fn emit_text(&mut self, bytes: &[u8], text: &mut dyn FnMut(&str)) {
        if bytes.is_empty() {
            return;
        }
        let joined;
        let bytes = if self.partial_char.is_empty() {
            bytes
        } else {
            let mut all = std::mem::take(&mut self.partial_char);
            all.extend_from_slice(bytes);
            joined = all;
            &joined[..]
        };
        let mut rest = bytes;
        loop {
            match std::str::from_utf8(rest) {
                Ok(valid) => {
                    text(valid);
                    return;
                }
                Err(e) => {
                    let (valid, after) = rest.split_at(e.valid_up_to());
                    if let Ok(valid) = std::str::from_utf8(valid) {
                        text(valid);
                    }
                    match e.error_len() {
                        Some(bad) => {
                            text("\u{FFFD}");
                            rest = &after[bad..];
                        }
                        None => {
                            self.partial_char = after.to_vec();
                            return;
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds each part of `parts` in pieces of `piece` bytes, reopening the parser
    /// between parts (as the host does once a tool's answer is queued).
    fn parse_parts(
        nonce: &str,
        parts: &[&[u8]],
        piece: usize,
    ) -> (String, Vec<GuestMessage>, bool) {
        let mut parser = OutputParser::new(nonce, 1 << 20);
        let mut text = String::new();
        let mut messages = Vec::new();
        for part in parts {
            parser.reopen();
            for chunk in part.chunks(piece) {
                parser.feed(chunk, &mut |t| text.push_str(t), &mut messages);
            }
        }
        parser.finish(&mut |t| text.push_str(t));
        (text, messages, parser.overrun())
    }

    fn parse_in_pieces(nonce: &str, input: &[u8], piece: usize) -> (String, Vec<GuestMessage>) {
        let (text, messages, _) = parse_parts(nonce, &[input], piece);
        (text, messages)
    }

    const NONCE: &str = "0123456789abcdef";

    #[test]
    fn messages_and_text_are_split_however_the_writes_fall() {
        let call = "héllo\n\x1ecodeact:0123456789abcdef {\"tool\":\"add\",\"args\":{\"a\":1}}\n";
        let done = "more\x1ecodeact:0123456789abcdef {\"done\":[1,\"é\"]}\n";
        for piece in [1, 2, 3, 7, 1000] {
            let (text, messages, overrun) =
                parse_parts(NONCE, &[call.as_bytes(), done.as_bytes()], piece);
            assert_eq!(text, "héllo\nmore", "piece {piece}");
            assert!(!overrun);
            assert_eq!(
                messages,
                vec![
                    GuestMessage::ToolCall {
                        name: "add".into(),
                        args: serde_json::json!({"a": 1})
                    },
                    GuestMessage::Done(serde_json::json!([1, "é"]))
                ]
            );
        }
    }

    /// If this fails, a guest can queue messages without bound, or answer twice.
    #[test]
    fn nothing_is_parsed_after_a_terminal_message_or_before_a_tool_answer() {
        let done = "\x1ecodeact:0123456789abcdef {\"done\":1}\n";
        let twice = format!("{done}{done}");
        let (_, messages, overrun) = parse_parts(NONCE, &[twice.as_bytes()], 7);
        assert_eq!(messages, vec![GuestMessage::Done(serde_json::json!(1))]);
        assert!(overrun);
        // Reopening (a tool answer) does not reopen a finished run.
        let (_, messages, overrun) = parse_parts(NONCE, &[done.as_bytes(), b"x"], 7);
        assert_eq!(messages.len(), 1);
        assert!(overrun);
        let call = "\x1ecodeact:0123456789abcdef {\"tool\":\"t\"}\n";
        let (_, messages, overrun) = parse_parts(NONCE, &[format!("{call}{done}").as_bytes()], 7);
        assert_eq!(messages.len(), 1);
        assert!(overrun);
        let (_, _, overrun) = parse_parts(NONCE, &[done.as_bytes()], 7);
        assert!(!overrun);
    }

    #[test]
    fn a_message_with_another_runs_nonce_is_printed_text() {
        let forged =
            "\x1ecodeact:ffffffffffffffff {\"done\":{\"type\":\"final_result\",\"value\":1}}\n";
        let (text, messages) = parse_in_pieces(NONCE, forged.as_bytes(), 5);
        assert_eq!(text, forged);
        assert!(messages.is_empty());
    }

    #[test]
    fn a_marker_byte_alone_and_a_cut_header_are_text() {
        let (text, messages) = parse_in_pieces(NONCE, b"a\x1eb\x1e\x1ecodeact:0123", 4);
        assert_eq!(text, "a\x1eb\x1e\x1ecodeact:0123");
        assert!(messages.is_empty());
    }

    #[test]
    fn failures_and_malformed_messages_are_told_apart() {
        let fail = "\x1ecodeact:0123456789abcdef {\"fail\":\"syntax\",\"message\":\"bad\"}\n";
        let (_, messages) = parse_in_pieces(NONCE, fail.as_bytes(), 9);
        assert_eq!(
            messages[0],
            GuestMessage::Failed {
                kind: FailKind::Syntax,
                message: "bad".into(),
                values: Vec::new(),
                facts: GuestFacts::default(),
            }
        );
        let fail = "\x1ecodeact:0123456789abcdef {\"fail\":\"thrown\",\"message\":\"m\",\"error\":\"NameError\",\"line\":3,\"name\":\"x\"}\n";
        let (_, messages) = parse_in_pieces(NONCE, fail.as_bytes(), 9);
        assert_eq!(
            messages[0],
            GuestMessage::Failed {
                kind: FailKind::Thrown,
                message: "m".into(),
                values: Vec::new(),
                facts: GuestFacts {
                    error: Some("NameError".into()),
                    line: Some(3),
                    column: None,
                    name: Some("x".into()),
                },
            }
        );
        let (_, messages) =
            parse_in_pieces(NONCE, b"\x1ecodeact:0123456789abcdef {\"what\":1}\n", 9);
        assert!(matches!(messages[0], GuestMessage::Malformed(_)));
    }

    /// If this fails, a guest's message costs the host more than the cap.
    #[test]
    fn an_oversized_message_is_dropped_as_it_streams_in() {
        let mut parser = OutputParser::new(NONCE, 1000);
        let mut messages = Vec::new();
        let mut text = String::new();
        parser.feed(
            b"\x1ecodeact:0123456789abcdef {\"done\":\"",
            &mut |t| text.push_str(t),
            &mut messages,
        );
        for _ in 0..100 {
            parser.feed(&[b'x'; 100], &mut |t| text.push_str(t), &mut messages);
        }
        assert_eq!(messages, vec![GuestMessage::Oversized(1000)]);
        assert!(text.is_empty());
        assert!(matches!(parser.state, State::Closed));
    }

    #[test]
    fn the_message_cap_follows_the_memory_limit_within_bounds() {
        let limits = |mib: usize| Limits {
            max_memory_bytes: mib << 20,
            ..Limits::default()
        };
        assert_eq!(max_message_bytes(&limits(64)), 4 << 20);
        assert_eq!(max_message_bytes(&limits(0)), MIN_MESSAGE_BYTES);
        assert_eq!(max_message_bytes(&limits(4096)), MAX_MESSAGE_BYTES);
    }

    #[test]
    fn invalid_utf8_is_replaced_and_split_characters_are_joined() {
        let (text, _) = parse_in_pieces(NONCE, b"a\xffb\xc3", 1);
        assert_eq!(text, "a\u{FFFD}b\u{FFFD}");
        let (text, _) = parse_in_pieces(NONCE, "€uro".as_bytes(), 1);
        assert_eq!(text, "€uro");
    }

    #[test]
    fn the_nonce_is_first_in_a_script_line_and_fresh_each_time() {
        let nonce = new_nonce();
        assert_eq!(nonce.len(), NONCE_LEN);
        assert_ne!(nonce, new_nonce());
        let line = script_line(&nonce, "print(\"hi\")\n");
        assert_eq!(&line[10..26], nonce.as_bytes());
        assert!(line.ends_with(b"}\n"));
        assert_eq!(line.iter().filter(|&&b| b == b'\n').count(), 1);
    }
}
