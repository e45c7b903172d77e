//! What a step costs on the JavaScript backend: Boa in a worker process (`js`), and
//! Boa on a thread of the host (`js-in-process`).
//!
//! `cargo bench --bench js`. A worker session's first run starts its worker; later
//! runs pay a round trip over pipes. An in-process session pays a hop to its
//! engine thread instead. Cases per mode: new session + first step, warm trivial
//! step, 1,000 tool calls, a 10 KB JSON value from a tool and back, sum of
//! 1..=1,000,000, time to stop an infinite loop under a 200 ms limit (a fresh
//! session each, its start included: a worker start is ~2% of it). Each case
//! checks its result before it is timed.

// criterion_group! generates an undocumented public function.
#![allow(missing_docs)]

use std::sync::Arc;
use std::time::Duration;

use codeact::{JsRuntime, Limits, ScriptOutput, ScriptSession, Tool, ToolBox};
use criterion::{Criterion, black_box, criterion_group, criterion_main};
use serde_json::json;

const TRIVIAL: &str = "final_result(40 + 2)";
const CALLS: &str =
    "let s = 0; for (let i = 0; i < 1000; i++) s += tools.add({a: i, b: 1}); final_result(s)";
const JSON: &str = "let d = tools.data({}); final_result(d)";
const SUM: &str = "let s = 0; for (let i = 1; i <= 1000000; i++) s += i; final_result(s)";
const SPIN: &str = "while (true) {}";

fn runtime(mode: &str, limits: Limits) -> JsRuntime {
    match mode {
        "js-in-process" => JsRuntime::in_process(limits),
        _ => JsRuntime::new(limits).with_worker(env!("CARGO_BIN_EXE_codeact")),
    }
}

fn toolbox() -> Arc<ToolBox> {
    let value = Arc::new(codeact_cli::bench::sample_value(10 * 1024));
    let data = Tool::from_fn("data", "A 10 KB value.", move |_| {
        Ok(serde_json::Value::clone(&value))
    });
    let add = Tool::from_fn("add", "Adds a and b.", |args| {
        Ok(json!(
            args["a"].as_i64().unwrap_or(0) + args["b"].as_i64().unwrap_or(0)
        ))
    });
    Arc::new(ToolBox::new([add, data]).expect("valid tools"))
}

fn expect_final(session: &mut ScriptSession, script: &str, value: serde_json::Value) {
    let run = session.run_blocking(script).expect("host ok");
    assert_eq!(run.output, ScriptOutput::final_result(value), "{script}");
}

fn steps(c: &mut Criterion) {
    for mode in ["js", "js-in-process"] {
        let mut group = c.benchmark_group(mode);
        let runtime = runtime(mode, Limits::default());
        group.sample_size(20);
        group.bench_function("new_session_and_first_step", |b| {
            b.iter(|| {
                let mut session =
                    ScriptSession::start(&runtime, toolbox()).expect("session starts");
                session.run_blocking(black_box(TRIVIAL)).expect("host ok")
            })
        });

        let mut warm = ScriptSession::start(&runtime, toolbox()).expect("session starts");
        expect_final(&mut warm, TRIVIAL, json!(42));
        group.sample_size(100);
        group.bench_function("warm_trivial_step", |b| {
            b.iter(|| warm.run_blocking(black_box(TRIVIAL)).expect("host ok"))
        });

        expect_final(&mut warm, JSON, codeact_cli::bench::sample_value(10 * 1024));
        group.bench_function("json_10kb", |b| {
            b.iter(|| warm.run_blocking(black_box(JSON)).expect("host ok"))
        });

        expect_final(&mut warm, CALLS, json!(500_500));
        group.sample_size(10);
        group.bench_function("tool_calls_1000", |b| {
            b.iter(|| warm.run_blocking(black_box(CALLS)).expect("host ok"))
        });

        expect_final(&mut warm, SUM, json!(500_000_500_000_i64));
        group.bench_function("sum_to_a_million", |b| {
            b.iter(|| warm.run_blocking(black_box(SUM)).expect("host ok"))
        });
        // A session that degraded during the measurement would have been timed
        // failing fast: check it still works.
        expect_final(&mut warm, TRIVIAL, json!(42));

        let limited = runtime_with_stop(mode);
        group.measurement_time(Duration::from_secs(5));
        group.bench_function("time_to_stop_200ms_limit", |b| {
            b.iter(|| {
                let mut session =
                    ScriptSession::start(&limited, toolbox()).expect("session starts");
                let run = session.run_blocking(black_box(SPIN)).expect("host ok");
                assert!(
                    matches!(&run.output, ScriptOutput::Error { message } if message.contains("time limit of 200 ms")),
                    "{}",
                    run.output
                );
                run
            })
        });
        group.finish();
    }
}

fn runtime_with_stop(mode: &str) -> JsRuntime {
    runtime(
        mode,
        Limits {
            wall_time: Duration::from_millis(200),
            max_operations: u64::MAX,
            ..Limits::default()
        },
    )
}

criterion_group!(benches, steps);
criterion_main!(benches);
