//! `codeact serve` exporting traces and metrics over OTLP/HTTP: the real binary,
//! a replayed model and a real command tool, and an OTLP/HTTP receiver in the
//! test that decodes what arrives as the protobuf messages of the OpenTelemetry
//! protocol (`opentelemetry-proto`), as a collector would.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

#[path = "support/codeact_process.rs"]
mod codeact_process;
#[path = "support/pg_cluster.rs"]
mod pg_cluster;
// The real `codeact serve` (or `worker`), killed when dropped.
use codeact_process::CodeactProcess as Server;

use axum::body::Bytes;
use axum::routing::post;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, Span};
use prost::Message;
use serde_json::{Value, json};

const TOKEN: &str = "otel-test-token";
/// What the span attributes of code and outputs are cut to (`spans::ATTRIBUTE_CAP`).
const CAP: usize = 1024;

/// An OTLP/HTTP receiver: keeps the bodies posted to `/v1/traces` and
/// `/v1/metrics`.
struct Receiver {
    base: String,
    traces: Arc<Mutex<Vec<Bytes>>>,
    metrics: Arc<Mutex<Vec<Bytes>>>,
}

impl Receiver {
    async fn start() -> Self {
        let traces = Arc::new(Mutex::new(Vec::new()));
        let metrics = Arc::new(Mutex::new(Vec::new()));
        let keep = |into: Arc<Mutex<Vec<Bytes>>>| {
            post(move |body: Bytes| {
                let into = into.clone();
                async move {
                    into.lock().expect("not poisoned").push(body);
                    // An empty Export…ServiceResponse: everything accepted.
                    (
                        [("content-type", "application/x-protobuf")],
                        Vec::<u8>::new(),
                    )
                }
            })
        };
        let app = axum::Router::new()
            .route("/v1/traces", keep(traces.clone()))
            .route("/v1/metrics", keep(metrics.clone()));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a free port");
        let address: SocketAddr = listener.local_addr().expect("an address");
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self {
            base: format!("http://{address}"),
            traces,
            metrics,
        }
    }

    /// Every batch of spans received, decoded.
    fn trace_batches(&self) -> Vec<ResourceSpans> {
        let bodies = self.traces.lock().expect("not poisoned").clone();
        bodies
            .iter()
            .map(|body| ExportTraceServiceRequest::decode(body.as_ref()).expect("OTLP traces"))
            .flat_map(|request| request.resource_spans)
            .collect()
    }

    fn spans(&self) -> Vec<Span> {
        self.trace_batches()
            .into_iter()
            .flat_map(|resource| resource.scope_spans)
            .flat_map(|scope| scope.spans)
            .collect()
    }

    /// The `codeact.process` resource attribute of every batch of spans.
    fn processes(&self) -> Vec<String> {
        self.trace_batches()
            .into_iter()
            .filter_map(|spans| spans.resource)
            .flat_map(|resource| resource.attributes)
            .filter(|kv| kv.key == "codeact.process")
            .filter_map(|kv| match kv.value.and_then(|v| v.value) {
                Some(Any::StringValue(s)) => Some(s),
                _ => None,
            })
            .collect()
    }

    fn metrics(&self) -> Vec<opentelemetry_proto::tonic::metrics::v1::Metric> {
        let bodies = self.metrics.lock().expect("not poisoned").clone();
        bodies
            .iter()
            .map(|body| ExportMetricsServiceRequest::decode(body.as_ref()).expect("OTLP metrics"))
            .flat_map(|request| request.resource_metrics)
            .flat_map(|resource| resource.scope_metrics)
            .flat_map(|scope| scope.metrics)
            .collect()
    }

    fn received_nothing(&self) -> bool {
        self.traces.lock().expect("not poisoned").is_empty()
            && self.metrics.lock().expect("not poisoned").is_empty()
    }
}

