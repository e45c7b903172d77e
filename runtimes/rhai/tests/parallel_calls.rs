//! `parallel([|| a(1), || b(2)])` makes its calls at once: they overlap in
//! time, come back in order, and one failure is catchable without losing the
//! others (`parallel_settled`).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use codeact_rhai::RhaiRuntime;
use codeact_runtime::{Limits, Runtime, ToolDispatch, ToolError, ToolSpec};
use serde_json::{Value, json};

/// `slow(n)` sleeps 200 ms and returns `n * 10`; `n` below 0 fails. Each call's
/// start and end are kept.
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
    let runtime = RhaiRuntime::new(Limits::default());
    let mut session = runtime.new_session(tools).expect("starts");
    let outcome = session.run(script).expect("runs");
    outcome.completion.map_err(|e| e.to_string())
}

#[test]
fn ten_slow_calls_in_parallel_overlap_and_come_back_in_order() {
    let tools = Slow::new();
    let script = "parallel([|| slow(1), || slow(2), || slow(3), || slow(4), || slow(5), \
                  || slow(6), || slow(7), || slow(8), || slow(9), || slow(10)])";
    assert_eq!(
        run(tools.clone(), script),
        Ok(json!([10, 20, 30, 40, 50, 60, 70, 80, 90, 100]))
    );
    let spans = tools.spans.lock().unwrap();
    assert_eq!(spans.len(), 10);
    let last_start = spans.iter().map(|(start, _)| *start).max().unwrap();
    let first_end = spans.iter().map(|(_, end)| *end).min().unwrap();
    assert!(
        last_start < first_end,
        "every call started before the first one ended"
    );
}

#[test]
fn a_failing_call_among_several_is_catchable_and_parallel_settled_keeps_the_others() {
    let tools = Slow::new();
    let caught = run(
        tools.clone(),
        r#"let r = (); try { parallel([|| slow(1), || slow(-1)]) } catch (e) { r = "caught: " + e } r"#,
    )
    .expect("caught");
    let caught = caught.as_str().expect("a string");
    assert!(
        caught.starts_with("caught: tool 'slow' failed: n is -1 (call 2 of 2"),
        "{caught}"
    );
    assert_eq!(
        run(
            tools,
            "parallel_settled([|| slow(1), || slow(-1), || slow(3)])"
        ),
        Ok(json!([{"ok": 10}, {"error": "n is -1"}, {"ok": 30}]))
    );
}

#[test]
fn calls_through_call_tool_and_a_function_of_the_script_are_recorded_too() {
    let script = r#"fn twice(n) { slow(n * 2) }
                    parallel([|| call_tool("slow", #{n: 1}), || twice(2)])"#;
    assert_eq!(run(Slow::new(), script), Ok(json!([10, 40])));
}

#[test]
fn a_closure_that_uses_its_result_or_makes_two_calls_or_none_is_refused_and_nothing_is_called() {
    for (script, says) in [
        (
            "parallel([|| slow(1) + 1])",
            "closure 1 of parallel failed before its call was made",
        ),
        ("parallel([|| { slow(1); slow(2) }])", "made 2 tool calls"),
        ("parallel([|| 5])", "made 0 tool calls"),
        ("parallel([5])", "item 1 of parallel is not a closure"),
        (
            "parallel([|| parallel([|| slow(1)])])",
            "cannot run inside another parallel",
        ),
    ] {
        let tools = Slow::new();
        let error = run(tools.clone(), script).expect_err(script);
        assert!(error.contains(says), "{script}: {error}");
        assert!(
            tools.spans.lock().unwrap().is_empty(),
            "{script} called a tool"
        );
    }
}

#[test]
fn after_parallel_a_plain_call_is_made_at_once_again() {
    let script = "let a = parallel([|| slow(1)]); let b = slow(2); a[0] + b";
    assert_eq!(run(Slow::new(), script), Ok(json!(30)));
}

#[test]
fn an_empty_parallel_returns_an_empty_list() {
    assert_eq!(run(Slow::new(), "parallel([])"), Ok(json!([])));
}
