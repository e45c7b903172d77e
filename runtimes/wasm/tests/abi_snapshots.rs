//! Snapshots of the guests on codeact's ABI (`wasm:js`, `wasm:rhai`, `wasm:boa`, built by
//! guests/build-guests.sh), issue 19: a session's linear memory, restored into a
//! fresh instance of the same guest. Variables and functions come back, restores
//! fork, 10 MB survive, limits hold, and a snapshot of another guest, other tools
//! or limits, or damaged bytes, is refused; the stdio guests say they cannot.

use std::sync::Arc;
use std::time::Duration;

use codeact_runtime::{
    LimitKind, Limits, NoTools, Runtime, ScriptError, Session, Snapshot, SnapshotError, ToolSpec,
};
use codeact_wasm::WasmRuntime;
use serde_json::{Value, json};

fn runtime(name: &str, limits: Limits) -> WasmRuntime {
    WasmRuntime::by_name(name, limits).expect("the guest loads (guests/build-guests.sh)")
}

fn value(session: &mut dyn Session, script: &str) -> Value {
    session
        .run(script)
        .expect("the host stays up")
        .completion
        .unwrap_or_else(|e| panic!("{script}: {e}"))
}

/// The same state in each guest's language: a counter, a list, a function.
fn setup(name: &str) -> (&'static str, &'static str, &'static str) {
    match name {
        "wasm:rhai" => (
            "fn double(x) { x * 2 } let n = 41; let list = [1, 2]; 0",
            "n += 1; list.push(3); 0",
            "[n, list.len(), double(n)]",
        ),
        _ => (
            "function double(x) { return x * 2 } var n = 41; var list = [1, 2]; 0",
            "n += 1; list.push(3); 0",
            "[n, list.length, double(n)]",
        ),
    }
}

/// If this fails, a restored ABI guest session lost its variables or functions,
/// or two restores of one snapshot share their memory.
#[test]
fn an_abi_guests_session_comes_back_from_its_memory_and_restores_fork() {
    for name in ["wasm:js", "wasm:rhai", "wasm:boa"] {
        let runtime = runtime(name, Limits::default());
        let (define, change, read) = setup(name);
        let mut session = runtime.new_session(Arc::new(NoTools)).expect("starts");
        value(&mut *session, define);
        let snapshot = session.snapshot().expect("snapshots");
        value(&mut *session, change);
        let mut left = runtime.restore(&snapshot, Arc::new(NoTools)).expect("left");
        let mut right = runtime
            .restore(&snapshot, Arc::new(NoTools))
            .expect("right");
        assert_eq!(value(&mut *left, read), json!([41, 2, 82]), "{name}");
        value(&mut *left, change);
        assert_eq!(value(&mut *left, read), json!([42, 3, 84]), "{name}");
        assert_eq!(value(&mut *right, read), json!([41, 2, 82]), "{name}");
        assert_eq!(value(&mut *session, read), json!([42, 3, 84]), "{name}");
    }
}

/// If this fails, a guest session holding 10 MB does not come back whole.
#[test]
fn an_abi_guest_session_holding_ten_megabytes_comes_back_whole() {
    for (name, make, read) in [
        (
            "wasm:rhai",
            r#"let big = "0123456789"; while big.len() < 10_000_000 { big += big; } 0"#,
            "big.len()",
        ),
        (
            "wasm:boa",
            r#"var big = "0123456789".repeat(1_000_000); 0"#,
            "big.length",
        ),
        (
            "wasm:js",
            r#"var big = "0123456789".repeat(1_000_000); 0"#,
            "big.length",
        ),
    ] {
        let runtime = runtime(name, Limits::default());
        let mut session = runtime.new_session(Arc::new(NoTools)).expect("starts");
        value(&mut *session, make);
        let want = value(&mut *session, read);
        let snapshot = session.snapshot().expect("snapshots");
        let mut restored = runtime
            .restore(&snapshot, Arc::new(NoTools))
            .expect("restores");
        assert_eq!(value(&mut *restored, read), want, "{name}");
    }
}

