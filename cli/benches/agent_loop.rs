//! What the loop itself costs per run: a 10-step run against a replay model, so no
//! network and no model time, only the host's work (prompt assembly, code
//! extraction, script runs, feedback, events), on Rhai and on JavaScript (Boa in
//! process, and in a worker process, whose start each run pays: a run is a new
//! session).
//!
//! `cargo bench --bench agent_loop`. Target (issue 5): ≤ 200 µs per 10-step Rhai run.

// criterion_group! generates an undocumented public function.
#![allow(missing_docs)]

use std::sync::Arc;

use codeact::model::ReplayModel;
use codeact::{Agent, JsRuntime, Limits, Outcome, RhaiRuntime, Runtime};
use codeact_cli::bench::{Lang, agent_replies};
use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::json;

fn ten_step_run(c: &mut Criterion) {
    let host = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime starts");
    let backends: [(&str, Lang, &str, Arc<dyn Runtime>); 3] = [
        (
            "rhai",
            Lang::Rhai,
            "rhai",
            Arc::new(RhaiRuntime::new(Limits::default())),
        ),
        (
            "js_in_process",
            Lang::Js,
            "js",
            Arc::new(JsRuntime::in_process(Limits::default())),
        ),
        (
            "js_worker",
            Lang::Js,
            "js",
            Arc::new(JsRuntime::new(Limits::default()).with_worker(env!("CARGO_BIN_EXE_codeact"))),
        ),
    ];
    for (name, lang, fence, runtime) in backends {
        let model = Arc::new(ReplayModel::new(agent_replies(lang, fence)).without_recording());
        let agent = Agent::builder(model, runtime)
            .stream(false)
            .build()
            .expect("agent builds");
        let run = host
            .block_on(agent.run("Count to ten."))
            .expect("run finishes");
        assert_eq!(run.outcome, Outcome::FinalResult { value: json!(10) });
        assert_eq!(run.steps, 10);

        let mut group = c.benchmark_group("loop");
        if name == "js_worker" {
            group.sample_size(20);
        }
        group.bench_function(format!("{name}_10_step_run_replay"), |b| {
            b.iter(|| {
                host.block_on(agent.run("Count to ten."))
                    .expect("run finishes")
            })
        });
        group.finish();
    }
}

criterion_group!(benches, ten_step_run);
criterion_main!(benches);
