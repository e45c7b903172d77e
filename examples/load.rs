//! A load probe: N concurrent Rhai sessions on one multi-threaded runtime, mixing
//! trivial steps, tool calls and runaway loops, for a while. Prints steps done,
//! errors by kind, threads and peak RSS.
//!
//! `cargo run --release --example load -- [sessions] [seconds]` (default 500, 20).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use codeact::{Limits, RhaiRuntime, ScriptOutput, ScriptSession, Tool, ToolBox};
use serde_json::json;

fn status(field: &str) -> String {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with(field))
        .map(|l| l.trim().to_string())
        .unwrap_or_default()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let sessions: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(500);
    let seconds: u64 = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(20);
    let limits = Limits {
        wall_time: Duration::from_millis(200),
        ..Limits::default()
    };
    let runtime = Arc::new(RhaiRuntime::new(limits));
    let add = Tool::from_fn("add", "Adds.", |a| {
        Ok(json!(a["a"].as_i64().unwrap_or(0) + 1))
    });
    let tools = Arc::new(ToolBox::new([add]).expect("tools"));
    let steps = Arc::new(AtomicU64::new(0));
    let limit_hits = Arc::new(AtomicU64::new(0));
    let wrong = Arc::new(AtomicU64::new(0));
    println!("before: {} {}", status("VmRSS"), status("Threads"));
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let mut handles = Vec::new();
    for i in 0..sessions {
        let (runtime, tools, steps, limit_hits, wrong) = (
            runtime.clone(),
            tools.clone(),
            steps.clone(),
            limit_hits.clone(),
            wrong.clone(),
        );
        handles.push(tokio::spawn(async move {
            let mut session = ScriptSession::start(&*runtime, tools).expect("session");
            let mut n = 0u64;
            while Instant::now() < deadline {
                n += 1;
                let script = match (i + n as usize) % 10 {
                    0 => "let x = 0; loop { x += 1; }".to_string(),
                    1 => "let s = \"x\"; loop { s += s; }".to_string(),
                    2..=4 => format!(
                        "let t = 0; for i in 0..100 {{ t += add(i); }} final_result(t + {n})"
                    ),
                    _ => format!("final_result({n})"),
                };
                match session.run(script).await {
                    Ok(run) => match run.output {
                        ScriptOutput::FinalResult { .. } => {}
                        ScriptOutput::Error { message } if message.contains("exceeded") => {
                            limit_hits.fetch_add(1, Ordering::Relaxed);
                        }
                        other => {
                            eprintln!("unexpected: {other}");
                            wrong.fetch_add(1, Ordering::Relaxed);
                        }
                    },
                    Err(e) => {
                        eprintln!("host error: {e}");
                        wrong.fetch_add(1, Ordering::Relaxed);
                    }
                }
                steps.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    while Instant::now() < deadline {
        tokio::time::sleep(Duration::from_secs(2)).await;
        println!(
            "during: steps {} · {} {} {}",
            steps.load(Ordering::Relaxed),
            status("VmHWM"),
            status("VmRSS"),
            status("Threads")
        );
    }
    for handle in handles {
        handle.await.expect("session task");
    }
    println!(
        "after: steps {} · limit hits {} · unexpected {} · {} {}",
        steps.load(Ordering::Relaxed),
        limit_hits.load(Ordering::Relaxed),
        wrong.load(Ordering::Relaxed),
        status("VmRSS"),
        status("VmHWM")
    );
}
