//! Tool calls a script waits on together, through the agent: made at once by
//! the host (they overlap in time), one `ToolCall` event each in the order the
//! script wrote them, each under the run's approvals, and served from the
//! transcript on resume without calling the tool again. One case per runtime
//! that can say it: Rhai's `parallel`, JavaScript's `Promise.all` (the worker
//! process), Python's `asyncio.gather` (the CPython guest).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use codeact::agent::ResumePoint;
use codeact::model::ReplayModel;
use codeact::{Agent, ApprovalDecision, ApprovalRequest, Approver, Event, Limits, Outcome, Tool};
use serde_json::{Value, json};

use crate::support::runtimes::runtime;

/// When each call of a tool started and ended.
type Spans = Arc<Mutex<Vec<(Instant, Instant)>>>;

/// `slow(n)`: waits 200 ms (on the async runtime, as an HTTP or MCP tool
/// does) and returns `n * 10`; `n` below 0 fails.
fn slow_tool(spans: Spans, calls: Arc<AtomicUsize>) -> Tool {
    Tool::new("slow", "Answers slowly.", move |args: Value| {
        let spans = spans.clone();
        calls.fetch_add(1, Ordering::SeqCst);
        async move {
            let start = Instant::now();
            tokio::time::sleep(Duration::from_millis(200)).await;
            spans
                .lock()
                .expect("unpoisoned")
                .push((start, Instant::now()));
            let n = args["n"].as_i64().unwrap_or(0);
            if n < 0 {
                return Err(codeact::ToolError::new(format!("n is {n}")));
            }
            Ok(json!(n * 10))
        }
    })
    .with_parameters(json!({
        "type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]
    }))
}

/// The script that makes `slow(1)` … `slow(10)` at once and answers with
/// their results, in each runtime's words.
fn ten_at_once(runtime: &str) -> String {
    match runtime {
        "rhai" => "```rhai\nlet got = parallel([|| slow(1), || slow(2), || slow(3), || slow(4), || slow(5), || slow(6), || slow(7), || slow(8), || slow(9), || slow(10)]);\nfinal_result(got)\n```".into(),
        "js" => "```javascript\nconst got = await Promise.all([1, 2, 3, 4, 5, 6, 7, 8, 9, 10].map((n) => tools.slow({n})));\nfinal_result(got)\n```".into(),
        _ => "```python\nimport asyncio\ngot = await asyncio.gather(*[slow(n) for n in range(1, 11)])\nfinal_result(list(got))\n```".into(),
    }
}

const RUNTIMES: [&str; 3] = ["rhai", "js", "wasm:python"];

fn events_into(events: &Arc<Mutex<Vec<Event>>>) -> codeact::agent::Listener {
    let recorded = events.clone();
    Arc::new(move |_: &str, event: &Event| {
        recorded.lock().expect("unpoisoned").push(event.clone());
    })
}

