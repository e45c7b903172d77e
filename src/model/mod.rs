//! Model clients behind one async trait: OpenAI-compatible chat completions,
//! Anthropic messages, and a replay model for tests and demos.

mod anthropic;
mod http;
mod openai;
mod replay;
mod sse;

use std::sync::Arc;

use async_trait::async_trait;

use crate::chat::{ModelRequest, ModelResponse, StreamEvent};

pub use anthropic::{AnthropicClient, AnthropicConfig, AnthropicStream};
pub use http::RetryPolicy;
pub use openai::{OpenAiClient, OpenAiConfig, OpenAiStream};
pub use replay::ReplayModel;
pub use sse::{Flow, StreamFault, StreamFold, fold_sse_bytes};

/// A model the loop can talk to.
///
/// `complete` returns the whole reply; `stream` also reports text as it arrives and
/// returns the same assembled reply. A client without streaming keeps the default
/// `stream`, which emits the whole text as one delta.
#[async_trait]
pub trait ModelClient: Send + Sync {
    /// A label for logs and transcripts, e.g. `openai:gpt-4o-mini`.
    fn label(&self) -> String;

    /// Sends `request` and returns the reply.
    async fn complete(&self, request: &ModelRequest) -> Result<ModelResponse, ModelError>;

    /// Sends `request`, calling `on_event` as the reply streams in, and returns it.
    async fn stream(
        &self,
        request: &ModelRequest,
        on_event: &mut (dyn FnMut(StreamEvent) + Send),
    ) -> Result<ModelResponse, ModelError> {
        let response = self.complete(request).await?;
        on_event(StreamEvent::TextDelta {
            text: response.text(),
        });
        on_event(StreamEvent::ContentBlockStop { index: 0 });
        on_event(StreamEvent::Final {
            stop_reason: response.stop_reason.clone(),
            usage: response.usage,
        });
        on_event(StreamEvent::Done);
        Ok(response)
    }
}

/// A model call failed; the run cannot go on without a reply.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ModelError {
    /// The server refused the request (a 4xx other than 429): a bad key, an unknown
    /// model, a malformed request. Retrying will not help.
    #[error("{provider} refused the request ({status}): {message}")]
    Rejected {
        /// Which client.
        provider: &'static str,
        /// The HTTP status.
        status: u16,
        /// What the server said, shortened.
        message: String,
    },
    /// The server stayed unavailable (429, 5xx, timeouts, refused connections)
    /// through every retry.
    #[error("{provider} unavailable after {attempts} attempt(s): {last}")]
    Unavailable {
        /// Which client.
        provider: &'static str,
        /// Attempts made.
        attempts: u32,
        /// The last failure.
        last: String,
    },
    /// The reply could not be understood (bad JSON, a stream cut short).
    #[error("{provider} sent a reply that cannot be used: {message}")]
    Malformed {
        /// Which client.
        provider: &'static str,
        /// What was wrong.
        message: String,
    },
    /// The client is not configured (no API key, a bad base URL).
    #[error("{provider} is not configured: {message}")]
    Config {
        /// Which client.
        provider: &'static str,
        /// What is missing.
        message: String,
    },
    /// A replay model was asked for more replies than it recorded.
    #[error(
        "the replay model ran out of replies: it had {replies} and was asked for reply {asked}"
    )]
    ReplayExhausted {
        /// Replies recorded.
        replies: usize,
        /// The reply number asked for (1-based).
        asked: usize,
    },
}

/// Why a model spec (`openai:NAME`, `anthropic:NAME`, `replay:FILE`) gave no client.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModelSpecError {
    /// The spec itself is wrong (a usage error).
    #[error("{0}")]
    Usage(String),
    /// The spec is fine but the client cannot start (e.g. no API key).
    #[error(transparent)]
    Model(ModelError),
}

/// Ollama's OpenAI-compatible endpoint on its default port, for `ollama:NAME`.
pub const OLLAMA_BASE_URL: &str = "http://127.0.0.1:11434/v1";

