//! What a step costs on the wasm backend, per guest: QuickJS (`wasm:js`),
//! MicroPython (`wasm:micropython`), CPython (`wasm:python`), and the guests built
//! here, Rhai (`wasm:rhai`) and Boa (`wasm:boa`).
//!
//! `cargo bench --bench wasm` (guests from `guests/fetch-guests.sh`, which also
//! builds the last two). Cases: load
//! from the disk cache, new session, warm trivial step, 1,000 tool calls, sum of
//! 1..=1,000,000 in a loop, time to stop an infinite loop under a 200 ms limit, and
//! a 10 KB JSON value from a tool and back as the result.
//! Compiling a guest cold takes seconds, too long for criterion's samples: it is
//! timed once per guest and printed first (`compile_cold`). Each case checks its
//! result before it is timed.
//!
//! Then `wasm:python-sci` (when fetched with `guests/fetch-guests.sh
//! --python-sci`; else a `SKIPPED` line): a new session from its memory template
//! plus its first step, a warm step, and a snapshot and a restore of a session
//! that imported pandas and made a data frame.

// criterion_group! generates an undocumented public function.
#![allow(missing_docs)]

mod common;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use codeact::{Limits, ScriptOutput, ScriptSession, Tool, ToolBox};
use codeact_wasm::{Guest, Source, WasmRuntime, cache, default_guest_dir};
use criterion::{BatchSize, Criterion, black_box, criterion_group, criterion_main};
use serde_json::json;

struct Case {
    guest: &'static str,
    trivial: &'static str,
    calls: &'static str,
    sum: &'static str,
    spin: &'static str,
    json: &'static str,
}

const CASES: &[Case] = &[
    Case {
        guest: "wasm:js",
        trivial: "final_result(40 + 2)",
        calls: "let s = 0; for (let i = 0; i < 1000; i++) s += tools.add({a: i, b: 1}); final_result(s)",
        sum: "let s = 0; for (let i = 1; i <= 1000000; i++) s += i; final_result(s)",
        spin: "while (true) {}",
        json: "let d = tools.data({}); final_result(d)",
    },
    Case {
        guest: "wasm:micropython",
        trivial: "final_result(40 + 2)",
        calls: "s = 0\nfor i in range(1000):\n    s += add(a=i, b=1)\nfinal_result(s)",
        sum: "s = 0\nfor i in range(1, 1000001):\n    s += i\nfinal_result(s)",
        spin: "while True:\n    pass",
        json: "d = data()\nfinal_result(d)",
    },
    Case {
        guest: "wasm:python",
        trivial: "final_result(40 + 2)",
        calls: "s = 0\nfor i in range(1000):\n    s += add(a=i, b=1)\nfinal_result(s)",
        sum: "s = 0\nfor i in range(1, 1000001):\n    s += i\nfinal_result(s)",
        spin: "while True:\n    pass",
        json: "d = data()\nfinal_result(d)",
    },
    Case {
        guest: "wasm:rhai",
        trivial: "final_result(40 + 2)",
        calls: "let s = 0; for i in 0..1000 { s += add(#{a: i, b: 1}); } final_result(s)",
        sum: "let s = 0; for i in 1..=1000000 { s += i; } final_result(s)",
        spin: "loop {}",
        json: "let d = data(); final_result(d)",
    },
    Case {
        guest: "wasm:boa",
        trivial: "final_result(40 + 2)",
        calls: "let s = 0; for (let i = 0; i < 1000; i++) s += tools.add({a: i, b: 1}); final_result(s)",
        sum: "let s = 0; for (let i = 1; i <= 1000000; i++) s += i; final_result(s)",
        spin: "while (true) {}",
        json: "let d = tools.data({}); final_result(d)",
    },
];

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

fn guest(name: &str) -> Guest {
    Guest::pinned(name, &default_guest_dir()).expect("a known guest")
}

