//! A real model, end to end: small tasks on every shipped runtime against an
//! OpenAI-compatible server. Ignored by a plain `cargo test` (it shows as
//! ignored, not as passed): run it with `cargo test --test real_model -- --ignored`
//! and `CODEACT_TEST_MODEL_URL` naming the server's base URL (e.g.
//! `http://127.0.0.1:18080/v1`, as `../shared/local-model/` serves
//! Qwen2.5-Coder-1.5B); without it the test fails, saying so. `CODEACT_TEST_MODEL`
//! names the model (default `local`), `CODEACT_RECORD_TRANSCRIPTS=DIR` keeps each
//! run's transcript, and `CODEACT_TEST_RUNTIMES` chooses the runtimes (default:
//! all of them).
//!
//! Every run is coached by `SmallModelCoach`, as recommended for a small local
//! model. Every run must keep the protocol (end in an outcome, never a host failure), and
//! each runtime must answer at least its bar of the 5 tasks right (see
//! [`min_right`]): one below what Qwen2.5-Coder-1.5B scored here on them, because
//! temperature 0 is not fully deterministic on a llama.cpp server.

use std::sync::Arc;

use codeact::model::{OpenAiClient, OpenAiConfig};
use codeact::{
    Agent, JsRuntime, Limits, LoopConfig, McpServer, Outcome, Runtime, Tool, Transcript,
    runtime_by_name,
};
use serde_json::{Value, json};

struct Task {
    name: &'static str,
    prompt: &'static str,
    answer: Value,
}

fn tasks() -> Vec<Task> {
    vec![
        Task {
            name: "product",
            prompt: "What is 17 * 23? Return the number.",
            answer: json!(391),
        },
        Task {
            name: "sum",
            prompt: "What is the sum of the integers from 1 to 100 inclusive? Return the number.",
            answer: json!(5050),
        },
        Task {
            name: "multiples",
            prompt: "How many integers from 1 to 100 inclusive are divisible by 7? Return the count.",
            answer: json!(14),
        },
        Task {
            name: "prime",
            prompt: "What is the largest prime number below 100? Return the number.",
            answer: json!(97),
        },
        Task {
            name: "reverse",
            prompt: "Reverse the string \"codeact\". Return the reversed string.",
            answer: json!("tcaedoc"),
        },
    ]
}

/// Right when equal, or when a number or string answer matches once unwrapped
/// (`"391"` for 391, `391.0` for 391).
fn is_right(value: &Value, answer: &Value) -> bool {
    if value == answer {
        return true;
    }
    match (value, answer) {
        (Value::Number(got), Value::Number(want)) => got.as_f64() == want.as_f64(),
        (Value::String(got), Value::Number(want)) => {
            got.trim().parse::<f64>().ok() == want.as_f64()
        }
        (Value::String(got), Value::String(want)) => got.trim() == want,
        _ => false,
    }
}

/// The runtime under test; JavaScript workers are the codeact binary.
fn runtime(name: &str) -> Arc<dyn Runtime> {
    match name {
        "js" => {
            Arc::new(JsRuntime::new(Limits::default()).with_worker(env!("CARGO_BIN_EXE_codeact")))
        }
        "wasm:python-sci" => runtime_by_name(name, sci_limits()).expect("a known runtime"),
        other => runtime_by_name(other, Limits::default()).expect("a known runtime"),
    }
}

/// What `wasm:python-sci` runs under: importing pandas takes more than the
/// default 64 MiB and 5 s.
fn sci_limits() -> Limits {
    Limits {
        max_memory_bytes: 512 << 20,
        wall_time: std::time::Duration::from_secs(60),
        ..Limits::default()
    }
}

/// Data tasks for the scientific stack: a CSV in the prompt, pandas to answer.
fn pandas_tasks() -> Vec<Task> {
    vec![Task {
        name: "pandas-revenue",
        prompt: "Here is a CSV of sales:\n\nregion,units,price\nnorth,3,2.5\nsouth,10,1.0\nnorth,4,3.0\neast,1,20.0\nsouth,2,4.0\n\nUsing pandas, find the region with the highest total revenue (units times price, summed per region). Return the region's name.",
        answer: json!("east"),
    }]
}

