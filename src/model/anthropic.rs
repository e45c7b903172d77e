//! Anthropic messages API, streaming included.

use std::time::Duration;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};

use super::http::{self, AttemptError, Retrier, RetryPolicy};
use super::sse::{self, Flow, StreamFault, StreamFold};
use super::{ModelClient, ModelError};
use crate::chat::{
    ContentBlock, ModelRequest, ModelResponse, Role, StopReason, StreamEvent, Usage,
};

const PROVIDER: &str = "anthropic";
const OFFICIAL_BASE_URL: &str = "https://api.anthropic.com";
const API_VERSION: &str = "2023-06-01";
const MAX_BODY_BYTES: usize = 32 << 20;

/// Where and how to reach the Anthropic messages API.
#[derive(Debug, Clone)]
pub struct AnthropicConfig {
    /// Base URL without `/v1`. Default: `ANTHROPIC_BASE_URL`, else
    /// `https://api.anthropic.com`.
    pub base_url: String,
    /// Default: `ANTHROPIC_API_KEY`.
    pub api_key: Option<String>,
    /// The model name, e.g. `claude-sonnet-4-5`.
    pub model: String,
    /// Longest wait for the response headers. Default: 120 s.
    pub request_timeout: Duration,
    /// Longest silence inside a reply once its headers arrived: between streamed
    /// events, or between chunks of a whole body. Default: 60 s.
    pub idle_timeout: Duration,
    /// Longest time reading one reply once its headers arrived, streamed or whole:
    /// a server that keeps sending (keep-alives, an endless reply) is cut off
    /// here. Default: 600 s.
    pub reply_timeout: Duration,
    /// Most bytes of one reply, streamed or whole (a stream is counted off the
    /// wire, before parsing); more is an error. Default: 32 MiB.
    pub max_reply_bytes: usize,
    /// Retries for 429, 5xx (529 overloaded included) and timeouts.
    pub retry: RetryPolicy,
    /// Fields added to every request body as they are, last (so they win), e.g.
    /// `thinking` or `top_k`. Default: none.
    pub extra_body: serde_json::Map<String, Value>,
}

impl AnthropicConfig {
    /// A config for `model` read from `ANTHROPIC_BASE_URL` and `ANTHROPIC_API_KEY`.
    pub fn from_env(model: impl Into<String>) -> Self {
        Self {
            base_url: std::env::var("ANTHROPIC_BASE_URL")
                .ok()
                .filter(|url| !url.trim().is_empty())
                .unwrap_or_else(|| OFFICIAL_BASE_URL.to_string()),
            api_key: std::env::var("ANTHROPIC_API_KEY")
                .ok()
                .filter(|key| !key.trim().is_empty()),
            model: model.into(),
            request_timeout: Duration::from_secs(120),
            idle_timeout: Duration::from_secs(60),
            reply_timeout: Duration::from_secs(600),
            max_reply_bytes: MAX_BODY_BYTES,
            retry: RetryPolicy::default(),
            extra_body: serde_json::Map::new(),
        }
    }

    /// The same config with this base URL.
    pub fn with_base_url(mut self, base_url: impl Into<String>) -> Self {
        self.base_url = base_url.into();
        self
    }
}

/// A client for `POST {base_url}/v1/messages`.
#[derive(Debug, Clone)]
pub struct AnthropicClient {
    config: AnthropicConfig,
    endpoint: String,
    http: reqwest::Client,
}

impl AnthropicClient {
    /// A client for `config`; the official endpoint needs a key.
    pub fn new(config: AnthropicConfig) -> Result<Self, ModelError> {
        let (base, http) = http::client(
            PROVIDER,
            &config.base_url,
            OFFICIAL_BASE_URL,
            config.api_key.is_some(),
            "set ANTHROPIC_API_KEY",
        )?;
        Ok(Self {
            endpoint: format!("{base}/v1/messages"),
            config,
            http,
        })
    }