/// Builds the client a spec names: `openai:NAME` (reads `OPENAI_BASE_URL`,
/// `OPENAI_API_KEY`), `ollama:NAME` (an OpenAI-compatible client for a local
/// Ollama at [`OLLAMA_BASE_URL`]), `anthropic:NAME` (`ANTHROPIC_API_KEY`,
/// `ANTHROPIC_BASE_URL`) or `replay:FILE`. `base_url` overrides the environment's
/// and the preset's; `options` (`KEY=VALUE`, the value read as JSON when it parses,
/// else as a string) are added to every request body.
pub fn model_from_spec(
    spec: &str,
    base_url: Option<&str>,
    options: &[String],
) -> Result<Arc<dyn ModelClient>, ModelSpecError> {
    let usage = |message: String| ModelSpecError::Usage(message);
    let (provider, name) = spec.split_once(':').ok_or_else(|| {
        usage(format!(
            "--model '{spec}' must be openai:NAME, ollama:NAME, anthropic:NAME or replay:FILE"
        ))
    })?;
    if name.trim().is_empty() {
        return Err(usage(format!("--model '{spec}' names no model")));
    }
    let extra_body = model_options(options).map_err(usage)?;
    match provider {
        "openai" | "ollama" => {
            let mut config = OpenAiConfig::from_env(name);
            if provider == "ollama" {
                config = config.with_base_url(OLLAMA_BASE_URL);
            }
            if let Some(url) = base_url {
                config = config.with_base_url(url);
            }
            config.extra_body = extra_body;
            Ok(Arc::new(
                OpenAiClient::new(config).map_err(ModelSpecError::Model)?,
            ))
        }
        "anthropic" => {
            let mut config = AnthropicConfig::from_env(name);
            if let Some(url) = base_url {
                config = config.with_base_url(url);
            }
            config.extra_body = extra_body;
            Ok(Arc::new(
                AnthropicClient::new(config).map_err(ModelSpecError::Model)?,
            ))
        }
        "replay" => Ok(Arc::new(
            ReplayModel::from_file(name).map_err(|e| usage(e.to_string()))?,
        )),
        other => Err(usage(format!(
            "unknown model provider '{other}'; use openai, ollama, anthropic or replay"
        ))),
    }
}

/// `KEY=VALUE` options as request body fields: the value as JSON when it parses
/// (`3`, `true`, `{"a":1}`), else as a string (`low`).
pub fn model_options(
    options: &[String],
) -> Result<serde_json::Map<String, serde_json::Value>, String> {
    let mut fields = serde_json::Map::new();
    for option in options {
        let (key, value) = option
            .split_once('=')
            .filter(|(key, _)| !key.trim().is_empty())
            .ok_or_else(|| format!("--model-option '{option}' must be KEY=VALUE"))?;
        let value = serde_json::from_str(value)
            .unwrap_or_else(|_| serde_json::Value::String(value.to_string()));
        fields.insert(key.trim().to_string(), value);
    }
    Ok(fields)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_options_read_json_values_and_fall_back_to_strings() {
        let fields = model_options(&[
            "reasoning_effort=low".into(),
            "top_k=20".into(),
            "extra={\"a\":true}".into(),
        ])
        .expect("valid");
        assert_eq!(fields["reasoning_effort"], "low");
        assert_eq!(fields["top_k"], 20);
        assert_eq!(fields["extra"]["a"], true);
        assert!(model_options(&["=1".into()]).is_err());
        assert!(model_options(&["novalue".into()]).is_err());
    }

    #[test]
    fn an_ollama_spec_is_an_openai_client_and_an_unknown_provider_lists_the_known_ones() {
        assert!(model_from_spec("ollama:qwen2.5-coder", None, &[]).is_ok());
        let Err(ModelSpecError::Usage(message)) = model_from_spec("llama:x", None, &[]) else {
            panic!("an unknown provider is a usage error");
        };
        assert!(
            message.contains("openai, ollama, anthropic or replay"),
            "{message}"
        );
    }
}
