//! How a step's cost grows: with the script's size (1, 10 and 100 KB), with the
//! session's history (step 100 of a session whose every step defined a variable),
//! and with sessions stepping at once (1, 10, 100 tokio tasks on a 2-thread
//! runtime, through `ScriptSession::run` as the agent loop does). On Rhai and on
//! Boa in process, the two backends cheap enough for criterion's sample counts;
//! `codeact bench` measures every backend, and idle memory per session.
//!
//! `cargo bench --bench scale`. Target (issue 8): 100 concurrent Rhai sessions
//! reach ≥ 80% of 2 cores' ideal throughput (compare `concurrent/100` elements/s
//! with twice `concurrent/1`'s single-session rate from `cargo bench --bench rhai`).

// criterion_group! generates an undocumented public function.
#![allow(missing_docs)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use codeact::tools::NoTools;
use codeact::{JsRuntime, Limits, RhaiRuntime, Runtime, ScriptOutput, ScriptSession};
use codeact_cli::bench::Lang;
use criterion::{BenchmarkId, Criterion, Throughput, black_box, criterion_group, criterion_main};
use serde_json::json;

fn session(runtime: &dyn Runtime) -> ScriptSession {
    ScriptSession::start(runtime, Arc::new(NoTools)).expect("session starts")
}

fn expect(session: &mut ScriptSession, script: &str, output: ScriptOutput) {
    let run = session.run_blocking(script).expect("host ok");
    assert_eq!(run.output, output);
}

fn backends() -> [(&'static str, Lang, Arc<dyn Runtime>); 2] {
    [
        (
            "rhai",
            Lang::Rhai,
            Arc::new(RhaiRuntime::new(Limits::default())),
        ),
        (
            "js_in_process",
            Lang::Js,
            Arc::new(JsRuntime::in_process(Limits::default())),
        ),
    ]
}

fn script_size(c: &mut Criterion) {
    for (name, lang, runtime) in backends() {
        let mut group = c.benchmark_group(format!("scale/{name}/script_size"));
        for bytes in [1024, 10 * 1024, 100 * 1024] {
            let (script, count) = lang.sized(bytes);
            let mut warm = session(&*runtime);
            expect(&mut warm, &script, ScriptOutput::final_result(json!(count)));
            group.throughput(Throughput::Bytes(script.len() as u64));
            group.bench_function(
                BenchmarkId::from_parameter(format!("{}kb", bytes / 1024)),
                |b| b.iter(|| warm.run_blocking(black_box(&script)).expect("host ok")),
            );
        }
        group.finish();
    }
}

fn history(c: &mut Criterion) {
    for (name, lang, runtime) in backends() {
        let mut group = c.benchmark_group(format!("scale/{name}/history"));
        group.sample_size(20);
        let observed = ScriptOutput::Observation { value: json!(3) };
        for steps_before in [0, 99] {
            group.bench_function(format!("step_{}", steps_before + 1), |b| {
                b.iter_custom(|iterations| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iterations {
                        let mut s = session(&*runtime);
                        expect(
                            &mut s,
                            lang.trivial(),
                            ScriptOutput::final_result(json!(42)),
                        );
                        for n in 1..=steps_before {
                            expect(&mut s, &lang.history_step(n), observed.clone());
                        }
                        let script = lang.history_step(steps_before + 1);
                        let started = Instant::now();
                        let run = s.run_blocking(&script).expect("host ok");
                        total += started.elapsed();
                        assert_eq!(run.output, observed);
                    }
                    total
                })
            });
        }
        group.finish();
    }
}

fn concurrency(c: &mut Criterion) {
    const STEPS_PER_SESSION: usize = 100;
    let host = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime starts");
    for (name, lang, runtime) in backends() {
        let mut group = c.benchmark_group(format!("scale/{name}/concurrent"));
        group.sample_size(10);
        for concurrent in [1usize, 10, 100] {
            group.throughput(Throughput::Elements(
                (concurrent * STEPS_PER_SESSION) as u64,
            ));
            group.bench_function(BenchmarkId::from_parameter(concurrent), |b| {
                b.iter_custom(|iterations| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iterations {
                        let sessions: Vec<ScriptSession> = (0..concurrent)
                            .map(|_| {
                                let mut s = session(&*runtime);
                                expect(
                                    &mut s,
                                    lang.trivial(),
                                    ScriptOutput::final_result(json!(42)),
                                );
                                s
                            })
                            .collect();
                        let started = Instant::now();
                        let done = host.block_on(async {
                            let tasks: Vec<_> = sessions
                                .into_iter()
                                .map(|mut s| {
                                    tokio::spawn(async move {
                                        for _ in 0..STEPS_PER_SESSION {
                                            let run = s.run(lang.trivial()).await.expect("host ok");
                                            assert_eq!(
                                                run.output,
                                                ScriptOutput::final_result(json!(42))
                                            );
                                        }
                                        s
                                    })
                                })
                                .collect();
                            let mut kept = Vec::new();
                            for task in tasks {
                                kept.push(task.await.expect("task ends"));
                            }
                            kept
                        });
                        total += started.elapsed();
                        drop(done);
                    }
                    total
                })
            });
        }
        group.finish();
    }
}

criterion_group!(benches, script_size, history, concurrency);
criterion_main!(benches);
