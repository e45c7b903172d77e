//! The JavaScript worker as a process: a tour of the language under its seccomp
//! filter, and its end.
//!
//! This binary is its own worker: `main` calls `run_worker_if_requested` first,
//! as an app must (so it has no test harness, and runs the tests below in order).
//! Linux only: elsewhere the worker is not confined, and the tests do not run.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use codeact_js::{JsRuntime, WORKER_ARG};
use codeact_runtime::{
    LimitKind, Limits, Runtime, ScriptError, Session, ToolDispatch, ToolError, ToolSpec,
};
use serde_json::{Value, json};

fn main() -> ExitCode {
    if let Some(code) = codeact_js::run_worker_if_requested() {
        return code;
    }
    if !cfg!(target_os = "linux") {
        println!("0 passed, 0 failed: the worker confines itself on Linux only");
        return ExitCode::SUCCESS;
    }
    let tests: &[(&str, fn())] = &[
        (
            "a_worker_runs_every_kind_of_script_under_its_confinement",
            a_worker_runs_every_kind_of_script_under_its_confinement,
        ),
        (
            "a_worker_whose_host_closes_its_input_exits_cleanly",
            a_worker_whose_host_closes_its_input_exits_cleanly,
        ),
    ];
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|arg| !arg.starts_with('-'))
        .collect();
    let (mut passed, mut failed) = (0, 0);
    for (name, test) in tests {
        if !filter.is_empty() && !filter.iter().any(|f| name.contains(f.as_str())) {
            continue;
        }
        let started = Instant::now();
        let result = std::panic::catch_unwind(test);
        let took = started.elapsed().as_secs_f64();
        if result.is_ok() {
            passed += 1;
            println!("test {name} ... ok ({took:.1}s)");
        } else {
            failed += 1;
            println!("test {name} ... FAILED ({took:.1}s)");
        }
    }
    println!("{passed} passed, {failed} failed");
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Answers every tool call with its arguments.
struct Echo;

impl ToolDispatch for Echo {
    fn specs(&self) -> &[ToolSpec] {
        &[]
    }
    fn call(&self, _name: &str, args: Value) -> Result<Value, ToolError> {
        Ok(args)
    }
}

fn session(limits: Limits) -> Box<dyn Session> {
    JsRuntime::new(limits)
        .new_session(Arc::new(Echo))
        .expect("a session")
}

/// The completion value of `script`, which must succeed.
fn value(session: &mut Box<dyn Session>, script: &str) -> Value {
    let outcome = session.run(script).expect("the host is fine");
    match outcome.completion {
        Ok(value) => value,
        Err(error) => panic!("{script}: {error:?}"),
    }
}

/// The error of `script`, which must fail.
fn error(session: &mut Box<dyn Session>, script: &str) -> ScriptError {
    let outcome = session.run(script).expect("the host is fine");
    outcome.completion.expect_err(script)
}

fn limit(error: &ScriptError) -> Option<LimitKind> {
    match error {
        ScriptError::LimitExceeded { limit, .. } => Some(*limit),
        _ => None,
    }
}

