//! The process-wide cap on running scripts: a script that runs keeps its whole time
//! limit however many wait, and a script waiting in a tool call does not hold its
//! slot. Its own test binary, because the cap is process-wide.

use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::{Duration, Instant};

use codeact::exec::set_max_running_scripts;
use codeact::{Limits, RhaiRuntime, ScriptOutput, ScriptSession, Tool, ToolBox};
use serde_json::json;
use tokio::sync::watch;

fn one_at_a_time() {
    set_max_running_scripts(NonZeroUsize::new(1));
}

fn runtime(wall_time: Duration) -> RhaiRuntime {
    RhaiRuntime::new(Limits {
        wall_time,
        ..Limits::default()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runaway_scripts_over_the_cap_wait_their_turn_and_each_is_stopped_at_its_own_limit() {
    one_at_a_time();
    let runtime = runtime(Duration::from_millis(300));
    let tools = Arc::new(ToolBox::new([]).expect("no tools"));
    let started = Instant::now();
    let runs = (0..2).map(|_| {
        let mut session = ScriptSession::start(&runtime, tools.clone()).expect("session");
        tokio::spawn(async move { session.run("let x = 0; loop { x += 1; }").await })
    });
    for run in runs.collect::<Vec<_>>() {
        let output = run.await.expect("no panic").expect("a run").output;
        assert!(
            matches!(&output, ScriptOutput::Error { message } if message.contains("time limit")),
            "{output}"
        );
    }
    // One at a time, each for its whole 300 ms: the second waited for the first.
    assert!(
        started.elapsed() >= Duration::from_millis(600),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_waiting_in_a_tool_call_lets_another_session_run_meanwhile() {
    one_at_a_time();
    let runtime = runtime(Duration::from_secs(20));
    let (done_tx, done_rx) = watch::channel(false);
    let (waiting_tx, mut waiting_rx) = watch::channel(false);
    // Session A waits in a tool until session B's script has run: with A holding
    // the only slot through its tool call, B could never start.
    let wait_for_b = Tool::new("wait_for_b", "Waits until B has run.", move |_| {
        let mut done = done_rx.clone();
        waiting_tx.send_replace(true);
        async move {
            done.wait_for(|done| *done)
                .await
                .map_err(|e| codeact::ToolError::new(e.to_string()))?;
            Ok(json!("b ran"))
        }
    });
    let tools_a = Arc::new(ToolBox::new([wait_for_b]).expect("tools"));
    let mut a = ScriptSession::start(&runtime, tools_a).expect("session a");
    let a_run = tokio::spawn(async move { a.run("final_result(wait_for_b())").await });
    waiting_rx
        .wait_for(|waiting| *waiting)
        .await
        .expect("a reached its tool call");
    let tools_b = Arc::new(ToolBox::new([]).expect("no tools"));
    let mut b = ScriptSession::start(&runtime, tools_b).expect("session b");
    let b_run = tokio::time::timeout(Duration::from_secs(10), b.run("final_result(2)"))
        .await
        .expect("b started while a waited in its tool call")
        .expect("b ran");
    assert!(
        matches!(b_run.output, ScriptOutput::FinalResult { .. }),
        "{}",
        b_run.output
    );
    done_tx.send(true).expect("a is waiting");
    let a_output = a_run.await.expect("no panic").expect("a ran").output;
    assert!(
        matches!(&a_output, ScriptOutput::FinalResult { value, .. } if *value == json!("b ran")),
        "{a_output}"
    );
}