/// Tasks answered with the tools of an MCP server (`cli/tests/mcp/scripted_server.py`:
/// `scripted_price`, `scripted_add`, each answering structured content).
fn mcp_tasks() -> Vec<Task> {
    vec![
        Task {
            name: "mcp-price",
            prompt: "What does one bread cost, in euros? Use the tools. Return the number.",
            answer: json!(2.25),
        },
        Task {
            name: "mcp-basket",
            prompt: "What do 3 apples and 2 milks cost together, in euros? Use the tools. Return the number.",
            answer: json!(4.0),
        },
        Task {
            name: "mcp-add",
            prompt: "Compute 1234 + 4321 with the add tool. Return the number.",
            answer: json!(5555),
        },
    ]
}

/// Runs `tasks` on `runtime_name` with `tools`; the number answered right.
async fn solve_all(
    runtime_name: &str,
    base_url: &str,
    model_name: &str,
    record: Option<&str>,
) -> usize {
    solve(
        runtime_name,
        base_url,
        model_name,
        record,
        tasks(),
        Vec::new(),
    )
    .await
}

async fn solve(
    runtime_name: &str,
    base_url: &str,
    model_name: &str,
    record: Option<&str>,
    tasks: Vec<Task>,
    tools: Vec<Tool>,
) -> usize {
    let mut right = 0;
    for task in &tasks {
        let client = OpenAiClient::new(OpenAiConfig::from_env(model_name).with_base_url(base_url))
            .expect("client");
        let mut builder = Agent::builder(Arc::new(client), runtime(runtime_name))
            .config(LoopConfig {
                max_steps: 6,
                ..LoopConfig::default()
            })
            .tools(tools.clone())
            // The coach recommended for a small local model.
            .coach(codeact::SmallModelCoach::default())
            .max_tokens(512)
            .temperature(0.0);
        if let Some(dir) = record {
            let path =
                std::path::Path::new(dir).join(format!("{runtime_name}-{}.jsonl", task.name));
            builder = builder.listener(Transcript::create(path).expect("transcript").listener());
        }
        let agent = builder.build().expect("agent");
        let run = agent
            .run(task.prompt)
            .await
            .expect("the protocol holds: no host or model failure");
        let ok =
            matches!(&run.outcome, Outcome::FinalResult { value } if is_right(value, &task.answer));
        eprintln!(
            "{runtime_name}/{}: {} in {} step(s): {:?}",
            task.name,
            if ok { "right" } else { "wrong" },
            run.steps,
            run.outcome
        );
        right += usize::from(ok);
    }
    eprintln!("{runtime_name}: {right} of {} tasks right", tasks.len());
    right
}

