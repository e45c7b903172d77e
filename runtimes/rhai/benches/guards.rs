//! What the in-process Rhai backend's guards cost per step, without building the
//! whole host: `cargo bench -p codeact-rhai --bench guards`. The deadline flag is
//! checked on every operation (`sum_to_a_million`: a million loop iterations); the
//! memory meter scans on variable reads and definitions, and on every access in a
//! small function frame (`fib_20`: 22,000 calls); `closures_1000` keeps a thousand
//! closures whose captures the meter walks.

// criterion_group! generates an undocumented public function.
#![allow(missing_docs)]

use std::sync::Arc;

use codeact_rhai::RhaiRuntime;
use codeact_runtime::{Limits, NoTools, Runtime, Session};
use criterion::{Criterion, black_box, criterion_group, criterion_main};
use serde_json::{Value, json};

const TRIVIAL: &str = "final_result(40 + 2)";
const SUM: &str = "let s = 0; for i in 1..=1000000 { s += i; } s";
const FIB: &str = "fn fib(n) { if n < 2 { n } else { fib(n - 1) + fib(n - 2) } } fib(20)";
const CLOSURES: &str = "let fs = []; for i in 0..1000 { let v = i; fs.push(|| v); } let t = 0; for f in fs { t += f.call(); } t";

fn limits() -> Limits {
    Limits {
        max_operations: u64::MAX,
        ..Limits::default()
    }
}

fn session() -> Box<dyn Session> {
    RhaiRuntime::new(limits())
        .new_session(Arc::new(NoTools))
        .expect("session starts")
}

fn run(session: &mut dyn Session, script: &str) -> Value {
    session
        .run(script)
        .expect("host ok")
        .completion
        .expect("script ok")
}

fn steps(c: &mut Criterion) {
    let mut group = c.benchmark_group("rhai_guards");
    let runtime = RhaiRuntime::new(limits());
    group.bench_function("new_session", |b| {
        b.iter(|| {
            runtime
                .new_session(Arc::new(NoTools))
                .expect("session starts")
        })
    });
    let mut warm = session();
    assert_eq!(run(&mut *warm, TRIVIAL)["value"], json!(42));
    group.bench_function("warm_trivial_step", |b| {
        b.iter(|| warm.run(black_box(TRIVIAL)).expect("host ok"))
    });
    group.sample_size(10);
    for (name, script, expected) in [
        ("sum_to_a_million", SUM, json!(500_000_500_000_i64)),
        ("fib_20", FIB, json!(6_765)),
        ("closures_1000", CLOSURES, json!(499_500)),
    ] {
        let mut session = session();
        assert_eq!(run(&mut *session, script), expected, "{name}");
        group.bench_function(name, |b| {
            b.iter(|| session.run(black_box(script)).expect("host ok"))
        });
    }
    group.finish();
}

criterion_group!(benches, steps);
criterion_main!(benches);
