//! The model clients against real HTTP servers on 127.0.0.1 speaking the OpenAI and
//! Anthropic wire formats, streaming included. Each server replies from a script
//! and records what it received, so the tests assert on what the loop sent.

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use codeact::agent::read_transcript;
use codeact::model::{
    AnthropicClient, AnthropicConfig, ModelClient, ModelError, OpenAiClient, OpenAiConfig,
    RetryPolicy,
};
use codeact::{Agent, Event, Limits, LoopConfig, Outcome, RhaiRuntime, Transcript};

use crate::support::reliability::{self, Section};
use serde_json::{Value, json};

/// One scripted reply.
#[derive(Clone)]
enum Reply {
    Json(Value),
    Sse(Vec<String>),
    Status {
        status: u16,
        body: String,
        retry_after: Option<&'static str>,
    },
    /// SSE lines, then silence with the connection held open.
    SseThenStall(Vec<String>),
    /// Never answers: not even the status line.
    Hang,
    /// A 200 with JSON headers, then a body that never comes.
    HeadersThenStall,
    /// A 200 with this content type and body, verbatim.
    Raw {
        content_type: &'static str,
        body: String,
    },
    /// A 200 with this content type, then `chunk` again and again, `pause` apart,
    /// forever; `produced` counts the bytes handed to the connection.
    Endless {
        content_type: &'static str,
        chunk: Bytes,
        pause: Duration,
        produced: Arc<AtomicUsize>,
    },
}

#[derive(Debug, Clone)]
struct Received {
    path: String,
    headers: HeaderMap,
    body: Value,
}

#[derive(Clone)]
struct ServerState {
    replies: Arc<Mutex<Vec<Reply>>>,
    received: Arc<Mutex<Vec<Received>>>,
}

struct FakeServer {
    url: String,
    received: Arc<Mutex<Vec<Received>>>,
}

impl FakeServer {
    async fn start(replies: Vec<Reply>) -> Self {
        let state = ServerState {
            replies: Arc::new(Mutex::new(replies.into_iter().rev().collect())),
            received: Arc::new(Mutex::new(Vec::new())),
        };
        let received = state.received.clone();
        let app = Router::new().fallback(handle).with_state(state);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("binds a port");
        let url = format!("http://{}", listener.local_addr().expect("has an address"));
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { url, received }
    }

    fn received(&self) -> Vec<Received> {
        self.received.lock().expect("not poisoned").clone()
    }
}

async fn handle(
    State(state): State<ServerState>,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    state.received.lock().expect("not poisoned").push(Received {
        path: uri.path().to_string(),
        headers,
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
    });
    let reply = state.replies.lock().expect("not poisoned").pop();
    let builder = Response::builder();
    match reply {
        None => builder
            .status(500)
            .body(Body::from("the test server ran out of replies")),
        Some(Reply::Json(value)) => builder
            .header("content-type", "application/json")
            .body(Body::from(value.to_string())),
        Some(Reply::Sse(events)) => builder
            .header("content-type", "text/event-stream")
            .body(Body::from(events.concat())),
        Some(Reply::Status {
            status,
            body,
            retry_after,
        }) => {
            let mut builder = builder.status(status);
            if let Some(after) = retry_after {
                builder = builder.header("retry-after", after);
            }
            builder.body(Body::from(body))
        }
        Some(Reply::Hang) => {
            std::future::pending::<()>().await;
            builder.body(Body::empty())
        }
        Some(Reply::HeadersThenStall) => {
            builder
                .header("content-type", "application/json")
                .body(Body::from_stream(futures_util::stream::pending::<
                    Result<Bytes, Infallible>,
                >()))
        }
        Some(Reply::Raw { content_type, body }) => builder
            .header("content-type", content_type)
            .body(Body::from(body)),
        Some(Reply::Endless {
            content_type,
            chunk,
            pause,
            produced,
        }) => {
            let endless = futures_util::stream::unfold((), move |()| {
                let (chunk, produced) = (chunk.clone(), produced.clone());
                async move {
                    if !pause.is_zero() {
                        tokio::time::sleep(pause).await;
                    }
                    produced.fetch_add(chunk.len(), Ordering::Relaxed);
                    Some((Ok::<_, Infallible>(chunk), ()))
                }
            });
            builder
                .header("content-type", content_type)
                .body(Body::from_stream(endless))
        }
        Some(Reply::SseThenStall(events)) => {
            let first = futures_util::stream::iter(
                events
                    .into_iter()
                    .map(|e| Ok::<_, Infallible>(Bytes::from(e))),
            );
            let stall = futures_util::stream::pending::<Result<Bytes, Infallible>>();
            builder
                .header("content-type", "text/event-stream")
                .body(Body::from_stream(futures_util::StreamExt::chain(
                    first, stall,
                )))
        }
    }
    .unwrap_or_else(|_| Response::new(Body::from("bad scripted reply")))
}

fn fast_retries() -> RetryPolicy {
    RetryPolicy {
        max_retries: 3,
        base_delay: Duration::from_millis(10),
        max_delay: Duration::from_millis(200),
    }
}

fn openai(server: &FakeServer) -> OpenAiClient {
    let mut config =
        OpenAiConfig::from_env("test-model").with_base_url(format!("{}/v1", server.url));
    config.api_key = Some("test-key".into());
    config.retry = fast_retries();
    config.idle_timeout = Duration::from_millis(300);
    OpenAiClient::new(config).expect("valid config")
}

fn anthropic(server: &FakeServer) -> AnthropicClient {
    let mut config = AnthropicConfig::from_env("claude-test").with_base_url(server.url.clone());
    config.api_key = Some("sk-ant-test".into());
    config.retry = fast_retries();
    config.idle_timeout = Duration::from_millis(300);
    AnthropicClient::new(config).expect("valid config")
}