    fn body(&self, request: &ModelRequest, stream: bool) -> Value {
        let messages: Vec<Value> = request
            .messages
            .iter()
            .filter(|m| m.role != Role::System)
            .map(|message| {
                let role = if message.role == Role::Assistant {
                    "assistant"
                } else {
                    "user"
                };
                let content: Vec<Value> = message
                    .content
                    .iter()
                    .filter_map(|block| {
                        Some(match block {
                            ContentBlock::Text { text } => json!({"type": "text", "text": text}),
                            ContentBlock::Image {
                                media_type,
                                data: Some(data),
                                ..
                            } => {
                                use base64::Engine as _;
                                json!({"type": "image", "source": {
                                    "type": "base64",
                                    "media_type": media_type,
                                    "data": base64::engine::general_purpose::STANDARD.encode(data.0.as_slice()),
                                }})
                            }
                            ContentBlock::Image {
                                media_type,
                                source,
                                bytes,
                                sha256,
                                data: None,
                            } => json!({"type": "text", "text":
                                ContentBlock::image_note(media_type, source, *bytes, sha256)}),
                            // Sent back only with its signature, which is not kept: the
                            // API accepts an assistant turn without it.
                            ContentBlock::Thinking { .. } => return None,
                            ContentBlock::ToolUse { id, name, input } => {
                                json!({"type": "tool_use", "id": id, "name": name, "input": input})
                            }
                            ContentBlock::ToolResult {
                                tool_use_id,
                                content,
                                is_error,
                            } => json!({
                                "type": "tool_result", "tool_use_id": tool_use_id,
                                "content": content, "is_error": is_error
                            }),
                        })
                    })
                    .collect();
                json!({"role": role, "content": content})
            })
            .collect();
        let mut body = json!({
            "model": self.config.model,
            "system": request.system,
            "messages": messages,
            "max_tokens": request.max_tokens,
        });
        if let Some(temperature) = request.temperature {
            body["temperature"] = json!(temperature);
        }
        if !request.stop.is_empty() {
            body["stop_sequences"] = json!(request.stop);
        }
        if stream {
            body["stream"] = json!(true);
        }
        for (key, value) in &self.config.extra_body {
            body[key] = value.clone();
        }
        body
    }

    fn post(&self, body: &Value) -> reqwest::RequestBuilder {
        let request = self
            .http
            .post(&self.endpoint)
            .header("anthropic-version", API_VERSION)
            .json(body);
        match &self.config.api_key {
            Some(key) => request.header("x-api-key", key),
            None => request,
        }
    }

    async fn complete_once(&self, body: &Value) -> Result<ModelResponse, AttemptError> {
        let response =
            http::attempt(PROVIDER, self.post(body), self.config.request_timeout).await?;
        let bytes = http::read_body(response, self.bounds()).await?;
        let reply: WireMessage = serde_json::from_slice(&bytes)
            .map_err(|e| http::malformed(PROVIDER, format!("{e}")))?;
        let content = reply
            .content
            .into_iter()
            .filter_map(|block| match block {
                WireBlock::Text { text } => Some(ContentBlock::Text { text }),
                WireBlock::Thinking { thinking } => Some(ContentBlock::Thinking { thinking }),
                WireBlock::ToolUse { id, name, input } => {
                    Some(ContentBlock::ToolUse { id, name, input })
                }
                WireBlock::Other => None,
            })
            .collect();
        Ok(ModelResponse {
            content,
            stop_reason: stop_reason(reply.stop_reason.as_deref()),
            usage: reply.usage.map(Usage::from).unwrap_or_default(),
            model: reply.model.unwrap_or_else(|| self.config.model.clone()),
        })
    }

    async fn stream_once(
        &self,
        body: &Value,
        on_event: &mut (dyn FnMut(StreamEvent) + Send),
    ) -> Result<ModelResponse, AttemptError> {
        let response =
            http::attempt(PROVIDER, self.post(body), self.config.request_timeout).await?;
        let fold = AnthropicStream::new(self.config.model.clone());
        http::fold_stream(PROVIDER, response, self.bounds(), fold, on_event).await
    }

