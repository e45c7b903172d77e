//! Snapshots of Rhai sessions (issue 19): what a session holds comes back with its
//! types, restores fork, a restore works in another process, and a snapshot that
//! is damaged, of another runtime, or holding what cannot be kept is refused.

use std::sync::Arc;
use std::time::Duration;

use codeact_rhai::RhaiRuntime;
use codeact_runtime::{
    LimitKind, Limits, NoTools, Runtime, ScriptError, Session, Snapshot, SnapshotError,
};
use serde_json::{Value, json};

fn runtime(limits: Limits) -> RhaiRuntime {
    RhaiRuntime::new(limits)
}

fn value(session: &mut dyn Session, script: &str) -> Value {
    let outcome = session.run(script).expect("runs");
    outcome
        .completion
        .unwrap_or_else(|e| panic!("{script}: {e}"))
}

/// A session holding a value of each kind and two functions.
fn filled(runtime: &RhaiRuntime) -> Box<dyn Session> {
    let mut session = runtime.new_session(Arc::new(NoTools)).expect("starts");
    value(
        &mut *session,
        r#"
        fn double(x) { x * 2 }
        fn greet(name) { `hello ${name}` }
        let n = 41;
        let f = 1.5;
        let nan = 0.0 / 0.0;
        let c = 'é';
        let s = "text";
        let b = blob(3, 7);
        let list = [1, "two", [3.0, ()], #{four: 4}];
        let pointer = Fn("double");
        const LIMIT = 10;
        let unit = ();
        "#,
    );
    session
}

/// If this fails, a restored Rhai session lost a variable, a value's type, a
/// constant or a function: a snapshot did not bring the session back.
#[test]
fn a_restored_session_has_every_variable_with_its_type_and_every_function() {
    let runtime = runtime(Limits::default());
    let mut session = filled(&runtime);
    let snapshot = session.snapshot().expect("snapshots");
    let mut restored = runtime
        .restore(&snapshot, Arc::new(NoTools))
        .expect("restores");
    let got = value(
        &mut *restored,
        r#"#{
            n: n + 1, f: f, nan: nan.is_nan, c: type_of(c), c_int: c.to_int(), s: s,
            b: b.len(), b0: b[0], list: list, called: pointer.call(21),
            double: double(4), greet: greet("you"), limit: LIMIT, unit: type_of(unit)
        }"#,
    );
    assert_eq!(
        got,
        json!({
            "n": 42, "f": 1.5, "nan": true, "c": "char", "c_int": 233, "s": "text",
            "b": 3, "b0": 7, "list": [1, "two", [3.0, null], {"four": 4}], "called": 42, "double": 8, "greet": "hello you", "limit": 10, "unit": "()"
        })
    );
    let constant = restored.run("LIMIT = 11;").expect("runs").completion;
    assert!(constant.is_err(), "a constant stays constant: {constant:?}");
}

/// If this fails, two sessions restored from one snapshot share state: a fork
/// changes the other.
#[test]
fn two_restores_of_one_snapshot_diverge() {
    let runtime = runtime(Limits::default());
    let snapshot = filled(&runtime).snapshot().expect("snapshots");
    let mut left = runtime.restore(&snapshot, Arc::new(NoTools)).expect("left");
    let mut right = runtime
        .restore(&snapshot, Arc::new(NoTools))
        .expect("right");
    value(&mut *left, "n = 1; list.push(5); fn double(x) { x * 3 }");
    assert_eq!(
        value(&mut *right, "[n, list.len(), double(2)]"),
        json!([41, 4, 4])
    );
    assert_eq!(
        value(&mut *left, "[n, list.len(), double(2)]"),
        json!([1, 5, 6])
    );
}

/// If this fails, a session holding 10 MB does not come back whole.
#[test]
fn a_session_holding_ten_megabytes_comes_back_whole() {
    let runtime = runtime(Limits::default());
    let mut session = runtime.new_session(Arc::new(NoTools)).expect("starts");
    value(
        &mut *session,
        r#"let big = "0123456789"; while big.len() < 10_000_000 { big += big; } 0"#,
    );
    let snapshot = session.snapshot().expect("snapshots");
    assert!(snapshot.as_bytes().len() > 10_000_000);
    let mut restored = runtime
        .restore(&snapshot, Arc::new(NoTools))
        .expect("restores");
    assert_eq!(value(&mut *restored, "big.len()"), json!(10_485_760));
}

