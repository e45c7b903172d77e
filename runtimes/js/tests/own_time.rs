//! A script's time limit counts its own work, in the worker process and in
//! process: waits on tools do not count against `wall_time`, while
//! `max_total_time` ends a run whatever it waits on, and each error names the
//! limit that fired.
//!
//! This binary is its own worker (`main` calls `run_worker_if_requested`
//! first), so it has no test harness and runs the tests below in order.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use codeact_js::JsRuntime;
use codeact_runtime::{
    Interrupt, LimitKind, Limits, Runtime, ScriptError, ToolDispatch, ToolError, ToolSpec,
    call_deadline,
};
use serde_json::{Value, json};

/// A test by name, run once per mode.
type NamedTest = (&'static str, fn(Mode));

fn main() -> ExitCode {
    if let Some(code) = codeact_js::run_worker_if_requested() {
        return code;
    }
    let tests: &[NamedTest] = &[
        (
            "three_waits_of_400_ms_under_a_500_ms_budget_finish",
            three_waits_of_400_ms_under_a_500_ms_budget_finish,
        ),
        (
            "a_busy_loop_after_waits_still_stops_at_its_own_time_and_says_so",
            a_busy_loop_after_waits_still_stops_at_its_own_time_and_says_so,
        ),
        (
            "a_tool_that_never_answers_ends_the_run_at_its_total_time_naming_it",
            a_tool_that_never_answers_ends_the_run_at_its_total_time_naming_it,
        ),
        (
            "a_caught_failure_of_a_call_cut_short_by_the_total_time_cannot_carry_on",
            a_caught_failure_of_a_call_cut_short_by_the_total_time_cannot_carry_on,
        ),
        (
            "an_interrupt_stops_a_script_that_waited_at_once",
            an_interrupt_stops_a_script_that_waited_at_once,
        ),
        (
            "a_tight_loop_of_instant_calls_does_not_escape_its_own_time",
            a_tight_loop_of_instant_calls_does_not_escape_its_own_time,
        ),
    ];
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|arg| !arg.starts_with('-'))
        .collect();
    let (mut passed, mut failed) = (0, 0);
    for mode in [Mode::Worker, Mode::InProcess] {
        for (name, test) in tests {
            if !filter.is_empty() && !filter.iter().any(|f| name.contains(f.as_str())) {
                continue;
            }
            let started = Instant::now();
            let result = std::panic::catch_unwind(|| test(mode));
            let took = started.elapsed().as_secs_f64();
            if result.is_ok() {
                passed += 1;
                println!("test {mode:?} {name} ... ok ({took:.1}s)");
            } else {
                failed += 1;
                println!("test {mode:?} {name} ... FAILED ({took:.1}s)");
            }
        }
    }
    println!("{passed} passed, {failed} failed");
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

#[derive(Debug, Clone, Copy)]
enum Mode {
    Worker,
    InProcess,
}

/// `wait({ms})` sleeps that long; `never()` answers only when the script's
/// total time is up (as the host's tool box does), with an error;
/// `instant()` answers at once.
struct Waits {
    specs: Vec<ToolSpec>,
}

impl Waits {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            specs: vec![
                ToolSpec::new("wait", "").with_parameters(json!({
                    "type": "object", "properties": {"ms": {"type": "integer"}}, "required": ["ms"]
                })),
                ToolSpec::new("never", ""),
                ToolSpec::new("instant", ""),
            ],
        })
    }
}

impl ToolDispatch for Waits {
    fn specs(&self) -> &[ToolSpec] {
        &self.specs
    }

    fn call(&self, name: &str, args: Value) -> Result<Value, ToolError> {
        match name {
            "wait" => {
                std::thread::sleep(Duration::from_millis(args["ms"].as_u64().unwrap_or(0)));
                Ok(json!("done"))
            }
            "never" => {
                let deadline = call_deadline::current().expect("a script deadline");
                std::thread::sleep(deadline.saturating_duration_since(Instant::now()));
                Err(ToolError::new("the call ran out of the script's time"))
            }
            _ => Ok(json!(1)),
        }
    }
}

fn limits(own_ms: u64, total_ms: u64) -> Limits {
    Limits {
        wall_time: Duration::from_millis(own_ms),
        max_total_time: Duration::from_millis(total_ms),
        max_operations: 100_000_000,
        ..Limits::default()
    }
}

