//! Provider-agnostic chat types: the lingua franca between the loop and every model
//! client. Provider wire formats stay private to each client's module.

use std::ops::{Add, AddAssign};

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Instructions from the host.
    System,
    /// The task, and the host's feedback after each script.
    User,
    /// The model.
    Assistant,
}

/// One block of a message's content.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentBlock {
    /// Plain text.
    Text {
        /// The text.
        text: String,
    },
    /// A provider-native tool call (codeact's own tools are called from scripts; this
    /// is kept so replies that contain one survive a round trip).
    ToolUse {
        /// The provider's id for the call.
        id: String,
        /// The tool's name.
        name: String,
        /// The arguments.
        input: Value,
    },
    /// What a reasoning model thought before it answered (OpenAI-compatible
    /// servers' `reasoning_content`, Anthropic's `thinking` blocks). Kept in the
    /// transcript; never sent back to a model, and never searched for code.
    Thinking {
        /// The thinking text.
        thinking: String,
    },
    /// An image a script showed (`show_image`), for a model that sees images.
    Image {
        /// `image/png`, `image/jpeg`, `image/gif` or `image/webp`.
        media_type: String,
        /// Where it came from: its path in the working directory.
        source: String,
        /// Its size.
        bytes: u64,
        /// Its sha256 in hex.
        sha256: String,
        /// The bytes, while the run holds them; a transcript read back has none,
        /// and the image is then described in words.
        #[serde(skip)]
        data: Option<ImageBytes>,
    },
    /// The result of a provider-native tool call.
    ToolResult {
        /// The id of the call this answers.
        tool_use_id: String,
        /// The result text.
        content: String,
        /// True when the call failed.
        #[serde(default)]
        is_error: bool,
    },
}

/// An image's bytes, held while a run shows it to a model; never written to a
/// transcript (which keeps where it came from and its digest).
#[derive(Clone, PartialEq, Eq)]
pub struct ImageBytes(pub std::sync::Arc<Vec<u8>>);

impl std::fmt::Debug for ImageBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ImageBytes({} bytes)", self.0.len())
    }
}

impl ContentBlock {
    /// What a model that is not sent the image reads instead.
    pub fn image_note(media_type: &str, source: &str, bytes: u64, sha256: &str) -> String {
        // The path is the script's to choose (a file it wrote): fenced.
        crate::prompts::Prompts::render_builtin(
            "image_note",
            minijinja::context! {
                media_type => media_type,
                bytes => bytes,
                sha256 => sha256.get(..12).unwrap_or(sha256),
                path => crate::untrusted::fence_stable(source),
            },
        )
    }

    /// A text block.
    pub fn text(text: impl Into<String>) -> Self {
        ContentBlock::Text { text: text.into() }
    }
}

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// Who wrote it.
    pub role: Role,
    /// What it says.
    pub content: Vec<ContentBlock>,
}

impl Message {
    /// A message of one text block.
    pub fn text(role: Role, text: impl Into<String>) -> Self {
        Self {
            role,
            content: vec![ContentBlock::text(text)],
        }
    }

    /// A user message of one text block.
    pub fn user(text: impl Into<String>) -> Self {
        Self::text(Role::User, text)
    }

    /// An assistant message of one text block.
    pub fn assistant(text: impl Into<String>) -> Self {
        Self::text(Role::Assistant, text)
    }

    /// The message's text blocks joined by newlines.
    pub fn joined_text(&self) -> String {
        join_text(&self.content)
    }
}

/// The text blocks of `content` joined by newlines.
fn join_text(content: &[ContentBlock]) -> String {
    let texts: Vec<&str> = content
        .iter()
        .filter_map(|block| match block {
            ContentBlock::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    texts.join("\n")
}

/// Tokens a model call used. Adds up across turns with `+` and `+=`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Tokens read (prompt).
    pub input_tokens: u64,
    /// Tokens written (completion).
    pub output_tokens: u64,
}

impl Add for Usage {
    type Output = Usage;
    fn add(self, other: Usage) -> Usage {
        Usage {
            input_tokens: self.input_tokens + other.input_tokens,
            output_tokens: self.output_tokens + other.output_tokens,
        }
    }
}

impl AddAssign for Usage {
    fn add_assign(&mut self, other: Usage) {
        *self = *self + other;
    }
}

/// Why a model stopped writing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// It finished its turn.
    EndTurn,
    /// It wrote one of the request's stop sequences.
    StopSequence,
    /// It wants a provider-native tool called.
    ToolUse,
    /// It hit the output token limit: the reply is cut off.
    OutputTruncated,
    /// The conversation no longer fits the model's context window.
    ContextWindowExceeded,
    /// It declined to answer.
    Refused,
    /// The provider paused a long turn; sending the conversation back continues it.
    Pause,
    /// A reason this version does not know, kept verbatim.
    Other(String),
}

