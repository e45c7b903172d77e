//! Embedding a CodeAct agent in an app, in a few lines.
//!
//! `cargo run --example embed` replays a recorded conversation (no network, no key).
//! With `OPENAI_BASE_URL` (and `OPENAI_API_KEY` where needed) set, it asks that
//! server's model instead: `CODEACT_MODEL` names it (default `gpt-4o-mini`).
//!
//! A complete program to copy: it needs `codeact`, `serde` (with `derive`),
//! `schemars`, `serde_json` and `tokio` (with the `rt-multi-thread` and `macros`
//! features) in `Cargo.toml`. The first lines of
//! `main` matter once the app uses `JsRuntime` (Boa in worker processes): each
//! worker is this program started again, and must stop there.

use std::sync::Arc;

use codeact::model::{ModelClient, OpenAiClient, OpenAiConfig, ReplayModel};
use codeact::{Agent, Event, Limits, Outcome, RhaiRuntime, Tool, ToolError};

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

/// What `price` takes.
#[derive(serde::Deserialize, schemars::JsonSchema)]
struct PriceQuery {
    /// The item's name: apple, bread or milk.
    item: String,
}

/// What `price` returns.
#[derive(serde::Serialize, schemars::JsonSchema)]
struct Price {
    euros: f64,
}

#[tokio::main]
async fn ask() -> Result<(), Box<dyn std::error::Error>> {
    let model: Arc<dyn ModelClient> = match std::env::var("OPENAI_BASE_URL") {
        Ok(_) => {
            let name = std::env::var("CODEACT_MODEL").unwrap_or_else(|_| "gpt-4o-mini".into());
            Arc::new(OpenAiClient::new(OpenAiConfig::from_env(name))?)
        }
        Err(_) => Arc::new(ReplayModel::new([
            "Let me look at both prices first.\n```rhai\nlet apple = price(#{item: \"apple\"});\nlet bread = price(#{item: \"bread\"});\nobservation([apple, bread])\n```",
            "```rhai\nfinal_result(#{total: apple.euros + bread.euros})\n```",
        ])),
    };

    // A typed tool: its arguments and result are Rust types, whose JSON Schemas the
    // model sees as its signature (`price(#{item: string}) -> {euros: number}`);
    // a call with the wrong arguments is a tool error naming the field.
    let price = Tool::typed(
        "price",
        "The price of one unit of a shop item, in euros.",
        |query: PriceQuery| async move {
            match query.item.as_str() {
                "apple" => Ok(Price { euros: 0.5 }),
                "bread" => Ok(Price { euros: 2.25 }),
                "milk" => Ok(Price { euros: 1.25 }),
                other => Err(ToolError::new(format!(
                    "no item '{other}'; items: apple, bread, milk"
                ))),
            }
        },
    );

    let agent = Agent::builder(model, Arc::new(RhaiRuntime::new(Limits::default())))
        .tool(price)
        .on_event(|event| match event {
            Event::ScriptStarted { step, code } => eprintln!("[step {step}] running:\n{code}"),
            Event::Observation { value, .. } => eprintln!("observation: {value}"),
            Event::Error { message, .. } => eprintln!("error: {message}"),
            _ => {}
        })
        .build()?;

    let run = agent
        .run("What do an apple and a bread cost together?")
        .await?;
    match run.outcome {
        Outcome::FinalResult { value } => println!("{value}"),
        other => println!("the run ended without an answer: {other:?}"),
    }
    Ok(())
}
