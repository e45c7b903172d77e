use super::*;
use serde_json::json;

fn started() -> Event {
    Event::RunStarted {
        model: "replay:x".into(),
        runtime: "rhai".into(),
        system_prompt: "s".into(),
    }
}

fn reply(step: usize) -> Event {
    Event::ModelReply {
        step,
        stop_reason: StopReason::EndTurn,
    }
}

fn call(step: usize, n: i64) -> Event {
    Event::ToolCall {
        step,
        name: "add".into(),
        args: json!({"a": n, "b": n}),
        outcome: ToolCallOutcome::Ok(json!(n * 2)),
    }
}

#[test]
fn a_run_killed_inside_a_script_resumes_that_step_with_its_recorded_calls() {
    let point = ResumePoint::from_events(&[
        started(),
        Event::Message {
            message: Message::user("task"),
        },
        reply(1),
        Event::Message {
            message: Message::assistant("```rhai\nobservation(add(1, 1))\n```"),
        },
        Event::ScriptStarted {
            step: 1,
            code: "observation(add(1, 1))".into(),
        },
        call(1, 1),
        Event::Observation {
            step: 1,
            value: json!(2),
            logs: String::new(),
        },
        Event::Message {
            message: Message::user("Observation: 2"),
        },
        reply(2),
        Event::Message {
            message: Message::assistant("```rhai\nadd(2, 2); add(3, 3)\n```"),
        },
        Event::ScriptStarted {
            step: 2,
            code: "add(2, 2); add(3, 3)".into(),
        },
        call(2, 2),
    ])
    .expect("resumable");
    assert_eq!(point.task(), "task");
    assert_eq!(point.steps, 1);
    assert_eq!(point.messages.len(), 3);
    assert_eq!(point.finished_scripts.len(), 1);
    assert_eq!(point.finished_scripts[0].calls.len(), 1);
    assert_eq!(point.pending_calls.len(), 1);
    assert!(point.pending_reply.is_some());
    assert_eq!(point.recorded_tool_calls(), 2);
}

/// Fails if resuming counts errors, refusals or steps by rules of its own
/// that drift from the loop's: the point must hold what the live
/// conversation held.
#[test]
fn a_transcripts_counters_are_the_ones_the_live_loop_kept() {
    use crate::agent::decide::{Conversation, LoopConfig};
    use crate::output::spec::{Check, RefusedBy};
    let reply = |text: &str| ModelResponse {
        content: vec![ContentBlock::text(text)],
        stop_reason: StopReason::EndTurn,
        usage: Usage {
            input_tokens: 3,
            output_tokens: 1,
        },
        model: "m".into(),
    };
    let mut c = Conversation::new("task", &["rhai"], LoopConfig::default());
    let mut events = vec![started()];
    events.extend(c.start().events);
    events.extend(c.on_reply(&reply("```rhai\nfinal_result(5)\n```")).events);
    let refused = Check::Refused {
        by: RefusedBy::Validator,
        reason: "not 5".into(),
        quoted: None,
    };
    events.extend(c.on_check(json!(5), &refused).events);
    events.extend(c.on_reply(&reply("no code")).events);
    events.extend(c.on_reply(&reply("still none")).events);
    let point = ResumePoint::from_events(&events).expect("resumable");
    assert_eq!(point.progress(), *c.progress());
    assert_eq!(
        (point.steps, point.consecutive_errors, point.refusals),
        (3, 2, 1)
    );
    assert!(point.pending_reply.is_none());
}

#[test]
fn a_finished_run_or_an_empty_transcript_is_not_resumed() {
    assert_eq!(ResumePoint::from_events(&[]), Err(ResumeError::NoRun));
    let finished = ResumePoint::from_events(&[
        started(),
        Event::Message {
            message: Message::user("task"),
        },
        Event::Finished {
            outcome: crate::agent::outcome::Outcome::StepLimit { steps: 1 },
            steps: 1,
            usage: Usage::default(),
        },
    ]);
    assert_eq!(
        finished,
        Err(ResumeError::Finished {
            outcome: "step_limit".into()
        })
    );
}

/// If this fails, a team's transcript is resumed as if one agent had run it
/// all, mixing the agents' conversations.
#[test]
fn a_team_transcript_with_a_handover_is_not_resumed() {
    let team = ResumePoint::from_events(&[
        started(),
        Event::Message {
            message: Message::user("task"),
        },
        Event::Handover {
            from: "triage".into(),
            to: "refunds".into(),
            carried: Vec::new(),
        },
    ]);
    assert_eq!(team, Err(ResumeError::Team));
}
