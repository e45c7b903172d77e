//! Tool calls a script waits on together (`await Promise.all([...])`, top-level
//! `await`) are made at once: they overlap in time, come back in order, and a
//! failing one rejects its own promise only. A script that never waits on a
//! promise gets values from its calls, as before.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use codeact_js::JsRuntime;
use codeact_runtime::{Limits, Runtime, ToolDispatch, ToolError, ToolSpec};
use serde_json::{Value, json};

/// `slow({n})` sleeps 200 ms and returns `n * 10`; `n` below 0 fails. Each
/// call's start and end are kept.
struct Slow {
    specs: Vec<ToolSpec>,
    spans: Mutex<Vec<(Instant, Instant)>>,
}

impl Slow {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            specs: vec![ToolSpec::new("slow", "").with_parameters(json!({
                "type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]
            }))],
            spans: Mutex::new(Vec::new()),
        })
    }

    fn calls(&self) -> usize {
        self.spans.lock().unwrap().len()
    }
}

impl ToolDispatch for Slow {
    fn specs(&self) -> &[ToolSpec] {
        &self.specs
    }

    fn call(&self, _name: &str, args: Value) -> Result<Value, ToolError> {
        let start = Instant::now();
        std::thread::sleep(Duration::from_millis(200));
        self.spans.lock().unwrap().push((start, Instant::now()));
        let n = args["n"].as_i64().unwrap_or(0);
        if n < 0 {
            return Err(ToolError::new(format!("n is {n}")));
        }
        Ok(json!(n * 10))
    }
}

fn run(tools: Arc<Slow>, script: &str) -> Result<Value, String> {
    let runtime = JsRuntime::in_process(Limits::default());
    let mut session = runtime.new_session(tools).expect("starts");
    let outcome = session.run(script).expect("runs");
    outcome.completion.map_err(|e| e.to_string())
}

fn overlapped(tools: &Slow) -> bool {
    let spans = tools.spans.lock().unwrap();
    let last_start = spans.iter().map(|(start, _)| *start).max().unwrap();
    let first_end = spans.iter().map(|(_, end)| *end).min().unwrap();
    last_start < first_end
}

#[test]
fn ten_slow_calls_under_promise_all_overlap_and_come_back_in_order() {
    let tools = Slow::new();
    let script = "const ns = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10];\n\
                  const got = await Promise.all(ns.map((n) => tools.slow({n})));\n\
                  got";
    assert_eq!(
        run(tools.clone(), script),
        Ok(json!([10, 20, 30, 40, 50, 60, 70, 80, 90, 100]))
    );
    assert_eq!(tools.calls(), 10);
    assert!(
        overlapped(&tools),
        "every call started before the first ended"
    );
}

#[test]
fn an_async_function_awaiting_promise_all_overlaps_too_and_its_promise_is_the_answer() {
    let tools = Slow::new();
    let script = "async function main() {\n\
                    const [a, b, c] = await Promise.all([tools.slow({n: 1}), call_tool('slow', {n: 2}), tools.slow({n: 3})]);\n\
                    return final_result(a + b + c);\n\
                  }\n\
                  main()";
    assert_eq!(
        run(tools.clone(), script),
        Ok(json!({"type": "final_result", "value": 60}))
    );
    assert!(overlapped(&tools));
}

#[test]
fn a_failing_call_among_several_rejects_its_own_promise_and_the_others_keep_their_results() {
    let tools = Slow::new();
    let script = "const settled = await Promise.allSettled([tools.slow({n: 1}), tools.slow({n: -1}), tools.slow({n: 3})]);\n\
                  settled.map((s) => s.status === 'fulfilled' ? s.value : s.reason.message)";
    assert_eq!(
        run(tools.clone(), script),
        Ok(json!([10, "tool 'slow' failed: n is -1", 30]))
    );
    let caught = "let r; try { r = await Promise.all([tools.slow({n: 1}), tools.slow({n: -2})]); } catch (e) { r = 'caught: ' + e.message; } r";
    assert_eq!(
        run(Slow::new(), caught),
        Ok(json!("caught: tool 'slow' failed: n is -2"))
    );
}

#[test]
fn top_level_await_keeps_declarations_for_the_next_script() {
    let tools = Slow::new();
    let runtime = JsRuntime::in_process(Limits::default());
    let mut session = runtime.new_session(tools.clone()).expect("starts");
    let first = session
        .run("const a = await tools.slow({n: 4}); a")
        .expect("runs");
    assert_eq!(first.completion.map_err(|e| e.to_string()), Ok(json!(40)));
    let second = session.run("a + 1").expect("runs");
    assert_eq!(second.completion.map_err(|e| e.to_string()), Ok(json!(41)));
}

#[test]
fn a_script_without_await_gets_values_from_its_calls_as_before() {
    assert_eq!(
        run(
            Slow::new(),
            "tools.slow({n: 2}) + call_tool('slow', {n: 3})"
        ),
        Ok(json!(50))
    );
}

#[test]
fn a_call_used_without_await_in_an_async_script_says_to_await_it() {
    let error = run(
        Slow::new(),
        "const r = tools.slow({n: 1}); await tools.slow({n: 2}); r.total",
    )
    .expect_err("a promise has no total");
    assert!(
        error.contains("slow(...) gives a promise in a script that uses await"),
        "{error}"
    );
}

#[test]
fn calls_never_awaited_are_still_made_when_the_script_ends() {
    let tools = Slow::new();
    assert_eq!(
        run(
            tools.clone(),
            "tools.slow({n: 1}); tools.slow({n: 2}); await 0; 'sent'"
        ),
        Ok(json!("sent"))
    );
    assert_eq!(tools.calls(), 2);
}

#[test]
fn a_promise_nothing_settles_is_an_error_not_a_hang() {
    let started = Instant::now();
    let error = run(Slow::new(), "await new Promise(() => {})").expect_err("never settles");
    assert!(error.contains("never settles"), "{error}");
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[test]
fn promise_callbacks_run_and_then_chains_settle_into_the_completion_value() {
    assert_eq!(
        run(Slow::new(), "tools.slow({n: 2}).then((v) => v + 1)"),
        Ok(json!(21))
    );
}

#[test]
fn the_await_helper_cannot_wait_inside_a_promise_callback() {
    let error = run(
        Slow::new(),
        "await Promise.resolve(1).then(() => __codeact_await(Promise.resolve(2)))",
    )
    .expect_err("refused");
    assert!(
        error.contains("cannot wait inside a promise's callback"),
        "{error}"
    );
}
