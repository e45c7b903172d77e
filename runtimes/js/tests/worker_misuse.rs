//! An app that hosts JavaScript sessions but forgets `run_worker_if_requested`:
//! its workers are the app's own `main` again. This test binary is such an app (it
//! never calls it), so it plays both sides.

use std::process::Command;
use std::sync::Arc;

use codeact_js::{JsRuntime, WORKER_ENV};
use codeact_runtime::{HostError, Limits, NoTools, Runtime};

/// Starts a JavaScript session whose worker is this test binary and runs a script.
fn run_with_this_binary_as_worker() -> Result<(), HostError> {
    let exe = std::env::current_exe().map_err(|e| HostError::SessionStart {
        runtime: "js",
        reason: e.to_string(),
    })?;
    let runtime = JsRuntime::new(Limits::default()).with_worker(exe);
    let mut session = runtime.new_session(Arc::new(NoTools))?;
    session.run("1").map(|_| ())
}

/// If this fails, an app that forgot the worker call gets a vague "worker ended"
/// (or hangs) instead of being told the fix.
#[test]
fn a_worker_that_does_not_speak_the_protocol_is_reported_with_the_fix() {
    let error = run_with_this_binary_as_worker().expect_err("this binary is no worker");
    let message = error.to_string();
    assert!(
        message.contains("run_worker_if_requested()") && message.contains("does not speak"),
        "{message}"
    );
}

/// Runs only as a child of the test below, with the worker marker set.
#[test]
#[ignore = "run by a_process_started_as_a_worker_never_starts_workers_of_its_own"]
fn child_that_tries_to_start_a_worker() {
    match run_with_this_binary_as_worker() {
        Ok(()) => println!("CHILD: started a worker"),
        Err(e) => println!("CHILD: {e}"),
    }
}

/// If this fails, a misbuilt app started as a worker starts copies of itself
/// without end (seen: 63 processes in 300 ms).
#[test]
fn a_process_started_as_a_worker_never_starts_workers_of_its_own() {
    let exe = std::env::current_exe().expect("the test binary's path");
    let output = Command::new(exe)
        .args([
            "--exact",
            "child_that_tries_to_start_a_worker",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(WORKER_ENV, "1")
        .output()
        .expect("the child test runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("CHILD: ")
            && stdout.contains("started as a JavaScript worker")
            && stdout.contains("run_worker_if_requested()"),
        "{stdout}"
    );
}
