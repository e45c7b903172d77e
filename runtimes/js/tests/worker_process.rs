//! The JavaScript worker as a process among others: the audit's findings against
//! its containment (what it inherits, who can read it, what outlives whom), and a
//! tour of the language under its seccomp filter.
//!
//! This binary is its own worker: `main` calls `run_worker_if_requested` first,
//! as an app must (so it has no test harness, and runs the tests below in order).
//! It is also the intermediary host some tests start and kill ([`HOST_ROLE`]).
//! Linux only: elsewhere the worker is not confined, and the tests do not run.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::Arc;
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use codeact_js::{JsRuntime, WORKER_ARG};
use codeact_runtime::{
    ErrorKind, LimitKind, Limits, NoTools, Runtime, ScriptError, Session, ToolDispatch, ToolError,
    ToolSpec,
};
use serde_json::{Value, json};

/// Set to `host` in the environment of the intermediary host this binary starts.
const HOST_ROLE: &str = "CODEACT_JS_TEST_ROLE";

/// A script that backtracks for far longer than any test runs (2^40 steps) inside
/// one native call, where Boa's loop limit never looks.
const RUNAWAY_REGEX: &str = r#"/(a+)+$/.test("a".repeat(40) + "b")"#;

/// The user the intermediary host runs as when the tests run as root, so that
/// the worker is not root either (root may read any process).
const NOBODY: u32 = 65534;

