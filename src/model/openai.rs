//! OpenAI-compatible chat completions (OpenAI, vLLM, llama.cpp, Ollama, LiteLLM).

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

const PROVIDER: &str = "openai";
const OFFICIAL_BASE_URL: &str = "https://api.openai.com/v1";
/// The default of `max_reply_bytes`: 32 MiB.
const MAX_BODY_BYTES: usize = 32 << 20;

/// Where and how to reach an OpenAI-compatible server.
#[derive(Debug, Clone)]
pub struct OpenAiConfig {
    /// Base URL up to and including `/v1`. Default: `OPENAI_BASE_URL`, else
    /// `https://api.openai.com/v1`.
    pub base_url: String,
    /// Bearer token. Default: `OPENAI_API_KEY`; local servers need none.
    pub api_key: Option<String>,
    /// The model name the server knows.
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
    /// Retries for 429, 5xx and timeouts. Default: [`RetryPolicy::default`].
    pub retry: RetryPolicy,
    /// Send the output token limit as `max_completion_tokens` (which OpenAI's
    /// reasoning models require) instead of `max_tokens` (which local servers
    /// read). Default: true for the official endpoint, false elsewhere.
    pub max_completion_tokens: bool,
    /// Fields added to every request body as they are, last (so they win), e.g.
    /// `reasoning_effort` or a server's own sampling options. Default: none.
    pub extra_body: serde_json::Map<String, Value>,
}

impl OpenAiConfig {
    /// A config for `model` read from `OPENAI_BASE_URL` and `OPENAI_API_KEY`.
    pub fn from_env(model: impl Into<String>) -> Self {
        Self {
            base_url: std::env::var("OPENAI_BASE_URL")
                .ok()
                .filter(|url| !url.trim().is_empty())
                .unwrap_or_else(|| OFFICIAL_BASE_URL.to_string()),
            api_key: std::env::var("OPENAI_API_KEY")
                .ok()
                .filter(|key| !key.trim().is_empty()),
            model: model.into(),
            request_timeout: Duration::from_secs(120),
            idle_timeout: Duration::from_secs(60),
            reply_timeout: Duration::from_secs(600),
            max_reply_bytes: MAX_BODY_BYTES,
            retry: RetryPolicy::default(),
            max_completion_tokens: false,
            extra_body: serde_json::Map::new(),
        }
        .with_default_token_field()
    }

    /// The same config with this base URL (and the token limit field that suits it).
    pub fn with_base_url(mut self, base_url: impl Into<String>) -> Self {
        self.base_url = base_url.into();
        self.with_default_token_field()
    }

    fn with_default_token_field(mut self) -> Self {
        self.max_completion_tokens = self.base_url.trim_end_matches('/') == OFFICIAL_BASE_URL;
        self
    }
}

/// A client for `POST {base_url}/chat/completions`, streaming over SSE.
#[derive(Debug, Clone)]
pub struct OpenAiClient {
    config: OpenAiConfig,
    endpoint: String,
    http: reqwest::Client,
}

/// A message's content on the wire: its text, or, when it carries images, text
/// and image parts (a data URL each). An image whose bytes are gone (a resumed
/// transcript) is described in words.
fn content_of(message: &crate::chat::Message) -> Value {
    let has_image = message
        .content
        .iter()
        .any(|block| matches!(block, ContentBlock::Image { .. }));
    if !has_image {
        return Value::String(message.joined_text());
    }
    let mut parts = Vec::new();
    for block in &message.content {
        match block {
            ContentBlock::Text { text } => parts.push(json!({"type": "text", "text": text})),
            ContentBlock::Image {
                media_type,
                data: Some(data),
                ..
            } => {
                use base64::Engine as _;
                let encoded = base64::engine::general_purpose::STANDARD.encode(data.0.as_slice());
                parts.push(json!({"type": "image_url", "image_url": {
                    "url": format!("data:{media_type};base64,{encoded}")
                }}));
            }
            ContentBlock::Image {
                media_type,
                source,
                bytes,
                sha256,
                data: None,
            } => parts.push(json!({"type": "text", "text":
                ContentBlock::image_note(media_type, source, *bytes, sha256)})),
            ContentBlock::Thinking { .. }
            | ContentBlock::ToolUse { .. }
            | ContentBlock::ToolResult { .. } => {}
        }
    }
    Value::Array(parts)
}

impl OpenAiClient {
    /// A client for `config`. Fails when the official endpoint has no key or the
    /// base URL is not http(s).
    pub fn new(config: OpenAiConfig) -> Result<Self, ModelError> {
        let (base, http) = http::client(
            PROVIDER,
            &config.base_url,
            OFFICIAL_BASE_URL,
            config.api_key.is_some(),
            "set OPENAI_API_KEY, or OPENAI_BASE_URL for a local server",
        )?;
        Ok(Self {
            endpoint: format!("{base}/chat/completions"),
            config,
            http,
        })
    }

