//! Teams of agents handing work to each other, each with its own replay model.

use std::sync::{Arc, Mutex};

use codeact::agent::TeamOutcome;
use codeact::chat::Role;
use codeact::model::ReplayModel;
use codeact::prompts::TransferTarget;
use codeact::{Agent, AgentError, Event, Limits, Outcome, RhaiRuntime, Team};
use serde_json::json;

fn rhai() -> Arc<RhaiRuntime> {
    Arc::new(RhaiRuntime::new(Limits::default()))
}

fn agent(name: &str, model: &Arc<ReplayModel>, targets: &[&str]) -> Agent {
    let mut builder = Agent::builder(model.clone(), rhai())
        .name(name)
        .description(format!("The {name} desk."));
    for target in targets {
        builder =
            builder.transfer_target(TransferTarget::new(*target, format!("The {target} desk.")));
    }
    builder.build().expect("agent builds")
}

fn replay(replies: &[&str]) -> Arc<ReplayModel> {
    Arc::new(ReplayModel::new(replies.iter().copied()))
}

const TO_BILLING: &str = "This is a billing matter.\n```rhai\ntransfer_to_agent(\"billing\")\n```";

#[tokio::test]
async fn a_handover_starts_the_target_with_the_task_and_the_carried_messages() {
    let triage = replay(&[
        "```rhai\nlet order = 7;\nobservation(order)\n```",
        TO_BILLING,
    ]);
    let billing = replay(&["```rhai\nfinal_result(#{refunded: 7})\n```"]);
    let events = Arc::new(Mutex::new(Vec::new()));
    let seen = events.clone();
    let team = Team::builder()
        .agent(agent("triage", &triage, &["billing"]))
        .agent(agent("billing", &billing, &[]))
        .max_carry(3)
        .listener(Arc::new(move |agent: &str, event: &Event| {
            seen.lock()
                .expect("not poisoned")
                .push((agent.to_string(), event.clone()))
        }))
        .build()
        .expect("team builds");

    let run = team
        .run("triage", "Refund order 7.")
        .await
        .expect("run finishes");
    assert_eq!(
        run.outcome,
        TeamOutcome::Finished {
            agent: "billing".into(),
            outcome: Outcome::FinalResult {
                value: json!({"refunded": 7})
            }
        }
    );
    assert_eq!(run.steps, 3);
    assert_eq!(run.handovers.len(), 1);
    assert_eq!(
        run.handovers[0].carried.len(),
        3,
        "max_carry clamps the four messages"
    );

    let sent = billing.requests();
    let first = sent[0].messages[0].joined_text();
    assert_eq!(sent[0].messages[0].role, Role::User);
    assert!(
        first.starts_with(
            "Agent 'triage' handed this task over to you.\n\nThe task:\nRefund order 7."
        ),
        "{first}"
    );
    assert!(
        first.contains("Observation:\n<untrusted-")
            && first.contains("\n7\n</untrusted-")
            && first.contains("transfer_to_agent(\"billing\")"),
        "{first}"
    );
    assert!(
        !sent[0].system.contains("transfer_to_agent"),
        "billing has no targets to be told about"
    );
    assert!(
        triage.requests()[0]
            .system
            .contains("- `billing`: The billing desk.")
    );

    let events = events.lock().expect("not poisoned");
    let handover = events.iter().position(|(agent, e)| {
        agent == "triage" && matches!(e, Event::Handover { to, .. } if to == "billing")
    });
    let billing_start = events
        .iter()
        .position(|(agent, e)| agent == "billing" && matches!(e, Event::RunStarted { .. }));
    assert!(
        handover.is_some() && billing_start > handover,
        "events name the agent and show the handover in order"
    );
}

#[tokio::test]
async fn a_transfer_to_an_unknown_agent_is_fed_back_with_the_valid_names() {
    let triage = replay(&["```rhai\ntransfer_to_agent(\"sales\")\n```", TO_BILLING]);
    let billing = replay(&["```rhai\nfinal_result(1)\n```"]);
    let team = Team::builder()
        .agent(agent("triage", &triage, &["billing"]))
        .agent(agent("billing", &billing, &[]))
        .build()
        .expect("team builds");
    let run = team
        .run("triage", "Sell me something.")
        .await
        .expect("run finishes");
    assert!(matches!(run.outcome, TeamOutcome::Finished { ref agent, .. } if agent == "billing"));
    let feedback = triage.requests()[1].messages[2].joined_text();
    assert!(
        feedback
            .starts_with("Error:\nthere is no agent of the name below to transfer to; valid names: billing\n<untrusted-")
            && feedback.contains("\nsales\n</untrusted-"),
        "{feedback}"
    );
}