    /// The bounds on one reply, streamed or whole.
    fn bounds(&self) -> http::ReplyBounds {
        http::ReplyBounds {
            max_bytes: self.config.max_reply_bytes,
            idle: self.config.idle_timeout,
            total: self.config.reply_timeout,
        }
    }
}

/// A streamed message, folded event by event: `message_start`, content blocks
/// (`content_block_start` / `_delta` / `_stop`), `message_delta` with the stop
/// reason and output tokens, and `message_stop`, which alone completes it.
#[derive(Debug, Clone, Default)]
pub struct AnthropicStream {
    /// Each content block so far: whether it is thinking, and its text.
    blocks: Vec<(bool, String)>,
    usage: Usage,
    stop: Option<String>,
    model: Option<String>,
    fallback_model: String,
    stopped: bool,
    emitted: bool,
}

impl AnthropicStream {
    /// A fold for a reply whose model is `fallback_model` unless `message_start`
    /// names one.
    pub fn new(fallback_model: impl Into<String>) -> Self {
        Self {
            fallback_model: fallback_model.into(),
            ..Self::default()
        }
    }
}

impl StreamFold for AnthropicStream {
    fn event(
        &mut self,
        name: &str,
        data: &str,
        on_event: &mut dyn FnMut(StreamEvent),
    ) -> Result<Flow, StreamFault> {
        if data.trim().is_empty() {
            return Ok(Flow::More);
        }
        let data: Value = sse::parse_data(data, "event")?;
        match data.get("type").and_then(Value::as_str).unwrap_or(name) {
            "message_start" => {
                let message = &data["message"];
                self.model = message["model"].as_str().map(str::to_string);
                self.usage.input_tokens = message["usage"]["input_tokens"].as_u64().unwrap_or(0);
            }
            "content_block_start" => {
                let thinking = data["content_block"]["type"].as_str() == Some("thinking");
                self.blocks.push((thinking, String::new()));
            }
            "content_block_delta" => {
                if let Some(thought) = data["delta"]["thinking"].as_str() {
                    match self.blocks.last_mut() {
                        Some((true, last)) => last.push_str(thought),
                        _ => self.blocks.push((true, thought.to_string())),
                    }
                } else if let Some(text) = data["delta"]["text"].as_str().filter(|t| !t.is_empty())
                {
                    match self.blocks.last_mut() {
                        Some((false, last)) => last.push_str(text),
                        _ => self.blocks.push((false, text.to_string())),
                    }
                    self.emitted = true;
                    on_event(StreamEvent::TextDelta {
                        text: text.to_string(),
                    });
                }
            }
            "content_block_stop" => {
                let index = data["index"].as_u64().unwrap_or(0);
                on_event(StreamEvent::ContentBlockStop {
                    index: usize::try_from(index).unwrap_or(usize::MAX),
                });
            }
            "message_delta" => {
                if let Some(reason) = data["delta"]["stop_reason"].as_str() {
                    self.stop = Some(reason.to_string());
                }
                if let Some(output) = data["usage"]["output_tokens"].as_u64() {
                    self.usage.output_tokens = output;
                }
            }
            "message_stop" => {
                self.stopped = true;
                return Ok(Flow::Complete);
            }
            "error" => {
                let message = data["error"]["message"].as_str().unwrap_or("unknown error");
                return Err(StreamFault::Broken(format!(
                    "the server reported an error mid-stream: {message}"
                )));
            }
            _ => {}
        }
        Ok(Flow::More)
    }

