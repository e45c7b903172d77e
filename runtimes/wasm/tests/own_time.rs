//! A script's time limit counts its own work, on every guest that is here
//! (fetched by guests/fetch-guests.sh, built by guests/build-guests.sh): waits
//! on tools do not count against `wall_time`, while `max_total_time` ends a
//! run whatever it waits on, and each error names the limit that fired.

use std::sync::Arc;
use std::time::{Duration, Instant};

use codeact_runtime::{
    Interrupt, LimitKind, Limits, Runtime, ScriptError, ToolDispatch, ToolError, ToolSpec,
    call_deadline,
};
use codeact_wasm::WasmRuntime;
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

/// The guests to try, and how each language says each script.
const GUESTS: [(&str, Lang); 5] = [
    ("wasm:python", Lang::Python),
    ("wasm:js", Lang::Js),
    ("wasm:js-stdio", Lang::Js),
    ("wasm:boa", Lang::Js),
    ("wasm:rhai", Lang::Rhai),
];

#[derive(Debug, Clone, Copy)]
enum Lang {
    Python,
    Js,
    Rhai,
}

impl Lang {
    /// `wait(ms)` `times` times, then `then`.
    fn waits(self, times: usize, ms: u64, then: &str) -> String {
        let call = match self {
            Lang::Python => format!("wait(ms={ms})\n"),
            Lang::Js => format!("tools.wait({{ms: {ms}}});\n"),
            Lang::Rhai => format!("wait(#{{ms: {ms}}});\n"),
        };
        call.repeat(times) + then
    }

    fn answer_3(self) -> &'static str {
        "final_result(3)"
    }

    fn busy_loop(self) -> &'static str {
        match self {
            Lang::Python => "x = 0\nwhile True:\n    x += 1",
            Lang::Js => "let x = 0; while (true) { x += 1; }",
            Lang::Rhai => "let x = 0; loop { x += 1; }",
        }
    }

    fn never(self) -> &'static str {
        match self {
            Lang::Python => "never()\nfinal_result(1)",
            Lang::Js => "tools.never(); final_result(1)",
            Lang::Rhai => "never(); final_result(1)",
        }
    }

    fn caught_never(self) -> &'static str {
        match self {
            Lang::Python => "try:\n    never()\nexcept Exception:\n    pass\nfinal_result(1)",
            Lang::Js => "try { tools.never(); } catch (e) {} final_result(1)",
            Lang::Rhai => "try { never(); } catch (e) { } final_result(1)",
        }
    }

    fn instant_loop(self) -> &'static str {
        match self {
            Lang::Python => "while True:\n    instant()",
            Lang::Js => "while (true) { tools.instant(); }",
            Lang::Rhai => "loop { instant(); }",
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

/// Each guest that is here, with its language.
fn guests() -> Vec<(&'static str, Lang)> {
    let here: Vec<_> = GUESTS
        .into_iter()
        .filter(|(name, _)| WasmRuntime::by_name(name, Limits::default()).is_ok())
        .collect();
    println!(
        "guests here: {:?}",
        here.iter().map(|(n, _)| n).collect::<Vec<_>>()
    );
    here
}

/// Runs `script` on `name` under `limits` with the tools bounded by the total
/// time, as the host runs it; returns its completion and how long it took.
fn run(
    name: &str,
    limits: Limits,
    script: &str,
    interrupt: Option<&Interrupt>,
) -> (Result<Value, ScriptError>, Duration) {
    let total = limits.max_total_time;
    let runtime = WasmRuntime::by_name(name, limits).expect("the guest is here");
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
    for (name, lang) in guests() {
        let script = lang.waits(3, 400, lang.answer_3());
        let (completion, took) = run(name, limits(500, 10_000), &script, None);
        assert_eq!(
            completion.unwrap_or_else(|e| panic!("{name}: {e}")),
            json!({"type": "final_result", "value": 3}),
            "{name}"
        );
        assert!(took >= Duration::from_millis(1_200), "{name}: {took:?}");
    }
}

#[test]
fn a_busy_loop_after_waits_still_stops_at_its_own_time_and_says_so() {
    for (name, lang) in guests() {
        let script = lang.waits(2, 400, lang.busy_loop());
        let (completion, took) = run(name, limits(300, 10_000), &script, None);
        assert_eq!(
            limit_of(&completion),
            Some(LimitKind::WallTime),
            "{name}: {completion:?}"
        );
        assert!(took >= Duration::from_millis(1_100), "{name}: {took:?}");
        assert!(took < Duration::from_millis(2_500), "{name}: {took:?}");
    }
}

#[test]
fn a_tool_that_never_answers_ends_the_run_at_its_total_time_naming_it() {
    for (name, lang) in guests() {
        let (completion, took) = run(name, limits(300, 1_000), lang.never(), None);
        assert_eq!(
            limit_of(&completion),
            Some(LimitKind::TotalTime),
            "{name}: {completion:?}"
        );
        let message = completion.expect_err("stopped").to_string();
        assert!(
            message.contains("total time limit of 1000 ms"),
            "{name}: {message}"
        );
        assert!(took < Duration::from_millis(2_500), "{name}: {took:?}");
    }
}

#[test]
fn a_caught_failure_of_a_call_cut_short_by_the_total_time_cannot_carry_on() {
    for (name, lang) in guests() {
        let (completion, _) = run(name, limits(300, 1_000), lang.caught_never(), None);
        assert_eq!(
            limit_of(&completion),
            Some(LimitKind::TotalTime),
            "{name}: {completion:?}"
        );
    }
}

#[test]
fn an_interrupt_stops_a_script_that_waited_at_once() {
    for (name, lang) in guests() {
        let interrupt = Interrupt::new();
        let raiser = interrupt.clone();
        let raise = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(600));
            raiser.raise();
        });
        let script = lang.waits(1, 100, lang.busy_loop());
        let (completion, took) = run(name, limits(10_000, 20_000), &script, Some(&interrupt));
        raise.join().expect("raised");
        assert!(limit_of(&completion).is_some(), "{name}: {completion:?}");
        assert!(took < Duration::from_millis(2_000), "{name}: {took:?}");
    }
}

#[test]
fn a_tight_loop_of_instant_calls_does_not_escape_its_own_time() {
    for (name, lang) in guests() {
        let (completion, took) = run(name, limits(300, 10_000), lang.instant_loop(), None);
        assert_eq!(
            limit_of(&completion),
            Some(LimitKind::WallTime),
            "{name}: {completion:?}"
        );
        assert!(took < Duration::from_millis(2_500), "{name}: {took:?}");
    }
}