fn completion(text: &str) -> Reply {
    Reply::Json(json!({
        "id": "c1", "object": "chat.completion", "model": "test-model",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 20}
    }))
}

fn openai_stream(text_parts: &[&str]) -> Reply {
    let mut events: Vec<String> = text_parts
        .iter()
        .map(|part| format!("data: {}\n\n", json!({"model": "test-model", "choices": [{"index": 0, "delta": {"content": part}, "finish_reason": null}]})))
        .collect();
    events.push(format!(
        "data: {}\n\n",
        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    ));
    events.push(format!(
        "data: {}\n\n",
        json!({"choices": [], "usage": {"prompt_tokens": 50, "completion_tokens": 7}})
    ));
    events.push("data: [DONE]\n\n".into());
    Reply::Sse(events)
}

fn anthropic_message(text: &str) -> Reply {
    Reply::Json(json!({
        "id": "m1", "type": "message", "role": "assistant", "model": "claude-test",
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn", "usage": {"input_tokens": 80, "output_tokens": 12}
    }))
}

fn anthropic_stream(text_parts: &[&str]) -> Reply {
    let event = |name: &str, data: Value| format!("event: {name}\ndata: {data}\n\n");
    let mut events = vec![
        event(
            "message_start",
            json!({"type": "message_start", "message": {"model": "claude-test", "usage": {"input_tokens": 80, "output_tokens": 1}}}),
        ),
        event(
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ),
        event("ping", json!({"type": "ping"})),
    ];
    for part in text_parts {
        events.push(event("content_block_delta", json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": part}})));
    }
    events.push(event(
        "content_block_stop",
        json!({"type": "content_block_stop", "index": 0}),
    ));
    events.push(event("message_delta", json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 9}})));
    events.push(event("message_stop", json!({"type": "message_stop"})));
    Reply::Sse(events)
}

const OBSERVE: &str =
    "Let me look first.\n```rhai\nlet data = [3, 1, 2];\nobservation(data.len())\n```";
const FAIL: &str =
    "```rhai\nlet total = data.reduce(|s, x| s + x, 0);\nthrow `not yet: ${total}`;\n```";
const FINISH: &str = "```rhai\nfinal_result(data.reduce(|s, x| s + x, 0))\n```";

fn agent(model: Arc<dyn ModelClient>, stream: bool, events: Arc<Mutex<Vec<Event>>>) -> Agent {
    Agent::builder(model, Arc::new(RhaiRuntime::new(Limits::default())))
        .stream(stream)
        .config(LoopConfig::default())
        .on_event(move |event| events.lock().expect("not poisoned").push(event.clone()))
        .build()
        .expect("agent builds")
}

