//! The `wasm:js` guest (QuickJS-NG built by guests/build-guests.sh): QuickJS
//! inside wasmtime, called through the import ABI. QuickJS checks the host's
//! alarm, its own memory limit and its stack, so a runaway script stops with
//! its session kept; wasmtime holds behind it.

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
            "echo" => Ok(args),
            other => Err(ToolError::new(format!("unknown tool '{other}'"))),
        }
    }
}

fn session(limits: Limits) -> Box<dyn Session> {
    let tools = Add(vec![
        ToolSpec::new("add", "Adds a and b."),
        ToolSpec::new("blob", "Four megabytes of text."),
    ]);
    WasmRuntime::by_name("wasm:js", limits)
        .expect("the QuickJS guest loads (guests/build-guests.sh)")
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

/// Whether the limit error says the session restarted.
fn restarted(outcome: &RunOutcome) -> bool {
    matches!(
        &outcome.completion,
        Err(ScriptError::LimitExceeded {
            restarted: true,
            ..
        })
    )
}

#[test]
fn state_tools_errors_and_console_output_work_as_in_the_other_javascript_runtimes() {
    let mut session = session(Limits::default());
    run(&mut *session, "let total = tools.add({a: 40, b: 1});");
    // A top-level `let` declared again in a later script, as a model does.
    run(&mut *session, "let again = 1;");
    run(&mut *session, "let again = 2;");
    let outcome = run(
        &mut *session,
        "console.log('total', total, {again}); let caught; try { tools.nope({}) } catch (e) { caught = String(e) } final_result({sum: call_tool('add', {a: total, b: 1}), caught})",
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
    assert_eq!(outcome.logs.kept(), "total 41 {\"again\":2}\n");
    let outcome = run(&mut *session, "let x = 1;\nnull.field");
    match outcome.completion {
        Err(ScriptError::Thrown { message, .. }) => {
            assert!(message.starts_with("TypeError:"), "{message}");
            assert!(message.contains("script:2"), "the line: {message}");
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        run(&mut *session, "let = ;").completion,
        Err(ScriptError::Syntax { .. })
    ));
    assert!(matches!(
        run(&mut *session, "var declared = 1;").completion,
        Err(ScriptError::NoValue { .. })
    ));
    assert!(matches!(
        run(&mut *session, "final_result(() => 1)").completion,
        Err(ScriptError::Unrepresentable { .. })
    ));
}

/// The guest's native hooks and the prelude's own functions are out of a
/// script's reach, and a helper a script rebinds is back for the next one.
#[test]
fn a_script_reaches_no_hook_of_the_guest_and_cannot_keep_a_helper_rebound() {
    let mut session = session(Limits::default());
    let outcome = run(
        &mut *session,
        "[typeof __codeact_call_tool, typeof __codeact_log, typeof __codeact_eval, typeof __codeact_encode, typeof std, typeof os]",
    );
    assert_eq!(outcome.completion, Ok(json!(vec!["undefined"; 6])));
    run(
        &mut *session,
        "final_result = (v) => ({type: 'final_result', value: 'forged'}); JSON.stringify = () => '{}'; 0",
    );
    assert_eq!(
        run(&mut *session, "final_result(tools.add({a: 1, b: 2}))").completion,
        Ok(json!({"type": "final_result", "value": 3}))
    );
}

/// QuickJS's regex engine asks the interrupt handler as it backtracks: the
/// script stops at the time limit and the session keeps its state.
#[test]
fn a_catastrophic_regex_stops_at_the_time_limit_and_the_session_goes_on() {
    // Two seconds: wasmtime's backstop comes 4% after the limit, and on a busy
    // machine a thread can wait longer than 4% of a short limit to run.
    let mut session = session(Limits {
        wall_time: Duration::from_secs(2),
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
    // Stopped by QuickJS at the alarm, not by wasmtime's backstop (which
    // restarts the session); how soon is `codeact bench`'s to measure.
    assert!(!restarted(&outcome), "{:?}", outcome.completion);
    assert!(
        elapsed < Duration::from_secs(4),
        "stopped after {elapsed:?}"
    );
    assert_eq!(run(&mut *session, "kept").completion, Ok(json!(1)));
}

/// The interrupt cannot be caught: a script that wraps its loop in `try` and
/// goes on in `catch` still stops.
#[test]
fn a_runaway_loop_that_catches_everything_still_stops_at_the_time_limit() {
    // Two seconds, as for the regex above.
    let mut session = session(Limits {
        wall_time: Duration::from_secs(2),
        ..Limits::default()
    });
    let started = Instant::now();
    let outcome = run(
        &mut *session,
        "for (;;) { try { for (;;) {} } catch (e) {} try { tools.add({a: 1, b: 1}) } catch (e) {} }",
    );
    assert_eq!(
        limit_hit(&outcome),
        Some(LimitKind::WallTime),
        "{:?}",
        outcome.completion
    );
    assert!(!restarted(&outcome), "{:?}", outcome.completion);
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "stopped after {:?}",
        started.elapsed()
    );
    assert_eq!(run(&mut *session, "6 * 7").completion, Ok(json!(42)));
}

/// Time in a tool is not the script's to stretch: a loop of tool calls whose
/// replies take the guest a while to read still ends at the deadline, even
/// when it catches each call's error.
#[test]
fn a_loop_of_tool_calls_with_large_replies_ends_at_the_time_limit() {
    let (sent, received) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut session = session(Limits {
            wall_time: Duration::from_millis(300),
            ..Limits::default()
        });
        let mut stops = Vec::new();
        for script in [
            "for (;;) tools.blob({});",
            "for (;;) { try { tools.blob({}) } catch (e) {} }",
        ] {
            let started = Instant::now();
            let outcome = run(&mut *session, script);
            stops.push((limit_hit(&outcome), started.elapsed()));
        }
        let _ = sent.send(stops);
    });
    let stops = received
        .recv_timeout(Duration::from_secs(10))
        .expect("the runs ended (a loop of tool calls stretched its time limit)");
    for (limit, elapsed) in stops {
        assert_eq!(limit, Some(LimitKind::WallTime));
        assert!(
            elapsed < Duration::from_millis(1_000),
            "stopped after {elapsed:?}"
        );
    }
}

/// A dozen 4 MB replies, each kept until the next comes, fit in a 64 MiB
/// session: QuickJS frees a reply as soon as nothing holds it.
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

/// QuickJS's own memory limit stops a growing script with an error; the
/// session goes on when the memory came back, and starts afresh (said in the
/// error) when its variables still hold it. A string doubled past QuickJS's
/// largest is an error too.
#[test]
fn memory_bombs_stop_at_the_memory_limit_and_the_session_goes_on() {
    let mut session = session(Limits {
        max_memory_bytes: 32 << 20,
        ..Limits::default()
    });
    run(&mut *session, "var kept = 'still here';");
    for (bomb, holds_it) in [
        (
            "(() => { const a = []; for (let i = 0; ; i++) a.push({i, text: 'y'.repeat(1000) + i}) })()",
            false,
        ),
        (
            "(() => { const parts = []; for (;;) parts.push(new Uint8Array(1 << 20)) })()",
            false,
        ),
        (
            "(() => { let s = 'x'; for (;;) s = (s + s).slice(0, s.length * 2 - 1) + 'y' })()",
            false,
        ),
        // A top-level variable holds what the bomb made.
        (
            "const a = []; for (let i = 0; ; i++) a.push({i, text: 'y'.repeat(1000) + i});",
            true,
        ),
    ] {
        let outcome = run(&mut *session, bomb);
        assert_eq!(
            limit_hit(&outcome),
            Some(LimitKind::Memory),
            "{bomb}: {:?}",
            outcome.completion
        );
        assert_eq!(
            restarted(&outcome),
            holds_it,
            "{bomb}: {:?}",
            outcome.completion
        );
        if !holds_it {
            assert_eq!(
                run(&mut *session, "kept").completion,
                Ok(json!("still here")),
                "{bomb}"
            );
        }
    }
    assert_eq!(
        run(&mut *session, "typeof kept").completion,
        Ok(json!("undefined"))
    );
    run(&mut *session, "var kept = 'still here';");
    let outcome = run(&mut *session, "let d = 'x'; for (;;) d += d;");
    assert!(
        matches!(
            &outcome.completion,
            Err(ScriptError::Thrown { message, .. }) if message.contains("string too long")
        ) || limit_hit(&outcome) == Some(LimitKind::Memory),
        "{:?}",
        outcome.completion
    );
    assert_eq!(
        run(&mut *session, "kept").completion,
        Ok(json!("still here"))
    );
}

/// QuickJS's own stack check is compiled out for WASI: recursion runs into the
/// end of the guest's stack, a trap the host reports as the call depth limit,
/// and the session restarts (said in the error).
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
    assert!(restarted(&outcome), "{:?}", outcome.completion);
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

/// Printed output past the limit is counted, not kept.
#[test]
fn a_print_flood_keeps_the_first_bytes_and_counts_the_rest() {
    let mut session = session(Limits {
        max_output_bytes: 1_000,
        ..Limits::default()
    });
    let outcome = run(
        &mut *session,
        "for (let i = 0; i < 10000; i++) console.log('line', i); 1",
    );
    assert_eq!(outcome.completion, Ok(json!(1)));
    assert!(outcome.logs.kept().len() <= 1_000);
    assert!(outcome.logs.kept().starts_with("line 0\nline 1\n"));
    assert!(outcome.logs.dropped_bytes() > 50_000);
}

/// A new session starts from the snapshot `codeact_preinit` left (wasmtime-wizer);
/// a guest that silently fell back to starting from scratch fails here.
#[test]
fn the_guest_is_pre_initialised() {
    let runtime = WasmRuntime::by_name("wasm:js", Limits::default()).expect("loads");
    assert!(runtime.preinitialised());
}

/// Tool arguments and completion values are written in Rust for the common
/// values (the guest's `encode.rs`) and by the JavaScript encoder for the
/// rest: whatever a script passes or returns, the host receives what the
/// JavaScript encoder alone sends, as the prebuilt reactor (`wasm:js-stdio`,
/// the encoder only) shows. Each case is sent to a tool that echoes its
/// arguments, returned, and used as a tool's name, on both.
#[test]
fn values_reach_the_host_as_the_javascript_encoder_writes_them() {
    let cases = [
        r#"({a: 1, b: -2.5, c: 'tü\u00e9\n\"q\"', d: true, e: null, f: 0.1, g: 1e21, h: 5e-7, i: -0, j: 2 ** 53 + 2})"#,
        "({u: undefined, f() {}, s: Symbol('x'), n: NaN, inf: -Infinity, list: [undefined, () => 1, Symbol('y'), NaN]})",
        "({when: new Date(0), bad: new Date(NaN), fake: Object.create(Date.prototype)})",
        "({deep: [[[{x: [1, [2, {y: 3}]]}]]]})",
        "(() => { const o = {}; o.self = o; return {wrap: [o]}; })()",
        "(() => { let v = 1; for (let i = 0; i < 70; i++) v = {v}; return v; })()",
        "(() => { let v = 1; for (let i = 0; i < 70; i++) v = [v]; return {v}; })()",
        "({big: 10n})",
        "({list: [1, , 3]})",
        "(() => { const a = [1, 2]; a.extra = 'x'; return {a}; })()",
        "({p: new Proxy({x: 1}, {})})",
        "({p: new Proxy([1, 2], {})})",
        "(() => { class Point { constructor() { this.x = 1; } get y() { return 2; } } return {pt: new Point()}; })()",
        "({get computed() { return 'by a getter'; }, [Symbol('k')]: 1, 2: 'two', 1: 'one'})",
        "({toJSON() { return 'no'; }, inner: {toJSON: () => 'nope', x: 1}})",
        "({map: new Map([[1, 2]]), set: new Set([1]), re: /x/g, err: new Error('e'), bytes: new Uint8Array([1, 2])})",
        "'a string'",
        "[1, 'two', null]",
        "42",
        "({s: 'x'.repeat(100000)})",
    ];
    let mut differences = Vec::new();
    for case in cases {
        // As a tool's arguments, and as the script's completion value.
        let sent = format!(
            "let r; try {{ r = {{ok: tools.echo({case})}} }} catch (e) {{ r = {{error: String(e.message)}} }} final_result(r)"
        );
        let returned = format!("final_result({case})");
        // As a tool's name (`String(...)` of it), which the host refuses,
        // quoting it.
        let named = format!(
            "let r; try {{ r = {{ok: call_tool({case}, {{}})}} }} catch (e) {{ r = {{error: String(e.message)}} }} final_result(r)"
        );
        for script in [sent, returned, named] {
            let mut answers = Vec::new();
            for runtime in ["wasm:js", "wasm:js-stdio"] {
                let tools = Add(vec![ToolSpec::new("echo", "Returns its arguments.")]);
                let mut session = WasmRuntime::by_name(runtime, Limits::default())
                    .expect("loads")
                    .new_session(Arc::new(tools))
                    .expect("starts");
                answers.push(run(&mut *session, &script).completion);
            }
            if answers[0] != answers[1] {
                differences.push(format!(
                    "{script}\n  wasm:js       {:?}\n  wasm:js-stdio {:?}",
                    answers[0], answers[1]
                ));
            }
        }
    }
    assert!(differences.is_empty(), "{}", differences.join("\n"));
}
