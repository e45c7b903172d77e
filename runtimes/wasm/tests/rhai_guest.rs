//! The `wasm:rhai` guest (built by guests/build-guests.sh): codeact's Rhai backend
//! inside wasmtime, called through the import ABI. Each limit is attacked the way
//! the audit of the in-process engine did, and must hold here.

use std::sync::Arc;
use std::time::{Duration, Instant};

use codeact_runtime::{
    LimitKind, Limits, NoTools, RunOutcome, Runtime, ScriptError, Session, ToolDispatch, ToolError,
    ToolSpec,
};
use codeact_wasm::WasmRuntime;
use serde_json::{Value, json};

fn runtime(limits: Limits) -> WasmRuntime {
    WasmRuntime::by_name("wasm:rhai", limits)
        .expect("the Rhai guest loads (guests/build-guests.sh)")
}

fn session(limits: Limits) -> Box<dyn Session> {
    runtime(limits)
        .new_session(Arc::new(NoTools))
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

/// Tools that answer from the host: `add` sums, `fail` fails, `slow` sleeps.
struct HostTools(Vec<ToolSpec>);

impl HostTools {
    fn new() -> Self {
        let add = ToolSpec::new("add", "Adds.").with_parameters(json!({
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"]
        }));
        Self(vec![
            add,
            ToolSpec::new("fail", "Fails."),
            ToolSpec::new("echo", "Returns its arguments."),
            ToolSpec::new("slow", "Sleeps 300 ms."),
            ToolSpec::new("numbers", "200,000 numbers in no order.").with_parameters(json!({
                "type": "object", "properties": {"part": {"type": "integer"}}
            })),
        ])
    }
}

impl ToolDispatch for HostTools {
    fn specs(&self) -> &[ToolSpec] {
        &self.0
    }

    fn call(&self, name: &str, args: Value) -> Result<Value, ToolError> {
        match name {
            "add" => Ok(json!(
                args["a"].as_i64().unwrap_or(0) + args["b"].as_i64().unwrap_or(0)
            )),
            "fail" => Err(ToolError::new("the disk is on fire")),
            "echo" => Ok(args),
            "numbers" => {
                let part = args["part"].as_u64().unwrap_or(0);
                let numbers =
                    (part * 200_000..(part + 1) * 200_000).map(|x| (x * 7_919) % 1_000_003);
                Ok(json!(numbers.collect::<Vec<_>>()))
            }
            "slow" => {
                std::thread::sleep(Duration::from_millis(300));
                Ok(json!("done"))
            }
            other => Err(ToolError::new(format!("unknown tool '{other}'"))),
        }
    }
}

#[test]
fn variables_functions_and_printed_output_work_as_in_process() {
    let mut session = session(Limits::default());
    run(&mut *session, "let x = 40; fn twice(v) { v * 2 }");
    let outcome = run(
        &mut *session,
        r#"print("hello"); final_result(twice(x) + 2 - x)"#,
    );
    assert_eq!(
        outcome.completion,
        Ok(json!({"type": "final_result", "value": 42}))
    );
    assert_eq!(outcome.logs.kept(), "hello\n");
    let outcome = run(&mut *session, "let y = ;");
    assert!(
        matches!(outcome.completion, Err(ScriptError::Syntax { .. })),
        "{:?}",
        outcome.completion
    );
}

/// The spellings in-process Rhai accepts from other languages hold in the guest
/// (the same crate builds both engines): a map's loop walks its keys, and
/// `reverse()` returns the array it reversed.
#[test]
fn map_loops_walk_keys_and_reverse_returns_the_array_as_in_process() {
    let mut session = session(Limits::default());
    let outcome = run(
        &mut *session,
        r#"let counts = #{b: 2, a: 1}; let seen = "";
           for key in counts { seen += key; }
           let words = [1, 2, 3]; let backwards = words.reverse();
           final_result([seen, backwards, words])"#,
    );
    assert_eq!(
        outcome.completion,
        Ok(json!({"type": "final_result", "value": ["ab", [3, 2, 1], [3, 2, 1]]}))
    );
}

#[test]
fn tools_are_functions_whose_errors_the_script_can_catch() {
    let runtime = runtime(Limits::default());
    let mut session = runtime
        .new_session(Arc::new(HostTools::new()))
        .expect("the session starts");
    let outcome = run(
        &mut *session,
        r#"let caught = ""; try { fail() } catch (e) { caught = `${e}` }; #{sum: add(2, 3) + call_tool("add", #{a: 1, b: 1}), caught: caught}"#,
    );
    let value = outcome.completion.expect("a value");
    assert_eq!(value["sum"], 7);
    assert!(
        value["caught"]
            .as_str()
            .unwrap_or_default()
            .contains("the disk is on fire"),
        "{value}"
    );
    assert_eq!(
        runtime.tool_signature(&HostTools::new().0[0]),
        "add(#{a: int, b: int})"
    );
}

#[test]
fn a_runaway_loop_stops_at_the_time_limit_and_the_session_keeps_its_variables() {
    let mut session = session(Limits {
        wall_time: Duration::from_millis(200),
        max_operations: u64::MAX,
        ..Limits::default()
    });
    run(&mut *session, "let kept = 7;");
    let started = Instant::now();
    let outcome = run(&mut *session, "let t = 0; loop { t += 1; }");
    assert_eq!(limit_hit(&outcome), Some(LimitKind::WallTime));
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(run(&mut *session, "kept").completion, Ok(json!(7)));
}

/// The audit's time attack: one builtin call is one operation however long it
/// runs, so the engine alone let this run 40 times its limit.
#[test]
fn long_builtin_calls_in_a_loop_stop_near_the_time_limit() {
    for script in [
        "loop { let s = \"\"; s.pad(1600000, 'x'); }",
        "loop { let s = \"\"; s.pad(8000000, 'x'); }",
        "let a = []; a.pad(1000000, 0); loop { a.sort(); a.reverse(); }",
    ] {
        let mut session = session(Limits {
            wall_time: Duration::from_millis(100),
            max_operations: u64::MAX,
            ..Limits::default()
        });
        let started = Instant::now();
        let outcome = run(&mut *session, script);
        let elapsed = started.elapsed();
        assert_eq!(
            limit_hit(&outcome),
            Some(LimitKind::WallTime),
            "{script}: {:?}",
            outcome.completion
        );
        // Generous: the mechanism, not its precision (the benchmark measures that).
        assert!(
            elapsed < Duration::from_millis(1_000),
            "{script}: stopped after {elapsed:?}"
        );
        assert_eq!(
            run(&mut *session, "1 + 1").completion,
            Ok(json!(2)),
            "{script}"
        );
    }
}

/// The audit's memory attacks: values held where the engine's own meter did not
/// look (curried arguments, closure captures, recursion frames).
#[test]
fn values_hidden_in_closures_curried_functions_and_frames_stop_at_the_memory_limit() {
    let limits = Limits {
        max_memory_bytes: 16 << 20,
        wall_time: Duration::from_secs(20),
        max_operations: u64::MAX,
        ..Limits::default()
    };
    for script in [
        // Curried function pointers, each holding 4 MiB.
        "fn f(a) { a.len() } let fs = []; for i in 0..150 { let big = \"\"; big.pad(4000000, 'x'); fs.push(Fn(\"f\").curry(big)); } fs.len()",
        // Closures capturing 4 MiB each.
        "let fs = []; for i in 0..150 { let big = \"\"; big.pad(4000000, 'x'); fs.push(|| big.len()); } fs.len()",
        // Recursion frames holding 4 MiB each.
        "fn deep(n) { let big = \"\"; big.pad(4000000, 'x'); if n == 0 { 0 } else { deep(n - 1) + big.len() } } deep(15)",
    ] {
        let mut session = session(limits.clone());
        let outcome = run(&mut *session, script);
        assert_eq!(
            limit_hit(&outcome),
            Some(LimitKind::Memory),
            "{script}: {:?}",
            outcome.completion
        );
        assert_eq!(
            run(&mut *session, "1 + 1").completion,
            Ok(json!(2)),
            "{script}"
        );
    }
}

/// One builtin call that alone outlasts the limit never reaches the engine's next
/// check: wasmtime stops it, and the session starts afresh, saying so.
#[test]
fn a_single_builtin_longer_than_the_limit_is_stopped_by_wasmtime_and_the_session_restarts() {
    let runtime = runtime(Limits {
        wall_time: Duration::from_millis(250),
        max_operations: u64::MAX,
        max_memory_bytes: 512 << 20,
        ..Limits::default()
    });
    let mut session = runtime
        .new_session(Arc::new(HostTools::new()))
        .expect("the session starts");
    // Four million numbers in no order, 200,000 a run (the tool's time and the
    // reading of its reply are the host's, not the script's). Their sort takes
    // twice the limit on an idle machine here: two million took about the
    // limit, so the engine's own check after the sort caught it first.
    run(&mut *session, "let kept = 1; let a = [];");
    for part in 0..20 {
        let outcome = run(&mut *session, &format!("a += numbers({part}); a.len()"));
        assert_eq!(outcome.completion, Ok(json!((part + 1) * 200_000)));
    }
    let started = Instant::now();
    let outcome = run(&mut *session, "a.sort(); a.len()");
    let elapsed = started.elapsed();
    assert!(
        elapsed < Duration::from_millis(1_000),
        "stopped after {elapsed:?}"
    );
    let Err(ScriptError::LimitExceeded {
        limit: LimitKind::WallTime,
        restarted: true,
        ..
    }) = outcome.completion
    else {
        panic!("{:?}", outcome.completion);
    };
    assert!(
        run(&mut *session, "kept").completion.is_err(),
        "a fresh session"
    );
    assert_eq!(run(&mut *session, "3").completion, Ok(json!(3)));
}

#[test]
fn deep_recursion_is_a_call_depth_error_not_a_crash() {
    let mut session = session(Limits::default());
    let outcome = run(&mut *session, "fn r(n) { r(n + 1) } r(0)");
    assert_eq!(
        limit_hit(&outcome),
        Some(LimitKind::CallDepth),
        "{:?}",
        outcome.completion
    );
    assert_eq!(run(&mut *session, "2 + 2").completion, Ok(json!(4)));
}

/// Time in a tool is the host's: a script past its deadline because a tool was
/// slow is stopped by the engine (keeping the session), not trapped by wasmtime.
#[test]
fn a_slow_tool_that_outlasts_the_deadline_ends_the_run_without_losing_the_session() {
    let runtime = runtime(Limits {
        wall_time: Duration::from_millis(100),
        ..Limits::default()
    });
    let mut session = runtime
        .new_session(Arc::new(HostTools::new()))
        .expect("the session starts");
    run(&mut *session, "let kept = 1;");
    let outcome = run(&mut *session, "slow(); let t = 0; loop { t += 1; }");
    assert_eq!(
        limit_hit(&outcome),
        Some(LimitKind::WallTime),
        "{:?}",
        outcome.completion
    );
    let ScriptError::LimitExceeded { detail, .. } = outcome.completion.expect_err("stopped") else {
        unreachable!()
    };
    assert!(
        detail.is_none(),
        "the engine stopped it, not wasmtime: {detail:?}"
    );
    assert_eq!(run(&mut *session, "kept").completion, Ok(json!(1)));
}

/// Each tool call gives the guest time to read its reply, but the engine stops at
/// its next operation once the alarm is up: a loop of calls cannot stretch it.
#[test]
fn a_loop_of_tool_calls_with_large_replies_ends_at_the_time_limit() {
    let runtime = runtime(Limits {
        wall_time: Duration::from_millis(300),
        max_operations: u64::MAX,
        ..Limits::default()
    });
    let mut session = runtime
        .new_session(Arc::new(HostTools::new()))
        .expect("the session starts");
    let started = Instant::now();
    let outcome = run(
        &mut *session,
        "let big = \"\"; big.pad(1000000, 'x'); loop { echo(#{big: big}); }",
    );
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
        run(&mut *session, "1").completion,
        Ok(json!(1)),
        "the session goes on"
    );
}