fn tool_call_args(events: &[Event]) -> Vec<Value> {
    events
        .iter()
        .filter_map(|event| match event {
            Event::ToolCall { args, .. } => Some(args["n"].clone()),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_slow_calls_from_one_script_overlap_and_are_ten_events_in_script_order() {
    for name in RUNTIMES {
        let spans: Spans = Arc::default();
        let calls = Arc::new(AtomicUsize::new(0));
        let events: Arc<Mutex<Vec<Event>>> = Arc::default();
        let agent = Agent::builder(
            Arc::new(ReplayModel::new([ten_at_once(name)])),
            runtime(name, Limits::default()).expect("the runtime loads"),
        )
        .tool(slow_tool(spans.clone(), calls.clone()))
        .listener(events_into(&events))
        .build()
        .expect("builds");
        let run = agent.run("Ten at once.").await.expect("runs");
        assert_eq!(
            run.outcome,
            Outcome::FinalResult {
                value: json!([10, 20, 30, 40, 50, 60, 70, 80, 90, 100])
            },
            "{name}"
        );
        let spans = spans.lock().expect("unpoisoned");
        let last_start = spans.iter().map(|(start, _)| *start).max().expect("calls");
        let first_end = spans.iter().map(|(_, end)| *end).min().expect("calls");
        assert!(
            last_start < first_end,
            "{name}: every call started before the first one ended"
        );
        let ns: Vec<Value> = (1..=10).map(|n| json!(n)).collect();
        assert_eq!(
            tool_call_args(&events.lock().expect("unpoisoned")),
            ns,
            "{name}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_call_of_a_batch_goes_to_the_approver_and_a_denied_one_fails_alone() {
    let scripts = [
        (
            "rhai",
            "```rhai\nlet got = parallel_settled([|| slow(1), || slow(2), || slow(3)]);\nfinal_result(got.map(|r| if \"ok\" in r { r.ok } else { \"denied\" }))\n```",
        ),
        (
            "js",
            "```javascript\nconst got = await Promise.allSettled([tools.slow({n: 1}), tools.slow({n: 2}), tools.slow({n: 3})]);\nfinal_result(got.map((r) => r.status === 'fulfilled' ? r.value : 'denied'))\n```",
        ),
        (
            "wasm:python",
            "```python\nimport asyncio\ngot = await asyncio.gather(slow(1), slow(2), slow(3), return_exceptions=True)\nfinal_result([g if isinstance(g, int) else 'denied' for g in got])\n```",
        ),
    ];
    for (name, script) in scripts {
        let asked: Arc<Mutex<Vec<Value>>> = Arc::default();
        let seen = asked.clone();
        let approver = Approver::new(move |request: ApprovalRequest| {
            seen.lock().expect("unpoisoned").push(request.args.clone());
            async move {
                if request.args["n"] == json!(2) {
                    ApprovalDecision::deny("not two").by("ops")
                } else {
                    ApprovalDecision::approve().by("ops")
                }
            }
        });
        let calls = Arc::new(AtomicUsize::new(0));
        let agent = Agent::builder(
            Arc::new(ReplayModel::new([script])),
            runtime(name, Limits::default()).expect("the runtime loads"),
        )
        .tool(slow_tool(Arc::default(), calls.clone()))
        .needs_approval("slow")
        .on_approval(approver)
        .build()
        .expect("builds");
        let run = agent
            .run("Three, approved one by one.")
            .await
            .expect("runs");
        assert_eq!(
            run.outcome,
            Outcome::FinalResult {
                value: json!([10, "denied", 30])
            },
            "{name}"
        );
        assert_eq!(
            *asked.lock().expect("unpoisoned"),
            vec![json!({"n": 1}), json!({"n": 2}), json!({"n": 3})],
            "{name}: asked once per call, in order"
        );
        assert_eq!(
            calls.load(Ordering::SeqCst),
            2,
            "{name}: the denied call was not made"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_run_replays_a_batch_from_the_transcript_without_calling_again() {
    for name in RUNTIMES {
        let observe = ten_at_once(name)
            .replace("final_result(got)", "observation(got)")
            .replace("final_result(list(got))", "observation(list(got))");
        let calls = Arc::new(AtomicUsize::new(0));
        let events: Arc<Mutex<Vec<Event>>> = Arc::default();
        // The model has one reply: the run fails asking for a second.
        let agent = Agent::builder(
            Arc::new(ReplayModel::new([observe.clone()])),
            runtime(name, Limits::default()).expect("the runtime loads"),
        )
        .tool(slow_tool(Arc::default(), calls.clone()))
        .listener(events_into(&events))
        .build()
        .expect("builds");
        let _ = agent.run("Ten at once, then answer.").await;
        assert_eq!(calls.load(Ordering::SeqCst), 10, "{name}");
        let events = events.lock().expect("unpoisoned").clone();
        let point = ResumePoint::from_events(&events).expect("resumable");
        let answer = match name {
            "rhai" => "```rhai\nfinal_result(got[9])\n```",
            "js" => "```javascript\nfinal_result(got[9])\n```",
            _ => "```python\nfinal_result(got[9])\n```",
        };
        // A replay model answers by step: its first reply stands for step 1.
        let resumed = Agent::builder(
            Arc::new(ReplayModel::new([observe, answer.to_string()])),
            runtime(name, Limits::default()).expect("the runtime loads"),
        )
        .tool(slow_tool(Arc::default(), calls.clone()))
        .build()
        .expect("builds")
        .resume_request(&point)
        .run()
        .await
        .expect("resumed");
        assert_eq!(
            resumed.outcome,
            Outcome::FinalResult { value: json!(100) },
            "{name}"
        );
        assert_eq!(
            calls.load(Ordering::SeqCst),
            10,
            "{name}: the batch was served from the transcript"
        );
    }
}
