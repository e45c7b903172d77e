//! What the loop itself costs per run: a 10-step Rhai run against a replay model,
//! so no network and no model time, only the host's work (prompt assembly, code
//! extraction, script runs on a blocking thread, feedback, events).
//!
//! `cargo bench --bench agent_loop`. Target (issue 5): ≤ 200 µs per 10-step run.

// criterion_group! generates an undocumented public function.
#![allow(missing_docs)]

use std::sync::Arc;

use codeact::model::ReplayModel;
use codeact::{Agent, Limits, Outcome, RhaiRuntime};
use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::json;

fn ten_step_run(c: &mut Criterion) {
    let mut replies: Vec<String> = (1..10)
        .map(|step| {
            format!("Step {step}.\n```rhai\nlet x{step} = {step};\nobservation(x{step} * 2)\n```")
        })
        .collect();
    replies.push("Done.\n```rhai\nfinal_result(x9 + 1)\n```".into());
    let model = Arc::new(ReplayModel::new(replies).without_recording());
    let agent = Agent::builder(model, Arc::new(RhaiRuntime::new(Limits::default())))
        .stream(false)
        .build()
        .expect("agent builds");
    let host = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime starts");
    let run = host
        .block_on(agent.run("Count to ten."))
        .expect("run finishes");
    assert_eq!(run.outcome, Outcome::FinalResult { value: json!(10) });
    assert_eq!(run.steps, 10);

    c.bench_function("loop/rhai_10_step_run_replay", |b| {
        b.iter(|| {
            host.block_on(agent.run("Count to ten."))
                .expect("run finishes")
        })
    });
}

criterion_group!(benches, ten_step_run);
criterion_main!(benches);
