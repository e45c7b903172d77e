//! How a backend behaves at scale: memory per idle session, throughput with many
//! sessions stepping at once, and how a step's cost grows with the script's size
//! and with the session's history.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;

use super::cases::{Backend, check, step};
use super::machine::{children_private_bytes, cpu_seconds, rss_bytes};
use super::report::{History, IdleMemory, Measured, ScaleReport, ScriptSize, Throughput};
use super::stats::Summary;
use codeact::exec::ScriptSession;
use codeact::output::ScriptOutput;

/// Sessions stepping at once, per throughput measurement.
pub const CONCURRENCY: [usize; 3] = [1, 10, 100];

/// Script sizes of the script-size measurement, in bytes.
pub const SCRIPT_SIZES: [usize; 3] = [1024, 10 * 1024, 100 * 1024];

/// Steps per session in the history measurement.
pub const HISTORY_STEPS: usize = 100;

/// Sessions held for the idle-memory figure. 1,000 where a session is cheap;
/// fewer where each holds a process or a whole interpreter (a CPython guest holds
/// tens of MiB), so the machine is not exhausted: the count is in the report.
pub fn idle_sessions(runtime: &str, quick: bool) -> usize {
    let full = match runtime {
        "rhai" | "js-in-process" => 1_000,
        "wasm:python" | "wasm:cpython" => 50,
        _ => 100,
    };
    if quick { (full / 10).max(10) } else { full }
}

/// Runs every scale measurement on `backend`. `warm_step_us` (the warm-step
/// median) sets the ideal throughput.
pub fn run_scale(
    backend: &Backend,
    warm_step_us: Option<f64>,
    progress: &mut dyn FnMut(&str),
) -> ScaleReport {
    progress("scale: idle session memory");
    let idle_memory = Measured::from(idle_memory(
        backend,
        idle_sessions(&backend.name, backend.quick),
    ));
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    let throughput = CONCURRENCY
        .iter()
        .map(|&n| {
            progress(&format!("scale: {n} concurrent sessions"));
            Measured::from(throughput(backend, n, workers, warm_step_us))
        })
        .collect();
    let script_size = SCRIPT_SIZES
        .iter()
        .map(|&bytes| {
            progress(&format!("scale: {} KB script", bytes / 1024));
            ScriptSize {
                bytes,
                result: Measured::from(script_size(backend, bytes)),
            }
        })
        .collect();
    progress("scale: step 1 vs step 100");
    let history = Measured::from(history(backend));
    ScaleReport {
        idle_memory,
        worker_threads: workers,
        throughput,
        script_size,
        history,
    }
}

fn memory_now() -> Result<(u64, u64), String> {
    let rss = rss_bytes().ok_or("no /proc/self/status here to read VmRSS from")?;
    Ok((rss, children_private_bytes()))
}

fn growth(after: u64, before: u64) -> i64 {
    i64::try_from(after).unwrap_or(i64::MAX) - i64::try_from(before).unwrap_or(i64::MAX)
}

/// Holds `count` sessions, each past one trivial step, and reads how much resident
/// memory grew. A few sessions are started and dropped first, so one-off costs
/// (allocator arenas, thread-local stacks, module caches) are not counted.
fn idle_memory(backend: &Backend, count: usize) -> Result<IdleMemory, String> {
    for _ in 0..count.min(10) {
        drop(backend.warm_session()?);
    }
    let (rss_before, workers_before) = memory_now()?;
    let mut sessions = Vec::with_capacity(count);
    for _ in 0..count {
        sessions.push(backend.warm_session()?);
    }
    let (rss_after, workers_after) = memory_now()?;
    drop(sessions);
    let host = growth(rss_after, rss_before);
    let workers = growth(workers_after, workers_before);
    Ok(IdleMemory {
        sessions: count,
        host_rss_growth_bytes: host,
        worker_private_growth_bytes: workers,
        per_session_bytes: (host + workers) as f64 / count.max(1) as f64,
    })
}

