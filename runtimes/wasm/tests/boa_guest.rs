//! The `wasm:boa` guest (built by guests/build-guests.sh): codeact's JavaScript
//! engine inside wasmtime, called through the import ABI. What Boa cannot bound in
//! a process of its own (a catastrophic regex, the heap) must hold here without a
//! worker process.

use std::sync::Arc;
use std::time::{Duration, Instant};

use codeact_runtime::{
    LimitKind, Limits, RunOutcome, Runtime, ScriptError, Session, ToolDispatch, ToolError, ToolSpec,
};
use codeact_wasm::WasmRuntime;
use serde_json::{Value, json};

struct Add(Vec<ToolSpec>);

impl ToolDispatch for Add {
    fn specs(&self) -> &[ToolSpec] {
        &self.0
    }

    fn call(&self, name: &str, args: Value) -> Result<Value, ToolError> {
        match name {
            "add" => Ok(json!(
                args["a"].as_i64().unwrap_or(0) + args["b"].as_i64().unwrap_or(0)
            )),
            "blob" => Ok(json!("x".repeat(4 << 20))),
            other => Err(ToolError::new(format!("unknown tool '{other}'"))),
        }
    }
}

fn session(limits: Limits) -> Box<dyn Session> {
    let tools = Add(vec![ToolSpec::new("add", "Adds a and b.")]);
    WasmRuntime::by_name("wasm:boa", limits)
        .expect("the Boa guest loads (guests/build-guests.sh)")
        .new_session(Arc::new(tools))
        .expect("the session starts")
}

fn run(session: &mut dyn Session, script: &str) -> RunOutcome {
    session.run(script).expect("the host stays up")
}

fn limit_hit(outcome: &RunOutcome) -> Option<LimitKind> {
    match &outcome.completion {
        Err(ScriptError::LimitExceeded { limit, .. }) => Some(*limit),
        _ => None,
    }
}

#[test]
fn state_tools_and_console_output_work_as_in_the_worker() {
    let mut session = session(Limits::default());
    run(&mut *session, "let total = tools.add({a: 40, b: 1});");
    let outcome = run(
        &mut *session,
        "console.log('total', total); let caught; try { tools.nope({}) } catch (e) { caught = String(e) } final_result({sum: total + 1, caught})",
    );
    let value = outcome.completion.expect("a value");
    assert_eq!(value["value"]["sum"], 42);
    assert!(
        value["value"]["caught"]
            .as_str()
            .unwrap_or_default()
            .contains("unknown tool 'nope'"),
        "{value}"
    );
    assert_eq!(outcome.logs.kept(), "total 41\n");
}

/// Boa cannot be interrupted inside a regex; wasmtime can.
#[test]
fn a_catastrophic_regex_stops_at_the_time_limit_and_the_session_starts_afresh() {
    let mut session = session(Limits {
        wall_time: Duration::from_millis(300),
        ..Limits::default()
    });
    run(&mut *session, "var kept = 1;");
    let started = Instant::now();
    let outcome = run(&mut *session, r#"/(a+)+$/.test("a".repeat(30) + "b")"#);
    let elapsed = started.elapsed();
    assert_eq!(
        limit_hit(&outcome),
        Some(LimitKind::WallTime),
        "{:?}",
        outcome.completion
    );
    assert!(
        elapsed < Duration::from_millis(1_500),
        "stopped after {elapsed:?}"
    );
    assert_eq!(
        run(&mut *session, "typeof kept").completion,
        Ok(json!("undefined")),
        "a fresh instance"
    );
}

/// Time in a tool is not the script's to stretch: a loop of tool calls whose
/// replies take the guest a while to read still ends at the deadline (wasmtime
/// stops Boa there; only an engine that checks the alarm gets time to read).
#[test]
fn a_loop_of_tool_calls_with_large_replies_ends_at_the_time_limit() {
    let (sent, received) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut session = session(Limits {
            wall_time: Duration::from_millis(300),
            ..Limits::default()
        });
        let started = Instant::now();
        let outcome = run(&mut *session, "for (;;) tools.blob({});");
        let _ = sent.send((limit_hit(&outcome), started.elapsed()));
    });
    let (limit, elapsed) = received
        .recv_timeout(Duration::from_secs(10))
        .expect("the run ended (a loop of tool calls stretched its time limit)");
    assert_eq!(limit, Some(LimitKind::WallTime));
    assert!(
        elapsed < Duration::from_millis(1_500),
        "stopped after {elapsed:?}"
    );
}

/// A tool's reply reaches the script without copies of itself as text, and the
/// replies a script has dropped are collected: a dozen 4 MB replies, each kept
/// until the next comes, fit in a 64 MiB guest (two filled it when every reply
/// went through JSON text and Boa never counted the strings).
#[test]
fn a_dozen_large_tool_replies_fit_in_the_memory_limit() {
    let mut session = session(Limits {
        wall_time: Duration::from_secs(60),
        max_memory_bytes: 64 << 20,
        ..Limits::default()
    });
    let outcome = run(
        &mut *session,
        "let last; for (let i = 0; i < 12; i++) last = tools.blob({}); final_result(last.length)",
    );
    assert_eq!(
        outcome.completion,
        Ok(json!({"type": "final_result", "value": 4 << 20}))
    );
}

/// Boa has no heap cap; the guest's linear memory has one.
#[test]
fn memory_bombs_stop_at_the_memory_limit_and_the_session_goes_on() {
    let mut session = session(Limits {
        max_memory_bytes: 32 << 20,
        ..Limits::default()
    });
    let outcome = run(&mut *session, "let s = 'x'; for (;;) s += s;");
    assert_eq!(
        limit_hit(&outcome),
        Some(LimitKind::Memory),
        "{:?}",
        outcome.completion
    );
    let outcome = run(
        &mut *session,
        "const a = []; for (let i = 0; ; i++) a.push({i, text: 'y'.repeat(1000) + i});",
    );
    assert!(
        matches!(
            limit_hit(&outcome),
            Some(LimitKind::Memory | LimitKind::Operations)
        ),
        "{:?}",
        outcome.completion
    );
    assert_eq!(run(&mut *session, "6 * 7").completion, Ok(json!(42)));
}

#[test]
fn deep_recursion_and_deep_source_are_call_depth_errors_not_crashes() {
    let mut session = session(Limits::default());
    let outcome = run(&mut *session, "function f(n) { return f(n + 1) + 1 } f(0)");
    assert_eq!(
        limit_hit(&outcome),
        Some(LimitKind::CallDepth),
        "{:?}",
        outcome.completion
    );
    let nested = format!("{}1{}", "[".repeat(100_000), "]".repeat(100_000));
    let outcome = run(&mut *session, &nested);
    assert_eq!(
        limit_hit(&outcome),
        Some(LimitKind::CallDepth),
        "{:?}",
        outcome.completion
    );
    assert_eq!(run(&mut *session, "2 + 2").completion, Ok(json!(4)));
}

/// A new session starts from the snapshot `codeact_preinit` left (wasmtime-wizer);
/// a guest that silently fell back to starting from scratch fails here.
#[test]
fn the_guest_is_pre_initialised() {
    let runtime = WasmRuntime::by_name("wasm:boa", Limits::default()).expect("loads");
    assert!(runtime.preinitialised());
}