/// Runs `script` under `limits` with the tools bounded by the total time, as
/// the host runs it; returns its completion and how long it took.
fn run(
    mode: Mode,
    limits: Limits,
    script: &str,
    interrupt: Option<&Interrupt>,
) -> (Result<Value, ScriptError>, Duration) {
    let total = limits.max_total_time;
    let runtime = match mode {
        Mode::Worker => JsRuntime::new(limits),
        Mode::InProcess => JsRuntime::in_process(limits),
    };
    let mut session = runtime.new_session(Waits::new()).expect("starts");
    // The first run starts the worker: not part of what is measured.
    session.run("1").expect("warms up");
    let started = Instant::now();
    let outcome = call_deadline::within(started + total, || match interrupt {
        Some(interrupt) => session.run_interruptible(script, interrupt),
        None => session.run(script),
    })
    .expect("runs");
    (outcome.completion, started.elapsed())
}

fn limit_of(completion: &Result<Value, ScriptError>) -> Option<LimitKind> {
    match completion {
        Err(ScriptError::LimitExceeded { limit, .. }) => Some(*limit),
        _ => None,
    }
}

/// A loop only a deadline ends, which ends by itself after 3 s (an
/// in-process engine's abandoned thread runs on until then).
const BUSY: &str = "const end = Date.now() + 3000; while (Date.now() < end) {}";

fn three_waits_of_400_ms_under_a_500_ms_budget_finish(mode: Mode) {
    let script = "await tools.wait({ms: 400}); await tools.wait({ms: 400}); \
                  await Promise.all([tools.wait({ms: 400})]); final_result(3)";
    let (completion, took) = run(mode, limits(500, 10_000), script, None);
    assert_eq!(
        completion.expect("finishes"),
        json!({"type": "final_result", "value": 3})
    );
    assert!(took >= Duration::from_millis(1_200), "{took:?}");
}

fn a_busy_loop_after_waits_still_stops_at_its_own_time_and_says_so(mode: Mode) {
    let script = format!("tools.wait({{ms: 400}}); tools.wait({{ms: 400}}); {BUSY}");
    let (completion, took) = run(mode, limits(300, 10_000), &script, None);
    assert_eq!(
        limit_of(&completion),
        Some(LimitKind::WallTime),
        "{completion:?}"
    );
    let message = completion.expect_err("stopped").to_string();
    assert!(message.contains("own time"), "{message}");
    assert!(took >= Duration::from_millis(1_100), "{took:?}");
    assert!(took < Duration::from_millis(2_500), "{took:?}");
}

fn a_tool_that_never_answers_ends_the_run_at_its_total_time_naming_it(mode: Mode) {
    let (completion, took) = run(
        mode,
        limits(200, 800),
        "tools.never(); final_result(1)",
        None,
    );
    assert_eq!(
        limit_of(&completion),
        Some(LimitKind::TotalTime),
        "{completion:?}"
    );
    let message = completion.expect_err("stopped").to_string();
    assert!(message.contains("total time limit of 800 ms"), "{message}");
    assert!(took < Duration::from_millis(2_000), "{took:?}");
}

fn a_caught_failure_of_a_call_cut_short_by_the_total_time_cannot_carry_on(mode: Mode) {
    let script = "try { tools.never(); } catch (e) {} final_result(1)";
    let (completion, _) = run(mode, limits(200, 600), script, None);
    assert_eq!(
        limit_of(&completion),
        Some(LimitKind::TotalTime),
        "{completion:?}"
    );
}

fn an_interrupt_stops_a_script_that_waited_at_once(mode: Mode) {
    let interrupt = Interrupt::new();
    let raiser = interrupt.clone();
    let raise = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(500));
        raiser.raise();
    });
    let script = format!("tools.wait({{ms: 100}}); {BUSY}");
    let (completion, took) = run(mode, limits(5_000, 10_000), &script, Some(&interrupt));
    raise.join().expect("raised");
    assert!(limit_of(&completion).is_some(), "{completion:?}");
    assert!(took < Duration::from_millis(1_500), "{took:?}");
}

fn a_tight_loop_of_instant_calls_does_not_escape_its_own_time(mode: Mode) {
    let script = "const end = Date.now() + 3000; while (Date.now() < end) { tools.instant(); }";
    let (completion, took) = run(mode, limits(300, 10_000), script, None);
    assert_eq!(
        limit_of(&completion),
        Some(LimitKind::WallTime),
        "{completion:?}"
    );
    assert!(took < Duration::from_millis(2_000), "{took:?}");
}