fn scratch_cache(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "codeact-bench-cache-{}-{}",
        name.replace(':', "-"),
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn guests(c: &mut Criterion) {
    for case in CASES {
        // Compile cold: an empty cache directory, nothing loaded in this process.
        let cold_dir = scratch_cache(case.guest);
        cache::forget_loaded();
        let started = Instant::now();
        let runtime = WasmRuntime::with_cache_dir(guest(case.guest), Limits::default(), &cold_dir)
            .expect("the guest compiles");
        assert_eq!(runtime.source(), Source::Compiled);
        println!(
            "{}/compile_cold: {:.3} s (one run)",
            case.guest,
            started.elapsed().as_secs_f64()
        );

        let mut group = c.benchmark_group(case.guest);
        group.sample_size(10);
        group.bench_function("load_from_cache", |b| {
            b.iter(|| {
                cache::forget_loaded();
                let runtime =
                    WasmRuntime::with_cache_dir(guest(case.guest), Limits::default(), &cold_dir)
                        .expect("loads");
                assert_eq!(runtime.source(), Source::Disk);
                runtime
            })
        });
        let _ = std::fs::remove_dir_all(&cold_dir);

        group.bench_function("new_session", |b| {
            b.iter(|| ScriptSession::start(&runtime, toolbox()).expect("session starts"))
        });

        let mut warm = ScriptSession::start(&runtime, toolbox()).expect("session starts");
        let run = warm.run_blocking(case.trivial).expect("host ok");
        assert_eq!(run.output, ScriptOutput::final_result(json!(42)));
        group.sample_size(50);
        group.bench_function("warm_trivial_step", |b| {
            b.iter(|| warm.run_blocking(black_box(case.trivial)).expect("host ok"))
        });

        let run = warm.run_blocking(case.calls).expect("host ok");
        assert_eq!(run.output, ScriptOutput::final_result(json!(500_500)));
        group.sample_size(10);
        group.bench_function("tool_calls_1000", |b| {
            b.iter(|| warm.run_blocking(black_box(case.calls)).expect("host ok"))
        });

        let run = warm.run_blocking(case.json).expect("host ok");
        assert_eq!(
            run.output,
            ScriptOutput::final_result(common::sample_value(10 * 1024))
        );
        group.bench_function("json_10kb", |b| {
            b.iter(|| warm.run_blocking(black_box(case.json)).expect("host ok"))
        });

        let mut fresh = ScriptSession::start(&runtime, toolbox()).expect("session starts");
        let run = fresh.run_blocking(case.sum).expect("host ok");
        assert_eq!(
            run.output,
            ScriptOutput::final_result(json!(500_000_500_000_i64))
        );
        // A fresh session per iteration (not timed): MicroPython never collects
        // garbage (see its prelude), and a million big-integer additions fill
        // its heap in a few runs.
        group.measurement_time(Duration::from_secs(20));
        group.bench_function("sum_to_a_million", |b| {
            b.iter_batched(
                || ScriptSession::start(&runtime, toolbox()).expect("session starts"),
                |mut session| session.run_blocking(black_box(case.sum)).expect("host ok"),
                BatchSize::PerIteration,
            )
        });

        let limited = WasmRuntime::new(
            guest(case.guest),
            Limits {
                wall_time: Duration::from_millis(200),
                ..Limits::default()
            },
        )
        .expect("loads");
        let mut stopping = ScriptSession::start(&limited, toolbox()).expect("session starts");
        let run = stopping.run_blocking(case.spin).expect("host ok");
        assert!(
            matches!(&run.output, ScriptOutput::Error { message } if message.contains("time limit of 200 ms")),
            "{}",
            run.output
        );
        group.measurement_time(Duration::from_secs(5));
        group.bench_function("time_to_stop_200ms_limit", |b| {
            b.iter(|| {
                stopping
                    .run_blocking(black_box(case.spin))
                    .expect("host ok")
            })
        });
        group.finish();
    }
}

/// `wasm:python-sci`'s start by turns and its snapshots; see the module docs.
fn python_sci(c: &mut Criterion) {
    let limits = Limits {
        max_memory_bytes: 512 << 20,
        wall_time: Duration::from_secs(60),
        ..Limits::default()
    };
    let runtime = match WasmRuntime::new(guest("wasm:python-sci"), limits) {
        Ok(runtime) => runtime,
        Err(e) => {
            println!("SKIPPED: wasm:python-sci: {e}");
            return;
        }
    };
    let mut group = c.benchmark_group("wasm:python-sci");
    group.sample_size(20);
    let trivial = "final_result(40 + 2)";
    let mut first = ScriptSession::start(&runtime, toolbox()).expect("session starts");
    let run = first.run_blocking(trivial).expect("host ok");
    assert_eq!(run.output, ScriptOutput::final_result(json!(42)));
    group.bench_function("new_session_first_step", |b| {
        b.iter_with_large_drop(|| {
            let mut session = ScriptSession::start(&runtime, toolbox()).expect("session starts");
            let run = session.run_blocking(trivial).expect("host ok");
            (session, run)
        })
    });
    group.sample_size(50);
    group.bench_function("warm_trivial_step", |b| {
        b.iter(|| first.run_blocking(black_box(trivial)).expect("host ok"))
    });
    let mut pandas = ScriptSession::start(&runtime, toolbox()).expect("session starts");
    let run = pandas
        .run_blocking("import pandas as pd\nframe = pd.DataFrame({'a': [1, 2, 3]})\nfinal_result(int(frame['a'].sum()))")
        .expect("host ok");
    assert_eq!(run.output, ScriptOutput::final_result(json!(6)));
    group.sample_size(20);
    group.bench_function("snapshot_pandas", |b| {
        b.iter(|| pandas.snapshot().expect("a snapshot"))
    });
    let snapshot = pandas.snapshot().expect("a snapshot");
    println!(
        "wasm:python-sci/snapshot_pandas: {:.1} MB",
        snapshot.as_bytes().len() as f64 / 1e6
    );
    let mut restored = ScriptSession::restore(&runtime, &snapshot, toolbox()).expect("restores");
    let run = restored
        .run_blocking("final_result(int(frame['a'].sum()) + len(pd.__version__) * 0)")
        .expect("host ok");
    assert_eq!(run.output, ScriptOutput::final_result(json!(6)));
    group.bench_function("restore_pandas", |b| {
        b.iter_with_large_drop(|| {
            ScriptSession::restore(&runtime, &snapshot, toolbox()).expect("restores")
        })
    });
    group.finish();
}

criterion_group!(benches, guests, python_sci);
criterion_main!(benches);