/// The config (with `telemetry` added), the agent `seven` (a script with a
/// long comment that calls the command tool `seven`, then 42) in `dir`.
fn write_config(dir: &Path, telemetry: &str) {
    let write = |name: &str, text: &str| std::fs::write(dir.join(name), text).expect("fixture");
    write(
        "serve.toml",
        &format!(
            "{telemetry}\n\n[[token]]\nname = \"alice\"\ntoken = \"{TOKEN}\"\n\n[[agent]]\nname = \"seven\"\nteam = \"seven.toml\"\n"
        ),
    );
    write(
        "seven.toml",
        "[[agent]]\nname = \"seven\"\nmodel = \"replay:seven.json\"\ntools = \"tools.json\"\n",
    );
    write(
        "tools.json",
        &json!([{
            "name": "seven",
            "description": "Says 7.",
            "parameters": {"type": "object", "properties": {}},
            "command": ["echo", "7"],
        }])
        .to_string(),
    );
    let comment = "a".repeat(3000);
    write(
        "seven.json",
        &json!({"replies": [
            format!("```rhai\n// {comment}\nlet r = call_tool(\"seven\", #{{}});\nobservation(r)\n```"),
            "```rhai\nfinal_result(r + 35)\n```",
        ]})
        .to_string(),
    );
}

impl Server {
    /// The real `codeact serve` on SQLite, its stderr in `dir/stderr.log`.
    fn serve(dir: &Path, env: &[(&str, &str)]) -> Self {
        let store = format!("sqlite:{}", dir.join("runs.sqlite").display());
        Self::spawn(
            dir,
            &["serve", "--listen", "127.0.0.1:0"],
            &store,
            env,
            "stderr.log",
        )
    }

    /// `codeact ARGS --store STORE --config …`, once it printed its first line.
    fn spawn(dir: &Path, args: &[&str], store: &str, env: &[(&str, &str)], log: &str) -> Self {
        let stderr = std::fs::File::create(dir.join(log)).expect("a log file");
        let mut command = Command::new(env!("CARGO_BIN_EXE_codeact"));
        command
            .args(args)
            .arg("--store")
            .arg(store)
            .arg("--config")
            .arg(dir.join("serve.toml"))
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            .env_remove("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")
            .env_remove("OTEL_SDK_DISABLED")
            .env_remove("RUST_LOG")
            .stderr(stderr);
        for (name, value) in env {
            command.env(name, value);
        }
        let process = Self::start(command);
        assert!(
            !process.base.is_empty() || process.first_line.contains("working"),
            "the process did not start: {:?}",
            process.first_line
        );
        process
    }

    /// Starts a run of `seven` and waits until it finished; its id.
    async fn run_seven(&self) -> String {
        let client = reqwest::Client::new();
        let created: Value = client
            .post(format!("{}/runs", self.base))
            .bearer_auth(TOKEN)
            .json(&json!({"agent": "seven", "task": "Say 42."}))
            .send()
            .await
            .expect("the server answers")
            .json()
            .await
            .expect("JSON");
        let id = created["id"].as_str().expect("a run id").to_string();
        let started = Instant::now();
        loop {
            let run: Value = client
                .get(format!("{}/runs/{id}", self.base))
                .bearer_auth(TOKEN)
                .send()
                .await
                .expect("the server answers")
                .json()
                .await
                .expect("JSON");
            if run["status"] == "finished" {
                assert_eq!(run["outcome"]["value"], 42, "{run}");
                return id;
            }
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "the run did not finish: {run}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// SIGTERM, and waits for a clean exit.
    fn stop(&mut self) {
        assert!(self.terminate(), "kill runs");
        let status = self
            .wait_exit(Duration::from_secs(15))
            .expect("serve stops");
        assert!(status.success(), "serve exited with {status}");
    }
}

fn attribute<'a>(span: &'a Span, key: &str) -> Option<&'a Any> {
    span.attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref())
        .and_then(|v| v.value.as_ref())
}

fn text(span: &Span, key: &str) -> String {
    match attribute(span, key) {
        Some(Any::StringValue(s)) => s.clone(),
        other => panic!("{key} of {} is {other:?}", span.name),
    }
}

fn int(span: &Span, key: &str) -> i64 {
    match attribute(span, key) {
        Some(Any::IntValue(n)) => *n,
        other => panic!("{key} of {} is {other:?}", span.name),
    }
}