/// The right answers of 5 a runtime must reach; `CODEACT_TEST_MIN_RIGHT` (one
/// number for every runtime) overrides.
fn min_right(runtime_name: &str) -> usize {
    if let Some(n) = std::env::var("CODEACT_TEST_MIN_RIGHT")
        .ok()
        .and_then(|n| n.parse().ok())
    {
        return n;
    }
    // Measured here (Qwen2.5-Coder-1.5B, temperature 0) on two stops' trees
    // (2026-12-02, each sharing the model with an evaluation): rhai 4 and 4, js
    // 4 and 5, wasm:js 5 and 4, wasm:python 4 and 5, wasm:micropython 3 and 4,
    // wasm:rhai 4 and 4, wasm:boa 5 and 4 of 5; on 2026-12-03's closing tree
    // (the model alone): rhai 4, js 5, wasm:js 4, wasm:python 5,
    // wasm:micropython 4, wasm:rhai 4, wasm:boa 4. Each bar is one below the
    // lowest: a bar at the lowest (4 for js and wasm:python) would fail CI on
    // the one-task swings the evaluation shows between sittings.
    match runtime_name {
        "wasm:micropython" => 2,
        _ => 3,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real model: CODEACT_TEST_MODEL_URL=… cargo test --test real_model -- --ignored"]
async fn a_real_model_solves_small_tasks_in_every_runtime() {
    let base_url = std::env::var("CODEACT_TEST_MODEL_URL").expect(
        "CODEACT_TEST_MODEL_URL must name an OpenAI-compatible server (e.g. http://127.0.0.1:18080/v1) for this test",
    );
    let model_name = std::env::var("CODEACT_TEST_MODEL").unwrap_or_else(|_| "local".into());
    let record = std::env::var("CODEACT_RECORD_TRANSCRIPTS").ok();
    let runtimes = std::env::var("CODEACT_TEST_RUNTIMES").unwrap_or_else(|_| {
        "rhai,js,wasm:js,wasm:python,wasm:micropython,wasm:rhai,wasm:boa".into()
    });
    let mut short = Vec::new();
    for runtime_name in runtimes.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let right = solve_all(runtime_name, &base_url, &model_name, record.as_deref()).await;
        let bar = min_right(runtime_name);
        if right < bar {
            short.push(format!("{runtime_name}: {right} right, {bar} wanted"));
        }
    }
    assert!(short.is_empty(), "below the bar: {}", short.join("; "));
}

/// The right answers of the 3 MCP tasks a runtime must reach;
/// `CODEACT_TEST_MIN_RIGHT` overrides as above.
fn mcp_min_right(runtime_name: &str) -> usize {
    if let Some(n) = std::env::var("CODEACT_TEST_MIN_RIGHT")
        .ok()
        .and_then(|n| n.parse().ok())
    {
        return n;
    }
    // Measured here (Qwen2.5-Coder-1.5B, temperature 0): wasm:python 2 of 3 in
    // every run so far, js 0 of 3 until a 1 on 2026-12-02 and again on 2026-12-03 (it returns the
    // tools' `{euros: …}` map itself, not the number asked for). Each bar is one below the lowest, at
    // least 0: for js the test holds only the protocol (every run ends in an
    // outcome).
    match runtime_name {
        "wasm:python" => 1,
        _ => 0,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real model: CODEACT_TEST_MODEL_URL=… cargo test --test real_model -- --ignored"]
async fn a_real_model_solves_tasks_through_mcp_tools_in_javascript_and_python() {
    let base_url = std::env::var("CODEACT_TEST_MODEL_URL").expect(
        "CODEACT_TEST_MODEL_URL must name an OpenAI-compatible server (e.g. http://127.0.0.1:18080/v1) for this test",
    );
    let model_name = std::env::var("CODEACT_TEST_MODEL").unwrap_or_else(|_| "local".into());
    let record = std::env::var("CODEACT_RECORD_TRANSCRIPTS").ok();
    let server = McpServer::stdio(
        "scripted",
        "python3",
        [concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/mcp/scripted_server.py"
        )],
    );
    let tools: Vec<Tool> = server
        .tools()
        .await
        .expect("the scripted MCP server starts")
        .into_iter()
        .filter(|tool| matches!(tool.spec().name.as_str(), "scripted_price" | "scripted_add"))
        .collect();
    let mut short = Vec::new();
    for runtime_name in ["js", "wasm:python"] {
        let right = solve(
            runtime_name,
            &base_url,
            &model_name,
            record.as_deref(),
            mcp_tasks(),
            tools.clone(),
        )
        .await;
        let bar = mcp_min_right(runtime_name);
        if right < bar {
            short.push(format!("{runtime_name}: {right} right, {bar} wanted"));
        }
    }
    assert!(short.is_empty(), "below the bar: {}", short.join("; "));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real model: CODEACT_TEST_MODEL_URL=… cargo test --test real_model -- --ignored"]
async fn a_real_model_answers_a_pandas_task_in_python_with_the_scientific_stack() {
    let base_url = std::env::var("CODEACT_TEST_MODEL_URL").expect(
        "CODEACT_TEST_MODEL_URL must name an OpenAI-compatible server (e.g. http://127.0.0.1:18080/v1) for this test",
    );
    let model_name = std::env::var("CODEACT_TEST_MODEL").unwrap_or_else(|_| "local".into());
    let record = std::env::var("CODEACT_RECORD_TRANSCRIPTS").ok();
    if let Err(e) = runtime_by_name("wasm:python-sci", sci_limits()) {
        eprintln!("SKIPPED: wasm:python-sci cannot load: {e}");
        return;
    }
    // Run against the local model once (2026-12-03: 1 of 1): the bar holds the
    // protocol only until more runs than one show what it reliably reaches.
    let right = solve(
        "wasm:python-sci",
        &base_url,
        &model_name,
        record.as_deref(),
        pandas_tasks(),
        Vec::new(),
    )
    .await;
    eprintln!("wasm:python-sci: {right} of 1 pandas task right");
}
