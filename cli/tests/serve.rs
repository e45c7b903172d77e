//! `codeact serve` as an operator runs it: the real binary on a free port, its
//! real SQLite file, replayed models, and a real HTTP client.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use eventsource_stream::Eventsource;
use futures_util::StreamExt;
use reqwest::StatusCode;
use serde_json::{Value, json};

#[path = "support/codeact_process.rs"]
mod codeact_process;
// The real `codeact serve`, killed when dropped.
use codeact_process::CodeactProcess as Server;

const ALICE: &str = "alice-secret-token";
const BOB: &str = "bob-secret-token";
const ROOT: &str = "root-secret-token";

/// Writes a server config and the team files it offers into `dir`:
/// `calc` (two steps, 42), `slow` (a script that loops), `refund` (a call that
/// needs approval), `chat` (a conversation), `desk` (a two-agent team).
fn write_config(dir: &Path) {
    let write = |name: &str, text: &str| std::fs::write(dir.join(name), text).expect("fixture");
    let replay = |name: &str, replies: &[&str]| {
        write(name, &json!({ "replies": replies }).to_string());
    };
    write(
        "serve.toml",
        &format!(
            r#"
[server]
max_body_kib = 4
max_task_chars = 1000

[limits]
timeout_ms = 10000
max_operations = 100000000000

[[token]]
name = "alice"
token = "{ALICE}"

[[token]]
name = "bob"
token = "{BOB}"

[[token]]
name = "root"
token = "{ROOT}"
admin = true

[[agent]]
name = "calc"
team = "calc.toml"

[[agent]]
name = "slow"
team = "slow.toml"

[[agent]]
name = "refund"
team = "refund.toml"

[[agent]]
name = "chat"
team = "chat.toml"

[[agent]]
name = "desk"
team = "desk.toml"
"#
        ),
    );
    let single = |file: &str, name: &str, replay: &str, extra: &str| {
        write(
            file,
            &format!(
                "[[agent]]\nname = \"{name}\"\ndescription = \"{name} things\"\nmodel = \"replay:{replay}\"\n{extra}"
            ),
        );
    };
    single("calc.toml", "calc", "calc.json", "");
    replay(
        "calc.json",
        &[
            "Counting.\n```rhai\nlet x = 40;\nobservation(x)\n```",
            "```rhai\nfinal_result(x + 2)\n```",
        ],
    );
    single("slow.toml", "slow", "slow.json", "");
    replay("slow.json", &["```rhai\nlet n = 0;\nloop { n += 1; }\n```"]);
    single(
        "refund.toml",
        "refund",
        "refund.json",
        "tools = \"refund-tools.json\"\n",
    );
    write(
        "refund-tools.json",
        &json!([{
            "name": "refund",
            "description": "Refunds an amount.",
            "parameters": {"type": "object", "properties": {"amount": {"type": "number"}}},
            "command": ["python3", "-c", "import json,sys; a=json.load(sys.stdin); print(json.dumps({'refunded': a['amount']}))"],
            "approval": true
        }])
        .to_string(),
    );
    replay(
        "refund.json",
        &[
            "```rhai\nlet r = \"\";\ntry { r = call_tool(\"refund\", #{amount: 5}); } catch (e) { r = \"refused\"; }\nfinal_result(r)\n```",
        ],
    );
    single("chat.toml", "chat", "chat.json", "");
    replay(
        "chat.json",
        &[
            "```rhai\nlet total = 40;\nfinal_result(total)\n```",
            "```rhai\nfinal_result(total + 2)\n```",
        ],
    );
    write(
        "desk.toml",
        "entry = \"triage\"\n\n[[agent]]\nname = \"triage\"\ndescription = \"Sorts.\"\nmodel = \"replay:triage.json\"\ntargets = [\"billing\"]\n\n[[agent]]\nname = \"billing\"\ndescription = \"Bills.\"\nmodel = \"replay:billing.json\"\n",
    );
    replay(
        "triage.json",
        &["```rhai\ntransfer_to_agent(\"billing\")\n```"],
    );
    replay("billing.json", &["```rhai\nfinal_result(\"billed\")\n```"]);
}

/// A folder with the config, and the store file a server (and its successor) uses.
struct Setup {
    dir: tempfile::TempDir,
}

impl Setup {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("a temporary folder");
        write_config(dir.path());
        Self { dir }
    }

    fn store(&self) -> PathBuf {
        self.dir.path().join("runs.sqlite")
    }

    /// Adds `lines` to the config's `[server]` table.
    fn server_settings(&self, lines: &str) {
        let config = self.dir.path().join("serve.toml");
        let text = std::fs::read_to_string(&config).expect("the config");
        std::fs::write(
            &config,
            text.replace(
                "max_task_chars = 1000",
                &format!("max_task_chars = 1000\n{lines}"),
            ),
        )
        .expect("the config");
    }

    /// Starts the server on a free port and waits for its "listening" line.
    fn start(&self) -> Server {
        let mut command = Command::new(env!("CARGO_BIN_EXE_codeact"));
        command
            .args(["serve", "--listen", "127.0.0.1:0", "--store"])
            .arg(format!("sqlite:{}", self.store().display()))
            .arg("--config")
            .arg(self.dir.path().join("serve.toml"))
            .stderr(Stdio::inherit());
        Server::start_listening(command)
    }
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .expect("an HTTP client")
}

