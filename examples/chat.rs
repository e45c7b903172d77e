//! A conversation over several turns: the model's variables from one turn are
//! still there in the next, and so is the history.
//!
//! `cargo run --example chat` replays a model's replies (no network, no key): turn
//! one stores the prices, turn two uses them. `codeact run --chat` is the same at
//! the terminal.

use std::sync::Arc;

use codeact::model::ReplayModel;
use codeact::{Agent, Limits, RhaiRuntime};

#[global_allocator]
static ALLOCATOR: codeact::MeteredAllocator = codeact::MeteredAllocator;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let model = ReplayModel::new([
        "```rhai\nlet prices = #{apple: 3, bread: 2};\nfinal_result(\"noted\")\n```",
        "```rhai\nfinal_result(prices.apple * 2 + prices.bread)\n```",
    ]);
    let agent = Agent::builder(
        Arc::new(model),
        Arc::new(RhaiRuntime::new(Limits::default())),
    )
    .build()?;
    let mut chat = agent.chat()?;
    for message in [
        "Apples cost 3, bread costs 2. Remember that.",
        "What do two apples and a bread cost?",
    ] {
        let turn = chat.send(message).await?;
        println!(
            "> {message}\n{}",
            turn.outcome
                .script_output()
                .map(|o| o.to_string())
                .unwrap_or_default()
        );
    }
    Ok(())
}
