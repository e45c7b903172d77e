//! A load probe: N concurrent sessions on one multi-threaded runtime, mixing
//! runtimes and scripts (trivial steps, tool calls, runaway loops, memory bombs),
//! for a while (`codeact_cli::bench::run_load`). Prints steps done, how each kind of
//! script ended, anything unexpected, and RSS before (once each runtime has run one
//! step: what it keeps for the process's life, like compiled guests, is baseline),
//! during and after: once every session has ended and after 12 s idle. With more
//! than one round the same load runs again in the same process: memory leaked
//! grows round by round, memory the allocator keeps for reuse does not.
//!
//! `cargo run --release --example load -- [sessions] [seconds] [mixed|NAME,…] [rounds]`
//! (default 500, 20, rhai, 1). `mixed` gives each tenth of the sessions, in order:
//! five Rhai, one JavaScript worker, two QuickJS, one MicroPython, one CPython
//! (wasm guests from `guests/fetch-guests.sh`); runtime names, comma-separated,
//! take turns instead.
//!
//! Every limit is a wall-clock one (200 ms here). At most twice as many scripts as
//! cores run at once (`codeact::exec::set_max_running_scripts`; the others wait, their
//! clocks not yet started), so each one stopped is stopped at its own limit.

use std::sync::Arc;
use std::time::{Duration, Instant};

use codeact::{Limits, Runtime, ScriptOutput, ScriptSession, runtime_by_name};
use codeact_cli::bench::{LoadPlan, LoadProgress, MIXED, add_tool, run_load};

/// As the `codeact` binary: Rhai runs are held to their memory limit by what they
/// allocate.
#[global_allocator]
static ALLOCATOR: codeact::MeteredAllocator = codeact::MeteredAllocator;

fn status(field: &str) -> String {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with(field))
        .map(|l| l.trim().to_string())
        .unwrap_or_default()
}

fn main() -> std::process::ExitCode {
    // The JavaScript sessions' workers are this program started again.
    if let Some(code) = codeact::run_worker_if_requested() {
        return code;
    }
    probe();
    std::process::ExitCode::SUCCESS
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn probe() {
    let args: Vec<String> = std::env::args().collect();
    let sessions: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(500);
    let seconds: u64 = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(20);
    let mix = args.get(3).cloned().unwrap_or_else(|| "rhai".into());
    let rounds: usize = args.get(4).and_then(|a| a.parse().ok()).unwrap_or(1);
    let limits = Limits {
        wall_time: Duration::from_millis(200),
        ..Limits::default()
    };
    let names: Vec<&str> = if mix == "mixed" {
        MIXED.to_vec()
    } else {
        mix.split(',').map(str::trim).collect()
    };
    let mut runtimes: Vec<(String, Arc<dyn Runtime>)> = Vec::new();
    let mut loaded: Vec<(&str, Arc<dyn Runtime>)> = Vec::new();
    for name in names.iter().copied() {
        let runtime = match loaded.iter().find(|(loaded, _)| *loaded == name) {
            Some((_, runtime)) => runtime.clone(),
            None => {
                let runtime = runtime_by_name(name, limits.clone()).expect("runtime");
                loaded.push((name, runtime.clone()));
                runtime
            }
        };
        runtimes.push((name.to_string(), runtime));
    }
    // What a process keeps for its life once a runtime is used (the wasm guests'
    // compiled code, loaded on first use) is part of the baseline.
    for (name, runtime) in &loaded {
        let mut session = ScriptSession::start(&**runtime, add_tool()).expect("warm-up");
        let run = session.run("final_result(0)").await.expect("warm-up step");
        assert_eq!(run.output, ScriptOutput::final_result(0.into()), "{name}");
    }
    println!(
        "before: {} {} · at most {:?} scripts run at once",
        status("VmRSS"),
        status("Threads"),
        codeact::exec::max_running_scripts()
    );
    for round in 1..=rounds {
        if rounds > 1 {
            println!("round {round} of {rounds}");
        }
        let progress = LoadProgress::new(&runtimes);
        let watcher = progress.clone();
        let watch = tokio::spawn(async move {
            let started = Instant::now();
            loop {
                tokio::time::sleep(Duration::from_secs(5)).await;
                if started.elapsed() > Duration::from_secs(seconds) {
                    break;
                }
                println!(
                    "during: steps {} · {} {} {}",
                    watcher.steps(),
                    status("VmHWM"),
                    status("VmRSS"),
                    status("Threads")
                );
            }
        });
        let plan = LoadPlan {
            sessions,
            duration: Duration::from_secs(seconds),
            steps_per_session: None,
        };
        let tallies = run_load(&plan, &runtimes, &progress).await;
        watch.abort();
        for (name, tally) in &tallies {
            println!("{name}: {}", tally.line());
            for sample in &tally.unexpected_samples {
                println!("  unexpected: {sample}");
            }
        }
        println!(
            "ended: {} {} {}",
            status("VmRSS"),
            status("VmHWM"),
            status("Threads")
        );
        // Idle blocking threads of the runtime exit after 10 s; give them time.
        tokio::time::sleep(Duration::from_secs(12)).await;
        println!("after 12 s idle: {} {}", status("VmRSS"), status("Threads"));
    }
}