/// If this fails, the allow-list misses a call the engine makes for some part of
/// the language: state, tools, console, dates, randomness, regular expressions,
/// errors, deep recursion, big arrays, promises, or dying at the memory cap and
/// starting again.
fn a_worker_runs_every_kind_of_script_under_its_confinement() {
    let mut session = session(Limits {
        max_memory_bytes: 32 << 20,
        ..Limits::default()
    });
    assert_eq!(value(&mut session, "var kept = 41; kept"), json!(41));
    let outcome = session
        .run("console.log('hello'); kept + 1")
        .expect("the host is fine");
    assert_eq!(outcome.completion, Ok(json!(42)));
    assert_eq!(outcome.logs.kept(), "hello\n");
    assert_eq!(
        value(&mut session, "tools.echo({a: [1, 'two']})"),
        json!({"a": [1, "two"]})
    );
    assert_eq!(
        value(
            &mut session,
            "call_tool('echo', {big: 'x'.repeat(1 << 20)}).big.length"
        ),
        json!(1 << 20)
    );
    assert_eq!(
        value(
            &mut session,
            "[new Date(0).toISOString(), typeof Date.now(), String(new Date()).length > 0]"
        ),
        json!(["1970-01-01T00:00:00.000Z", "number", true])
    );
    assert_eq!(
        value(&mut session, "let r = Math.random(); r >= 0 && r < 1"),
        json!(true)
    );
    assert_eq!(
        value(
            &mut session,
            "[/(a+)+b/.test('aaaab'), 'a-b-c'.split(/-/).length, 'é'.normalize('NFD').length]"
        ),
        json!([true, 3, 2])
    );
    assert_eq!(
        value(
            &mut session,
            "JSON.parse(JSON.stringify({a: [1, 2, {b: null}]})).a.length"
        ),
        json!(3)
    );
    assert_eq!(
        value(
            &mut session,
            "new Array(1e6).fill(1.5).map(x => x * 2).reduce((a, b) => a + b)"
        ),
        json!(3_000_000)
    );
    assert_eq!(
        value(
            &mut session,
            "let m = new Map([[1, 2]]); [m.size, [3, 1, 2].sort((a, b) => a - b), 2n ** 70n > 0n]"
        ),
        json!([1, [1, 2, 3], true])
    );
    let outcome = session
        .run("Promise.resolve(7).then(x => console.log('later ' + x)); 1")
        .expect("the host is fine");
    assert_eq!(outcome.completion, Ok(json!(1)));
    assert!(
        matches!(
            error(&mut session, "throw new Error('boom')"),
            ScriptError::Thrown { .. }
        ),
        "thrown"
    );
    assert!(
        matches!(
            error(&mut session, "this is not ( javascript"),
            ScriptError::Syntax { .. }
        ),
        "syntax"
    );
    let deep = error(
        &mut session,
        "function f(n) { return n == 0 ? 0 : 1 + f(n - 1) } f(100000)",
    );
    assert_eq!(limit(&deep), Some(LimitKind::CallDepth), "{deep:?}");
    assert_eq!(
        value(&mut session, "kept"),
        json!(41),
        "the worker lived on"
    );
    let bomb = error(&mut session, "let s = 'y'; while (true) s += s;");
    assert_eq!(limit(&bomb), Some(LimitKind::Memory), "{bomb:?}");
    assert_eq!(
        value(&mut session, "typeof kept"),
        json!("undefined"),
        "a fresh worker after the memory cap"
    );
}

/// Starts this binary as a worker directly, as a host would.
fn start_worker(limits: &Limits) -> Child {
    Command::new(std::env::current_exe().expect("this binary"))
        .arg(WORKER_ARG)
        .arg(serde_json::to_string(limits).expect("limits as JSON"))
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the worker starts")
}

/// Sends a run of `script` to a worker started by [`start_worker`].
fn send_run(worker: &mut Child, script: &str) {
    let stdin = worker.stdin.as_mut().expect("the worker's stdin");
    let line = json!({"op": "run", "script": script}).to_string();
    // A worker that already exited makes this fail; its status says why.
    let _ = writeln!(stdin, "{line}").and_then(|()| stdin.flush());
}

/// Waits up to `limit` for `child` to end; its status, or None if it runs on
/// (then it is killed).
fn wait_for(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let started = Instant::now();
    while started.elapsed() < limit {
        if let Some(status) = child.try_wait().expect("wait") {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

/// If this fails, a worker cannot end normally under its filter (flushing,
/// freeing its signal stack, exiting) once its host closes its input.
fn a_worker_whose_host_closes_its_input_exits_cleanly() {
    let mut worker = start_worker(&Limits::default());
    send_run(&mut worker, "6 * 7");
    let mut reply = String::new();
    BufReader::new(worker.stdout.take().expect("stdout"))
        .read_line(&mut reply)
        .expect("a reply");
    assert!(
        reply.contains("\"done\"") && reply.contains("42"),
        "{reply}"
    );
    drop(worker.stdin.take());
    let status = wait_for(&mut worker, Duration::from_secs(10)).expect("the worker ends");
    assert_eq!(status.code(), Some(0), "{status:?}");
}