/// Steps per second with `concurrent` sessions, one tokio task each, on a
/// multi-threaded runtime with `workers` threads, each task stepping through
/// `ScriptSession::run` (the agent loop's path) until the window closes.
fn throughput(
    backend: &Backend,
    concurrent: usize,
    workers: usize,
    warm_step_us: Option<f64>,
) -> Result<Throughput, String> {
    let window = if backend.quick {
        Duration::from_millis(300)
    } else {
        Duration::from_secs(2)
    };
    let host = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start a tokio runtime: {e}"))?;
    let mut sessions = Vec::with_capacity(concurrent);
    for _ in 0..concurrent {
        sessions.push(backend.warm_session()?);
    }
    let steps = Arc::new(AtomicU64::new(0));
    let script: Arc<str> = Arc::from(backend.lang.trivial());
    let cpu_before = cpu_seconds();
    let started = Instant::now();
    let deadline = started + window;
    let result: Result<Vec<ScriptSession>, String> = host.block_on(async {
        let tasks: Vec<_> = sessions
            .into_iter()
            .map(|mut session| {
                let steps = steps.clone();
                let script = script.clone();
                tokio::spawn(async move {
                    let expected = ScriptOutput::final_result(json!(42));
                    while Instant::now() < deadline {
                        let run = session.run(&*script).await.map_err(|e| e.to_string())?;
                        check(&run, &expected)?;
                        steps.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok::<_, String>(session)
                })
            })
            .collect();
        let mut kept = Vec::with_capacity(tasks.len());
        for task in tasks {
            kept.push(
                task.await
                    .map_err(|e| format!("a stepping task failed: {e}"))??,
            );
        }
        Ok(kept)
    });
    let seconds = started.elapsed().as_secs_f64();
    let cpus_used = cpu_before
        .zip(cpu_seconds())
        .map(|(before, after)| (after - before) / seconds);
    // Sessions end outside the window (a JavaScript worker is a process to stop).
    drop(result?);
    let steps = steps.load(Ordering::Relaxed);
    let steps_per_second = steps as f64 / seconds;
    let per_cpu = warm_step_us.filter(|us| *us > 0.0).map(|us| 1e6 / us);
    let cpus = concurrent.min(workers) as f64;
    Ok(Throughput {
        concurrent,
        steps,
        seconds,
        steps_per_second,
        share_of_ideal: per_cpu.map(|rate| steps_per_second / (rate * cpus)),
        cpus_used,
        share_of_ideal_per_cpu_used: per_cpu
            .zip(cpus_used)
            .filter(|(_, used)| *used > 0.0)
            .map(|(rate, used)| steps_per_second / (rate * used)),
    })
}

fn script_size(backend: &Backend, bytes: usize) -> Result<Summary, String> {
    let (script, count) = backend.lang.sized(bytes);
    let mut session = backend.warm_session()?;
    backend.time_step(
        &mut session,
        &script,
        &ScriptOutput::final_result(json!(count)),
    )
}

/// Times step 1 and step 100 of fresh sessions whose every step defines one more
/// variable. A warm-up step starts each session first (a JavaScript worker, a
/// guest's first read), so step 1 is a warm step, not a start.
fn history(backend: &Backend) -> Result<History, String> {
    let (min, max, window) = if backend.quick {
        (3, 10, Duration::from_millis(300))
    } else {
        (10, 50, Duration::from_secs(3))
    };
    let expected = ScriptOutput::Observation { value: json!(3) };
    let mut first = Vec::new();
    let mut last = Vec::new();
    let started = Instant::now();
    while first.len() < max && (first.len() < min || started.elapsed() < window) {
        let mut session = backend.warm_session()?;
        for n in 1..=HISTORY_STEPS {
            let script = backend.lang.history_step(n);
            let begin = Instant::now();
            let run = session.run_blocking(&script).map_err(|e| e.to_string())?;
            let took = begin.elapsed();
            check(&run, &expected)?;
            if n == 1 {
                first.push(took);
            } else if n == HISTORY_STEPS {
                last.push(took);
            }
        }
        // State really accumulated: the first and the last variable are both there.
        step(
            &mut session,
            backend.lang.history_check(),
            &ScriptOutput::Observation { value: json!(6) },
        )?;
    }
    let summary = |samples: &[Duration]| {
        Summary::from_durations(samples).ok_or_else(|| "no session was timed".to_string())
    };
    Ok(History {
        sessions: first.len(),
        step_1: summary(&first)?,
        step_100: summary(&last)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cheap_sessions_are_counted_by_the_thousand_and_quick_runs_hold_fewer() {
        assert_eq!(idle_sessions("rhai", false), 1_000);
        assert_eq!(idle_sessions("rhai", true), 100);
        assert_eq!(idle_sessions("wasm:python", false), 50);
        assert_eq!(idle_sessions("wasm:python", true), 10);
    }

    #[test]
    fn growth_can_be_negative() {
        assert_eq!(growth(10, 15), -5);
    }
}
