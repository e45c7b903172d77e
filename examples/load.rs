//! A load probe: N concurrent sessions on one multi-threaded runtime, mixing
//! runtimes (Rhai, JavaScript in workers, QuickJS, MicroPython and CPython guests)
//! and scripts (trivial steps, tool calls, runaway loops, memory bombs), for a
//! while. Prints steps done, how each kind of script ended, anything unexpected,
//! and RSS before, during and after: once every session has ended and after 12 s
//! idle. With more than one round the same load runs again in the same process:
//! memory leaked grows round by round, memory the allocator keeps for reuse does not.
//!
//! `cargo run --release --example load -- [sessions] [seconds] [rhai|mixed] [rounds]`
//! (default 500, 20, rhai, 1). `mixed` gives each tenth of the sessions, in order:
//! five Rhai, one JavaScript worker, two QuickJS, one MicroPython, one CPython
//! (wasm guests from `scripts/fetch-guests.sh`).
//!
//! Every limit is a wall-clock one (200 ms here): with hundreds of sessions on two
//! cores a legitimate script can be stopped too, which is counted apart from runaway
//! scripts (all of which must be stopped) and from anything unexpected (which must
//! stay at zero).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use codeact::{Limits, Runtime, ScriptOutput, ScriptSession, Tool, ToolBox, runtime_by_name};
use serde_json::json;

fn status(field: &str) -> String {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with(field))
        .map(|l| l.trim().to_string())
        .unwrap_or_default()
}

/// The scripts one runtime's sessions cycle through: (runaway loop, memory bomb,
/// 100 tool calls ending in final_result(N), trivial final_result(N)); `{n}` is
/// replaced by the step number.
fn scripts(runtime: &str) -> [&'static str; 4] {
    match runtime {
        "rhai" => [
            "let x = 0; loop { x += 1; }",
            "let s = \"x\"; loop { s += s; }",
            "let t = 0; for i in 0..100 { t += add(i); } final_result({n})",
            "final_result({n})",
        ],
        "js" | "wasm:js" => [
            "while (true) {}",
            "let a = []; while (true) a.push(new Array(10000).fill(1));",
            "let t = 0; for (let i = 0; i < 100; i++) t += tools.add({a: i}); final_result({n})",
            "final_result({n})",
        ],
        _ => [
            "while True:\n    pass",
            "a = []\nwhile True:\n    a.append([1] * 10000)",
            "t = 0\nfor i in range(100):\n    t += add(a=i)\nfinal_result({n})",
            "final_result({n})",
        ],
    }
}

fn runtime_for(index: usize, mix: &str) -> &'static str {
    if mix != "mixed" {
        return "rhai";
    }
    match index % 10 {
        0..=4 => "rhai",
        5 => "js",
        6 | 7 => "wasm:js",
        8 => "wasm:micropython",
        _ => "wasm:python",
    }
}

#[derive(Default)]
struct Tally {
    steps: AtomicU64,
    results: AtomicU64,
    runaways_stopped: AtomicU64,
    slowest_loop_stop_ms: AtomicU64,
    slowest_bomb_stop_ms: AtomicU64,
    legit_stopped_by_clock: AtomicU64,
    unexpected: AtomicU64,
}

/// How one step ended, against what its script should do.
fn judge(pick: usize, n: u64, outcome: &Result<codeact::ScriptRun, codeact::HostError>) -> Verdict {
    let runaway = pick < 2;
    match outcome {
        Ok(run) => match &run.output {
            ScriptOutput::FinalResult { value, .. } if !runaway && *value == json!(n) => {
                Verdict::Result
            }
            ScriptOutput::Error { message } if message.contains("exceeded the") => {
                if runaway {
                    Verdict::RunawayStopped
                } else if message.contains("time limit") {
                    Verdict::LegitStoppedByClock
                } else {
                    Verdict::Unexpected(message.clone())
                }
            }
            other => Verdict::Unexpected(other.to_string()),
        },
        Err(e) => Verdict::Unexpected(format!("host error: {e}")),
    }
}