impl Server {
    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    async fn post(&self, token: &str, path: &str, body: Value) -> (StatusCode, Value) {
        let response = client()
            .post(self.url(path))
            .bearer_auth(token)
            .json(&body)
            .send()
            .await
            .expect("the server answers");
        let status = response.status();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    async fn get(&self, token: &str, path: &str) -> (StatusCode, Value) {
        let response = client()
            .get(self.url(path))
            .bearer_auth(token)
            .send()
            .await
            .expect("the server answers");
        let status = response.status();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    /// Creates a run and returns its id.
    async fn create(&self, token: &str, body: Value) -> String {
        let (status, run) = self.post(token, "/runs", body).await;
        assert_eq!(status, StatusCode::CREATED, "{run}");
        run["id"].as_str().expect("a run id").to_string()
    }

    /// The run's events from after `last_id` until `end`: (id, data) pairs, the
    /// `end` event's status last as ("end", status).
    async fn stream(&self, token: &str, id: &str, last_id: Option<&str>) -> Vec<(String, Value)> {
        let mut request = client()
            .get(self.url(&format!("/runs/{id}/events")))
            .bearer_auth(token);
        if let Some(last) = last_id {
            request = request.header("Last-Event-ID", last);
        }
        let response = request.send().await.expect("the stream opens");
        assert_eq!(response.status(), StatusCode::OK);
        let mut events = response.bytes_stream().eventsource();
        let mut seen = Vec::new();
        let read = async {
            while let Some(event) = events.next().await {
                let event = event.expect("a well-formed event");
                let data: Value = serde_json::from_str(&event.data).expect("JSON data");
                if event.event == "end" {
                    seen.push(("end".to_string(), data["status"].clone()));
                    return;
                }
                seen.push((event.id, data));
            }
        };
        tokio::time::timeout(Duration::from_secs(60), read)
            .await
            .expect("the stream ends within a minute");
        seen
    }

    /// Polls the run until `done` holds for it.
    async fn wait_for(&self, token: &str, id: &str, done: impl Fn(&Value) -> bool) -> Value {
        let started = Instant::now();
        loop {
            let (status, run) = self.get(token, &format!("/runs/{id}")).await;
            assert_eq!(status, StatusCode::OK, "{run}");
            if done(&run) {
                return run;
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "the run never got there: {run}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

fn kinds(events: &[(String, Value)]) -> Vec<String> {
    events
        .iter()
        .map(|(id, data)| {
            if id == "end" {
                "end".to_string()
            } else {
                data["event"].as_str().unwrap_or("?").to_string()
            }
        })
        .collect()
}

/// If this fails, a client cannot follow a run to its answer over HTTP.
#[tokio::test(flavor = "multi_thread")]
async fn a_created_run_streams_its_events_and_ends_with_the_final_result() {
    let setup = Setup::new();
    let server = setup.start();
    let id = server
        .create(ALICE, json!({"agent": "calc", "task": "What is 40 + 2?"}))
        .await;
    let events = server.stream(ALICE, &id, None).await;
    let kinds = kinds(&events);
    assert_eq!(
        kinds.first().map(String::as_str),
        Some("run_started"),
        "{kinds:?}"
    );
    assert!(kinds.contains(&"script_started".to_string()), "{kinds:?}");
    assert!(kinds.contains(&"observation".to_string()), "{kinds:?}");
    assert_eq!(events.last().map(|e| e.1.clone()), Some(json!("finished")));
    let finished = events
        .iter()
        .find(|(_, data)| data["event"] == "finished")
        .expect("a finished event");
    assert_eq!(
        finished.1["outcome"],
        json!({"outcome": "final_result", "value": 42})
    );
    assert_eq!(finished.1["agent"], "calc");
    let ids: Vec<i64> = events
        .iter()
        .filter(|(id, _)| id != "end")
        .map(|(id, _)| id.parse().expect("numbered events"))
        .collect();
    assert_eq!(ids, (1..=ids.len() as i64).collect::<Vec<_>>());

    let (status, run) = server.get(ALICE, &format!("/runs/{id}")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(run["status"], "finished");
    assert_eq!(run["tenant"], "alice");
    assert_eq!(run["outcome"]["value"], 42);
    assert_eq!(run["steps"], 2);
    assert!(run["usage"]["input_tokens"].is_u64(), "{run}");
    assert_eq!(run["final_output"]["content"], "42", "{run}");
}

/// If this fails, a client with many runs cannot page through them.
#[tokio::test(flavor = "multi_thread")]
async fn runs_are_listed_newest_first_in_pages() {
    let setup = Setup::new();
    let server = setup.start();
    let mut ids = Vec::new();
    for n in 0..3 {
        ids.push(
            server
                .create(ALICE, json!({"agent": "calc", "task": format!("task {n}")}))
                .await,
        );
    }
    let (status, page) = server.get(ALICE, "/runs?limit=2").await;
    assert_eq!(status, StatusCode::OK, "{page}");
    let listed: Vec<&str> = page["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .map(|r| r["id"].as_str().expect("id"))
        .collect();
    assert_eq!(listed, vec![ids[2].as_str(), ids[1].as_str()]);
    let next = page["next"].as_str().expect("a next page");
    let (_, rest) = server
        .get(ALICE, &format!("/runs?limit=2&after={next}"))
        .await;
    let listed: Vec<&str> = rest["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .map(|r| r["id"].as_str().expect("id"))
        .collect();
    assert_eq!(listed, vec![ids[0].as_str()]);
    assert_eq!(rest["next"], Value::Null);
    for bad in [
        "/runs?limit=0",
        "/runs?limit=101",
        "/runs?limit=x",
        "/runs?after=nope",
    ] {
        let (status, body) = server.get(ALICE, bad).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
        assert!(body["error"].is_string(), "{bad}: {body}");
    }
}

/// If this fails, anyone who can reach the port can start runs.
#[tokio::test(flavor = "multi_thread")]
async fn requests_without_a_valid_bearer_token_are_refused() {
    let setup = Setup::new();
    let server = setup.start();
    let http = client();
    let attempts = [
        http.get(server.url("/runs")),
        http.get(server.url("/runs")).bearer_auth("wrong-token-123"),
        http.get(server.url("/runs"))
            .basic_auth("alice", Some(ALICE)),
        http.get(server.url(&format!("/runs?token={ALICE}"))),
        http.get(server.url(&format!("/runs?access_token={ALICE}"))),
        http.get(server.url("/runs"))
            .header("Authorization", format!("Bearer {ALICE}x")),
        http.post(server.url("/runs"))
            .json(&json!({"agent": "calc", "task": "hi"})),
    ];
    for attempt in attempts {
        let response = attempt.send().await.expect("the server answers");
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
        let body: Value = response.json().await.expect("a JSON error");
        assert!(body["error"].is_string(), "{body}");
    }
    let (status, body) = server.get("", "/healthz").await;
    assert_eq!((status, body), (StatusCode::OK, json!({"ok": true})));
    let (status, body) = server.get("", "/readyz").await;
    assert_eq!((status, body), (StatusCode::OK, json!({"ready": true})));
    let (status, _) = server.get(BOB, "/runs").await;
    assert_eq!(status, StatusCode::OK);
}

/// If this fails, one tenant reads or stops another's runs.
#[tokio::test(flavor = "multi_thread")]
async fn another_tenants_run_is_not_found_but_an_admin_sees_it() {
    let setup = Setup::new();
    let server = setup.start();
    let id = server
        .create(ALICE, json!({"agent": "calc", "task": "alice's task"}))
        .await;
    server
        .wait_for(ALICE, &id, |run| run["status"] == "finished")
        .await;
    let missing = format!("run_{}", "0".repeat(32));
    let (status, nothing) = server.get(BOB, &format!("/runs/{missing}")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    for path in [format!("/runs/{id}"), format!("/runs/{id}/events")] {
        let (status, body) = server.get(BOB, &path).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}");
        assert_eq!(body, nothing, "another's run looks like no run");
    }
    let (status, _) = server
        .post(BOB, &format!("/runs/{id}/cancel"), json!({}))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (_, bobs) = server.get(BOB, "/runs").await;
    assert_eq!(bobs["runs"], json!([]));
    let (status, run) = server.get(ROOT, &format!("/runs/{id}")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(run["tenant"], "alice");
    let (_, all) = server.get(ROOT, "/runs").await;
    assert_eq!(all["runs"][0]["id"], json!(id));
    let events = server.stream(ROOT, &id, None).await;
    assert_eq!(events.last().map(|e| e.1.clone()), Some(json!("finished")));
}

/// If this fails, a client can make the server hold any amount of text.
#[tokio::test(flavor = "multi_thread")]
async fn oversized_bodies_and_tasks_are_refused_with_json_errors() {
    let setup = Setup::new();
    let server = setup.start();
    let (status, body) = server
        .post(
            ALICE,
            "/runs",
            json!({"agent": "calc", "task": "x".repeat(5000)}),
        )
        .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
    assert!(
        body["error"]
            .as_str()
            .expect("an error")
            .contains("4096 bytes"),
        "{body}"
    );
    // Chunked, so no Content-Length tells the size ahead.
    let chunks =
        futures_util::stream::iter((0..20).map(|_| Ok::<_, std::io::Error>(vec![b' '; 1000])));
    let response = client()
        .post(server.url("/runs"))
        .bearer_auth(ALICE)
        .body(reqwest::Body::wrap_stream(chunks))
        .send()
        .await
        .expect("the server answers");
    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
    let (status, body) = server
        .post(
            ALICE,
            "/runs",
            json!({"agent": "calc", "task": "é".repeat(1001)}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(
        body["error"]
            .as_str()
            .expect("an error")
            .contains("at most 1000"),
        "{body}"
    );
    let (status, body) = server
        .post(ALICE, "/runs", json!({"agent": "calc", "task": "  "}))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let response = client()
        .post(server.url("/runs"))
        .bearer_auth(ALICE)
        .body("{not json")
        .send()
        .await
        .expect("the server answers");
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let body: Value = response.json().await.expect("a JSON error");
    assert!(body["error"].is_string());
}

/// If this fails, a client can widen what the operator's config grants.
#[tokio::test(flavor = "multi_thread")]
async fn a_client_cannot_pass_limits_tools_commands_or_a_validator() {
    let setup = Setup::new();
    let server = setup.start();
    let attempts = [
        (
            json!({"agent": "calc", "task": "t", "limits": {"timeout_ms": 999999}}),
            "limits",
        ),
        (
            json!({"agent": "calc", "task": "t", "tools": "/etc/tools.json"}),
            "tools",
        ),
        (
            json!({"agent": "calc", "task": "t", "model": "openai:gpt"}),
            "model",
        ),
        (
            json!({"agent": "calc", "task": "t", "runtime": "wasm:/tmp/x.wasm"}),
            "runtime",
        ),
        (
            json!({"agent": "calc", "task": "t", "mounts": ["/:/host:rw"]}),
            "mounts",
        ),
        (
            json!({"agent": "calc", "task": "t", "output": {"validator": "/tmp/v.rhai"}}),
            "validator",
        ),
        (json!({"agent": "/bin/sh", "task": "t"}), "no agent"),
        (
            json!({"agent": "calc", "task": "t", "output": {"schema": {"type": 7}}}),
            "output",
        ),
    ];
    for (body, named) in attempts {
        let (status, answer) = server.post(ALICE, "/runs", body.clone()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {answer}");
        let error = answer["error"].as_str().expect("an error");
        assert!(error.contains(named), "{body}: {error}");
    }
    let (_, runs) = server.get(ALICE, "/runs").await;
    assert_eq!(runs["runs"], json!([]), "nothing was started");
    let id = server
        .create(
            ALICE,
            json!({"agent": "calc", "task": "t", "output": {"format": "json", "schema": {"type": "integer"}}}),
        )
        .await;
    let run = server
        .wait_for(ALICE, &id, |run| run["status"] != "running")
        .await;
    assert_eq!(run["outcome"]["value"], 42, "{run}");
}

/// If this fails, a viewer that lost its connection sees events twice or misses some.
#[tokio::test(flavor = "multi_thread")]
async fn reconnecting_with_last_event_id_sends_only_later_events() {
    let setup = Setup::new();
    let server = setup.start();
    let id = server
        .create(ALICE, json!({"agent": "calc", "task": "t"}))
        .await;
    let all = server.stream(ALICE, &id, None).await;
    let numbered = all.len() - 1;
    assert!(numbered > 4, "{all:?}");
    let later = server.stream(ALICE, &id, Some("3")).await;
    assert_eq!(later.len(), all.len() - 3);
    assert_eq!(later[0].0, "4");
    assert_eq!(later, all[3..].to_vec());
    let last = all[numbered - 1].0.clone();
    let none = server.stream(ALICE, &id, Some(&last)).await;
    assert_eq!(none, vec![("end".to_string(), json!("finished"))]);
    for bad in ["x", "-1", "1e3"] {
        let response = client()
            .get(server.url(&format!("/runs/{id}/events")))
            .bearer_auth(ALICE)
            .header("Last-Event-ID", bad)
            .send()
            .await
            .expect("the server answers");
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{bad}");
    }
}

/// If this fails, a runaway script cannot be stopped from the API.
#[tokio::test(flavor = "multi_thread")]
async fn cancelling_a_run_whose_script_runs_long_stops_it() {
    let setup = Setup::new();
    let server = setup.start();
    let id = server
        .create(ALICE, json!({"agent": "slow", "task": "spin"}))
        .await;
    let started = Instant::now();
    while !server_has_event(&server, &id, "script_started").await {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the script never started"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let asked = Instant::now();
    let (status, body) = server
        .post(ALICE, &format!("/runs/{id}/cancel"), json!({}))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let run = server
        .wait_for(ALICE, &id, |run| run["status"] != "running")
        .await;
    assert_eq!(run["status"], "cancelled", "{run}");
    assert_eq!(run["outcome"], json!({"outcome": "cancelled"}));
    assert!(
        asked.elapsed() < Duration::from_secs(5),
        "the cancel took {:?}; the script's own limit is 10 s",
        asked.elapsed()
    );
    let (status, body) = server
        .post(ALICE, &format!("/runs/{id}/cancel"), json!({}))
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
}

/// Whether the run's journal so far holds an event of `kind`: what the stream
/// sends within half a second (the stream of a running run stays open).
async fn server_has_event(server: &Server, id: &str, kind: &str) -> bool {
    let response = client()
        .get(server.url(&format!("/runs/{id}/events")))
        .bearer_auth(ALICE)
        .send()
        .await
        .expect("stream");
    let mut events = response.bytes_stream().eventsource();
    let found = tokio::time::timeout(Duration::from_millis(500), async {
        while let Some(Ok(event)) = events.next().await {
            if event.data.contains(&format!("\"event\":\"{kind}\"")) {
                return true;
            }
        }
        false
    })
    .await;
    found.unwrap_or(false)
}

/// If this fails, a restart loses the runs clients started.
#[tokio::test(flavor = "multi_thread")]
async fn a_restarted_server_keeps_its_runs_and_their_events() {
    let setup = Setup::new();
    let server = setup.start();
    let id = server
        .create(ALICE, json!({"agent": "calc", "task": "keep me"}))
        .await;
    let before = server.stream(ALICE, &id, None).await;
    drop(server);
    let server = setup.start();
    let (status, run) = server.get(ALICE, &format!("/runs/{id}")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(run["status"], "finished");
    assert_eq!(run["task"], "keep me");
    let (_, page) = server.get(ALICE, "/runs").await;
    assert_eq!(page["runs"][0]["id"], json!(id));
    let after = server.stream(ALICE, &id, None).await;
    assert_eq!(after, before);
}

/// If this fails, a path segment reaches the store unchecked.
#[tokio::test(flavor = "multi_thread")]
async fn path_ids_that_are_not_run_ids_are_not_found() {
    let setup = Setup::new();
    let server = setup.start();
    let long = "a".repeat(5000);
    for id in [
        "..%2F..%2Fetc%2Fpasswd",
        "run_ZZZZ",
        "run_%27%20OR%201%3D1%20--",
        "%00",
        long.as_str(),
        "RUN_00000000000000000000000000000000",
        "run_000000000000000000000000000000000",
    ] {
        for path in [format!("/runs/{id}"), format!("/runs/{id}/events")] {
            let (status, body) = server.get(ALICE, &path).await;
            assert_eq!(status, StatusCode::NOT_FOUND, "{path}: {body}");
            assert_eq!(body, json!({"error": "no such run"}), "{path}");
        }
    }
    let (status, body) = server.get(ALICE, "/nothing/here").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    let response = client()
        .delete(server.url("/runs"))
        .bearer_auth(ALICE)
        .send()
        .await
        .expect("the server answers");
    assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED);
    let body: Value = response.json().await.expect("a JSON error");
    assert!(body["error"].is_string());
}

/// If this fails, one request with huge headers can take the server down.
#[tokio::test(flavor = "multi_thread")]
async fn huge_headers_are_refused_and_the_server_stays_up() {
    let setup = Setup::new();
    let server = setup.start();
    let huge = "x".repeat(1 << 20);
    let answered = client()
        .get(server.url("/runs"))
        .bearer_auth(ALICE)
        .header("X-Filler", huge.clone())
        .send()
        .await;
    if let Ok(response) = answered {
        assert!(
            response.status().is_client_error(),
            "a 1 MiB header was taken: {}",
            response.status()
        );
    }
    let answered = client()
        .get(server.url("/runs"))
        .header("Authorization", format!("Bearer {huge}"))
        .send()
        .await;
    if let Ok(response) = answered {
        assert!(response.status().is_client_error());
    }
    let (status, _) = server.get(ALICE, "/runs").await;
    assert_eq!(status, StatusCode::OK, "the server is still up");
}

/// If this fails, a call that needs approval cannot be approved over HTTP.
#[tokio::test(flavor = "multi_thread")]
async fn a_run_waiting_for_approval_goes_on_once_approved() {
    let setup = Setup::new();
    let server = setup.start();
    let id = server
        .create(ALICE, json!({"agent": "refund", "task": "Refund 5."}))
        .await;
    let first = server.stream(ALICE, &id, None).await;
    assert_eq!(
        first.last().map(|e| e.1.clone()),
        Some(json!("awaiting_approval")),
        "{first:?}"
    );
    let (_, run) = server.get(ALICE, &format!("/runs/{id}")).await;
    let call = run["awaiting"]["call"]
        .as_str()
        .expect("the awaited call")
        .to_string();
    assert_eq!(run["awaiting"]["tool"], "refund");
    assert_eq!(run["awaiting"]["args"], json!({"amount": 5}));

    let (status, _) = server
        .post(
            ALICE,
            &format!("/runs/{id}/approvals/s9c9"),
            json!({"approve": true}),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = server
        .post(
            BOB,
            &format!("/runs/{id}/approvals/{call}"),
            json!({"approve": true}),
        )
        .await;
    assert_eq!(
        status,
        StatusCode::NOT_FOUND,
        "bob cannot approve alice's call"
    );
    let (status, body) = server
        .post(
            ALICE,
            &format!("/runs/{id}/approvals/{call}"),
            json!({"approve": true, "limits": {}}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (status, body) = server
        .post(
            ALICE,
            &format!("/runs/{id}/approvals/{call}"),
            json!({"approve": true}),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let last_id = first[first.len() - 2].0.clone();
    let rest = server.stream(ALICE, &id, Some(&last_id)).await;
    let kinds = kinds(&rest);
    assert!(kinds.contains(&"resumed".to_string()), "{kinds:?}");
    assert!(kinds.contains(&"approval_decided".to_string()), "{kinds:?}");
    assert_eq!(rest.last().map(|e| e.1.clone()), Some(json!("finished")));
    let (_, run) = server.get(ALICE, &format!("/runs/{id}")).await;
    assert_eq!(run["outcome"]["value"], json!({"refunded": 5}), "{run}");
    let (status, _) = server
        .post(
            ALICE,
            &format!("/runs/{id}/approvals/{call}"),
            json!({"approve": true}),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "a call is decided once");
}

/// If this fails, a denied call does not reach the script as a catchable error.
#[tokio::test(flavor = "multi_thread")]
async fn a_denied_call_is_refused_inside_the_script_which_goes_on() {
    let setup = Setup::new();
    let server = setup.start();
    let id = server
        .create(ALICE, json!({"agent": "refund", "task": "Refund 5."}))
        .await;
    let run = server
        .wait_for(ALICE, &id, |run| run["status"] == "awaiting_approval")
        .await;
    let call = run["awaiting"]["call"].as_str().expect("the awaited call");
    let (status, _) = server
        .post(
            ALICE,
            &format!("/runs/{id}/approvals/{call}"),
            json!({"approve": false, "reason": "not today"}),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let run = server
        .wait_for(ALICE, &id, |run| run["status"] == "finished")
        .await;
    assert_eq!(run["outcome"]["value"], "refused", "{run}");
    let events = server.stream(ALICE, &id, None).await;
    let decided = events
        .iter()
        .find(|(_, data)| data["event"] == "approval_decided")
        .expect("the decision is journalled");
    assert_eq!(decided.1["approved"], false);
    assert_eq!(decided.1["reason"], "not today");
    assert_eq!(decided.1["decided_by"], "alice (codeact serve)");
}

/// If this fails, a conversation cannot go on over HTTP.
#[tokio::test(flavor = "multi_thread")]
async fn a_conversation_takes_its_next_message() {
    let setup = Setup::new();
    let server = setup.start();
    let id = server
        .create(
            ALICE,
            json!({"agent": "chat", "task": "Start at 40.", "chat": true}),
        )
        .await;
    let run = server
        .wait_for(ALICE, &id, |run| run["status"] != "running")
        .await;
    assert_eq!(run["status"], "awaiting_message", "{run}");
    assert_eq!(run["outcome"]["value"], 40);
    let (status, body) = server
        .post(
            ALICE,
            &format!("/runs/{id}/messages"),
            json!({"message": "Add 2."}),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let run = server
        .wait_for(ALICE, &id, |run| run["status"] != "running")
        .await;
    assert_eq!(run["outcome"]["value"], 42, "{run}");
    let events = server.stream(ALICE, &id, None).await;
    let turns = events
        .iter()
        .filter(|(_, d)| d["event"] == "turn_started")
        .count();
    assert_eq!(turns, 2);

    let single = server
        .create(ALICE, json!({"agent": "calc", "task": "t"}))
        .await;
    server
        .wait_for(ALICE, &single, |run| run["status"] == "finished")
        .await;
    let (status, body) = server
        .post(
            ALICE,
            &format!("/runs/{single}/messages"),
            json!({"message": "more"}),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
}

/// If this fails, a team configured on the server cannot be run over HTTP.
#[tokio::test(flavor = "multi_thread")]
async fn a_team_run_ends_with_the_last_agents_result() {
    let setup = Setup::new();
    let server = setup.start();
    let (status, agents) = server.get(BOB, "/agents").await;
    assert_eq!(status, StatusCode::OK);
    let names: Vec<&str> = agents["agents"]
        .as_array()
        .expect("agents")
        .iter()
        .map(|a| a["name"].as_str().expect("name"))
        .collect();
    assert_eq!(names, vec!["calc", "chat", "desk", "refund", "slow"]);
    let id = server
        .create(BOB, json!({"agent": "desk", "task": "Bill me."}))
        .await;
    let events = server.stream(BOB, &id, None).await;
    assert!(
        events.iter().any(|(_, d)| d["event"] == "handover"),
        "{events:?}"
    );
    let (_, run) = server.get(BOB, &format!("/runs/{id}")).await;
    assert_eq!(run["status"], "finished");
    assert_eq!(
        run["outcome"],
        json!({"team_outcome": "finished", "agent": "billing", "outcome": {"outcome": "final_result", "value": "billed"}})
    );
}

/// If this fails, a server with a broken config listens anyway, or says nothing useful.
#[test]
fn a_broken_config_is_refused_before_the_server_listens() {
    let setup = Setup::new();
    let cases = [
        (
            "[[agent]]\nname = \"calc\"\nteam = \"calc.toml\"\n",
            "declares no [[token]]",
        ),
        (
            "[[token]]\nname = \"a\"\ntoken = \"short\"\n[[agent]]\nname = \"calc\"\nteam = \"calc.toml\"\n",
            "shorter than 8",
        ),
        (
            "[[token]]\nname = \"a\"\ntoken_env = \"CODEACT_TEST_NO_SUCH_VARIABLE\"\n[[agent]]\nname = \"calc\"\nteam = \"calc.toml\"\n",
            "CODEACT_TEST_NO_SUCH_VARIABLE is not set",
        ),
        (
            "[[token]]\nname = \"a\"\ntoken = \"long-enough\"\n[[agent]]\nname = \"calc\"\nteam = \"missing.toml\"\n",
            "missing.toml",
        ),
        (
            "[[token]]\nname = \"a\"\ntoken = \"long-enough\"\n[[agent]]\nname = \"calc\"\nteam = \"calc.toml\"\nlimits = 3\n",
            "unknown field",
        ),
    ];
    for (config, says) in cases {
        let path = setup.dir.path().join("broken.toml");
        std::fs::write(&path, config).expect("config");
        let out = Command::new(env!("CARGO_BIN_EXE_codeact"))
            .args(["serve", "--listen", "127.0.0.1:0", "--store"])
            .arg(format!("sqlite:{}", setup.store().display()))
            .arg("--config")
            .arg(&path)
            .output()
            .expect("codeact serve runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{config}: {stderr}");
        assert!(stderr.contains(says), "{config}: {stderr}");
        assert!(out.stdout.is_empty(), "it never listened");
    }
}

/// If this fails, the web page is missing, or could turn text a model wrote into markup.
#[tokio::test(flavor = "multi_thread")]
async fn the_page_is_served_under_a_strict_policy_and_writes_text_only() {
    let setup = Setup::new();
    let server = setup.start();
    let page = client()
        .get(server.url("/"))
        .send()
        .await
        .expect("the page");
    assert_eq!(page.status(), StatusCode::OK);
    let policy = page
        .headers()
        .get("content-security-policy")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    assert!(policy.contains("script-src 'self'"), "{policy}");
    assert!(!policy.contains("unsafe-inline"), "{policy}");
    let html = page.text().await.expect("HTML");
    assert!(html.contains("<script src=\"/page/app.js\"></script>"));
    assert!(!html.contains("<script>"), "no inline script");
    let script = client()
        .get(server.url("/page/app.js"))
        .send()
        .await
        .expect("the script")
        .text()
        .await
        .expect("text");
    for sink in [
        "innerHTML",
        "outerHTML",
        "insertAdjacentHTML",
        "document.write",
        "eval(",
    ] {
        assert!(!script.contains(sink), "app.js uses {sink}");
    }
    assert!(script.contains("textContent"));
    let style = client()
        .get(server.url("/page/style.css"))
        .send()
        .await
        .expect("css");
    assert_eq!(style.status(), StatusCode::OK);
}

/// If this fails, a restart strands runs that were waiting on a person: the
/// journal alone must carry an approval or a conversation across it.
#[tokio::test(flavor = "multi_thread")]
async fn waiting_runs_go_on_after_a_restart_from_their_journal() {
    let setup = Setup::new();
    let server = setup.start();
    let refund = server
        .create(ALICE, json!({"agent": "refund", "task": "Refund 5."}))
        .await;
    let chat = server
        .create(
            ALICE,
            json!({"agent": "chat", "task": "Start at 40.", "chat": true}),
        )
        .await;
    let waiting = server
        .wait_for(ALICE, &refund, |run| run["status"] == "awaiting_approval")
        .await;
    server
        .wait_for(ALICE, &chat, |run| run["status"] == "awaiting_message")
        .await;
    drop(server);

    let server = setup.start();
    let call = waiting["awaiting"]["call"]
        .as_str()
        .expect("the awaited call");
    let (status, _) = server
        .post(
            ALICE,
            &format!("/runs/{refund}/approvals/{call}"),
            json!({"approve": true}),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let (status, _) = server
        .post(
            ALICE,
            &format!("/runs/{chat}/messages"),
            json!({"message": "Add 2."}),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let run = server
        .wait_for(ALICE, &refund, |run| run["status"] == "finished")
        .await;
    assert_eq!(run["outcome"]["value"], json!({"refunded": 5}), "{run}");
    let run = server
        .wait_for(ALICE, &chat, |run| {
            run["status"] == "awaiting_message" && run["steps"] == 2
        })
        .await;
    assert_eq!(run["outcome"]["value"], 42, "{run}");
}

/// If this fails, a stopped server hangs on an open event stream, or its
/// successor shows a run as running that nothing works on.
#[tokio::test(flavor = "multi_thread")]
async fn a_stopped_server_exits_soon_and_its_successor_marks_unfinished_runs_interrupted() {
    let setup = Setup::new();
    let mut server = setup.start();
    let id = server
        .create(ALICE, json!({"agent": "slow", "task": "spin"}))
        .await;
    let started = Instant::now();
    while !server_has_event(&server, &id, "script_started").await {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the script never started"
        );
    }
    let viewer = client()
        .get(server.url(&format!("/runs/{id}/events")))
        .bearer_auth(ALICE)
        .send()
        .await
        .expect("a stream stays open");
    let stopping = Instant::now();
    assert!(server.terminate(), "kill runs");
    let exit = tokio::task::block_in_place(|| server.child.wait()).expect("the server exits");
    assert!(exit.success(), "{exit}");
    assert!(
        stopping.elapsed() < Duration::from_secs(9),
        "stopping took {:?} (the grace is 5 s; the script's limit 10 s)",
        stopping.elapsed()
    );
    drop(viewer);
    let server = setup.start();
    let (_, run) = server.get(ALICE, &format!("/runs/{id}")).await;
    assert_eq!(run["status"], "interrupted", "{run}");
    assert!(
        run["error"].as_str().expect("why").contains("stopped"),
        "{run}"
    );
}

/// What the page test needs besides the server: Chromium, node and playwright-core
/// (`cli/tests/setup/fetch-browser-driver.sh`); why the test cannot run when one is missing.
fn browser_parts() -> Result<(PathBuf, PathBuf), String> {
    let chromium = std::env::var_os("CODEACT_CHROMIUM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"));
    if !chromium.exists() {
        return Err(format!(
            "no Chromium at {} (apt-get install chromium, or set CODEACT_CHROMIUM)",
            chromium.display()
        ));
    }
    let home = std::env::var_os("HOME").ok_or("HOME is not set")?;
    let modules = PathBuf::from(home).join(".cache/codeact-browser/node_modules");
    if !modules.join("playwright-core").exists() {
        return Err(
            "playwright-core is missing: run cli/tests/setup/fetch-browser-driver.sh".into(),
        );
    }
    let node = Command::new("node").arg("--version").output();
    if !node.is_ok_and(|out| out.status.success()) {
        return Err("node is not installed".into());
    }
    Ok((chromium, modules))
}

/// If this fails, the page does not show a run's steps, or shows markup that a
/// model, a script or a user wrote as markup.
#[tokio::test(flavor = "multi_thread")]
async fn the_page_shows_a_runs_steps_in_a_real_browser_and_markup_only_as_text() {
    let (chromium, modules) = match browser_parts() {
        Ok(parts) => parts,
        Err(why) => {
            eprintln!("SKIPPED the_page_shows_a_runs_steps_in_a_real_browser: {why}");
            return;
        }
    };
    let setup = Setup::new();
    let dir = setup.dir.path();
    let mut config = std::fs::read_to_string(dir.join("serve.toml")).expect("config");
    config.push_str("\n[[agent]]\nname = \"page\"\nteam = \"page.toml\"\n");
    std::fs::write(dir.join("serve.toml"), config).expect("config");
    std::fs::write(
        dir.join("page.toml"),
        "[[agent]]\nname = \"page\"\ndescription = \"Shows markup.\"\nmodel = \"replay:page.json\"\n",
    )
    .expect("team file");
    std::fs::write(
        dir.join("page.json"),
        json!({"replies": [
            "<b>Thinking</b> it over.\n```rhai\nprint(\"<img src=x onerror=alert(1)>\");\nlet x = 40;\nobservation(x)\n```",
            "```rhai\nfinal_result(x + 2)\n```",
        ]})
        .to_string(),
    )
    .expect("replies");
    let server = setup.start();
    let screenshot = dir.join("page.png");
    let output = tokio::task::spawn_blocking({
        let url = server.url("/");
        let screenshot = screenshot.clone();
        move || {
            Command::new("node")
                .arg(concat!(
                    env!("CARGO_MANIFEST_DIR"),
                    "/tests/browser/serve_page.mjs"
                ))
                .args([url.as_str(), ALICE, "page", "Add <b>2</b> to 40."])
                .arg(&screenshot)
                .env("PLAYWRIGHT_MODULES", &modules)
                .env("CODEACT_CHROMIUM", &chromium)
                .output()
        }
    })
    .await
    .expect("joined")
    .expect("node runs");
    assert!(
        output.status.success(),
        "the browser script failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let shown: Value = serde_json::from_slice(
        output
            .stdout
            .split(|b| *b == b'\n')
            .find(|line| line.starts_with(b"{"))
            .expect("a JSON line"),
    )
    .expect("JSON");
    let steps: Vec<&str> = shown["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let all = steps.join("\n");
    for expected in [
        "<b>Thinking</b> it over.",
        "let x = 40;",
        "<img src=x onerror=alert(1)>",
        "observation",
        "final output",
        "42",
        "finished",
    ] {
        assert!(
            all.contains(expected),
            "{expected:?} not shown in {steps:#?}"
        );
    }
    assert_eq!(
        shown["injected"],
        json!(0),
        "markup became elements: {shown}"
    );
    assert_eq!(shown["problems"], json!([]), "the page threw: {shown}");
    assert!(
        shown["runs"].to_string().contains("<b>2</b>"),
        "the task is listed as text: {shown}"
    );
    assert!(screenshot.exists(), "no screenshot");
    if let Some(keep) = std::env::var_os("CODEACT_KEEP_SCREENSHOT") {
        std::fs::copy(&screenshot, keep).expect("screenshot kept");
    }
}

/// If this fails, one token can start runs without bound on a single server, or
/// is refused without being told when to try again.
#[tokio::test(flavor = "multi_thread")]
async fn a_token_past_its_running_runs_cap_is_refused_with_429_until_one_ends() {
    let setup = Setup::new();
    setup.server_settings("max_queued = 2\nmax_queued_per_token = 1");
    let server = setup.start();
    let slow = server
        .create(ALICE, json!({"agent": "slow", "task": "Loop."}))
        .await;
    let refused = client()
        .post(server.url("/runs"))
        .bearer_auth(ALICE)
        .json(&json!({"agent": "calc", "task": "What is 40 + 2?"}))
        .send()
        .await
        .expect("the server answers");
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        refused
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok()),
        Some("5")
    );
    let body: Value = refused.json().await.expect("a JSON error");
    assert!(
        body["error"]
            .as_str()
            .unwrap_or("")
            .contains("of your token"),
        "{body}"
    );
    // Another token still has room, up to the server's cap.
    let bob_slow = server
        .create(BOB, json!({"agent": "slow", "task": "Loop."}))
        .await;
    let (status, body) = server
        .post(
            ROOT,
            "/runs",
            json!({"agent": "calc", "task": "What is 40 + 2?"}),
        )
        .await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert!(
        body["error"]
            .as_str()
            .unwrap_or("")
            .contains("on this server"),
        "{body}"
    );
    for (token, id) in [(ALICE, &slow), (BOB, &bob_slow)] {
        let (status, _) = server
            .post(token, &format!("/runs/{id}/cancel"), json!({}))
            .await;
        assert_eq!(status, StatusCode::ACCEPTED);
        server
            .wait_for(token, id, |run| run["status"] == "cancelled")
            .await;
    }
    server
        .create(ALICE, json!({"agent": "calc", "task": "What is 40 + 2?"}))
        .await;
}

/// A client that sends `head` and then nothing more, keeping its connection open.
async fn half_request(server: &Server, head: &str) -> tokio::net::TcpStream {
    use tokio::io::AsyncWriteExt;
    let address = server.base.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(address)
        .await
        .expect("the server takes connections");
    stream
        .write_all(head.as_bytes())
        .await
        .expect("half a request sent");
    stream
}

/// Reads what the server sends until it closes the connection (a reset counts as
/// closing); `None` if it is still open after `limit`.
async fn read_until_closed(
    stream: &mut (impl tokio::io::AsyncRead + Unpin),
    limit: Duration,
) -> Option<String> {
    use tokio::io::AsyncReadExt;
    let mut seen = Vec::new();
    let read = async {
        let mut buffer = [0u8; 4096];
        while let Ok(n @ 1..) = stream.read(&mut buffer).await {
            seen.extend_from_slice(&buffer[..n]);
        }
    };
    tokio::time::timeout(limit, read).await.ok()?;
    Some(String::from_utf8_lossy(&seen).into_owned())
}

/// If this fails, clients that send half a request, or go quiet on a keep-alive
/// connection, each hold a connection (a file descriptor) for as long as they
/// like, before any token is checked: enough of them and real requests time out.
#[tokio::test(flavor = "multi_thread")]
async fn half_sent_requests_and_quiet_connections_are_closed_after_the_header_timeout() {
    let setup = Setup::new();
    setup.server_settings("header_timeout_ms = 1000");
    let server = setup.start();
    let mut slow = Vec::new();
    for _ in 0..20 {
        slow.push(half_request(&server, "POST /runs HTTP/1.1\r\nHost: x\r\n").await);
    }
    // One whole request, answered, then nothing on the kept-alive connection.
    let mut quiet = half_request(&server, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").await;
    let (status, _) = server.get(ALICE, "/runs").await;
    assert_eq!(status, StatusCode::OK, "a real client is served meanwhile");
    for stream in &mut slow {
        let sent = read_until_closed(stream, Duration::from_secs(15))
            .await
            .expect("a half-sent request is closed after the header timeout (1 s)");
        assert_eq!(sent, "", "nothing to answer to half a request");
    }
    let sent = read_until_closed(&mut quiet, Duration::from_secs(15))
        .await
        .expect("a quiet keep-alive connection is closed after the header timeout");
    assert!(sent.starts_with("HTTP/1.1 200"), "{sent}");
}

/// If this fails, a client trickling a body a byte at a time holds its
/// connection, and the handler reading it, for as long as it likes.
#[tokio::test(flavor = "multi_thread")]
async fn a_body_trickled_past_the_body_timeout_is_answered_408_and_closed() {
    use tokio::io::AsyncWriteExt;
    let setup = Setup::new();
    setup.server_settings("body_timeout_ms = 1000");
    let server = setup.start();
    let head = format!(
        "POST /runs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {ALICE}\r\n\
         Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{{"
    );
    let (mut reader, mut writer) = half_request(&server, &head).await.into_split();
    // A byte every 100 ms: steady, but the whole body would take 100 s.
    let trickle = tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_millis(100)).await;
            if writer.write_all(b" ").await.is_err() {
                break;
            }
        }
    });
    let sent = read_until_closed(&mut reader, Duration::from_secs(15))
        .await
        .expect("the connection is closed after the body timeout (1 s)");
    trickle.abort();
    assert!(sent.starts_with("HTTP/1.1 408"), "{sent}");
    assert!(sent.contains("did not arrive within 1000 ms"), "{sent}");
    let (status, _) = server.get(ALICE, "/runs").await;
    assert_eq!(status, StatusCode::OK);
}

/// If this fails, connections past the cap each take a file descriptor (the
/// server can be made to run out of them), or a real client is never served
/// while slow ones keep coming.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread")]
async fn connections_past_the_cap_wait_unaccepted_and_a_real_request_still_gets_through() {
    let setup = Setup::new();
    setup.server_settings("max_connections = 4\nheader_timeout_ms = 1000");
    let server = setup.start();
    let descriptors = || {
        std::fs::read_dir(format!("/proc/{}/fd", server.child.id()))
            .expect("the server's descriptors")
            .count()
    };
    let before = descriptors();
    let mut slow = Vec::new();
    for _ in 0..16 {
        slow.push(half_request(&server, "POST /runs HTTP/1.1\r\nHost: x\r\n").await);
    }
    // Whatever the server accepts of the 16 it holds: at most 4, plus the odd
    // file of the store.
    let mut most = 0;
    for _ in 0..10 {
        most = most.max(descriptors());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        most <= before + 4 + 2,
        "{most} descriptors open with 16 slow clients, {before} before"
    );
    // Queued behind the slow ones, each let go after 1 s, a real request is served.
    let (status, _) = server.get(ALICE, "/runs").await;
    assert_eq!(status, StatusCode::OK);
    for stream in &mut slow {
        read_until_closed(stream, Duration::from_secs(30))
            .await
            .expect("every slow client is closed in its turn");
    }
    let (status, _) = server.get(ALICE, "/runs").await;
    assert_eq!(status, StatusCode::OK, "the server is still up");
}