#[tokio::test]
async fn a_transfer_to_itself_is_refused_like_an_unknown_one() {
    let triage = replay(&[
        "```rhai\ntransfer_to_agent(\"triage\")\n```",
        "```rhai\nfinal_result(\"mine\")\n```",
    ]);
    let billing = replay(&[]);
    let team = Team::builder()
        .agent(agent("triage", &triage, &["billing"]))
        .agent(agent("billing", &billing, &[]))
        .build()
        .expect("team builds");
    let run = team
        .run("triage", "Do it yourself.")
        .await
        .expect("run finishes");
    assert!(run.handovers.is_empty());
    let feedback = triage.requests()[1].messages[2].joined_text();
    assert!(
        feedback.contains("'triage' is this agent: a transfer to itself is refused"),
        "{feedback}"
    );
}

#[tokio::test]
async fn ping_pong_stops_at_the_transfer_bound_with_its_own_outcome() {
    let to_b = replay(&["```rhai\ntransfer_to_agent(\"b\")\n```"]);
    let to_a = replay(&["```rhai\ntransfer_to_agent(\"a\")\n```"]);
    let team = Team::builder()
        .agent(agent("a", &to_b, &["b"]))
        .agent(agent("b", &to_a, &["a"]))
        .max_transfers(3)
        .build()
        .expect("team builds");
    let run = team.run("a", "Pass it on.").await.expect("run ends");
    assert_eq!(
        run.outcome,
        TeamOutcome::TransferLimit {
            transfers: 3,
            agent: "b".into()
        }
    );
    assert_eq!(run.handovers.len(), 3);
}

#[tokio::test]
async fn without_transfer_back_the_receiver_is_not_offered_the_sender() {
    let to_b = replay(&["```rhai\ntransfer_to_agent(\"b\")\n```"]);
    let b_model = replay(&[
        "```rhai\ntransfer_to_agent(\"a\")\n```",
        "```rhai\nfinal_result(\"kept\")\n```",
    ]);
    let team = Team::builder()
        .agent(agent("a", &to_b, &["b"]))
        .agent(agent("b", &b_model, &["a"]))
        .allow_transfer_back(false)
        .build()
        .expect("team builds");
    let run = team.run("a", "Handle it.").await.expect("run finishes");
    assert!(matches!(run.outcome, TeamOutcome::Finished { ref agent, .. } if agent == "b"));
    let sent = b_model.requests();
    assert!(
        !sent[0].system.contains("transfer_to_agent"),
        "b may not hand back to a"
    );
    assert!(sent[1].messages[2].joined_text().contains(
        "there is no agent of the name below to transfer to; this agent cannot transfer"
    ));
}

#[tokio::test]
async fn a_team_refuses_duplicate_names_undeclared_targets_and_unknown_entries() {
    let model = replay(&[]);
    let err = Team::builder()
        .agent(agent("a", &model, &[]))
        .agent(agent("a", &model, &[]))
        .build()
        .expect_err("duplicate");
    assert_eq!(
        err.to_string(),
        "the agent cannot be built: two agents are named 'a'"
    );
    let err = Team::builder()
        .agent(agent("a", &model, &["ghost"]))
        .build()
        .expect_err("undeclared");
    assert!(
        err.to_string()
            .contains("'ghost', which is not in the team")
    );
    let team = Team::builder()
        .agent(agent("a", &model, &[]))
        .build()
        .expect("team builds");
    assert!(
        matches!(team.run("zed", "x").await, Err(AgentError::Setup(message)) if message.contains("no agent 'zed'; the team has: a"))
    );
}

/// Different runtimes per agent: a Rhai agent hands over to a JavaScript agent,
/// whose scripts run in a worker process (the codeact binary).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rhai_agent_hands_over_to_a_javascript_agent() {
    let triage = replay(&["```rhai\nlet order = 7;\ntransfer_to_agent(\"refunds\")\n```"]);
    let refunds =
        replay(&["```js\nconst refund = {order: 7, euros: 12.5};\nfinal_result(refund)\n```"]);
    let js = Arc::new(
        codeact::JsRuntime::new(Limits::default()).with_worker(env!("CARGO_BIN_EXE_codeact")),
    );
    let refunds_agent = Agent::builder(refunds.clone(), js)
        .name("refunds")
        .build()
        .expect("agent builds");
    let team = Team::builder()
        .agent(agent("triage", &triage, &["refunds"]))
        .agent(refunds_agent)
        .build()
        .expect("team builds");
    let run = team
        .run("triage", "Refund order 7.")
        .await
        .expect("run finishes");
    assert_eq!(
        run.outcome,
        TeamOutcome::Finished {
            agent: "refunds".into(),
            outcome: Outcome::FinalResult {
                value: json!({"order": 7, "euros": 12.5})
            }
        }
    );
    assert!(
        refunds.requests()[0].system.contains("```js"),
        "the JS agent reads the JavaScript card"
    );
}