fn named<'a>(spans: &'a [Span], name: &str) -> Vec<&'a Span> {
    spans.iter().filter(|s| s.name == name).collect()
}

/// If this fails, a served run is not one trace of a `run` span with its model
/// calls, scripts and tool calls beneath it as the README says, a long script
/// reaches the collector whole, the config's endpoint does not win over the
/// environment's, or the metrics are not exported at shutdown.
#[tokio::test(flavor = "multi_thread")]
async fn a_served_run_is_exported_as_a_run_span_with_its_model_script_and_tool_spans() {
    let receiver = Receiver::start().await;
    let ignored = Receiver::start().await;
    let dir = tempfile::tempdir().expect("a temporary folder");
    write_config(
        dir.path(),
        &format!("[telemetry]\nendpoint = \"{}\"", receiver.base),
    );
    let mut server = Server::serve(
        dir.path(),
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", ignored.base.as_str())],
    );
    let id = server.run_seven().await;
    server.stop();
    let stderr = std::fs::read_to_string(dir.path().join("stderr.log")).expect("the log");
    assert!(
        stderr.contains(&format!(
            "exporting traces and metrics over OTLP/HTTP to {}",
            receiver.base
        )),
        "{stderr}"
    );
    assert!(
        ignored.received_nothing(),
        "the environment's endpoint was used"
    );

    let spans = receiver.spans();
    let runs = named(&spans, "run");
    assert_eq!(runs.len(), 1, "{spans:#?}");
    let run = runs[0];
    assert!(run.parent_span_id.is_empty(), "the run span is the root");
    assert_eq!(text(run, "codeact.run.id"), id);
    assert_eq!(text(run, "codeact.agent"), "seven");
    assert_eq!(text(run, "codeact.run.job"), "start");
    assert_eq!(text(run, "codeact.runtime"), "rhai");
    assert_eq!(text(run, "codeact.status"), "finished");
    assert_eq!(text(run, "codeact.outcome"), "final_result");
    assert_eq!(int(run, "codeact.steps"), 2);
    assert!(attribute(run, "gen_ai.usage.input_tokens").is_some());
    let in_run = |span: &&Span| span.trace_id == run.trace_id && span.parent_span_id == run.span_id;

    let mut models = named(&spans, "model");
    models.sort_by_key(|m| int(m, "codeact.step"));
    assert_eq!(models.len(), 2, "{models:#?}");
    assert!(
        models.iter().all(in_run),
        "model calls are the run's children"
    );
    assert_eq!(
        models
            .iter()
            .map(|m| int(m, "codeact.step"))
            .collect::<Vec<_>>(),
        [1, 2]
    );
    assert!(attribute(models[0], "gen_ai.usage.output_tokens").is_some());

    let scripts = named(&spans, "script");
    assert_eq!(scripts.len(), 2, "{scripts:#?}");
    assert!(scripts.iter().all(in_run), "scripts are the run's children");
    let first = scripts
        .iter()
        .find(|s| int(s, "codeact.step") == 1)
        .expect("the first step's script");
    let code = text(first, "codeact.code");
    assert!(
        code.len() <= CAP,
        "the code is capped: {} bytes",
        code.len()
    );
    assert!(code.starts_with("// aaa") && code.ends_with('…'), "{code}");
    assert!(int(first, "codeact.code.bytes") > 3000);
    assert_eq!(text(first, "codeact.outcome"), "observation");
    assert_eq!(text(first, "codeact.output"), "7");
    assert_eq!(text(first, "codeact.runtime"), "rhai");

    let tools = named(&spans, "tool");
    assert_eq!(tools.len(), 1, "{tools:#?}");
    let tool = tools[0];
    assert_eq!(tool.trace_id, run.trace_id);
    assert_eq!(
        tool.parent_span_id, first.span_id,
        "the call is its script's child"
    );
    assert_eq!(text(tool, "codeact.tool.name"), "seven");
    assert_eq!(text(tool, "codeact.tool.outcome"), "ok");
    assert_eq!(text(tool, "codeact.tool.result"), "7");
    assert!(
        tool.start_time_unix_nano >= first.start_time_unix_nano
            && tool.end_time_unix_nano <= first.end_time_unix_nano,
        "the call happened within its script"
    );

    let metrics = receiver.metrics();
    let names: Vec<&str> = metrics.iter().map(|m| m.name.as_str()).collect();
    for expected in [
        "http.server.request.duration",
        "codeact.runs.started",
        "codeact.runs.finished",
        "codeact.run.duration",
        "codeact.queue.depth",
    ] {
        assert!(
            names.contains(&expected),
            "{expected} missing from {names:?}"
        );
    }
    let routes = format!("{metrics:?}");
    assert!(routes.contains("/runs/{id}"), "requests by route pattern");
    assert!(!routes.contains(&id), "no run id in a metric's attributes");
}