    fn finish(self, on_event: &mut dyn FnMut(StreamEvent)) -> Result<ModelResponse, StreamFault> {
        if !self.stopped {
            return Err(StreamFault::Broken(
                "the stream ended before message_stop".into(),
            ));
        }
        let stop_reason = stop_reason(self.stop.as_deref());
        on_event(StreamEvent::Final {
            stop_reason: stop_reason.clone(),
            usage: self.usage,
        });
        on_event(StreamEvent::Done);
        Ok(ModelResponse {
            content: self
                .blocks
                .into_iter()
                .filter_map(|(thinking, text)| match thinking {
                    true if text.is_empty() => None,
                    true => Some(ContentBlock::Thinking { thinking: text }),
                    false => Some(ContentBlock::text(text)),
                })
                .collect(),
            stop_reason,
            usage: self.usage,
            model: self.model.unwrap_or(self.fallback_model),
        })
    }

    fn emitted(&self) -> bool {
        self.emitted
    }
}

#[async_trait]
impl ModelClient for AnthropicClient {
    fn label(&self) -> String {
        format!("anthropic:{}", self.config.model)
    }

    async fn complete(&self, request: &ModelRequest) -> Result<ModelResponse, ModelError> {
        let body = self.body(request, false);
        http::with_retries(PROVIDER, self.config.retry, || self.complete_once(&body)).await
    }

    async fn stream(
        &self,
        request: &ModelRequest,
        on_event: &mut (dyn FnMut(StreamEvent) + Send),
    ) -> Result<ModelResponse, ModelError> {
        let body = self.body(request, true);
        let mut retrier = Retrier::new(PROVIDER, self.config.retry);
        loop {
            // Once text has reached the caller, a retry would repeat it: only a
            // stream that failed before its first delta is retried (`fold_stream`).
            match self.stream_once(&body, on_event).await {
                Ok(response) => return Ok(response),
                Err(failure) => retrier.after(failure).await?,
            }
        }
    }
}

fn stop_reason(reason: Option<&str>) -> StopReason {
    match reason {
        None | Some("end_turn") => StopReason::EndTurn,
        Some("stop_sequence") => StopReason::StopSequence,
        Some("tool_use") => StopReason::ToolUse,
        Some("max_tokens") => StopReason::OutputTruncated,
        Some("model_context_window_exceeded") => StopReason::ContextWindowExceeded,
        Some("refusal") => StopReason::Refused,
        Some("pause_turn") => StopReason::Pause,
        Some(other) => StopReason::Other(other.to_string()),
    }
}

#[derive(Deserialize)]
struct WireMessage {
    #[serde(default)]
    content: Vec<WireBlock>,
    stop_reason: Option<String>,
    usage: Option<WireUsage>,
    model: Option<String>,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum WireBlock {
    Text {
        text: String,
    },
    Thinking {
        thinking: String,
    },
    ToolUse {
        id: String,
        name: String,
        input: Value,
    },
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
struct WireUsage {
    #[serde(default)]
    input_tokens: u64,
    #[serde(default)]
    output_tokens: u64,
}

impl From<WireUsage> for Usage {
    fn from(usage: WireUsage) -> Self {
        Usage {
            input_tokens: usage.input_tokens,
            output_tokens: usage.output_tokens,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chat::Message;

    /// If this fails, Claude gets its own thinking back without the signature the
    /// API demands, and refuses the request.
    #[test]
    fn thinking_kept_in_the_history_is_never_sent_back() {
        let mut config = AnthropicConfig::from_env("claude");
        config.api_key = Some("k".into());
        let client = AnthropicClient::new(config).expect("a client");
        let mut request = ModelRequest::new("system", vec![Message::user("hi")]);
        request.messages.push(Message {
            role: Role::Assistant,
            content: vec![
                ContentBlock::Thinking {
                    thinking: "secret plan".into(),
                },
                ContentBlock::text("done"),
            ],
        });
        let body = client.body(&request, false);
        assert!(!body.to_string().contains("secret plan"));
        assert_eq!(
            body["messages"][1]["content"],
            json!([{"type": "text", "text": "done"}])
        );
    }
}
