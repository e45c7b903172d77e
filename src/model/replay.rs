//! A model that returns recorded replies in order, and records what it was sent.

use std::path::Path;
use std::sync::Mutex;

use async_trait::async_trait;
use serde::Deserialize;

use super::{ModelClient, ModelError};
use crate::chat::{ContentBlock, ModelRequest, ModelResponse, StopReason, Usage};

/// Returns recorded assistant replies in order; asking for one more than it has is
/// a [`ModelError::ReplayExhausted`] naming how many it had. Every request it gets
/// is kept, so tests can assert on what the loop fed back.
///
/// Which reply comes next is read off the request: a conversation holding `n`
/// assistant messages (counting those a chat dropped,
/// [`ModelRequest::earlier_replies`]) gets reply `n + 1`. So one replay serves any number of runs,
/// one after another or at once.
#[derive(Debug)]
pub struct ReplayModel {
    label: String,
    replies: Vec<String>,
    requests: Mutex<Vec<ModelRequest>>,
    record: bool,
}

#[derive(Deserialize)]
struct ReplayFile {
    replies: Vec<String>,
}

impl ReplayModel {
    /// A replay of `replies`.
    pub fn new(replies: impl IntoIterator<Item = impl Into<String>>) -> Self {
        Self {
            label: "replay".into(),
            replies: replies.into_iter().map(Into::into).collect(),
            requests: Mutex::new(Vec::new()),
            record: true,
        }
    }

    /// The same replay without keeping requests, for long benchmarks where the
    /// recordings would pile up.
    pub fn without_recording(mut self) -> Self {
        self.record = false;
        self
    }

    /// Loads replies from `path`: either `{"replies": ["…", …]}`, or a JSONL
    /// transcript written by a run, whose assistant messages are replayed in order.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, ModelError> {
        let path = path.as_ref();
        let config = |message: String| ModelError::Config {
            provider: "replay",
            message,
        };
        let text = std::fs::read_to_string(path)
            .map_err(|e| config(format!("cannot read '{}': {e}", path.display())))?;
        let replies = match serde_json::from_str::<ReplayFile>(&text) {
            Ok(file) => file.replies,
            Err(json_error) => {
                let replies = transcript_replies(&text);
                if replies.is_empty() {
                    return Err(config(format!(
                        "'{}' is neither {{\"replies\": [strings]}} ({json_error}) nor a transcript with assistant messages",
                        path.display()
                    )));
                }
                replies
            }
        };
        let mut model = Self::new(replies);
        model.label = format!("replay:{}", path.display());
        Ok(model)
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<ModelRequest> {
        self.requests.lock().map(|r| r.clone()).unwrap_or_default()
    }
}

/// The assistant messages of a JSONL transcript, in order.
fn transcript_replies(text: &str) -> Vec<String> {
    crate::agent::parse_transcript(text)
        .into_iter()
        .filter_map(|event| match event {
            crate::agent::events::Event::Message { message }
                if message.role == crate::chat::Role::Assistant =>
            {
                Some(message.joined_text())
            }
            _ => None,
        })
        .collect()
}

#[async_trait]
impl ModelClient for ReplayModel {
    fn label(&self) -> String {
        self.label.clone()
    }

    async fn complete(&self, request: &ModelRequest) -> Result<ModelResponse, ModelError> {
        if self.record {
            self.requests
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .push(request.clone());
        }
        let asked = 1
            + request.earlier_replies
            + request
                .messages
                .iter()
                .filter(|m| m.role == crate::chat::Role::Assistant)
                .count();
        let reply = self
            .replies
            .get(asked - 1)
            .ok_or(ModelError::ReplayExhausted {
                replies: self.replies.len(),
                asked,
            })?;
        Ok(ModelResponse {
            content: vec![ContentBlock::text(reply.clone())],
            stop_reason: StopReason::EndTurn,
            usage: Usage::default(),
            model: self.label.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chat::Message;

    #[tokio::test]
    async fn replies_come_back_in_order_and_requests_are_recorded() {
        let model = ReplayModel::new(["one", "two"]);
        let mut request = ModelRequest::new("sys", vec![Message::user("task")]);
        assert_eq!(model.complete(&request).await.expect("first").text(), "one");
        request.messages.push(Message::assistant("one"));
        request.messages.push(Message::user("Observation:\n1"));
        assert_eq!(
            model.complete(&request).await.expect("second").text(),
            "two"
        );
        assert_eq!(model.requests().len(), 2);
        let fresh = ModelRequest::new("sys", vec![Message::user("another run")]);
        assert_eq!(
            model
                .complete(&fresh)
                .await
                .expect("a new run starts over")
                .text(),
            "one"
        );
    }

    #[tokio::test]
    async fn running_out_of_replies_names_how_many_there_were() {
        let model = ReplayModel::new(["only"]);
        let request =
            ModelRequest::new("sys", vec![Message::user("t"), Message::assistant("only")]);
        let err = model.complete(&request).await.expect_err("exhausted");
        assert_eq!(
            err.to_string(),
            "the replay model ran out of replies: it had 1 and was asked for reply 2"
        );
    }
}
