//! Cells on real engines: a script starts a cell that goes on between steps; a
//! later step waits for it and gets its progress and result, a cell is
//! cancelled, a cell's tool call is refused like the script's own, and a cell
//! still running when the run ends is stopped with it, on Rhai, both
//! JavaScript runtimes and CPython.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use codeact::model::ReplayModel;
use codeact::{Agent, CellLimits, CellState, Event, Limits, Outcome, Tool};
use serde_json::{Value, json};

use crate::support::runtimes::runtime;

/// The scripts of one run, in the language of `runtime`: start a cell that
/// notifies and returns 42; wait for it; start an endless cell and cancel it;
/// start a cell whose tool call needs an approval no one gives; start an
/// endless cell and finish while it runs.
fn scripts(runtime: &str) -> [&'static str; 5] {
    match runtime {
        "rhai" => [
            "let c = start_cell(\"notify(`half way`); 40 + 2\");\nobservation(c)",
            "observation(wait_cell(c, 30))",
            "let d = start_cell(\"let i = 0; loop { i += 1; }\");\nobservation(cancel_cell(d).state)",
            "let a = start_cell(\"let r = ``; try { send(`ada`); } catch (err) { r = err; } r\");\nobservation(wait_cell(a, 30))",
            "let e = start_cell(\"let i = 0; loop { i += 1; }\");\nfinal_result(e)",
        ],
        "wasm:python" => [
            "c = start_cell(\"notify('half way')\\nobservation(40 + 2)\")\nobservation(c)",
            "observation(wait_cell(c, 30))",
            "d = start_cell('i = 0\\nwhile True:\\n    i += 1')\nobservation(cancel_cell(d)['state'])",
            "a = start_cell(\"try:\\n    r = send('ada')\\nexcept ToolError as err:\\n    r = str(err)\\nobservation(r)\")\nobservation(wait_cell(a, 30))",
            "e = start_cell('i = 0\\nwhile True:\\n    i += 1')\nfinal_result(e)",
        ],
        _ => [
            "const c = tools.start_cell({code: \"tools.notify({message: 'half way'}); 40 + 2\"});\nobservation(c)",
            "observation(tools.wait_cell({id: c, seconds: 30}))",
            "const d = tools.start_cell({code: 'let i = 0; while (true) { i++; }'});\nobservation(tools.cancel_cell({id: d}).state)",
            "const a = tools.start_cell({code: \"let r; try { r = tools.send({to: 'ada'}); } catch (err) { r = err.message; } r\"});\nobservation(tools.wait_cell({id: a, seconds: 30}))",
            "const e = tools.start_cell({code: 'let i = 0; while (true) { i++; }'});\nfinal_result(e)",
        ],
    }
}