/// The user messages of a recorded OpenAI request, in order.
fn user_messages(body: &Value) -> Vec<String> {
    body["messages"]
        .as_array()
        .map(|messages| {
            messages
                .iter()
                .filter(|m| m["role"] == "user")
                .map(|m| match &m["content"] {
                    Value::String(text) => text.clone(),
                    Value::Array(blocks) => blocks
                        .iter()
                        .filter_map(|b| b["text"].as_str())
                        .collect::<Vec<_>>()
                        .join("\n"),
                    _ => String::new(),
                })
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn an_openai_run_feeds_back_the_observation_and_the_error_and_ends_on_the_final_result() {
    let server = FakeServer::start(vec![
        completion(OBSERVE),
        completion(FAIL),
        completion(FINISH),
    ])
    .await;
    let events = Arc::new(Mutex::new(Vec::new()));
    let run = agent(Arc::new(openai(&server)), false, events.clone())
        .run("Sum the data.")
        .await
        .expect("run finishes");
    assert_eq!(run.outcome, Outcome::FinalResult { value: json!(6) });
    assert_eq!(run.steps, 3);
    assert_eq!(run.usage.input_tokens, 300);

    let received = server.received();
    assert_eq!(received.len(), 3);
    let first = &received[0];
    assert_eq!(first.path, "/v1/chat/completions");
    assert_eq!(first.headers["authorization"], "Bearer test-key");
    assert_eq!(first.body["model"], "test-model");
    assert_eq!(first.body["stream"], false);
    assert_eq!(first.body["messages"][0]["role"], "system");
    assert!(
        first.body["messages"][0]["content"]
            .as_str()
            .unwrap_or_default()
            .contains("```rhai")
    );
    assert_eq!(user_messages(&first.body), vec!["Sum the data."]);
    let second = user_messages(&received[1].body);
    assert_eq!(
        unfenced(&second[1]),
        "Observation:\n<untrusted>\n3\n</untrusted>\n\nIf it is the answer, finish with final_result(3)."
    );
    let third = user_messages(&received[2].body);
    assert!(
        unfenced(&third[2]).starts_with("Error:\n<untrusted>\nRuntime error: not yet: 6"),
        "{}",
        third[2]
    );
    assert_eq!(received[2].body["messages"][4]["role"], "assistant");
    assert_eq!(received[2].body["messages"][4]["content"], FAIL);

    let events = events.lock().expect("not poisoned");
    assert!(
        events
            .iter()
            .any(|e| matches!(e, Event::Observation { value, .. } if value == &json!(3)))
    );
    assert!(
        events
            .iter()
            .any(|e| matches!(e, Event::Error { message, .. } if message.contains("not yet")))
    );
    assert!(matches!(
        events.last(),
        Some(Event::Finished { steps: 3, .. })
    ));
}

#[tokio::test]
async fn an_openai_stream_reports_text_as_it_arrives_and_asks_for_usage() {
    let server = FakeServer::start(vec![openai_stream(&[
        "```rhai\nfinal_",
        "result(",
        "42)\n```",
    ])])
    .await;
    let events = Arc::new(Mutex::new(Vec::new()));
    let run = agent(Arc::new(openai(&server)), true, events.clone())
        .run("Answer.")
        .await
        .expect("run finishes");
    assert_eq!(run.outcome, Outcome::FinalResult { value: json!(42) });
    assert_eq!(run.usage.output_tokens, 7);
    let body = &server.received()[0].body;
    assert_eq!(body["stream"], true);
    assert_eq!(body["stream_options"]["include_usage"], true);
    let deltas: Vec<String> = events
        .lock()
        .expect("not poisoned")
        .iter()
        .filter_map(|e| match e {
            Event::TextDelta { text, .. } => Some(text.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(deltas, ["```rhai\nfinal_", "result(", "42)\n```"]);
}

#[tokio::test]
async fn an_anthropic_run_sends_the_system_prompt_apart_and_the_key_in_its_header() {
    let server =
        FakeServer::start(vec![anthropic_message(OBSERVE), anthropic_message(FINISH)]).await;
    let events = Arc::new(Mutex::new(Vec::new()));
    let run = agent(Arc::new(anthropic(&server)), false, events)
        .run("Sum the data.")
        .await
        .expect("run finishes");
    assert_eq!(run.outcome, Outcome::FinalResult { value: json!(6) });
    let received = server.received();
    assert_eq!(received[0].path, "/v1/messages");
    assert_eq!(received[0].headers["x-api-key"], "sk-ant-test");
    assert_eq!(received[0].headers["anthropic-version"], "2023-06-01");
    assert!(
        received[0].body["system"]
            .as_str()
            .unwrap_or_default()
            .contains("```rhai")
    );
    assert_eq!(received[0].body["messages"][0]["role"], "user");
    assert_eq!(
        unfenced(&user_messages(&received[1].body)[1]),
        "Observation:\n<untrusted>\n3\n</untrusted>\n\nIf it is the answer, finish with final_result(3)."
    );
}

/// Feedback with each fence made neutral (`<untrusted-NONCE>` … `</untrusted-NONCE>`
/// become `<untrusted>` … `</untrusted>`), so it compares exactly. Panics when a
/// fence opens without its closing line: fenced text must stay fenced.
fn unfenced(text: &str) -> String {
    let mut open: Option<String> = None;
    let mut out = Vec::new();
    for line in text.lines() {
        match &open {
            None if line.starts_with("<untrusted-") => {
                open = Some(line.replacen('<', "</", 1));
                out.push("<untrusted>");
            }
            Some(close) if line == close => {
                open = None;
                out.push("</untrusted>");
            }
            _ => out.push(line),
        }
    }
    assert!(open.is_none(), "a fence is left open in:\n{text}");
    out.join("\n")
}

#[tokio::test]
async fn an_anthropic_stream_assembles_the_reply_and_its_usage() {
    let server = FakeServer::start(vec![anthropic_stream(&[
        "```rhai\nfinal_result(",
        "\"done\")\n```",
    ])])
    .await;
    let events = Arc::new(Mutex::new(Vec::new()));
    let run = agent(Arc::new(anthropic(&server)), true, events)
        .run("Finish.")
        .await
        .expect("run finishes");
    assert_eq!(
        run.outcome,
        Outcome::FinalResult {
            value: json!("done")
        }
    );
    assert_eq!((run.usage.input_tokens, run.usage.output_tokens), (80, 9));
    assert_eq!(server.received()[0].body["stream"], true);
}

#[tokio::test]
async fn a_429_with_retry_after_and_a_500_are_retried() {
    let server = FakeServer::start(vec![
        Reply::Status {
            status: 429,
            body: r#"{"error":{"message":"slow down"}}"#.into(),
            retry_after: Some("0"),
        },
        Reply::Status {
            status: 503,
            body: "overloaded".into(),
            retry_after: None,
        },
        completion(FINISH.replace("data.reduce(|s, x| s + x, 0)", "1").as_str()),
    ])
    .await;
    let run = agent(Arc::new(openai(&server)), false, Arc::default())
        .run("Go.")
        .await
        .expect("run finishes");
    assert_eq!(run.outcome, Outcome::FinalResult { value: json!(1) });
    assert_eq!(server.received().len(), 3);
}

#[tokio::test]
async fn a_server_that_keeps_failing_ends_in_a_clear_error_after_bounded_retries() {
    let failing = Reply::Status {
        status: 500,
        body: "boom".into(),
        retry_after: None,
    };
    let server = FakeServer::start(vec![failing; 10]).await;
    let err = openai(&server)
        .complete(&codeact::chat::ModelRequest::new(
            "s",
            vec![codeact::chat::Message::user("t")],
        ))
        .await
        .expect_err("never succeeds");
    assert_eq!(
        err,
        ModelError::Unavailable {
            provider: "openai",
            attempts: 4,
            last: "500 Internal Server Error: boom".into()
        }
    );
    assert_eq!(server.received().len(), 4);
}

#[tokio::test]
async fn a_bad_key_is_a_clear_error_without_retries() {
    let server = FakeServer::start(vec![Reply::Status {
        status: 401,
        body: r#"{"error":{"message":"Incorrect API key provided"}}"#.into(),
        retry_after: None,
    }])
    .await;
    let err = agent(Arc::new(openai(&server)), false, Arc::default())
        .run("Go.")
        .await
        .expect_err("refused");
    assert_eq!(
        err.to_string(),
        "openai refused the request (401): the API key was not accepted: Incorrect API key provided"
    );
    assert_eq!(server.received().len(), 1);
}

#[tokio::test]
async fn a_stream_that_stalls_after_sending_text_is_an_error_not_a_hang() {
    let first = format!(
        "data: {}\n\n",
        json!({"choices": [{"index": 0, "delta": {"content": "```rhai\n"}}]})
    );
    let server = FakeServer::start(vec![Reply::SseThenStall(vec![first])]).await;
    let started = std::time::Instant::now();
    let err = agent(Arc::new(openai(&server)), true, Arc::default())
        .run("Go.")
        .await
        .expect_err("stalls");
    assert!(err.to_string().contains("no data for 300 ms"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(5));
}

/// If this fails, a server streaming big events without end fills the host's
/// memory: a streamed reply must stop at the same byte cap as a whole one.
#[tokio::test]
async fn an_endless_stream_of_big_events_ends_in_a_clear_error_at_the_byte_cap() {
    let filler = "x".repeat(1 << 20);
    let event = format!("data: {}\n\n", text_chunk(&filler));
    let produced = Arc::new(AtomicUsize::new(0));
    let server = FakeServer::start(vec![Reply::Endless {
        content_type: "text/event-stream",
        chunk: Bytes::from(event),
        pause: Duration::ZERO,
        produced: produced.clone(),
    }])
    .await;
    let mut config =
        OpenAiConfig::from_env("test-model").with_base_url(format!("{}/v1", server.url));
    assert_eq!(config.max_reply_bytes, 32 << 20, "the default cap");
    config.api_key = Some("test-key".into());
    config.retry = RetryPolicy {
        max_retries: 0,
        ..fast_retries()
    };
    // 8 MiB instead of the default 32 keeps the test quick (debug builds parse
    // slowly); the path is the same.
    config.max_reply_bytes = 8 << 20;
    let client = OpenAiClient::new(config).expect("valid config");
    let result = tokio::time::timeout(
        Duration::from_secs(60),
        client.stream(&request(), &mut |_| {}),
    )
    .await
    .expect("the endless stream is cut off, not read for ever");
    let error = result.expect_err("an endless stream is not a reply");
    assert!(
        error
            .to_string()
            .contains("the reply is larger than 8388608 bytes"),
        "{error}"
    );
    // What sat in buffers on the way adds a few MiB at most.
    let sent = produced.load(Ordering::Relaxed);
    assert!(sent < 32 << 20, "the server got {sent} bytes out");
}

/// If this fails, a server that keeps a stream alive without end (events that
/// carry nothing, never a finished reply) holds the run for ever.
#[tokio::test]
async fn a_stream_that_never_finishes_is_cut_at_the_reply_timeout() {
    let server = FakeServer::start(vec![Reply::Endless {
        content_type: "text/event-stream",
        chunk: Bytes::from_static(b"data: {\"choices\": []}\n\n"),
        pause: Duration::from_millis(50),
        produced: Arc::new(AtomicUsize::new(0)),
    }])
    .await;
    let mut config =
        OpenAiConfig::from_env("test-model").with_base_url(format!("{}/v1", server.url));
    config.api_key = Some("test-key".into());
    config.retry = RetryPolicy {
        max_retries: 0,
        ..fast_retries()
    };
    config.idle_timeout = Duration::from_millis(300);
    config.reply_timeout = Duration::from_secs(1);
    let client = OpenAiClient::new(config).expect("valid config");
    let error = tokio::time::timeout(
        Duration::from_secs(20),
        client.stream(&request(), &mut |_| {}),
    )
    .await
    .expect("cut off, not read for ever")
    .expect_err("never a reply");
    assert!(
        error
            .to_string()
            .contains("the reply took longer than 1000 ms in all"),
        "{error}"
    );
}

/// If this fails, a whole (not streamed) body that trickles in without end holds
/// the run for ever: only silence was bounded.
#[tokio::test]
async fn a_body_that_trickles_without_end_is_cut_at_the_reply_timeout() {
    let server = FakeServer::start(vec![Reply::Endless {
        content_type: "application/json",
        chunk: Bytes::from_static(b" "),
        pause: Duration::from_millis(50),
        produced: Arc::new(AtomicUsize::new(0)),
    }])
    .await;
    let mut config =
        OpenAiConfig::from_env("test-model").with_base_url(format!("{}/v1", server.url));
    config.api_key = Some("test-key".into());
    config.retry = RetryPolicy {
        max_retries: 0,
        ..fast_retries()
    };
    config.idle_timeout = Duration::from_millis(300);
    config.reply_timeout = Duration::from_secs(1);
    let client = OpenAiClient::new(config).expect("valid config");
    let error = tokio::time::timeout(Duration::from_secs(20), client.complete(&request()))
        .await
        .expect("cut off, not read for ever")
        .expect_err("never a reply");
    assert!(
        error
            .to_string()
            .contains("the reply took longer than 1000 ms in all"),
        "{error}"
    );
}

fn request() -> codeact::chat::ModelRequest {
    codeact::chat::ModelRequest::new("system", vec![codeact::chat::Message::user("go")])
}

#[tokio::test]
async fn a_stream_cut_before_it_finished_is_retried_when_nothing_was_shown_yet() {
    let truncated = Reply::Sse(vec![format!("data: {}\n\n", json!({"choices": []}))]);
    let server = FakeServer::start(vec![
        truncated,
        openai_stream(&["```rhai\nfinal_result(1)\n```"]),
    ])
    .await;
    let run = agent(Arc::new(openai(&server)), true, Arc::default())
        .run("Go.")
        .await
        .expect("second try works");
    assert_eq!(run.outcome, Outcome::FinalResult { value: json!(1) });
    assert_eq!(server.received().len(), 2);
}

#[tokio::test]
async fn a_reply_with_no_choices_or_no_content_is_handled() {
    let server = FakeServer::start(vec![Reply::Json(json!({"choices": []}))]).await;
    let err = agent(Arc::new(openai(&server)), false, Arc::default())
        .run("Go.")
        .await
        .expect_err("no choices");
    assert!(
        err.to_string().contains("the reply has no choices"),
        "{err}"
    );

    let empty = Reply::Json(
        json!({"choices": [{"message": {"role": "assistant", "content": null}, "finish_reason": "stop"}]}),
    );
    let server = FakeServer::start(vec![empty, completion("```rhai\nfinal_result(2)\n```")]).await;
    let run = agent(Arc::new(openai(&server)), false, Arc::default())
        .run("Go.")
        .await
        .expect("recovers");
    assert_eq!(run.outcome, Outcome::FinalResult { value: json!(2) });
    assert!(user_messages(&server.received()[1].body)[1].contains("no code block"));
}

#[tokio::test]
async fn a_refused_connection_is_retried_then_reported() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("binds");
    let url = format!("http://{}/v1", listener.local_addr().expect("address"));
    drop(listener);
    let mut config = OpenAiConfig::from_env("m").with_base_url(url);
    config.api_key = Some("k".into());
    config.retry = fast_retries();
    let err = OpenAiClient::new(config)
        .expect("valid config")
        .complete(&codeact::chat::ModelRequest::new("s", vec![]))
        .await
        .expect_err("nothing listens");
    assert!(
        matches!(&err, ModelError::Unavailable { attempts: 4, last, .. } if last.starts_with("could not connect")),
        "{err}"
    );
}

const FAULT_SECTION: Section = Section {
    name: "model-servers",
    title: "Faulty model servers",
    intro: "A fault-injecting HTTP server on 127.0.0.1 (axum) speaking the OpenAI or Anthropic wire format, driven by a real agent run with a transcript. Clients are set to 200 ms request and 300 ms idle timeouts and 3 fast retries. Every case must end in a bounded retry or a clear error within 5 s, without a panic, and the transcript must hold the run up to its last event (`finished` or `failed`). The refused connection, 429/503, persistent 500, bad key, stalled and cut stream cases are tests of their own in the same file.",
    binary: "suite model_servers::",
    columns: &["outcome"],
};

/// The provider a fault case talks to.
#[derive(Clone, Copy)]
enum Provider {
    OpenAi,
    Anthropic,
}

struct Fault {
    name: &'static str,
    provider: Provider,
    stream: bool,
    replies: Vec<Reply>,
    /// The run's end: `Ok(final value)` or `Err(text the error contains)`.
    expect: Result<serde_json::Value, &'static str>,
    /// Requests the server must have seen.
    requests: usize,
}

fn sse(chunks: &[Value]) -> Vec<String> {
    chunks.iter().map(|c| format!("data: {c}\n\n")).collect()
}

/// An OpenAI stream of these chunks, ended by `[DONE]`.
fn sse_done(chunks: &[Value]) -> Reply {
    let mut events = sse(chunks);
    events.push("data: [DONE]\n\n".into());
    Reply::Sse(events)
}

fn text_chunk(text: &str) -> Value {
    json!({"choices": [{"index": 0, "delta": {"content": text}}]})
}

fn faults() -> Vec<Fault> {
    let done = "```rhai\nfinal_result(1)\n```";
    let ten_mb = format!("{}\n```rhai\nobservation(1)\n```", "x".repeat(10 << 20));
    let mut ten_mb_stream: Vec<String> = ten_mb
        .as_bytes()
        .chunks(64 << 10)
        .map(|part| format!("data: {}\n\n", text_chunk(&String::from_utf8_lossy(part))))
        .collect();
    ten_mb_stream.push(format!(
        "data: {}\n\n",
        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    ));
    ten_mb_stream.push("data: [DONE]\n\n".into());
    vec![
        Fault {
            name: "request_that_never_answers",
            provider: Provider::OpenAi,
            stream: false,
            replies: vec![Reply::Hang, Reply::Hang, Reply::Hang, Reply::Hang],
            expect: Err("unavailable after 4 attempt(s): no response within 200 ms"),
            requests: 4,
        },
        Fault {
            name: "headers_then_a_body_that_never_comes",
            provider: Provider::OpenAi,
            stream: false,
            replies: vec![
                Reply::HeadersThenStall,
                Reply::HeadersThenStall,
                Reply::HeadersThenStall,
                Reply::HeadersThenStall,
            ],
            expect: Err("unavailable after 4 attempt(s): the reply's body stalled: no data for 300 ms"),
            requests: 4,
        },
        Fault {
            name: "stream_that_never_answers",
            provider: Provider::OpenAi,
            stream: true,
            replies: vec![Reply::Hang, Reply::Hang, Reply::Hang, Reply::Hang],
            expect: Err("unavailable after 4 attempt(s): no response within 200 ms"),
            requests: 4,
        },
        Fault {
            name: "malformed_json_body",
            provider: Provider::OpenAi,
            stream: false,
            replies: vec![Reply::Raw {
                content_type: "application/json",
                body: r#"{"choices": [{"message": {"content": "```rhai"#.into(),
            }],
            expect: Err("openai sent a reply that cannot be used: EOF while parsing"),
            requests: 1,
        },
        Fault {
            name: "malformed_json_body_anthropic",
            provider: Provider::Anthropic,
            stream: false,
            replies: vec![Reply::Raw {
                content_type: "application/json",
                body: "<html>502 Bad Gateway</html>".into(),
            }],
            expect: Err("anthropic sent a reply that cannot be used"),
            requests: 1,
        },
        Fault {
            name: "malformed_json_in_a_stream_chunk",
            provider: Provider::OpenAi,
            stream: true,
            replies: vec![Reply::Sse(vec![
                format!("data: {}\n\n", text_chunk("```rhai\n")),
                "data: {\"choices\": [{\"delta\": \n\n".into(),
            ])],
            expect: Err("bad stream chunk"),
            requests: 1,
        },
        Fault {
            name: "sse_cut_mid_event_after_text_was_shown",
            provider: Provider::OpenAi,
            stream: true,
            replies: vec![Reply::Sse(vec![
                format!("data: {}\n\n", text_chunk("```rhai\nfinal_")),
                r#"data: {"choices": [{"delta": {"content": "resu"#.into(),
            ])],
            expect: Err("openai sent a reply that cannot be used"),
            requests: 1,
        },
        Fault {
            name: "sse_cut_mid_event_before_any_text_is_retried",
            provider: Provider::OpenAi,
            stream: true,
            replies: vec![
                Reply::Sse(vec![r#"data: {"choices": [{"delta": {"content": "``"#.into()]),
                openai_stream(&[done]),
            ],
            expect: Ok(json!(1)),
            requests: 2,
        },
        Fault {
            name: "anthropic_sse_cut_mid_event_before_any_text_is_retried",
            provider: Provider::Anthropic,
            stream: true,
            replies: vec![
                Reply::Sse(vec!["event: message_start\ndata: {\"type\": \"message_st".into()]),
                anthropic_stream(&[done]),
            ],
            expect: Ok(json!(1)),
            requests: 2,
        },
        Fault {
            name: "stream_starting_with_a_byte_order_mark",
            provider: Provider::OpenAi,
            stream: true,
            replies: vec![match openai_stream(&[done]) {
                Reply::Sse(events) => Reply::Sse([vec!["\u{feff}".to_string()], events].concat()),
                other => other,
            }],
            expect: Ok(json!(1)),
            requests: 1,
        },
        Fault {
            name: "error_chunk_mid_stream_before_any_text_is_retried",
            provider: Provider::OpenAi,
            stream: true,
            replies: vec![
                Reply::Sse(sse(&[json!({"error": {"message": "overloaded"}})])),
                openai_stream(&[done]),
            ],
            expect: Ok(json!(1)),
            requests: 2,
        },
        Fault {
            name: "empty_choices_in_every_stream_chunk",
            provider: Provider::OpenAi,
            stream: true,
            replies: vec![
                sse_done(&[json!({"choices": []}), json!({"choices": []})]),
                openai_stream(&[done]),
            ],
            expect: Ok(json!(1)),
            requests: 2,
        },
        Fault {
            name: "stream_deltas_without_content",
            provider: Provider::OpenAi,
            stream: true,
            replies: vec![sse_done(&[
                json!({"choices": [{"delta": {"role": "assistant"}}]}),
                json!({"choices": [{"delta": {"content": null}}]}),
                text_chunk(done),
                json!({"choices": [{"delta": {}, "finish_reason": "stop"}]}),
            ])],
            expect: Ok(json!(1)),
            requests: 1,
        },
        Fault {
            name: "message_without_a_content_field",
            provider: Provider::OpenAi,
            stream: false,
            replies: vec![
                Reply::Json(json!({"choices": [{"message": {"role": "assistant"}, "finish_reason": "stop"}]})),
                completion(done),
            ],
            expect: Ok(json!(1)),
            requests: 2,
        },
        Fault {
            name: "unknown_finish_reason",
            provider: Provider::OpenAi,
            stream: false,
            replies: vec![Reply::Json(json!({
                "choices": [{"message": {"content": done}, "finish_reason": "eldritch"}]
            }))],
            expect: Ok(json!(1)),
            requests: 1,
        },
        Fault {
            name: "unknown_finish_reason_in_a_stream",
            provider: Provider::OpenAi,
            stream: true,
            replies: vec![sse_done(&[
                text_chunk(done),
                json!({"choices": [{"delta": {}, "finish_reason": "eldritch"}]}),
            ])],
            expect: Ok(json!(1)),
            requests: 1,
        },
        Fault {
            name: "unknown_stop_reason_anthropic",
            provider: Provider::Anthropic,
            stream: false,
            replies: vec![Reply::Json(json!({
                "content": [{"type": "text", "text": done}],
                "stop_reason": "eldritch", "usage": {"input_tokens": 1, "output_tokens": 1}
            }))],
            expect: Ok(json!(1)),
            requests: 1,
        },
        Fault {
            name: "reply_of_10_mb",
            provider: Provider::OpenAi,
            stream: false,
            // Serialized before the server starts, so the reply is not late.
            replies: vec![
                Reply::Raw {
                    content_type: "application/json",
                    body: json!({"choices": [{"message": {"content": ten_mb}, "finish_reason": "stop"}]})
                        .to_string(),
                },
                completion(done),
            ],
            expect: Ok(json!(1)),
            requests: 2,
        },
        Fault {
            name: "reply_of_10_mb_streamed_in_64_kib_events",
            provider: Provider::OpenAi,
            stream: true,
            replies: vec![Reply::Sse(ten_mb_stream), openai_stream(&[done])],
            expect: Ok(json!(1)),
            requests: 2,
        },
    ]
}

/// Runs one fault case; the table cell, or why it failed.
async fn run_fault(fault: Fault) -> Result<String, String> {
    let server = FakeServer::start(fault.replies).await;
    let model: Arc<dyn ModelClient> = match fault.provider {
        Provider::OpenAi => {
            let mut config =
                OpenAiConfig::from_env("test-model").with_base_url(format!("{}/v1", server.url));
            config.api_key = Some("test-key".into());
            config.retry = fast_retries();
            config.request_timeout = Duration::from_millis(200);
            config.idle_timeout = Duration::from_millis(300);
            Arc::new(OpenAiClient::new(config).map_err(|e| e.to_string())?)
        }
        Provider::Anthropic => {
            let mut config =
                AnthropicConfig::from_env("claude-test").with_base_url(server.url.clone());
            config.api_key = Some("sk-ant-test".into());
            config.retry = fast_retries();
            config.request_timeout = Duration::from_millis(200);
            config.idle_timeout = Duration::from_millis(300);
            Arc::new(AnthropicClient::new(config).map_err(|e| e.to_string())?)
        }
    };
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("model-servers");
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let path = dir.join(format!("{}.jsonl", fault.name));
    let transcript = Transcript::create(&path).map_err(|e| e.to_string())?;
    let agent = Agent::builder(model, Arc::new(RhaiRuntime::new(Limits::default())))
        .stream(fault.stream)
        .listener(transcript.listener())
        .build()
        .map_err(|e| e.to_string())?;
    let started = std::time::Instant::now();
    let result = tokio::time::timeout(Duration::from_secs(20), agent.run("Go."))
        .await
        .map_err(|_| "the run hung for 20 s".to_string())?;
    let elapsed = started.elapsed();
    if elapsed > Duration::from_secs(5) {
        return Err(format!("took {} ms", elapsed.as_millis()));
    }
    let requests = server.received().len();
    if requests != fault.requests {
        return Err(format!(
            "the server saw {requests} request(s), expected {}",
            fault.requests
        ));
    }
    let events = read_transcript(&path).map_err(|e| e.to_string())?;
    let kept = matches!(events.first(), Some(Event::RunStarted { .. }))
        && events.iter().any(|e| matches!(e, Event::Message { .. }));
    let cell = match (&fault.expect, result) {
        (Ok(value), Ok(run))
            if run.outcome
                == (Outcome::FinalResult {
                    value: value.clone(),
                }) =>
        {
            if !matches!(events.last(), Some(Event::Finished { .. })) {
                return Err("the transcript does not end with the finished run".into());
            }
            let retried = if requests > run.steps {
                format!(", {} retry", requests - run.steps)
            } else {
                String::new()
            };
            format!(
                "✓ final_result {value} after {} step(s){retried}",
                run.steps
            )
        }
        (Err(needle), Err(error)) if error.to_string().contains(needle) => {
            if !matches!(events.last(), Some(Event::Failed { .. })) {
                return Err("the transcript does not end with the failure".into());
            }
            format!("✓ error after {requests} request(s): \"{needle}…\"")
        }
        (_, Ok(run)) => return Err(format!("the run ended with {:?}", run.outcome)),
        (_, Err(error)) => return Err(format!("the run failed with: {error}")),
    };
    if !kept {
        return Err("the transcript lost the run's start".into());
    }
    Ok(format!("{cell}; transcript kept"))
}

/// If this fails, a model server's fault hangs, crashes or loses a run, or its
/// error stopped being clear.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_faulty_server_ends_in_a_bounded_retry_or_a_clear_error_and_keeps_the_transcript() {
    let mut rows = Vec::new();
    let mut failures = Vec::new();
    for fault in faults() {
        let name = fault.name;
        match run_fault(fault).await {
            Ok(cell) => rows.push((name.to_string(), cell)),
            Err(failure) => failures.push(format!("{name}: {failure}")),
        }
    }
    if failures.is_empty()
        && let Err(problem) = reliability::submit(&FAULT_SECTION, "outcome", rows)
    {
        failures.push(problem);
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A 10 MB reply is kept cut in the history: the next request does not resend it.
#[tokio::test]
async fn a_10_mb_reply_is_not_sent_back_whole_with_the_next_request() {
    let huge = format!("{}\n```rhai\nobservation(1)\n```", "x".repeat(10 << 20));
    let server = FakeServer::start(vec![
        completion(&huge),
        completion("```rhai\nfinal_result(2)\n```"),
    ])
    .await;
    let run = agent(Arc::new(openai(&server)), false, Arc::default())
        .run("Go.")
        .await
        .expect("run finishes");
    assert_eq!(run.outcome, Outcome::FinalResult { value: json!(2) });
    let second = server.received()[1].body.to_string();
    assert!(
        second.len() < 100_000,
        "the second request is {} bytes",
        second.len()
    );
}

/// A 1×1 PNG.
const DOT_PNG: &[u8] = &[
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1f, 0x15, 0xc4,
    0x89, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0xf8, 0xcf, 0xc0, 0xf0,
    0x1f, 0x00, 0x05, 0x00, 0x01, 0xff, 0x89, 0x99, 0x3d, 0x1d, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45,
    0x4e, 0x44, 0xae, 0x42, 0x60, 0x82,
];

const SHOW: &str = "```rhai\nshow_image(\"in/dot.png\");\nobservation(\"look\")\n```";
const SEEN: &str = "```rhai\nfinal_result(\"seen\")\n```";

/// An agent over `model` whose scripts may show `in/dot.png`.
fn seeing_agent(
    model: Arc<dyn codeact::model::ModelClient>,
    see: bool,
    scratch: &std::path::Path,
) -> Agent {
    std::fs::create_dir_all(scratch.join("in")).expect("made");
    std::fs::write(scratch.join("in/dot.png"), DOT_PNG).expect("written");
    let area = codeact::FileArea::builder()
        .mount(codeact::files::Mount {
            host: scratch.join("in"),
            guest: "in".into(),
            mode: codeact::files::MountMode::ReadOnly,
        })
        .open()
        .expect("opens");
    Agent::builder(model, Arc::new(RhaiRuntime::new(Limits::default())))
        .files(&area)
        .see_images(see)
        .stream(false)
        .build()
        .expect("builds")
}

/// If this fails, a model that sees images no longer gets the picture a script
/// showed (OpenAI's format: an `image_url` part holding a data URL), or a
/// transcript would carry the image's bytes.
#[tokio::test]
async fn an_image_a_script_shows_reaches_an_openai_model_as_an_image_part() {
    let server = FakeServer::start(vec![completion(SHOW), completion(SEEN)]).await;
    let scratch = tempfile::tempdir().expect("scratch");
    let agent = seeing_agent(Arc::new(openai(&server)), true, scratch.path());
    let run = agent.request("Look at the dot.").events();
    use futures_util::StreamExt;
    let items: Vec<_> = Box::pin(run).collect().await;
    assert!(matches!(
        items.last(),
        Some(codeact::agent::RunItem::Finished(Ok(_)))
    ));
    let received = server.received();
    let parts = received[1].body["messages"]
        .as_array()
        .and_then(|m| m.last())
        .map(|m| m["content"].clone())
        .expect("the feedback");
    let image = parts
        .as_array()
        .and_then(|parts| parts.iter().find(|p| p["type"] == "image_url"))
        .expect("an image part");
    use base64::Engine as _;
    let url = image["image_url"]["url"].as_str().unwrap_or_default();
    assert_eq!(
        url,
        format!(
            "data:image/png;base64,{}",
            base64::engine::general_purpose::STANDARD.encode(DOT_PNG)
        )
    );
    let shown = items
        .iter()
        .find_map(|item| match item {
            codeact::agent::RunItem::Event {
                event: Event::ImagesShown { blocks, .. },
                ..
            } => Some(serde_json::to_string(blocks).expect("serializes")),
            _ => None,
        })
        .expect("an images_shown event");
    assert!(shown.contains(r#""source":"in/dot.png""#), "{shown}");
    assert!(
        !shown.contains("iVBOR"),
        "the transcript keeps no bytes: {shown}"
    );
}

/// If this fails, Anthropic's models get the picture in another shape than
/// their API's base64 image block.
#[tokio::test]
async fn an_image_a_script_shows_reaches_an_anthropic_model_as_an_image_block() {
    let server = FakeServer::start(vec![anthropic_message(SHOW), anthropic_message(SEEN)]).await;
    let scratch = tempfile::tempdir().expect("scratch");
    let run = seeing_agent(Arc::new(anthropic(&server)), true, scratch.path())
        .run("Look at the dot.")
        .await
        .expect("finishes");
    assert!(matches!(run.outcome, Outcome::FinalResult { .. }));
    let received = server.received();
    let content = received[1].body["messages"]
        .as_array()
        .and_then(|m| m.last())
        .map(|m| m["content"].clone())
        .expect("the feedback");
    let image = content
        .as_array()
        .and_then(|blocks| blocks.iter().find(|b| b["type"] == "image"))
        .expect("an image block");
    assert_eq!(image["source"]["type"], "base64");
    assert_eq!(image["source"]["media_type"], "image/png");
}

/// If this fails, a model that is not sent images gets nothing (or the bytes)
/// where a script showed one, instead of a line saying what it was.
#[tokio::test]
async fn a_model_not_sent_images_reads_a_line_about_the_image() {
    let server = FakeServer::start(vec![completion(SHOW), completion(SEEN)]).await;
    let scratch = tempfile::tempdir().expect("scratch");
    seeing_agent(Arc::new(openai(&server)), false, scratch.path())
        .run("Look at the dot.")
        .await
        .expect("finishes");
    let received = server.received();
    let last = received[1].body["messages"]
        .as_array()
        .and_then(|m| m.last())
        .map(|m| m["content"].clone())
        .expect("the feedback");
    let text = unfenced(last.as_str().unwrap_or_default());
    assert!(
        text.contains("[The script showed an image (image/png, 70 bytes, sha256 "),
        "{text}"
    );
    assert!(
        text.contains("this model is not sent images.]\n<untrusted>\nin/dot.png\n</untrusted>"),
        "the path, the script's to name, is fenced: {text}"
    );
}

/// If this fails, a model is sent a picture larger than models take (upload and
/// tokens for pixels the provider throws away), or a smaller shape than the
/// script's picture has.
#[tokio::test]
async fn a_large_picture_reaches_the_model_scaled_to_its_long_side() {
    let big = {
        let mut out = std::io::Cursor::new(Vec::new());
        image::RgbaImage::from_pixel(3136, 1000, image::Rgba([0, 90, 200, 255]))
            .write_to(&mut out, image::ImageFormat::Png)
            .expect("encodes");
        out.into_inner()
    };
    let server = FakeServer::start(vec![completion(SHOW), completion(SEEN)]).await;
    let scratch = tempfile::tempdir().expect("scratch");
    let agent = seeing_agent(Arc::new(openai(&server)), true, scratch.path());
    std::fs::write(scratch.path().join("in/dot.png"), &big).expect("written");
    let run = agent.run("Look at the picture.").await.expect("finishes");
    assert_eq!(
        run.outcome,
        codeact::Outcome::FinalResult {
            value: serde_json::json!("seen")
        }
    );
    let received = server.received();
    let url = received[1].body["messages"]
        .as_array()
        .and_then(|m| m.last())
        .and_then(|m| m["content"].as_array().cloned())
        .and_then(|parts| parts.into_iter().find(|p| p["type"] == "image_url"))
        .and_then(|part| part["image_url"]["url"].as_str().map(str::to_string))
        .expect("an image part");
    use base64::Engine as _;
    let sent = base64::engine::general_purpose::STANDARD
        .decode(url.trim_start_matches("data:image/png;base64,"))
        .expect("base64");
    let shown = image::load_from_memory(&sent).expect("a PNG");
    assert_eq!((shown.width(), shown.height()), (1568, 500));
}
