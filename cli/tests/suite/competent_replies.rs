//! A corpus of competent replies: what a strong model sends for everyday tasks,
//! correct and minimal, replayed through the default loop on `rhai`, `js` and
//! `wasm:python`. Each case must end with the model's own answer, in as many model
//! calls as it has replies, with no refusal and no script the model did not send.
//! The cases live in `fixtures/competent-replies.jsonl`, one JSON object a line:
//! `id` (`runtime__case`), `runtime`, `covers` (what kind of reply it is), `task`,
//! `replies` (the model's turns, in order), `answer`, and `tolerance` for numbers.

use std::sync::{Arc, Mutex};

use codeact::model::ReplayModel;
use codeact::{Agent, Event, Limits, Outcome, Tool, ToolError};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::support::runtimes::runtime;

const CORPUS: &str = include_str!("../../../fixtures/competent-replies.jsonl");

#[derive(Debug, Deserialize)]
struct Case {
    id: String,
    runtime: String,
    covers: String,
    task: String,
    replies: Vec<String>,
    answer: Value,
    #[serde(default)]
    tolerance: Option<f64>,
}

fn cases() -> Vec<Case> {
    CORPUS
        .lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| serde_json::from_str(line).expect("every corpus line is a case"))
        .collect()
}

fn object(properties: Value, required: &[&str]) -> Value {
    json!({"type": "object", "properties": properties, "required": required})
}

fn text_arg(args: &Value, name: &str) -> Result<String, ToolError> {
    args.get(name)
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| ToolError::new(format!("`{name}` must be a string")))
}

/// The small world every case's tools answer from.
fn tools() -> Vec<Tool> {
    let weather = Tool::from_fn(
        "weather",
        "Current weather of a city: city, temp_c (degrees Celsius) and condition.",
        |args| {
            let city = text_arg(&args, "city")?;
            match city.as_str() {
                "Cairo" => Ok(json!({"city": "Cairo", "temp_c": 31, "condition": "sunny"})),
                "Oslo" => Ok(json!({"city": "Oslo", "temp_c": -2, "condition": "snow"})),
                "Lima" => Ok(json!({"city": "Lima", "temp_c": 19, "condition": "cloudy"})),
                other => Err(ToolError::new(format!(
                    "no weather for '{other}'; cities: Cairo, Oslo, Lima"
                ))),
            }
        },
    )
    .with_parameters(object(json!({"city": {"type": "string"}}), &["city"]));
    let price = Tool::from_fn(
        "price",
        "The price of one unit of an item, in euros.",
        |args| match text_arg(&args, "item")?.as_str() {
            "bread" => Ok(json!(1.2)),
            "milk" => Ok(json!(0.95)),
            "eggs" => Ok(json!(1.7)),
            other => Err(ToolError::new(format!(
                "unknown item '{other}'; items: bread, milk, eggs"
            ))),
        },
    )
    .with_parameters(object(json!({"item": {"type": "string"}}), &["item"]));
    let orders = Tool::from_fn(
        "orders",
        "All orders: a list of id, customer and amount (euros).",
        |_| {
            Ok(json!([
                {"id": 1, "customer": "mia", "amount": 23.5},
                {"id": 2, "customer": "noah", "amount": 12.0},
                {"id": 3, "customer": "lena", "amount": 37.0},
            ]))
        },
    )
    .with_parameters(object(json!({}), &[]));
    let user = Tool::from_fn(
        "user",
        "The directory's record of a user, by id.",
        |args| match args.get("id").and_then(Value::as_i64) {
            Some(7) => Ok(json!({"id": 7, "name": "Mia Chen", "email": "mia@example.org"})),
            Some(other) => Err(ToolError::new(format!("no user with id {other}"))),
            None => Err(ToolError::new("`id` must be an integer")),
        },
    )
    .with_parameters(object(json!({"id": {"type": "integer"}}), &["id"]));
    let note = Tool::from_fn("note", "The text of a named note.", |args| match text_arg(
        &args, "name",
    )?
    .as_str()
    {
        "meeting.txt" => Ok(json!(
            "Moved: the quarterly review is now on Thursday, 10:00, room B. Bring the figures."
        )),
        other => Err(ToolError::new(format!(
            "no note '{other}'; notes: meeting.txt"
        ))),
    })
    .with_parameters(object(json!({"name": {"type": "string"}}), &["name"]));
    let stock =
        Tool::from_fn(
            "stock",
            "Units in stock of a SKU (upper case).",
            |args| match text_arg(&args, "sku")?.as_str() {
                "X-1" => Ok(json!(12)),
                other => Err(ToolError::new(format!(
                    "unknown sku '{other}'; SKUs are upper case, such as X-1"
                ))),
            },
        )
        .with_parameters(object(json!({"sku": {"type": "string"}}), &["sku"]));
    vec![weather, price, orders, user, note, stock]
}