/// A complete reply from a model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelResponse {
    /// What it wrote.
    pub content: Vec<ContentBlock>,
    /// Why it stopped.
    pub stop_reason: StopReason,
    /// Tokens used by this call.
    pub usage: Usage,
    /// The model that answered, as the provider names it.
    pub model: String,
}

impl ModelResponse {
    /// The reply's text blocks joined by newlines.
    pub fn text(&self) -> String {
        join_text(&self.content)
    }
}

/// What a streaming model call emits as it goes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum StreamEvent {
    /// More text of the current block.
    TextDelta {
        /// The new text.
        text: String,
    },
    /// A content block is complete.
    ContentBlockStop {
        /// Its position in the reply.
        index: usize,
    },
    /// The reply is complete: why it stopped and what it cost.
    Final {
        /// Why it stopped.
        stop_reason: StopReason,
        /// Tokens used.
        usage: Usage,
    },
    /// The stream is over.
    Done,
}

/// What the loop sends a model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelRequest {
    /// The system prompt.
    pub system: String,
    /// The conversation so far (user and assistant messages).
    pub messages: Vec<Message>,
    /// Output token limit. Default: 2,048.
    pub max_tokens: u32,
    /// Sampling temperature; `None` leaves it out of the request, so the server's
    /// default applies (current reasoning models refuse any other). Default: none.
    pub temperature: Option<f32>,
    /// Sequences that end the reply. Default: none.
    pub stop: Vec<String>,
    /// The model's replies no longer in `messages` (a chat's oldest turns,
    /// dropped to keep its history within budget). Never sent to a provider; a
    /// replay counts them to know which reply comes next. Default: 0.
    pub earlier_replies: usize,
}

impl ModelRequest {
    /// A request with the defaults above.
    pub fn new(system: impl Into<String>, messages: Vec<Message>) -> Self {
        Self {
            system: system.into(),
            messages,
            max_tokens: 2_048,
            temperature: None,
            stop: Vec::new(),
            earlier_replies: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn round_trip<T: Serialize + for<'de> Deserialize<'de> + PartialEq + std::fmt::Debug>(
        value: T,
    ) {
        let json = serde_json::to_string(&value).expect("serializes");
        let back: T = serde_json::from_str(&json).expect("deserializes");
        assert_eq!(back, value, "{json}");
    }

    #[test]
    fn messages_with_every_block_kind_round_trip() {
        round_trip(Message {
            role: Role::Assistant,
            content: vec![
                ContentBlock::text("hi"),
                ContentBlock::ToolUse {
                    id: "t1".into(),
                    name: "add".into(),
                    input: json!({"a": 1}),
                },
                ContentBlock::ToolResult {
                    tool_use_id: "t1".into(),
                    content: "2".into(),
                    is_error: false,
                },
            ],
        });
    }

    #[test]
    fn every_stop_reason_round_trips() {
        for reason in [
            StopReason::EndTurn,
            StopReason::StopSequence,
            StopReason::ToolUse,
            StopReason::OutputTruncated,
            StopReason::ContextWindowExceeded,
            StopReason::Refused,
            StopReason::Pause,
            StopReason::Other("weird".into()),
        ] {
            round_trip(reason);
        }
    }

    #[test]
    fn responses_and_stream_events_round_trip() {
        round_trip(ModelResponse {
            content: vec![ContentBlock::text("```rhai\n1\n```")],
            stop_reason: StopReason::EndTurn,
            usage: Usage {
                input_tokens: 10,
                output_tokens: 5,
            },
            model: "m".into(),
        });
        for event in [
            StreamEvent::TextDelta { text: "a".into() },
            StreamEvent::ContentBlockStop { index: 0 },
            StreamEvent::Final {
                stop_reason: StopReason::EndTurn,
                usage: Usage::default(),
            },
            StreamEvent::Done,
        ] {
            round_trip(event);
        }
        round_trip(ModelRequest::new("sys", vec![Message::user("task")]));
    }

    #[test]
    fn usage_adds_up_across_turns() {
        let mut total = Usage::default();
        total += Usage {
            input_tokens: 100,
            output_tokens: 20,
        };
        total += Usage {
            input_tokens: 150,
            output_tokens: 30,
        };
        assert_eq!(
            total,
            Usage {
                input_tokens: 250,
                output_tokens: 50
            }
        );
    }
}