/// If this fails, a snapshot is loaded into another guest, under other tools or
/// limits than the guest's memory holds, or damaged, instead of being refused.
#[test]
fn a_snapshot_of_another_guest_other_tools_or_damaged_bytes_is_refused() {
    let rhai = runtime("wasm:rhai", Limits::default());
    let boa = runtime("wasm:boa", Limits::default());
    let mut session = rhai.new_session(Arc::new(NoTools)).expect("starts");
    value(&mut *session, "let n = 1; 0");
    let snapshot = session.snapshot().expect("snapshots");
    let refused = boa
        .restore(&snapshot, Arc::new(NoTools))
        .map(|_| ())
        .expect_err("foreign");
    assert!(
        matches!(refused, SnapshotError::Foreign { .. }),
        "{refused}"
    );
    let with_tools: Arc<dyn codeact_runtime::ToolDispatch> =
        Arc::new(OneTool(vec![ToolSpec::new("add", "Adds.")]));
    let refused = rhai
        .restore(&snapshot, with_tools)
        .map(|_| ())
        .expect_err("other tools");
    assert!(
        refused.to_string().contains("other tools or limits"),
        "{refused}"
    );
    let stricter = runtime(
        "wasm:rhai",
        Limits {
            max_operations: 1_000,
            ..Limits::default()
        },
    );
    assert!(stricter.restore(&snapshot, Arc::new(NoTools)).is_err());
    let bytes = snapshot.as_bytes();
    let mut changed = bytes.to_vec();
    let middle = changed.len() / 2;
    changed[middle] ^= 1;
    assert!(matches!(
        rhai.restore(&Snapshot::from_bytes(changed), Arc::new(NoTools)),
        Err(SnapshotError::Corrupt(_))
    ));
}

/// `snapshot` with its guest state's `baseline` set to `baseline` and sealed
/// again, as anyone who can write the file can: the seal is a checksum, not a
/// signature.
fn forge_baseline(snapshot: &Snapshot, baseline: u64) -> Snapshot {
    let bytes = snapshot.as_bytes();
    let mut at = b"CODEACT-SNAPSHOT\n".len() + 4;
    let mut text = || {
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes")) as usize;
        let text = std::str::from_utf8(&bytes[at + 4..at + 4 + len]).expect("utf-8");
        at += 4 + len;
        text.to_string()
    };
    let (runtime, identity, _version) = (text(), text(), text());
    let payload_len = u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes")) as usize;
    let payload = &bytes[at + 8..at + 8 + payload_len];
    let header_len = u64::from_le_bytes(payload[..8].try_into().expect("8 bytes")) as usize;
    let mut header: Value = serde_json::from_slice(&payload[8..8 + header_len]).expect("json");
    header["baseline"] = json!(baseline);
    let header = header.to_string();
    let mut forged = (header.len() as u64).to_le_bytes().to_vec();
    forged.extend_from_slice(header.as_bytes());
    forged.extend_from_slice(&payload[8 + header_len..]);
    Snapshot::seal(&runtime, &identity, &forged)
}

/// If this fails, a snapshot file decides how much memory its restored session
/// may hold: its header's baseline, raised and the checksum recomputed, lifts
/// the memory cap far past the restoring runtime's limit.
#[test]
fn a_snapshot_whose_baseline_was_raised_is_refused_by_the_runtime_that_restores_it() {
    let limits = Limits {
        max_memory_bytes: 8 << 20,
        ..Limits::default()
    };
    let boa = runtime("wasm:boa", limits);
    let mut session = boa.new_session(Arc::new(NoTools)).expect("starts");
    value(&mut *session, "var n = 1; 0");
    let sealed = session.snapshot().expect("snapshots");
    let forged = forge_baseline(&sealed, 450 << 20);
    let refused = boa
        .restore(&forged, Arc::new(NoTools))
        .map(|_| ())
        .expect_err("a forged baseline");
    assert!(
        refused
            .to_string()
            .contains("more than a guest may start with"),
        "{refused}"
    );
}

/// If this fails, a restored guest session runs past its time limit.
#[test]
fn a_restored_guest_session_is_held_to_its_limits() {
    let limits = Limits {
        wall_time: Duration::from_millis(300),
        ..Limits::default()
    };
    let runtime = runtime("wasm:rhai", limits);
    let mut session = runtime.new_session(Arc::new(NoTools)).expect("starts");
    value(&mut *session, "let n = 1; 0");
    let snapshot = session.snapshot().expect("snapshots");
    let mut restored = runtime
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
}

/// If this fails, a stdio guest pretends to snapshot, or fails without saying why.
#[test]
fn a_stdio_guest_says_its_sessions_cannot_be_snapshotted() {
    let Ok(runtime) = WasmRuntime::by_name("wasm:js-stdio", Limits::default()) else {
        eprintln!("SKIPPED: the QuickJS guest is not fetched (guests/fetch-guests.sh)");
        return;
    };
    let mut session = runtime.new_session(Arc::new(NoTools)).expect("starts");
    let refused = session.snapshot().expect_err("unsupported");
    assert!(
        matches!(refused, SnapshotError::Unsupported { .. }),
        "{refused}"
    );
    assert!(refused.to_string().contains("wasm:js-stdio"), "{refused}");
}

struct OneTool(Vec<ToolSpec>);

impl codeact_runtime::ToolDispatch for OneTool {
    fn specs(&self) -> &[ToolSpec] {
        &self.0
    }

    fn call(&self, _name: &str, _args: Value) -> Result<Value, codeact_runtime::ToolError> {
        Ok(json!(0))
    }
}
