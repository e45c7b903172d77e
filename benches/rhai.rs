//! What a step costs on the Rhai backend, next to Rhai's own floor.
//!
//! `cargo bench --bench rhai`. Targets (issue 2): warm trivial step ≤ 5 µs, new
//! session ≤ 20 µs, 1,000 tool calls ≤ 1 ms, time to stop a runaway loop ≤ the
//! 200 ms limit + 10%. The `floor` group is a bare engine with nothing of ours.
//! `json_10kb` takes a 10 KB value from a tool and returns it (issue 8).

// criterion_group! generates an undocumented public function.
#![allow(missing_docs)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use codeact::{Limits, RhaiRuntime, Runtime, ScriptOutput, ScriptSession, Tool, ToolBox};
use criterion::{Criterion, black_box, criterion_group, criterion_main};
use serde_json::json;

const TRIVIAL: &str = "final_result(40 + 2)";
const TOOL_CALLS: &str =
    "let s = 0; for i in 0..1000 { s += call_tool(\"add\", #{a: i, b: 1}); } final_result(s)";
const SUM: &str = "let s = 0; for i in 1..=1000000 { s += i; } final_result(s)";

fn toolbox() -> Arc<ToolBox> {
    let value = Arc::new(common::sample_value(10 * 1024));
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

fn session(limits: Limits) -> ScriptSession {
    ScriptSession::start(&RhaiRuntime::new(limits), toolbox()).expect("session starts")
}

fn expect_final(session: &mut ScriptSession, script: &str, value: serde_json::Value) {
    let run = session.run_blocking(script).expect("host ok");
    assert_eq!(run.output, ScriptOutput::final_result(value), "{script}");
}

fn floor(c: &mut Criterion) {
    let mut group = c.benchmark_group("floor");
    let engine = rhai::Engine::new();
    let ast = engine.compile("40 + 2").expect("compiles");
    assert_eq!(engine.eval_ast::<i64>(&ast).expect("runs"), 42);
    group.bench_function("bare_engine_precompiled_ast", |b| {
        b.iter(|| engine.eval_ast::<i64>(black_box(&ast)).expect("runs"))
    });
    group.bench_function("bare_engine_compile_and_run", |b| {
        b.iter(|| engine.eval::<i64>(black_box("40 + 2")).expect("runs"))
    });
    let sum_ast = engine
        .compile("let s = 0; for i in 1..=1000000 { s += i; } s")
        .expect("compiles");
    group.sample_size(10);
    group.bench_function("bare_engine_sum_to_a_million", |b| {
        b.iter(|| engine.eval_ast::<i64>(black_box(&sum_ast)).expect("runs"))
    });
    group.finish();
}

fn steps(c: &mut Criterion) {
    let mut group = c.benchmark_group("rhai");
    let runtime = RhaiRuntime::new(Limits::default());
    let tools = toolbox();
    group.bench_function("new_session", |b| {
        b.iter(|| runtime.new_session(tools.clone()).expect("session starts"))
    });

    let mut warm = session(Limits::default());
    expect_final(&mut warm, TRIVIAL, json!(42));
    group.bench_function("warm_trivial_step", |b| {
        b.iter(|| warm.run_blocking(black_box(TRIVIAL)).expect("host ok"))
    });

    let mut calls = session(Limits::default());
    expect_final(&mut calls, TOOL_CALLS, json!(500_500));
    group.bench_function("tool_calls_1000", |b| {
        b.iter(|| calls.run_blocking(black_box(TOOL_CALLS)).expect("host ok"))
    });

    const JSON: &str = "let d = call_tool(\"data\", #{}); final_result(d)";
    let mut json_session = session(Limits::default());
    expect_final(&mut json_session, JSON, common::sample_value(10 * 1024));
    group.bench_function("json_10kb", |b| {
        b.iter(|| json_session.run_blocking(black_box(JSON)).expect("host ok"))
    });

    // A session that degraded during the measurement (a limit creeping up, state
    // piling up) would have been timed failing fast: check it still works.
    expect_final(&mut warm, TRIVIAL, json!(42));
    expect_final(&mut calls, TOOL_CALLS, json!(500_500));

    group.sample_size(10);
    let mut sum = ScriptSession::start(
        &RhaiRuntime::new(Limits::unlimited()),
        Arc::new(codeact::tools::NoTools),
    )
    .expect("session starts");
    expect_final(&mut sum, SUM, json!(500_000_500_000_i64));
    group.bench_function("sum_to_a_million", |b| {
        b.iter(|| sum.run_blocking(black_box(SUM)).expect("host ok"))
    });

    let mut limits = Limits::unlimited();
    limits.wall_time = Duration::from_millis(200);
    let mut runaway = session(limits);
    let stopped = runaway
        .run_blocking("let x = 0; loop { x += 1; }")
        .expect("host ok");
    assert!(
        matches!(&stopped.output, ScriptOutput::Error { message } if message.contains("time limit of 200 ms"))
    );
    group.measurement_time(Duration::from_secs(5));
    group.bench_function("infinite_loop_stop_at_200ms", |b| {
        b.iter(|| {
            runaway
                .run_blocking(black_box("let x = 0; loop { x += 1; }"))
                .expect("host ok")
        })
    });
    expect_final(&mut sum, SUM, json!(500_000_500_000_i64));
    group.finish();
}

criterion_group!(benches, floor, steps);
criterion_main!(benches);