enum Verdict {
    Result,
    RunawayStopped,
    LegitStoppedByClock,
    Unexpected(String),
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    codeact::run_worker_if_requested();
    let args: Vec<String> = std::env::args().collect();
    let sessions: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(500);
    let seconds: u64 = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(20);
    let mix = args.get(3).cloned().unwrap_or_else(|| "rhai".into());
    let rounds: usize = args.get(4).and_then(|a| a.parse().ok()).unwrap_or(1);
    let limits = Limits {
        wall_time: Duration::from_millis(200),
        ..Limits::default()
    };
    let mut runtimes: BTreeMap<&'static str, Arc<dyn Runtime>> = BTreeMap::new();
    for i in 0..sessions.min(10) {
        let name = runtime_for(i, &mix);
        if !runtimes.contains_key(name) {
            let runtime = runtime_by_name(name, limits.clone()).expect("runtime");
            runtimes.insert(name, runtime);
        }
    }
    let add = Tool::from_fn("add", "Adds.", |a| {
        Ok(json!(a["a"].as_i64().unwrap_or(0) + 1))
    });
    let tools = Arc::new(ToolBox::new([add]).expect("tools"));
    println!("before: {} {}", status("VmRSS"), status("Threads"));
    for round in 1..=rounds {
        if rounds > 1 {
            println!("round {round} of {rounds}");
        }
        run_round(sessions, seconds, &mix, &runtimes, &tools).await;
        // Idle blocking threads of the runtime exit after 10 s; give them time.
        tokio::time::sleep(Duration::from_secs(12)).await;
        println!("after 12 s idle: {} {}", status("VmRSS"), status("Threads"));
    }
}

async fn run_round(
    sessions: usize,
    seconds: u64,
    mix: &str,
    runtimes: &BTreeMap<&'static str, Arc<dyn Runtime>>,
    tools: &Arc<ToolBox>,
) {
    let tallies: Arc<BTreeMap<&'static str, Tally>> = Arc::new(
        runtimes
            .keys()
            .map(|name| (*name, Tally::default()))
            .collect(),
    );
    let unexpected_samples = Arc::new(Mutex::new(Vec::<String>::new()));
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let mut handles = Vec::new();
    for i in 0..sessions {
        let name = runtime_for(i, mix);
        let runtime = runtimes[name].clone();
        let (tools, tallies, samples) =
            (tools.clone(), tallies.clone(), unexpected_samples.clone());
        handles.push(tokio::spawn(async move {
            let tally = &tallies[name];
            let note = |sample: String| {
                tally.unexpected.fetch_add(1, Ordering::Relaxed);
                if let Ok(mut s) = samples.lock() {
                    s.push(format!("{name}: {sample}"));
                }
            };
            let mut session = match ScriptSession::start(&*runtime, tools) {
                Ok(session) => session,
                Err(e) => return note(format!("session start: {e}")),
            };
            let cycle = scripts(name);
            let mut n = 0u64;
            while Instant::now() < deadline {
                n += 1;
                let pick = match (i + n as usize) % 10 {
                    0 => 0,
                    1 => 1,
                    2..=4 => 2,
                    _ => 3,
                };
                let script = cycle[pick].replace("{n}", &n.to_string());
                let outcome = session.run(script).await;
                match judge(pick, n, &outcome) {
                    Verdict::Result => {
                        tally.results.fetch_add(1, Ordering::Relaxed);
                    }
                    Verdict::RunawayStopped => {
                        tally.runaways_stopped.fetch_add(1, Ordering::Relaxed);
                        let took = outcome.as_ref().map(|run| run.ran_for).unwrap_or_default();
                        let ms = u64::try_from(took.as_millis()).unwrap_or(u64::MAX);
                        let slowest = if pick == 0 {
                            &tally.slowest_loop_stop_ms
                        } else {
                            &tally.slowest_bomb_stop_ms
                        };
                        slowest.fetch_max(ms, Ordering::Relaxed);
                    }
                    Verdict::LegitStoppedByClock => {
                        tally.legit_stopped_by_clock.fetch_add(1, Ordering::Relaxed);
                    }
                    Verdict::Unexpected(what) => note(what),
                }
                tally.steps.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    let total = || -> u64 {
        tallies
            .values()
            .map(|t| t.steps.load(Ordering::Relaxed))
            .sum()
    };
    while Instant::now() < deadline {
        tokio::time::sleep(Duration::from_secs(5)).await;
        println!(
            "during: steps {} · {} {} {}",
            total(),
            status("VmHWM"),
            status("VmRSS"),
            status("Threads")
        );
    }
    for handle in handles {
        handle.await.expect("a session task panicked");
    }
    for (name, tally) in tallies.iter() {
        let get = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        println!(
            "{name}: steps {} · results {} · runaways stopped {} (slowest: loop {} ms, memory bomb {} ms) · \
             legitimate scripts stopped by the clock {} · unexpected {}",
            get(&tally.steps),
            get(&tally.results),
            get(&tally.runaways_stopped),
            get(&tally.slowest_loop_stop_ms),
            get(&tally.slowest_bomb_stop_ms),
            get(&tally.legit_stopped_by_clock),
            get(&tally.unexpected),
        );
    }
    if let Ok(samples) = unexpected_samples.lock() {
        for sample in samples.iter().take(10) {
            println!(
                "unexpected: {}",
                sample.chars().take(300).collect::<String>()
            );
        }
    }
    println!(
        "ended: {} {} {}",
        status("VmRSS"),
        status("VmHWM"),
        status("Threads")
    );
}
