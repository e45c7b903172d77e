//! A run stopped from outside (an app's cancel, a run's deadline) through
//! `ScriptSession::run_interruptible`: on every runtime the script stops as at its
//! time limit, long before that limit, and the session serves the next script.

use std::time::{Duration, Instant};

use codeact::exec::{Interrupt, LimitKind, ScriptError};
use codeact::tools::NoTools;
use codeact::{Limits, ScriptSession};

use crate::support::runtimes::{EVERY_RUNTIME, runtime, still_runs};

/// A script that never ends, in the language of `runtime`.
fn endless(runtime: &str) -> &'static str {
    match runtime {
        "rhai" | "wasm:rhai" => "let x = 0; loop { x += 1; }",
        "wasm:python" | "wasm:micropython" => "x = 0\nwhile True:\n    x += 1",
        _ => "let x = 0; while (true) { x += 1; }",
    }
}

/// A script that never ends and catches whatever it can on the way, in the
/// language of `runtime`: the interrupt must not be something a script can catch.
fn endless_catching(runtime: &str) -> &'static str {
    match runtime {
        "rhai" | "wasm:rhai" => "let x = 0; loop { try { loop { x += 1; } } catch (e) { x = 0; } }",
        "wasm:python" | "wasm:micropython" => {
            "x = 0\nwhile True:\n    try:\n        while True:\n            x += 1\n    except BaseException:\n        x = 0"
        }
        _ => "let x = 0; while (true) { try { while (true) { x += 1; } } catch (e) { x = 0; } }",
    }
}

/// A time limit far beyond the test's patience: only the interrupt can stop
/// the script in time.
const LONG_LIMIT: Duration = Duration::from_secs(60);

/// When the interrupt is raised, after the script started.
const RAISED_AFTER: Duration = Duration::from_millis(300);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_script_stops_at_once_on_every_runtime_even_catching_and_its_session_goes_on()
 {
    let limits = Limits {
        wall_time: LONG_LIMIT,
        max_operations: u64::MAX,
        ..Limits::default()
    };
    let mut failures = Vec::new();
    let scripts = EVERY_RUNTIME
        .iter()
        .flat_map(|name| [(*name, endless(name)), (*name, endless_catching(name))]);
    for (name, script) in scripts {
        let engine = runtime(name, limits.clone()).expect("runtime");
        let mut session =
            ScriptSession::start(&*engine, std::sync::Arc::new(NoTools)).expect("session starts");
        let interrupt = Interrupt::new();
        let raiser = interrupt.clone();
        std::thread::spawn(move || {
            std::thread::sleep(RAISED_AFTER);
            raiser.raise();
        });
        let started = Instant::now();
        let run = session
            .run_interruptible(script, interrupt)
            .await
            .expect("the host stays up");
        let took = started.elapsed();
        if took > RAISED_AFTER + Duration::from_secs(2) {
            failures.push(format!("{name}: {script:?} stopped after {took:?}"));
        }
        if !matches!(
            run.completion,
            Err(ScriptError::LimitExceeded {
                limit: LimitKind::WallTime,
                ..
            })
        ) {
            failures.push(format!(
                "{name}: {script:?} ended with {:?}",
                run.completion
            ));
        }
        if let Err(why) = still_runs(&mut session).await {
            failures.push(format!("{name}: {why}"));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupt_raised_before_the_script_starts_stops_it_at_once() {
    let limits = Limits {
        wall_time: LONG_LIMIT,
        max_operations: u64::MAX,
        ..Limits::default()
    };
    let engine = runtime("rhai", limits).expect("runtime");
    let mut session =
        ScriptSession::start(&*engine, std::sync::Arc::new(NoTools)).expect("session starts");
    let interrupt = Interrupt::new();
    interrupt.raise();
    let started = Instant::now();
    let run = session
        .run_interruptible(endless("rhai"), interrupt)
        .await
        .expect("the host stays up");
    assert!(started.elapsed() < Duration::from_secs(2));
    assert!(matches!(
        run.completion,
        Err(ScriptError::LimitExceeded {
            limit: LimitKind::WallTime,
            ..
        })
    ));
}
