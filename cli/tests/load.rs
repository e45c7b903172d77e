//! A small load in the test suite: every runtime at once in one process, more
//! sessions than running slots, each session running every kind of step
//! (`codeact_cli::bench::run_load`). The 500-session, 60-second run is
//! `cargo run --release --example load -- 500 60 mixed`.

/// As the `codeact` binary: Rhai runs are held to their memory limit by what they
/// allocate, not only by what their variables hold.
#[global_allocator]
static ALLOCATOR: codeact::MeteredAllocator = codeact::MeteredAllocator;

use std::sync::Arc;
use std::time::Duration;

use codeact::{Limits, Runtime};
use codeact_cli::bench::{LoadPlan, LoadProgress, LoadTally, MIXED, run_load};

mod support;
use support::reliability::{self, Section};

const SECTION: Section = Section {
    name: "load",
    title: "Load: every runtime at once",
    intro: "30 sessions in one process (15 Rhai, 3 JavaScript workers, 6 QuickJS, 3 MicroPython, 3 CPython), more than the running-script slots, each running ten steps: one runaway loop, one memory bomb, three with 100 tool calls, five trivial. Limits are the defaults with a 2 s time limit. The 500-session run is `cargo run --release --example load -- 500 60 mixed` (its figures are in the closing notes, not here: they are timings).",
    binary: "load",
    columns: &["rhai", "js", "wasm:js", "wasm:micropython", "wasm:python"],
};

const SESSIONS: usize = 30;
const STEPS: u64 = 10;
/// Generous, so that an ordinary step on a loaded 2-core debug build never meets
/// it: the outcome must not depend on the machine's speed.
const LIMIT: Duration = Duration::from_secs(2);
/// How late a runaway may be stopped: past this the limit did not hold.
const GRACE: Duration = Duration::from_secs(2);

fn runtime(name: &str, limits: Limits) -> Arc<dyn Runtime> {
    support::runtimes::runtime(name, limits).unwrap_or_else(|e| panic!("{e}"))
}

/// The rows for one runtime's tally, or what went wrong.
fn rows(name: &str, tally: &LoadTally) -> Result<Vec<(String, String)>, String> {
    let sessions = MIXED.iter().filter(|m| **m == name).count() as u64 * SESSIONS as u64 / 10;
    let problems: Vec<String> = [
        (tally.steps != sessions * STEPS)
            .then(|| format!("{} steps ran, not {}", tally.steps, sessions * STEPS)),
        (tally.unexpected > 0).then(|| {
            format!(
                "{} unexpected outcome(s): {:?}",
                tally.unexpected, tally.unexpected_samples
            )
        }),
        (tally.runaways_stopped != sessions * 2).then(|| {
            format!(
                "{} runaways stopped, not {}",
                tally.runaways_stopped,
                sessions * 2
            )
        }),
        (tally.slowest_loop_stop.max(tally.slowest_bomb_stop) > LIMIT + GRACE).then(|| {
            format!(
                "a runaway ran on past its limit: loop {:?}, memory bomb {:?}",
                tally.slowest_loop_stop, tally.slowest_bomb_stop
            )
        }),
        (tally.stopped_by_the_clock > 0).then(|| {
            format!(
                "{} ordinary step(s) stopped by the clock",
                tally.stopped_by_the_clock
            )
        }),
    ]
    .into_iter()
    .flatten()
    .collect();
    if !problems.is_empty() {
        return Err(format!("{name}: {}", problems.join("; ")));
    }
    let row = |case: &str, outcome: &str| (case.to_string(), outcome.to_string());
    Ok(vec![
        row(
            "runaway_loop_in_one_step_of_ten",
            "✓ every one stopped by a limit, within 2 s past it",
        ),
        row(
            "memory_bomb_in_one_step_of_ten",
            "✓ every one stopped by a limit, within 2 s past it",
        ),
        row(
            "100_tool_calls_or_a_trivial_step_in_the_others",
            "✓ every one returned its own value",
        ),
        row("unexpected_outcomes_or_host_errors", "✓ none"),
    ])
}

#[test]
fn every_runtime_at_once_holds_every_limit_and_returns_every_result() {
    let limits = Limits {
        wall_time: LIMIT,
        ..Limits::default()
    };
    let mut runtimes: Vec<(String, Arc<dyn Runtime>)> = Vec::new();
    for name in MIXED {
        let loaded = runtimes.iter().find(|(loaded, _)| loaded == name);
        let runtime = match loaded {
            Some((_, runtime)) => runtime.clone(),
            None => runtime(name, limits.clone()),
        };
        runtimes.push((name.to_string(), runtime));
    }
    let plan = LoadPlan {
        sessions: SESSIONS,
        duration: Duration::from_secs(300),
        steps_per_session: Some(STEPS),
    };
    let progress = LoadProgress::new(&runtimes);
    let tallies = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
        .block_on(run_load(&plan, &runtimes, &progress));
    let mut failures = Vec::new();
    for name in SECTION.columns {
        let Some(tally) = tallies.get(*name) else {
            failures.push(format!("{name}: no tally"));
            continue;
        };
        eprintln!("{name}: {}", tally.line());
        match rows(name, tally) {
            Ok(rows) => {
                if let Err(problem) = reliability::submit(&SECTION, name, rows) {
                    failures.push(problem);
                }
            }
            Err(problem) => failures.push(problem),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
