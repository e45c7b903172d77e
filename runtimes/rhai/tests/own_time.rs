//! A script's time limit counts its own work: waits on tools do not count
//! against `wall_time`, while `max_total_time` ends a run whatever it waits
//! on, and each error names the limit that fired.

use std::sync::Arc;
use std::time::{Duration, Instant};

use codeact_rhai::RhaiRuntime;
use codeact_runtime::{
    Interrupt, LimitKind, Limits, Runtime, ScriptError, ToolDispatch, ToolError, ToolSpec,
    call_deadline,
};
use serde_json::{Value, json};

/// `wait(ms)` sleeps that long; `never()` answers only when the script's
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
        max_operations: u64::MAX,
        ..Limits::default()
    }
}

/// Runs `script` under `limits` with the tools bounded by the total time, as
/// the host runs it; returns its completion and how long it took.
fn run(
    limits: Limits,
    script: &str,
    interrupt: Option<&Interrupt>,
) -> (Result<Value, ScriptError>, Duration) {
    let total = limits.max_total_time;
    let runtime = RhaiRuntime::new(limits);
    let mut session = runtime.new_session(Waits::new()).expect("starts");
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

#[test]
fn three_waits_of_400_ms_under_a_500_ms_budget_finish() {
    let script =
        "wait(#{ms: 400}); wait(#{ms: 400}); parallel([|| wait(#{ms: 400})]); final_result(3)";
    let (completion, took) = run(limits(500, 10_000), script, None);
    assert_eq!(
        completion.expect("finishes"),
        json!({"type": "final_result", "value": 3})
    );
    assert!(took >= Duration::from_millis(1_200), "{took:?}");
}

#[test]
fn a_busy_loop_after_waits_still_stops_at_its_own_time_and_says_so() {
    let script = "wait(#{ms: 400}); wait(#{ms: 400}); let x = 0; loop { x += 1; }";
    let (completion, took) = run(limits(300, 10_000), script, None);
    assert_eq!(
        limit_of(&completion),
        Some(LimitKind::WallTime),
        "{completion:?}"
    );
    let message = completion.expect_err("stopped").to_string();
    assert!(message.contains("own time"), "{message}");
    // 800 ms of waits plus 300 ms of own time, and not much more.
    assert!(took >= Duration::from_millis(1_100), "{took:?}");
    assert!(took < Duration::from_millis(2_500), "{took:?}");
}

#[test]
fn a_tool_that_never_answers_ends_the_run_at_its_total_time_naming_it() {
    let (completion, took) = run(limits(200, 800), "never(); final_result(1)", None);
    assert_eq!(
        limit_of(&completion),
        Some(LimitKind::TotalTime),
        "{completion:?}"
    );
    let message = completion.expect_err("stopped").to_string();
    assert!(message.contains("total time limit of 800 ms"), "{message}");
    assert!(took < Duration::from_millis(2_000), "{took:?}");
}

#[test]
fn a_caught_failure_of_a_call_cut_short_by_the_total_time_cannot_carry_on() {
    let script = "try { never(); } catch (e) { } final_result(1)";
    let (completion, _) = run(limits(200, 600), script, None);
    assert_eq!(
        limit_of(&completion),
        Some(LimitKind::TotalTime),
        "{completion:?}"
    );
}

#[test]
fn waits_that_add_up_past_the_total_time_end_the_run_naming_it() {
    let script = "loop { wait(#{ms: 100}); }";
    let (completion, took) = run(limits(200, 700), script, None);
    assert_eq!(
        limit_of(&completion),
        Some(LimitKind::TotalTime),
        "{completion:?}"
    );
    assert!(took < Duration::from_millis(1_500), "{took:?}");
}

#[test]
fn an_interrupt_stops_a_script_that_waited_at_once() {
    let interrupt = Interrupt::new();
    let raiser = interrupt.clone();
    let raise = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(500));
        raiser.raise();
    });
    let script = "wait(#{ms: 100}); let x = 0; loop { x += 1; }";
    let (completion, took) = run(limits(5_000, 10_000), script, Some(&interrupt));
    raise.join().expect("raised");
    assert!(limit_of(&completion).is_some(), "{completion:?}");
    assert!(took < Duration::from_millis(1_500), "{took:?}");
}

#[test]
fn a_tight_loop_of_instant_calls_does_not_escape_its_own_time() {
    let script = "loop { instant(); }";
    let (completion, took) = run(limits(300, 10_000), script, None);
    assert_eq!(
        limit_of(&completion),
        Some(LimitKind::WallTime),
        "{completion:?}"
    );
    assert!(took < Duration::from_millis(2_000), "{took:?}");
}