    fn body(&self, request: &ModelRequest, stream: bool) -> Value {
        let mut messages = vec![json!({"role": "system", "content": request.system})];
        for message in &request.messages {
            let role = match message.role {
                Role::System => "system",
                Role::User => "user",
                Role::Assistant => "assistant",
            };
            messages.push(json!({"role": role, "content": content_of(message)}));
        }
        let mut body = json!({
            "model": self.config.model,
            "messages": messages,
            "stream": stream,
        });
        let limit_field = if self.config.max_completion_tokens {
            "max_completion_tokens"
        } else {
            "max_tokens"
        };
        body[limit_field] = json!(request.max_tokens);
        if let Some(temperature) = request.temperature {
            body["temperature"] = json!(temperature);
        }
        if !request.stop.is_empty() {
            body["stop"] = json!(request.stop);
        }
        if stream {
            body["stream_options"] = json!({"include_usage": true});
        }
        for (key, value) in &self.config.extra_body {
            body[key] = value.clone();
        }
        body
    }

    fn post(&self, body: &Value) -> reqwest::RequestBuilder {
        let request = self.http.post(&self.endpoint).json(body);
        match &self.config.api_key {
            Some(key) => request.bearer_auth(key),
            None => request,
        }
    }

    async fn complete_once(&self, body: &Value) -> Result<ModelResponse, AttemptError> {
        let response =
            http::attempt(PROVIDER, self.post(body), self.config.request_timeout).await?;
        let bytes = http::read_body(response, self.bounds()).await?;
        let reply: Completion = serde_json::from_slice(&bytes)
            .map_err(|e| http::malformed(PROVIDER, format!("{e}")))?;
        let choice = reply
            .choices
            .into_iter()
            .next()
            .ok_or_else(|| http::malformed(PROVIDER, "the reply has no choices".into()))?;
        let message = choice.message.unwrap_or_default();
        let mut content = Vec::new();
        if let Some(thinking) = message.thinking().filter(|t| !t.is_empty()) {
            content.push(ContentBlock::Thinking { thinking });
        }
        content.push(ContentBlock::text(message.content.unwrap_or_default()));
        Ok(ModelResponse {
            content,
            stop_reason: stop_reason(choice.finish_reason.as_deref()),
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
        let fold = OpenAiStream::new(self.config.model.clone());
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

/// A streamed chat completion, folded chunk by chunk: `data:` lines holding JSON
/// chunks, ending with `data: [DONE]` (or at least a chunk with a finish reason).
#[derive(Debug, Clone, Default)]
pub struct OpenAiStream {
    text: String,
    /// The reasoning deltas (`reasoning_content` or `reasoning`), not shown as text.
    thinking: String,
    finish: Option<String>,
    usage: Usage,
    model: Option<String>,
    fallback_model: String,
    done: bool,
    emitted: bool,
}

impl OpenAiStream {
    /// A fold for a reply whose model is `fallback_model` unless a chunk names one.
    pub fn new(fallback_model: impl Into<String>) -> Self {
        Self {
            fallback_model: fallback_model.into(),
            ..Self::default()
        }
    }
}

impl StreamFold for OpenAiStream {
    fn event(
        &mut self,
        _name: &str,
        data: &str,
        on_event: &mut dyn FnMut(StreamEvent),
    ) -> Result<Flow, StreamFault> {
        let data = data.trim();
        if data == "[DONE]" {
            self.done = true;
            return Ok(Flow::Complete);
        }
        if data.is_empty() {
            return Ok(Flow::More);
        }
        let chunk: Chunk = sse::parse_data(data, "chunk")?;
        if let Some(error) = chunk.error {
            return Err(StreamFault::Broken(format!(
                "the server reported an error mid-stream: {}",
                http::error_message(&error.to_string())
            )));
        }
        if let Some(choice) = chunk.choices.into_iter().next() {
            let delta = choice.delta.unwrap_or_default();
            if let Some(thought) = delta.thinking() {
                self.thinking.push_str(&thought);
            }
            if let Some(delta) = delta.content.filter(|d| !d.is_empty()) {
                self.emitted = true;
                self.text.push_str(&delta);
                on_event(StreamEvent::TextDelta { text: delta });
            }
            if choice.finish_reason.is_some() {
                self.finish = choice.finish_reason;
            }
        }
        if let Some(usage) = chunk.usage {
            self.usage = usage.into();
        }
        if chunk.model.is_some() {
            self.model = chunk.model;
        }
        Ok(Flow::More)
    }

    fn finish(self, on_event: &mut dyn FnMut(StreamEvent)) -> Result<ModelResponse, StreamFault> {
        // `[DONE]` is the end marker, but some servers stop right after the chunk
        // carrying the finish reason; that reply is complete too.
        if self.finish.is_none() && !self.done {
            return Err(StreamFault::Broken(
                "the stream ended before the reply was complete".into(),
            ));
        }
        let stop_reason = stop_reason(self.finish.as_deref());
        on_event(StreamEvent::ContentBlockStop { index: 0 });
        on_event(StreamEvent::Final {
            stop_reason: stop_reason.clone(),
            usage: self.usage,
        });
        on_event(StreamEvent::Done);
        let mut content = Vec::new();
        if !self.thinking.is_empty() {
            content.push(ContentBlock::Thinking {
                thinking: self.thinking,
            });
        }
        content.push(ContentBlock::text(self.text));
        Ok(ModelResponse {
            content,
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
impl ModelClient for OpenAiClient {
    fn label(&self) -> String {
        format!("openai:{}", self.config.model)
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

fn stop_reason(finish_reason: Option<&str>) -> StopReason {
    match finish_reason {
        None | Some("stop") => StopReason::EndTurn,
        Some("length") => StopReason::OutputTruncated,
        Some("content_filter") => StopReason::Refused,
        Some("tool_calls" | "function_call") => StopReason::ToolUse,
        Some(other) => StopReason::Other(other.to_string()),
    }
}

#[derive(Deserialize)]
struct Completion {
    #[serde(default)]
    choices: Vec<Choice>,
    usage: Option<WireUsage>,
    model: Option<String>,
}

#[derive(Deserialize)]
struct Choice {
    message: Option<WireMessage>,
    finish_reason: Option<String>,
}

#[derive(Deserialize, Default)]
struct WireMessage {
    content: Option<String>,
    /// DeepSeek, vLLM and llama.cpp's name for the reasoning text.
    reasoning_content: Option<Value>,
    /// OpenRouter's and some others' name for it. Any JSON: a server that puts an
    /// object here must not make the reply unreadable.
    reasoning: Option<Value>,
}

impl WireMessage {
    /// The reasoning text under either name, when it is text.
    fn thinking(&self) -> Option<String> {
        [&self.reasoning_content, &self.reasoning]
            .into_iter()
            .flatten()
            .find_map(|value| value.as_str().map(str::to_string))
    }
}

#[derive(Deserialize)]
struct Chunk {
    #[serde(default)]
    choices: Vec<ChunkChoice>,
    usage: Option<WireUsage>,
    model: Option<String>,
    error: Option<Value>,
}

#[derive(Deserialize)]
struct ChunkChoice {
    delta: Option<WireMessage>,
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct WireUsage {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
}

impl From<WireUsage> for Usage {
    fn from(usage: WireUsage) -> Self {
        Usage {
            input_tokens: usage.prompt_tokens,
            output_tokens: usage.completion_tokens,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chat::Message;

    fn client(base_url: &str) -> OpenAiClient {
        let mut config = OpenAiConfig::from_env("m").with_base_url(base_url);
        config.api_key = Some("k".into());
        OpenAiClient::new(config).expect("a client")
    }

    fn request(temperature: Option<f32>) -> ModelRequest {
        let mut request = ModelRequest::new("system", vec![Message::user("hi")]);
        request.max_tokens = 100;
        request.temperature = temperature;
        request
    }

    /// If this fails, OpenAI's reasoning models refuse every request (they take
    /// `max_completion_tokens` and no temperature) or a local server loses its
    /// token limit.
    #[test]
    fn the_official_endpoint_gets_max_completion_tokens_and_no_unset_temperature() {
        let official = client(OFFICIAL_BASE_URL).body(&request(None), false);
        assert_eq!(official["max_completion_tokens"], 100);
        assert!(official.get("max_tokens").is_none() && official.get("temperature").is_none());
        let local = client("http://127.0.0.1:1/v1").body(&request(Some(0.0)), false);
        assert_eq!(local["max_tokens"], 100);
        assert_eq!(local["temperature"], 0.0);
        assert!(local.get("max_completion_tokens").is_none());
    }

    #[test]
    fn extra_body_fields_are_sent_and_win_over_the_defaults() {
        let mut c = client("http://127.0.0.1:1/v1");
        c.config
            .extra_body
            .insert("reasoning_effort".into(), json!("low"));
        c.config.extra_body.insert("max_tokens".into(), json!(7));
        let body = c.body(&request(None), true);
        assert_eq!(body["reasoning_effort"], "low");
        assert_eq!(body["max_tokens"], 7);
    }

    /// If this fails, a reasoning model's earlier thinking is sent back to it as
    /// if it had said it.
    #[test]
    fn thinking_kept_in_the_history_is_never_sent_back() {
        let mut history = request(None);
        history.messages.push(Message {
            role: Role::Assistant,
            content: vec![
                ContentBlock::Thinking {
                    thinking: "secret plan".into(),
                },
                ContentBlock::text("```js\n1\n```"),
            ],
        });
        let body = client("http://127.0.0.1:1/v1").body(&history, false);
        assert!(!body.to_string().contains("secret plan"));
        assert_eq!(body["messages"][2]["content"], "```js\n1\n```");
    }
}
