//! Python's async code makes its tool calls at once: calls made in a coroutine
//! are pending until awaited, and the first await sends them all to the host
//! together (`asyncio.gather`, top-level `await`); a plain call outside async
//! code returns its value as before. The real guests (fetched by
//! guests/fetch-guests.sh; `wasm:python-sci` only when fetched).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use codeact_runtime::{Limits, Runtime, ToolDispatch, ToolError, ToolSpec};
use codeact_wasm::WasmRuntime;
use serde_json::{Value, json};

/// `slow(n)` sleeps 200 ms and returns `n * 10`; `n` below 0 fails.
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

    fn overlapped(&self) -> bool {
        let spans = self.spans.lock().unwrap();
        let last_start = spans.iter().map(|(start, _)| *start).max().unwrap();
        let first_end = spans.iter().map(|(_, end)| *end).min().unwrap();
        spans.len() > 1 && last_start < first_end
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

fn runtimes() -> Vec<WasmRuntime> {
    ["wasm:python", "wasm:python-sci"]
        .into_iter()
        .filter_map(|name| WasmRuntime::by_name(name, Limits::default()).ok())
        .collect()
}

fn run(runtime: &WasmRuntime, tools: Arc<Slow>, script: &str) -> Result<Value, String> {
    let mut session = runtime.new_session(tools).expect("the session starts");
    let outcome = session.run(script).expect("the run finishes");
    outcome.completion.map_err(|e| e.to_string())
}

#[test]
fn asyncio_gather_of_ten_slow_calls_overlaps_and_keeps_their_order() {
    let runtimes = runtimes();
    assert!(
        !runtimes.is_empty(),
        "no CPython guest: run guests/fetch-guests.sh"
    );
    for runtime in &runtimes {
        let tools = Slow::new();
        let script = "import asyncio\n\
                      async def main():\n    return await asyncio.gather(*[slow(n) for n in range(1, 11)])\n\
                      final_result(asyncio.run(main()))";
        assert_eq!(
            run(runtime, tools.clone(), script),
            Ok(json!({"type": "final_result", "value": [10, 20, 30, 40, 50, 60, 70, 80, 90, 100]})),
            "{}",
            runtime.info().name
        );
        assert!(tools.overlapped(), "{}", runtime.info().name);
    }
}

#[test]
fn top_level_await_waits_on_calls_together_and_keeps_variables_for_the_next_script() {
    for runtime in &runtimes() {
        let tools = Slow::new();
        let mut session = runtime.new_session(tools.clone()).expect("starts");
        let first = session
            .run("import asyncio\na, b = await asyncio.gather(slow(1), slow(n=2))\na + b")
            .expect("runs");
        assert_eq!(first.completion.map_err(|e| e.to_string()), Ok(json!(30)));
        assert!(tools.overlapped(), "{}", runtime.info().name);
        let second = session.run("a * 100 + slow(3)").expect("runs");
        assert_eq!(
            second.completion.map_err(|e| e.to_string()),
            Ok(json!(1030)),
            "a plain call outside async code returns its value"
        );
    }
}

#[test]
fn a_failing_call_among_several_raises_where_awaited_and_the_others_keep_their_results() {
    for runtime in &runtimes() {
        let script = "import asyncio\n\
                      got = await asyncio.gather(slow(1), slow(-1), slow(3), return_exceptions=True)\n\
                      [g if isinstance(g, int) else type(g).__name__ + ': ' + str(g) for g in got]";
        assert_eq!(
            run(runtime, Slow::new(), script),
            Ok(json!([10, "ToolError: tool 'slow' failed: n is -1", 30])),
            "{}",
            runtime.info().name
        );
        let caught =
            "try:\n    r = await slow(-2)\nexcept ToolError as e:\n    r = 'caught: ' + str(e)\nr";
        assert_eq!(
            run(runtime, Slow::new(), caught),
            Ok(json!("caught: tool 'slow' failed: n is -2"))
        );
    }
}

#[test]
fn a_pending_call_used_as_its_result_says_to_await_it() {
    for runtime in &runtimes() {
        let script = "async def main():\n    r = slow(1)\n    return r['total']\nimport asyncio\nasyncio.run(main())";
        let error = run(runtime, Slow::new(), script).expect_err("not awaited");
        assert!(error.contains("write `await slow(...)`"), "{error}");
    }
}

#[test]
fn calls_never_awaited_are_made_when_the_script_ends() {
    for runtime in &runtimes() {
        let tools = Slow::new();
        let script = "async def fire():\n    slow(1)\n    slow(2)\n    return 'sent'\nawait fire()";
        assert_eq!(run(runtime, tools.clone(), script), Ok(json!("sent")));
        assert_eq!(tools.spans.lock().unwrap().len(), 2);
    }
}

#[test]
fn a_loop_that_waits_on_nothing_ends_with_an_error_not_a_hang() {
    for runtime in &runtimes() {
        let started = Instant::now();
        let script = "import asyncio\nasync def main():\n    await asyncio.get_running_loop().create_future()\nasyncio.run(main())";
        let error = run(runtime, Slow::new(), script).expect_err("nothing wakes it");
        assert!(error.contains("nothing will wake one"), "{error}");
        assert!(started.elapsed() < Duration::from_secs(10));
    }
}