/// If this fails on a runtime, a cell there does not outlive its step, does not
/// report, cannot be cancelled, escapes the run's approvals, or outlives its run.
async fn cells_work_on(name: &str) -> Result<(), String> {
    // Long enough that only the interrupt stops an endless cell in time.
    let limits = Limits {
        wall_time: Duration::from_secs(60),
        max_operations: u64::MAX,
        ..Limits::default()
    };
    let engine = runtime(name, limits)?;
    let fence = engine.info().fence_tags[0];
    let replies: Vec<String> = scripts(name)
        .iter()
        .map(|script| format!("```{fence}\n{script}\n```"))
        .collect();
    let events = Arc::new(Mutex::new(Vec::new()));
    let seen = events.clone();
    let send = Tool::from_fn("send", "Sends a message.", |_| Ok(json!("sent")))
        .with_parameters(json!({"type": "object", "properties": {"to": {"type": "string"}}}));
    let agent = Agent::builder(Arc::new(ReplayModel::new(replies)), engine)
        .tool(send)
        .needs_approval("send")
        .cells(CellLimits::default())
        .on_event(move |event| seen.lock().expect("not poisoned").push(event.clone()))
        .build()
        .map_err(|e| e.to_string())?;
    let started = Instant::now();
    let run = agent
        .run("Use cells.")
        .await
        .map_err(|e| format!("{name}: {e}"))?;
    let took = started.elapsed();
    if run.outcome
        != (Outcome::FinalResult {
            value: json!("cell-4"),
        })
    {
        return Err(format!("{name}: ended with {:?}", run.outcome));
    }
    // The endless cells had 60 s: the run's end stopped the last one.
    if took > Duration::from_secs(40) {
        return Err(format!("{name}: the run and its cells took {took:?}"));
    }
    let events = events.lock().expect("not poisoned").clone();
    let observed: Vec<Value> = events
        .iter()
        .filter_map(|event| match event {
            Event::Observation { value, .. } => Some(value.clone()),
            _ => None,
        })
        .collect();
    let [first, awaited, cancelled, refused] = &observed[..] else {
        return Err(format!("{name}: observations {observed:?}"));
    };
    let expect = |ok: bool, what: &str| {
        if ok {
            Ok(())
        } else {
            Err(format!("{name}: {what}: {observed:?}"))
        }
    };
    expect(first == &json!("cell-1"), "the first cell's id")?;
    expect(
        awaited["state"] == "done"
            && awaited["result"] == 42
            && awaited["progress"] == json!(["half way"]),
        "the awaited cell's state, result and progress",
    )?;
    expect(cancelled == &json!("cancelled"), "the cancelled cell")?;
    expect(
        refused["result"]
            .as_str()
            .is_some_and(|r| r.contains("denied")),
        "the cell's call needing approval is denied",
    )?;
    let ends: Vec<(String, CellState, Option<String>)> = events
        .iter()
        .filter_map(|event| match event {
            Event::CellEnded {
                id, state, error, ..
            } => Some((id.clone(), *state, error.clone())),
            _ => None,
        })
        .collect();
    let mut sorted = ends.clone();
    sorted.sort_by(|a, b| a.0.cmp(&b.0));
    expect(
        matches!(&sorted[..], [
            (_, CellState::Done, None),
            (_, CellState::Cancelled, None),
            (_, CellState::Done, None),
            (_, CellState::Cancelled, Some(why)),
        ] if why.contains("the run that started it ended")),
        &format!("the cells' ends {ends:?}"),
    )?;
    expect(
        events
            .iter()
            .any(|e| matches!(e, Event::CellProgress { message, .. } if message == "half way")),
        "the progress event",
    )?;
    expect(
        events.iter().any(
            |e| matches!(e, Event::ApprovalDecided { tool, approved: false, .. } if tool == "send"),
        ),
        "the approval decision on the cell's call",
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cell_outlives_its_step_reports_is_cancelled_obeys_approvals_and_dies_with_its_run_on_rhai()
 {
    cells_work_on("rhai").await.expect("rhai");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cell_outlives_its_step_reports_is_cancelled_obeys_approvals_and_dies_with_its_run_in_javascript()
 {
    let mut failures = Vec::new();
    for name in ["js", "js-in-process"] {
        if let Err(failure) = cells_work_on(name).await {
            failures.push(failure);
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cell_outlives_its_step_reports_is_cancelled_obeys_approvals_and_dies_with_its_run_in_python()
 {
    cells_work_on("wasm:python").await.expect("wasm:python");
}

/// A cell that never ends, its id kept as `c`, and a script that waits for it
/// and shows what it got, in the language of `runtime`.
fn runaway(runtime: &str) -> [&'static str; 2] {
    match runtime {
        "rhai" => [
            "let c = start_cell(\"let i = 0; loop { i += 1; }\");\nobservation(c)",
            "observation(wait_cell(c, 5))",
        ],
        "wasm:python" => [
            "c = start_cell('i = 0\\nwhile True:\\n    i += 1')\nobservation(c)",
            "observation(wait_cell(c, 5))",
        ],
        _ => [
            "const c = tools.start_cell({code: 'let i = 0; while (true) { i++; }'});\nobservation(c)",
            "observation(tools.wait_cell({id: c, seconds: 5}))",
        ],
    }
}

/// If this fails on a runtime, a runaway cell there runs past the runtime's
/// time limit, or fails without saying which limit stopped it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runaway_cell_is_stopped_at_the_time_limit_and_says_so_on_every_language() {
    let limits = Limits {
        wall_time: Duration::from_millis(1_500),
        max_operations: u64::MAX,
        ..Limits::default()
    };
    let mut failures = Vec::new();
    for name in ["rhai", "js", "js-in-process", "wasm:python"] {
        let engine = runtime(name, limits.clone()).expect("runtime");
        let fence = engine.info().fence_tags[0];
        let [start, wait] = runaway(name);
        // Each wait ends before the waiting script's own limit: enough of them
        // that the cell's limit passes meanwhile.
        let mut replies = vec![format!("```{fence}\n{start}\n```")];
        replies.extend((0..6).map(|_| format!("```{fence}\n{wait}\n```")));
        let events = Arc::new(Mutex::new(Vec::new()));
        let seen = events.clone();
        let agent = Agent::builder(Arc::new(ReplayModel::new(replies)), engine)
            .cells(CellLimits::default())
            .on_event(move |event| seen.lock().expect("not poisoned").push(event.clone()))
            .build()
            .expect("builds");
        // The replay runs out after its last wait: that ends the run.
        let _ = agent.run("Run away.").await;
        let events = events.lock().expect("not poisoned").clone();
        let last = events.iter().rev().find_map(|event| match event {
            Event::Observation { value, .. } if value.get("state").is_some() => Some(value.clone()),
            _ => None,
        });
        let said = last
            .as_ref()
            .filter(|last| last["state"] == "failed")
            .and_then(|last| last["error"].as_str())
            .unwrap_or_default();
        if !said.contains("time limit of 1500 ms") {
            failures.push(format!("{name}: {last:?}"));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}
