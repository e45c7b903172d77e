//! Embedding a CodeAct agent in an app, in a few lines.
//!
//! `cargo run --example embed` replays a recorded conversation (no network, no key).
//! With `OPENAI_BASE_URL` (and `OPENAI_API_KEY` where needed) set, it asks that
//! server's model instead: `CODEACT_MODEL` names it (default `gpt-4o-mini`).
//!
//! A complete program to copy: it needs `codeact`, `serde_json` and `tokio` (with
//! the `rt-multi-thread` and `macros` features) in `Cargo.toml`. The first lines of
//! `main` matter once the app uses `JsRuntime` (Boa in worker processes): each
//! worker is this program started again, and must stop there.

use std::sync::Arc;

use codeact::model::{ModelClient, OpenAiClient, OpenAiConfig, ReplayModel};
use codeact::{Agent, Event, Limits, Outcome, RhaiRuntime, Tool, ToolError};
use serde_json::{Value, json};

// Holds each Rhai run to its memory limit by what it allocates, wherever the engine
// keeps it; without it, only what variables hold is counted.
#[global_allocator]
static ALLOCATOR: codeact::MeteredAllocator = codeact::MeteredAllocator;

fn main() -> Result<std::process::ExitCode, Box<dyn std::error::Error>> {
    if let Some(code) = codeact::run_worker_if_requested() {
        return Ok(code);
    }
    ask()?;
    Ok(std::process::ExitCode::SUCCESS)
}

#[tokio::main]
async fn ask() -> Result<(), Box<dyn std::error::Error>> {
    let model: Arc<dyn ModelClient> = match std::env::var("OPENAI_BASE_URL") {
        Ok(_) => {
            let name = std::env::var("CODEACT_MODEL").unwrap_or_else(|_| "gpt-4o-mini".into());
            Arc::new(OpenAiClient::new(OpenAiConfig::from_env(name))?)
        }
        Err(_) => Arc::new(ReplayModel::new([
            "Let me look at the prices first.\n```rhai\nlet prices = call_tool(\"prices\", #{});\nobservation(prices)\n```",
            "```rhai\nlet total = 0.0;\nfor item in prices.keys() { total += prices[item]; }\nfinal_result(#{items: prices.len(), total: total})\n```",
        ])),
    };

    // A tool is an async closure from JSON arguments to a JSON result.
    let prices = Tool::new(
        "prices",
        "Returns the price of each item, in euros.",
        |_args: Value| async {
            Ok::<_, ToolError>(json!({"apple": 0.5, "bread": 2.25, "milk": 1.25}))
        },
    );

    let agent = Agent::builder(model, Arc::new(RhaiRuntime::new(Limits::default())))
        .tool(prices)
        .on_event(|event| match event {
            Event::ScriptStarted { step, code } => eprintln!("[step {step}] running:\n{code}"),
            Event::Observation { value, .. } => eprintln!("observation: {value}"),
            Event::Error { message, .. } => eprintln!("error: {message}"),
            _ => {}
        })
        .build()?;

    let run = agent.run("What do all the items cost together?").await?;
    match run.outcome {
        Outcome::FinalResult { value } => println!("{value}"),
        other => println!("the run ended without an answer: {other:?}"),
    }
    Ok(())
}