/// The code of a reply's fenced block, as the loop should run it.
fn fenced_code(reply: &str) -> String {
    let body = reply
        .split("```")
        .nth(1)
        .expect("every corpus reply has a fenced block");
    let (_tag, code) = body.split_once('\n').expect("the fence has a tag line");
    code.trim_end().to_owned()
}

fn same_answer(got: &Value, want: &Value, tolerance: Option<f64>) -> bool {
    match (got.as_f64(), want.as_f64(), tolerance) {
        (Some(got), Some(want), Some(tolerance)) => (got - want).abs() <= tolerance,
        (Some(got), Some(want), None) => got == want,
        _ => got == want,
    }
}

/// Replays `case` through the default loop; the reasons it was not passed
/// untouched, or nothing.
async fn replay_untouched(case: &Case) -> Vec<String> {
    let model = Arc::new(ReplayModel::new(case.replies.clone()));
    let runtime = match runtime(&case.runtime, Limits::default()) {
        Ok(runtime) => runtime,
        Err(e) => return vec![format!("no runtime: {e}")],
    };
    let events = Arc::new(Mutex::new(Vec::new()));
    let recorded = events.clone();
    let agent = Agent::builder(model.clone(), runtime)
        .tools(tools())
        .on_event(move |event| recorded.lock().expect("not poisoned").push(event.clone()))
        .build()
        .expect("the agent builds");
    let mut problems = Vec::new();
    match agent.run(&case.task).await {
        Ok(result) => {
            match &result.outcome {
                Outcome::FinalResult { value } => {
                    if !same_answer(value, &case.answer, case.tolerance) {
                        problems.push(format!(
                            "answer changed: {value} instead of {}",
                            case.answer
                        ));
                    }
                }
                other => problems.push(format!("ended with {other:?}")),
            }
            if result.steps != case.replies.len() {
                problems.push(format!(
                    "{} model calls for {} replies",
                    result.steps,
                    case.replies.len()
                ));
            }
        }
        Err(e) => problems.push(format!("run failed: {e}")),
    }
    let events = events.lock().expect("not poisoned");
    let sent: Vec<String> = case.replies.iter().map(|r| fenced_code(r)).collect();
    let ran: Vec<String> = events
        .iter()
        .filter_map(|event| match event {
            Event::ScriptStarted { code, .. } => Some(code.trim_end().to_owned()),
            _ => None,
        })
        .collect();
    if ran != sent {
        problems.push(format!("ran scripts the model did not send: {ran:?}"));
    }
    for event in events.iter() {
        match event {
            Event::ResultRefused { reason, .. } => problems.push(format!("refused: {reason}")),
            Event::Error { message, .. } => problems.push(format!("error fed back: {message}")),
            _ => {}
        }
    }
    problems
}

#[test]
fn the_corpus_covers_every_kind_of_competent_reply_on_three_runtimes() {
    let cases = cases();
    assert!(cases.len() >= 40, "{} cases", cases.len());
    for runtime in ["rhai", "js", "wasm:python"] {
        let on_it = cases.iter().filter(|c| c.runtime == runtime).count();
        assert!(on_it >= 12, "{runtime}: {on_it} cases");
    }
    for kind in [
        "tool-named variable",
        "answer from knowledge with tools present",
        "word derived from data (translated)",
        "words derived from data (summarised)",
        "arithmetic done after an observation",
        "exclusive range",
        "whole record asked for",
        "answer found nowhere in the data",
        "a tool error handled in the script",
    ] {
        assert!(
            cases.iter().any(|c| c.covers == kind),
            "no case covers {kind}"
        );
    }
    for case in &cases {
        assert!(
            case.id
                .starts_with(&format!("{}__", case.runtime.trim_start_matches("wasm:"))),
            "{} is not named runtime__case",
            case.id
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_competent_reply_passes_the_default_loop_untouched() {
    let mut failures = Vec::new();
    for case in cases() {
        let problems = replay_untouched(&case).await;
        if !problems.is_empty() {
            failures.push(format!("{}: {}", case.id, problems.join("; ")));
        }
    }
    assert!(
        failures.is_empty(),
        "{} case(s) not passed untouched:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