#[test]
fn printed_floods_keep_the_first_bytes_and_count_the_rest() {
    let mut session = session(Limits {
        max_output_bytes: 1_000,
        ..Limits::default()
    });
    let outcome = run(
        &mut *session,
        "for i in 0..10000 { print(\"0123456789\"); } 1",
    );
    assert!(outcome.logs.kept().len() <= 1_000);
    assert!(
        outcome.logs.dropped_bytes() > 50_000,
        "{}",
        outcome.logs.dropped_bytes()
    );
}

#[test]
fn a_guest_file_in_a_directory_others_can_write_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("codeact-shared-guests-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let built = codeact_wasm::default_guest_dir().join(codeact_wasm::RHAI_GUEST_FILE);
    std::fs::copy(&built, dir.join(codeact_wasm::RHAI_GUEST_FILE)).expect("copy the guest");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let guest = codeact_wasm::Guest::pinned("wasm:rhai", &dir).expect("known");
    let error = WasmRuntime::new(guest, Limits::default()).expect_err("refused");
    let text = error.to_string();
    assert!(text.contains("lets group or others write it"), "{text}");
    std::fs::remove_dir_all(&dir).ok();
}

/// A new session starts from the snapshot `codeact_preinit` left (wasmtime-wizer);
/// a guest that silently fell back to starting from scratch fails here.
#[test]
fn the_guest_is_pre_initialised() {
    let runtime = WasmRuntime::by_name("wasm:rhai", Limits::default()).expect("loads");
    assert!(runtime.preinitialised());
}