/// If this fails, a closure's captured state or an anonymous function is silently
/// dropped (or the snapshot fails without saying which variable holds it).
#[test]
fn a_closure_or_an_anonymous_function_is_refused_naming_its_variable() {
    let runtime = runtime(Limits::default());
    for (script, name) in [
        ("let base = 5; let add_base = |x| x + base; 0", "add_base"),
        ("let inc = |x| x + 1; 0", "inc"),
        ("let nested = [1, #{f: |x| x}]; 0", "nested"),
    ] {
        let mut session = runtime.new_session(Arc::new(NoTools)).expect("starts");
        value(&mut *session, script);
        let refused = session.snapshot().expect_err("a function value");
        match &refused {
            SnapshotError::Value { variable, why } => {
                assert_eq!(variable, name);
                assert!(why.contains("anonymous function"), "{why}");
            }
            other => panic!("{other:?}"),
        }
        value(&mut *session, &format!("{name} = (); 0"));
        session.snapshot().expect("snapshots without it");
    }
}

/// If this fails, a damaged snapshot, or one of another runtime, is loaded
/// (or crashes the host) instead of being refused.
#[test]
fn a_damaged_or_foreign_snapshot_is_refused() {
    let runtime = runtime(Limits::default());
    let snapshot = filled(&runtime).snapshot().expect("snapshots");
    let bytes = snapshot.as_bytes();
    let cut = Snapshot::from_bytes(bytes[..bytes.len() / 2].to_vec());
    assert!(matches!(
        runtime.restore(&cut, Arc::new(NoTools)),
        Err(SnapshotError::Corrupt(_))
    ));
    let foreign = Snapshot::seal("wasm:rhai", "0123abcd", b"{}");
    let refused = runtime
        .restore(&foreign, Arc::new(NoTools))
        .map(|_| ())
        .expect_err("foreign");
    assert!(
        matches!(refused, SnapshotError::Foreign { .. }),
        "{refused}"
    );
    let garbage = Snapshot::seal("rhai", "codeact-rhai 0.1.0", b"\x01not a Rhai state");
    assert!(matches!(
        runtime.restore(&garbage, Arc::new(NoTools)),
        Err(SnapshotError::Corrupt(_))
    ));
}

/// If this fails, a restored session escapes the limits of the runtime that
/// restored it.
#[test]
fn a_restored_session_is_held_to_the_restoring_runtimes_limits() {
    let snapshot = filled(&runtime(Limits::default()))
        .snapshot()
        .expect("snapshots");
    let tight = runtime(Limits {
        wall_time: Duration::from_millis(200),
        ..Limits::default()
    });
    let mut restored = tight
        .restore(&snapshot, Arc::new(NoTools))
        .expect("restores");
    let outcome = restored.run("loop { n += 1; }").expect("runs");
    assert!(
        matches!(
            outcome.completion,
            Err(ScriptError::LimitExceeded {
                limit: LimitKind::WallTime,
                ..
            })
        ),
        "{:?}",
        outcome.completion
    );
    let bomb = restored
        .run(r#"let s = "x"; loop { s += s; }"#)
        .expect("runs");
    assert!(
        matches!(
            bomb.completion,
            Err(ScriptError::LimitExceeded {
                limit: LimitKind::Memory | LimitKind::WallTime,
                ..
            })
        ),
        "{:?}",
        bomb.completion
    );
    assert_eq!(value(&mut *restored, "double(n) > 0"), json!(true));
}

const CHILD_SNAPSHOT: &str = "CODEACT_TEST_RHAI_SNAPSHOT";

/// If this fails, a snapshot holds something of the process that made it (a
/// pointer, an interned id): it does not restore in another one.
#[test]
fn a_snapshot_restores_in_another_process() {
    let snapshot = filled(&runtime(Limits::default()))
        .snapshot()
        .expect("snapshots");
    let dir = tempfile::tempdir().expect("scratch");
    let path = dir.path().join("session.snapshot");
    std::fs::write(&path, snapshot.as_bytes()).expect("written");
    let child = std::process::Command::new(std::env::current_exe().expect("this test binary"))
        .args(["--exact", "restored_in_a_child_process", "--nocapture"])
        .env(CHILD_SNAPSHOT, &path)
        .output()
        .expect("runs");
    let printed = String::from_utf8_lossy(&child.stdout);
    assert!(
        child.status.success(),
        "{printed}{}",
        String::from_utf8_lossy(&child.stderr)
    );
    assert!(
        printed.contains("restored: [42,\"hello you\"]"),
        "{printed}"
    );
}

/// The other process of [`a_snapshot_restores_in_another_process`]; does nothing
/// when run on its own.
#[test]
fn restored_in_a_child_process() {
    let Ok(path) = std::env::var(CHILD_SNAPSHOT) else {
        return;
    };
    let snapshot = Snapshot::from_bytes(std::fs::read(path).expect("read"));
    let mut restored = runtime(Limits::default())
        .restore(&snapshot, Arc::new(NoTools))
        .expect("restores");
    let got = value(&mut *restored, r#"[double(21), greet("you")]"#);
    println!("restored: {got}");
}
