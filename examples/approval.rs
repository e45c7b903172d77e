//! A sensitive tool behind approvals: the script's call waits while the app
//! decides, and a denial is an error the script catches and works around.
//!
//! `cargo run --example approval` replays a model's script (no network, no key):
//! it tries two refunds; the app approves the small one and denies the large one,
//! and the script reports both. In an app, the approver would ask a person (a
//! button in a UI, a message in a chat) and may take its time: the script waits
//! inside the call. `ApprovalDecision::defer()` instead stops the run for an
//! approval that takes hours; see `codeact run --approve defer` in docs/cli.md.

use std::sync::Arc;

use codeact::model::ReplayModel;
use codeact::{Agent, ApprovalDecision, Approver, Event, Limits, Outcome, RhaiRuntime, Tool};
use serde_json::json;

#[global_allocator]
static ALLOCATOR: codeact::MeteredAllocator = codeact::MeteredAllocator;

const SCRIPT: &str = r#"```rhai
let done = [];
for order in [#{id: 17, amount: 20}, #{id: 18, amount: 900}] {
    try {
        done.push(refund(order));
    } catch (e) {
        done.push(`order ${order.id}: ${e}`);
    }
}
final_result(done)
```"#;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let refund = Tool::from_fn("refund", "Refunds an order.", |args| {
        Ok(json!(format!("order {} refunded", args["id"])))
    })
    .with_parameters(json!({"type": "object", "properties": {
        "id": {"type": "integer"}, "amount": {"type": "integer"}}}))
    .needing_approval();

    // The app's rule; a real app would ask a person here.
    let approver = Approver::new(|request| async move {
        let amount = request.args["amount"].as_i64().unwrap_or(i64::MAX);
        if amount <= 100 {
            ApprovalDecision::approve().by("refund desk")
        } else {
            ApprovalDecision::deny("refunds over 100 need a manager").by("refund desk")
        }
    });

    let agent = Agent::builder(
        Arc::new(ReplayModel::new([SCRIPT])),
        Arc::new(RhaiRuntime::new(Limits::default())),
    )
    .tool(refund)
    .on_approval(approver)
    .listener(Arc::new(|_: &str, event: &Event| {
        if let Event::ApprovalDecided {
            tool,
            args,
            approved,
            decided_by,
            ..
        } = event
        {
            let verdict = if *approved { "approved" } else { "denied" };
            eprintln!("{decided_by} {verdict} {tool}({args})");
        }
    }))
    .build()?;

    let run = agent.run("Refund orders 17 and 18.").await?;
    match run.outcome {
        Outcome::FinalResult { value } => println!("{value:#}"),
        other => println!("no result: {other:?}"),
    }
    Ok(())
}