/// If this fails, a server without an endpoint builds an exporter, tries to
/// send somewhere, or complains about it.
#[tokio::test(flavor = "multi_thread")]
async fn without_an_endpoint_nothing_is_exported_and_nothing_complains() {
    let dir = tempfile::tempdir().expect("a temporary folder");
    write_config(dir.path(), "");
    let mut server = Server::serve(dir.path(), &[]);
    server.run_seven().await;
    server.stop();
    let stderr = std::fs::read_to_string(dir.path().join("stderr.log")).expect("the log");
    assert!(stderr.trim().is_empty(), "{stderr}");
}

/// A database on a PostgreSQL cluster the test starts once; `None` (after
/// saying SKIPPED) without the binaries.
async fn postgres(name: &str) -> Option<String> {
    static CLUSTER: OnceLock<Option<pg_cluster::Cluster>> = OnceLock::new();
    let cluster = CLUSTER
        .get_or_init(|| {
            if pg_cluster::pg_bin().is_none() {
                eprintln!("SKIPPED: no initdb/pg_ctl found (install Debian's `postgresql`)");
                return None;
            }
            Some(pg_cluster::start_cluster().expect("PostgreSQL starts"))
        })
        .as_ref()?;
    Some(cluster.create_database(name).await)
}

/// If this fails, a run worked on by `codeact worker` (another process than
/// the front end that queued it) is not exported by the worker as a trace of
/// its own, rooted in its `run` span with the loop's spans beneath, or the
/// worker does not send what it batched when stopped with SIGTERM.
#[tokio::test(flavor = "multi_thread")]
async fn a_worker_exports_the_run_it_worked_on_as_its_own_trace() {
    let Some(url) = postgres("otel_worker").await else {
        return;
    };
    let receiver = Receiver::start().await;
    let dir = tempfile::tempdir().expect("a temporary folder");
    write_config(
        dir.path(),
        &format!("[telemetry]\nendpoint = \"{}\"", receiver.base),
    );
    let front = Server::spawn(
        dir.path(),
        &["serve", "--listen", "127.0.0.1:0"],
        &url,
        &[],
        "front.log",
    );
    let mut worker = Server::spawn(dir.path(), &["worker"], &url, &[], "worker.log");
    let id = front.run_seven().await;
    worker.stop();
    let spans = receiver.spans();
    let runs = named(&spans, "run");
    assert_eq!(runs.len(), 1, "{spans:#?}");
    let run = runs[0];
    assert_eq!(text(run, "codeact.run.id"), id);
    assert!(run.parent_span_id.is_empty(), "the run span is the root");
    assert_eq!(
        receiver.processes(),
        ["worker"],
        "only the worker exported so far"
    );
    let children = ["model", "script"]
        .iter()
        .flat_map(|name| named(&spans, name))
        .filter(|s| s.parent_span_id == run.span_id && s.trace_id == run.trace_id)
        .count();
    assert_eq!(children, 4, "two model calls and two scripts under the run");
    let tool = named(&spans, "tool");
    assert_eq!(tool.len(), 1);
    assert!(
        named(&spans, "script")
            .iter()
            .any(|s| s.span_id == tool[0].parent_span_id)
    );
}