fn main() -> ExitCode {
    if let Some(code) = codeact_js::run_worker_if_requested() {
        return code;
    }
    if !cfg!(target_os = "linux") {
        println!("0 passed, 0 failed: the worker confines itself on Linux only");
        return ExitCode::SUCCESS;
    }
    if std::env::var(HOST_ROLE).as_deref() == Ok("host") {
        return intermediary_host();
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
        (
            "a_worker_dies_with_its_host_when_the_host_is_killed",
            a_worker_dies_with_its_host_when_the_host_is_killed,
        ),
        (
            "a_worker_outlives_the_thread_that_started_it",
            a_worker_outlives_the_thread_that_started_it,
        ),
        (
            "a_worker_whose_parent_is_not_its_host_refuses_to_serve",
            a_worker_whose_parent_is_not_its_host_refuses_to_serve,
        ),
        (
            "a_runaway_run_ends_at_the_workers_own_deadline_when_nobody_kills_it",
            a_runaway_run_ends_at_the_workers_own_deadline_when_nobody_kills_it,
        ),
        (
            "a_descriptor_the_host_leaves_open_across_exec_is_closed_in_the_worker",
            a_descriptor_the_host_leaves_open_across_exec_is_closed_in_the_worker,
        ),
        (
            "a_process_of_the_workers_user_cannot_read_the_worker",
            a_process_of_the_workers_user_cannot_read_the_worker,
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
    // What is tested is the confinement, not the speed: a generous time limit keeps
    // the million-element array from meeting it on a loaded machine.
    let mut session = session(Limits {
        max_memory_bytes: 32 << 20,
        wall_time: std::time::Duration::from_secs(30),
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
    // A tool's null answer crosses the pipe as null, not as no answer.
    assert_eq!(
        value(&mut session, "call_tool('echo', null) === null"),
        json!(true)
    );
    // A batch crosses the pipe as one request and one answer.
    assert_eq!(
        value(
            &mut session,
            "(await Promise.all([tools.echo({a: 1}), tools.echo(null), tools.echo({a: 3})])).map((r) => r && r.a)"
        ),
        json!([1, null, 3])
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
    // The error's kind and line cross the worker's channel (Boa gives no
    // line for a name undefined at the top level).
    let facts = |session: &mut Box<dyn Session>, script: &str| {
        let error = error(session, script);
        let facts = error.facts().cloned();
        facts.map(|facts| (facts.kind, facts.line))
    };
    assert_eq!(
        facts(&mut session, "let a = 1;\nmissing + a"),
        Some((
            ErrorKind::UndefinedName {
                name: "missing".into()
            },
            None
        ))
    );
    assert_eq!(
        facts(&mut session, "const o = {};\no.nothing()"),
        Some((ErrorKind::NotCallable, Some(2)))
    );
    assert_eq!(
        facts(&mut session, "let x = 1;\nlet = ;"),
        Some((ErrorKind::Syntax, Some(2)))
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

/// Starts this binary as a worker directly, as a host would, telling it that its
/// host is `host`.
fn start_worker(limits: &Limits, host: u32) -> Child {
    Command::new(std::env::current_exe().expect("this binary"))
        .arg(WORKER_ARG)
        .arg(serde_json::to_string(limits).expect("limits as JSON"))
        .arg(host.to_string())
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
    let mut worker = start_worker(&Limits::default(), std::process::id());
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

/// If this fails, a worker started by a host that died at once serves whoever
/// adopted it: it must check that its parent is the host it was told of.
fn a_worker_whose_parent_is_not_its_host_refuses_to_serve() {
    // pid 1 is never this test's process.
    let mut worker = start_worker(&Limits::default(), 1);
    send_run(&mut worker, "6 * 7");
    // A worker that serves ends when its input does.
    drop(worker.stdin.take());
    let mut replies = String::new();
    let _ = worker
        .stdout
        .take()
        .expect("stdout")
        .read_to_string(&mut replies);
    let status = wait_for(&mut worker, Duration::from_secs(10)).expect("the worker ends");
    assert_eq!(status.code(), Some(1), "{status:?} {replies}");
    assert!(
        replies.contains("\"fatal\"") && replies.contains("host") && !replies.contains("42"),
        "{replies}"
    );
}

/// If this fails, a worker whose host is stuck or gone runs a catastrophic regex
/// without end: nothing but the host bounded a run.
fn a_runaway_run_ends_at_the_workers_own_deadline_when_nobody_kills_it() {
    let limits = Limits {
        wall_time: Duration::from_millis(100),
        ..Limits::default()
    };
    let mut worker = start_worker(&limits, std::process::id());
    let started = Instant::now();
    send_run(&mut worker, RUNAWAY_REGEX);
    // Its CPU limit: about 0.1 s of start-up, the 0.1 s limit and the 1 s grace,
    // rounded up to 2 s of CPU; a busy machine stretches that in wall time.
    let status = wait_for(&mut worker, Duration::from_secs(30));
    let took = started.elapsed();
    let status = status.expect("the worker ended by itself within 30 s");
    assert_eq!(
        status.signal(),
        Some(rustix::process::Signal::XCPU.as_raw()),
        "{status:?}"
    );
    assert!(
        took >= Duration::from_secs(1),
        "it ran past its grace: {took:?}"
    );
}

/// If this fails, a worker dies when the thread that started it ends (the kernel
/// sends the parent-death signal when that *thread* exits): a session used from
/// a pool of threads would lose its worker, and its variables, between runs.
fn a_worker_outlives_the_thread_that_started_it() {
    let mut session = session(Limits::default());
    let mut session = std::thread::spawn(move || {
        assert_eq!(value(&mut session, "var kept = 41; kept"), json!(41));
        session
    })
    .join()
    .expect("the thread ran");
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(value(&mut session, "kept + 1"), json!(42));
}

/// The worker processes whose parent is `parent`.
fn workers_of(parent: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            // After the command's name, which may hold anything, in parentheses:
            // the state, then the parent's pid.
            let after_name = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
            let ppid = after_name.split_whitespace().nth(1);
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            ppid == Some(&parent.to_string())
                && String::from_utf8_lossy(&cmdline).contains(WORKER_ARG)
        })
        .collect()
}

/// Whether `pid` is a process that has not ended (a zombie has ended).
fn is_running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let (_, rest) = stat.rsplit_once(')')?;
            rest.split_whitespace().next().map(|state| state != "Z")
        })
        .unwrap_or(false)
}

/// The intermediary host: starts a session, reports its worker, tries to read
/// the worker's environment as a process of the same user, then runs a runaway
/// regex under a 60 s deadline until the test kills it.
fn intermediary_host() -> ExitCode {
    let limits = Limits {
        wall_time: Duration::from_secs(60),
        ..Limits::default()
    };
    let mut session = JsRuntime::new(limits)
        .new_session(Arc::new(NoTools))
        .expect("a session");
    session.run("1").expect("the worker starts");
    let [worker] = workers_of(std::process::id())[..] else {
        println!("HOST found no single worker");
        return ExitCode::FAILURE;
    };
    match std::fs::read(format!("/proc/{worker}/environ")) {
        Ok(_) => println!("HOST environ readable"),
        Err(e) => println!("HOST environ refused: {:?}", e.kind()),
    }
    println!("HOST worker {worker}");
    let outcome = session.run(RUNAWAY_REGEX);
    println!("HOST the runaway run ended: {outcome:?}");
    ExitCode::SUCCESS
}

/// This binary as an intermediary host, as another user if the tests run as
/// root; its lines as they come.
fn start_intermediary_host() -> (Child, Receiver<String>) {
    let mut command = Command::new("/proc/self/exe");
    command
        .env(HOST_ROLE, "host")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    if rustix::process::getuid().is_root() {
        command.uid(NOBODY).gid(NOBODY);
    }
    let mut host = command.spawn().expect("the intermediary host starts");
    let stdout = host.stdout.take().expect("stdout");
    let (sender, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if sender.send(line).is_err() {
                break;
            }
        }
    });
    (host, lines)
}

/// The lines of the intermediary host up to its worker's pid.
fn until_worker(lines: &Receiver<String>) -> (Vec<String>, u32) {
    let mut seen = Vec::new();
    loop {
        let line = lines
            .recv_timeout(Duration::from_secs(20))
            .unwrap_or_else(|e| panic!("the host said {seen:?}, then {e}"));
        if let Some(pid) = line.strip_prefix("HOST worker ") {
            return (seen, pid.parse().expect("a pid"));
        }
        seen.push(line);
    }
}

/// If this fails, a worker outlives a host killed with SIGKILL and runs on,
/// here a catastrophic regex under a 60 s deadline nobody is left to keep.
fn a_worker_dies_with_its_host_when_the_host_is_killed() {
    let (mut host, lines) = start_intermediary_host();
    let (_, worker) = until_worker(&lines);
    std::thread::sleep(Duration::from_millis(300));
    assert!(is_running(worker), "the worker runs the regex");
    host.kill().expect("SIGKILL to the host");
    let _ = host.wait();
    let started = Instant::now();
    while is_running(worker) && started.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let alive = is_running(worker);
    kill_if_running(worker);
    assert!(!alive, "the worker {worker} outlived its host by 5 s");
}

/// Kills `pid` if it still runs: a worker whose host a test killed, when it did
/// not die with it.
fn kill_if_running(pid: u32) {
    if is_running(pid) {
        let _ = rustix::process::kill_process(
            rustix::process::Pid::from_raw(pid as i32).expect("a pid"),
            rustix::process::Signal::KILL,
        );
    }
}

/// If this fails, a process of the worker's user can read the worker's memory
/// and environment through /proc, or trace it: the worker is dumpable.
fn a_process_of_the_workers_user_cannot_read_the_worker() {
    use std::os::unix::fs::MetadataExt;

    let (mut host, lines) = start_intermediary_host();
    let (said, worker) = until_worker(&lines);
    let owner = std::fs::metadata(format!("/proc/{worker}/mem")).map(|m| m.uid());
    let _ = host.kill();
    let _ = host.wait();
    std::thread::sleep(Duration::from_millis(100));
    kill_if_running(worker);
    assert!(
        said.iter()
            .any(|line| line == "HOST environ refused: PermissionDenied"),
        "{said:?}"
    );
    // A process that is not dumpable has its /proc files owned by root (its
    // /proc/<pid> directory keeps its user's, for ps).
    assert_eq!(owner.ok(), Some(0), "the owner of /proc/{worker}/mem");
}

/// If this fails, a worker holds descriptors its host left open across exec (an
/// app's database, a socket), and a script that escaped the engine can use them.
fn a_descriptor_the_host_leaves_open_across_exec_is_closed_in_the_worker() {
    use rustix::io::{FdFlags, fcntl_setfd};

    let (mut reader, writer) = std::io::pipe().expect("a pipe");
    fcntl_setfd(&writer, FdFlags::empty()).expect("the writer stays open across exec");
    let mut session = session(Limits::default());
    // The worker answers only once it has confined itself.
    assert_eq!(value(&mut session, "1"), json!(1));
    drop(writer);
    // With no writer left anywhere, the reader sees the end at once; if the
    // worker held the writer, the read would wait for the worker to end.
    let (sender, ended) = mpsc::channel();
    std::thread::spawn(move || {
        let mut rest = Vec::new();
        let _ = sender.send(reader.read_to_end(&mut rest).map(|_| rest.len()));
    });
    let seen = ended.recv_timeout(Duration::from_secs(3));
    drop(session);
    assert!(
        matches!(seen, Ok(Ok(0))),
        "the worker held the host's descriptor: {seen:?}"
    );
}
