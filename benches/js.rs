//! What a step costs on the JavaScript backend (Boa in a worker process).
//!
//! `cargo bench --bench js`. A session's first run starts its worker; later runs
//! pay a round trip over pipes.

// criterion_group! generates an undocumented public function.
#![allow(missing_docs)]

use std::sync::Arc;

use codeact::{JsRuntime, Limits, ScriptOutput, ScriptSession, Tool, ToolBox};
use criterion::{Criterion, black_box, criterion_group, criterion_main};
use serde_json::json;

fn runtime() -> JsRuntime {
    JsRuntime::new(Limits::default()).with_worker(env!("CARGO_BIN_EXE_codeact"))
}

fn toolbox() -> Arc<ToolBox> {
    let add = Tool::from_fn("add", "Adds a and b.", |args| {
        Ok(json!(
            args["a"].as_i64().unwrap_or(0) + args["b"].as_i64().unwrap_or(0)
        ))
    });
    Arc::new(ToolBox::new([add]).expect("valid tools"))
}

fn steps(c: &mut Criterion) {
    let mut group = c.benchmark_group("js");
    let runtime = runtime();
    group.sample_size(20);
    group.bench_function("new_session_and_first_step", |b| {
        b.iter(|| {
            let mut session = ScriptSession::start(&runtime, toolbox()).expect("session starts");
            session
                .run_blocking(black_box("final_result(40 + 2)"))
                .expect("host ok")
        })
    });

    let mut warm = ScriptSession::start(&runtime, toolbox()).expect("session starts");
    let run = warm.run_blocking("final_result(40 + 2)").expect("host ok");
    assert_eq!(run.output, ScriptOutput::final_result(json!(42)));
    group.sample_size(100);
    group.bench_function("warm_trivial_step", |b| {
        b.iter(|| {
            warm.run_blocking(black_box("final_result(40 + 2)"))
                .expect("host ok")
        })
    });

    const CALLS: &str =
        "let s = 0; for (let i = 0; i < 1000; i++) s += tools.add({a: i, b: 1}); final_result(s)";
    let run = warm.run_blocking(CALLS).expect("host ok");
    assert_eq!(run.output, ScriptOutput::final_result(json!(500_500)));
    group.sample_size(10);
    group.bench_function("tool_calls_1000", |b| {
        b.iter(|| warm.run_blocking(black_box(CALLS)).expect("host ok"))
    });
    let run = warm.run_blocking("final_result(1)").expect("host ok");
    assert_eq!(run.output, ScriptOutput::final_result(json!(1)));
    group.finish();
}

criterion_group!(benches, steps);
criterion_main!(benches);
