//! The plain loop never refuses what the app's checks accept; a coach's
//! decisions are refusals and events, and a resumed run replays them.

use std::sync::Arc;

use codeact_runtime::LogBuffer;
use serde_json::{Value, json};

use super::{Conversation, Decision, LoopConfig, Next, Progress};
use crate::agent::coach::{Coach, Hold, Rule, Seen, SmallModelCoach};
use crate::agent::events::{CoachDecision, Event};
use crate::chat::{ContentBlock, ModelResponse, StopReason, Usage};
use crate::output::script_output::ScriptOutput;
use crate::output::spec::RefusedBy;

fn text_reply(text: String) -> ModelResponse {
    ModelResponse {
        content: vec![ContentBlock::text(text)],
        stop_reason: StopReason::EndTurn,
        usage: Usage::default(),
        model: "test".into(),
    }
}

fn reply(fence: &str, script: &str) -> ModelResponse {
    text_reply(format!("```{fence}\n{script}\n```"))
}

fn final_result(value: &Value) -> Result<Value, codeact_runtime::ScriptError> {
    Ok(json!({"type": "final_result", "value": value}))
}

/// Runs `script` (in `fence`) as the next step and reports `completion`.
fn step(
    c: &mut Conversation,
    fence: &str,
    script: &str,
    completion: Result<Value, codeact_runtime::ScriptError>,
) -> (Decision, Decision) {
    let replied = c.on_reply(&reply(fence, script));
    let (completed, _) = c.on_completion(&completion, &LogBuffer::new(10));
    (replied, completed)
}

fn coached_events(decision: &Decision) -> Vec<&Event> {
    decision
        .events
        .iter()
        .filter(|e| matches!(e, Event::Coached { .. } | Event::ResultRefused { .. }))
        .collect()
}

fn weather_tools(fence: &str) -> Vec<(String, String)> {
    let signature = match fence {
        "js" => "tools.weather({city: string})",
        "rhai" => "weather(#{city: string})",
        _ => "weather(city=string)",
    };
    vec![("weather".to_string(), signature.to_string())]
}

fn a_result_to_check(decision: &Decision, value: &Value) {
    assert_eq!(
        decision.next,
        Next::CheckResult {
            value: value.clone(),
            artifacts: vec![]
        },
        "{:?}",
        decision.events
    );
    assert!(coached_events(decision).is_empty(), "{:?}", decision.events);
}

#[test]
fn the_plain_loop_takes_a_variable_named_like_the_tool_it_holds_to_the_checks() {
    for (fence, script) in [
        (
            "js",
            "const weather = tools.weather({city: 'Cairo'});\nfinal_result(weather.temp_c);",
        ),
        (
            "rhai",
            "let weather = weather(#{city: \"Cairo\"});\nfinal_result(weather.temp_c)",
        ),
        (
            "python",
            "weather = weather(city=\"Cairo\")\nfinal_result(weather[\"temp_c\"])",
        ),
    ] {
        for coach in [None, Some(SmallModelCoach::default())] {
            let mut c = Conversation::new("How warm is Cairo?", &[fence], LoopConfig::default())
                .with_tools(weather_tools(fence));
            if let Some(coach) = coach {
                c = c.with_coach(Arc::new(coach));
            }
            c.note_tool_results(Vec::new());
            let (replied, done) = step(&mut c, fence, script, final_result(&json!(31)));
            assert_eq!(
                replied.next,
                Next::RunScript {
                    code: script.into()
                }
            );
            a_result_to_check(&done, &json!(31));
        }
    }
}

#[test]
fn the_plain_loop_takes_answers_from_knowledge_translations_head_arithmetic_and_exclusive_ranges_to_the_checks()
 {
    let tools = vec![
        (
            "price".to_string(),
            "tools.price({item: string})".to_string(),
        ),
        (
            "weather".to_string(),
            "tools.weather({city: string})".to_string(),
        ),
    ];
    // From knowledge while tools are present.
    let mut c = Conversation::new(
        "What is the capital of France?",
        &["js"],
        LoopConfig::default(),
    )
    .with_tools(tools.clone());
    let (_, done) = step(
        &mut c,
        "js",
        "final_result('Paris');",
        final_result(&json!("Paris")),
    );
    a_result_to_check(&done, &json!("Paris"));

    // A word derived from the data: the sky's weather, translated.
    let mut c = Conversation::new(
        "What is the weather in Oslo, in one French word?",
        &["js"],
        LoopConfig::default(),
    )
    .with_tools(tools.clone());
    step(
        &mut c,
        "js",
        "observation(tools.weather({city: 'Oslo'}))",
        Ok(json!({"type": "observation", "value": {"sky": "snow"}})),
    );
    let (_, done) = step(
        &mut c,
        "js",
        "final_result('neige');",
        final_result(&json!("neige")),
    );
    a_result_to_check(&done, &json!("neige"));

    // Arithmetic in the head over observed numbers.
    let mut c = Conversation::new(
        "What do bread, milk and eggs cost together?",
        &["js"],
        LoopConfig::default(),
    )
    .with_tools(tools.clone());
    step(
        &mut c,
        "js",
        "observation(['bread', 'milk', 'eggs'].map(item => tools.price({item})))",
        Ok(json!({"type": "observation", "value": [1.2, 0.95, 1.7]})),
    );
    let (_, done) = step(
        &mut c,
        "js",
        "final_result(3.85)",
        final_result(&json!(3.85)),
    );
    a_result_to_check(&done, &json!(3.85));

    // A string worked by hand, for a task that needs no tool.
    let mut c = Conversation::new(
        "Reverse the word 'codeact'.",
        &["js"],
        LoopConfig::default(),
    )
    .with_tools(tools);
    let (_, done) = step(
        &mut c,
        "js",
        "final_result('tcaedoc')",
        final_result(&json!("tcaedoc")),
    );
    a_result_to_check(&done, &json!("tcaedoc"));

    // Rhai's range up to but not including its end.
    let mut c = Conversation::new(
        "Sum the numbers from 1 up to but not including 100.",
        &["rhai"],
        LoopConfig::default(),
    );
    let (_, done) = step(
        &mut c,
        "rhai",
        "let s = 0;\nfor i in 1..100 { s += i; }\nfinal_result(s)",
        final_result(&json!(4950)),
    );
    a_result_to_check(&done, &json!(4950));
}

#[test]
fn the_plain_loop_runs_a_python_stub_of_a_tool_as_the_model_sent_it() {
    let mut c = Conversation::new("task", &["python"], LoopConfig::default()).with_tools([(
        "list_orders".to_string(),
        "list_orders(customer=string)".to_string(),
    )]);
    let script =
        "def list_orders(customer):\n    return [1]\n\nobservation(list_orders(customer='mia'))";
    let decision = c.on_reply(&reply("python", script));
    assert_eq!(
        decision.next,
        Next::RunScript {
            code: script.into()
        }
    );
    assert!(coached_events(&decision).is_empty());
}

#[test]
fn a_coachs_rewrite_of_a_python_stub_is_an_event_with_both_scripts() {
    let mut c = Conversation::new("task", &["python"], LoopConfig::default())
        .with_coach(Arc::new(SmallModelCoach::default()))
        .with_tools([(
            "list_orders".to_string(),
            "list_orders(customer=string)".to_string(),
        )]);
    let script =
        "def list_orders(customer):\n    return [1]\n\nobservation(list_orders(customer='mia'))";
    let decision = c.on_reply(&reply("python", script));
    let Next::RunScript { code } = &decision.next else {
        panic!("{:?}", decision.next)
    };
    assert!(
        decision.events.iter().any(|e| matches!(
            e,
            Event::Coached { rule, decision: CoachDecision::Rewrote { sent, run }, .. }
                if rule == "python_stubs" && sent == script && run == code
        )),
        "{:?}",
        decision.events
    );
    // Turned off, the script runs as sent.
    let mut off = Conversation::new("task", &["python"], LoopConfig::default())
        .with_coach(Arc::new(
            SmallModelCoach::default().without(Rule::PythonStubs),
        ))
        .with_tools([(
            "list_orders".to_string(),
            "list_orders(customer=string)".to_string(),
        )]);
    assert_eq!(
        off.on_reply(&reply("python", script)).next,
        Next::RunScript {
            code: script.into()
        }
    );
}

/// A coach that holds every final result back, under the rule `always`.
#[derive(Debug)]
struct Doubter;

impl Coach for Doubter {
    fn name(&self) -> &str {
        "doubter"
    }

    fn on_final_result(&self, _seen: &Seen<'_>, _value: &Value, held: &[String]) -> Option<Hold> {
        Some(Hold {
            rule: format!("always-{}", held.len()),
            reason: "the doubter doubts it".into(),
            text: "Are you sure?".into(),
        })
    }
}

#[test]
fn holds_spend_the_refusal_budget_never_the_error_budget_and_each_is_an_event_naming_its_rule() {
    let config = LoopConfig {
        max_refusals: 3,
        max_consecutive_errors: 1,
        ..LoopConfig::default()
    };
    let mut c = Conversation::new("task", &["rhai"], config).with_coach(Arc::new(Doubter));
    for refusal in 1..=3 {
        let (_, done) = step(&mut c, "rhai", "final_result(4)", final_result(&json!(4)));
        assert!(done.events.iter().any(|e| matches!(
            e,
            Event::Coached { rule, decision: CoachDecision::Held { reason }, .. }
                if *rule == format!("always-{}", refusal - 1) && reason == "the doubter doubts it"
        )), "{:?}", done.events);
        assert!(done.events.iter().any(|e| matches!(
            e,
            Event::ResultRefused { by: RefusedBy::Coach, refusals, .. } if *refusals == refusal
        )));
        assert!(!done.events.iter().any(|e| matches!(e, Event::Error { .. })));
        assert_eq!(c.progress().consecutive_errors, 0);
        if refusal < 3 {
            assert_eq!(done.next, Next::CallModel, "one error would have ended it");
        } else {
            assert!(
                matches!(
                    done.next,
                    Next::Finish(crate::agent::Outcome::RefusalBudget { refusals: 3, .. })
                ),
                "{:?}",
                done.next
            );
        }
    }
}

#[test]
fn a_resumed_run_replays_its_holds_and_decides_as_the_first_did() {
    let coach = || Arc::new(SmallModelCoach::default());
    let mut first =
        Conversation::new("Power of two?", &["rhai"], LoopConfig::default()).with_coach(coach());
    let mut events = first.start().events;
    let (replied, held) = step(
        &mut first,
        "rhai",
        "final_result(2^10)",
        final_result(&json!(8)),
    );
    events.extend(replied.events);
    events.extend(held.events);
    assert!(events.iter().any(|e| matches!(
        e,
        Event::Coached { rule, decision: CoachDecision::Held { .. }, .. } if rule == "rhai_powers"
    )));
    // The run stops here; a resumed one gets the same script again.
    let progress = Progress::replayed(&events);
    assert_eq!(progress.held_rules, vec!["rhai_powers".to_string()]);
    assert_eq!(progress.refusals, 1);
    let mut resumed =
        Conversation::resumed(progress, &["rhai"], LoopConfig::default()).with_coach(coach());
    let (_, resumed_done) = step(
        &mut resumed,
        "rhai",
        "final_result(2^10)",
        final_result(&json!(8)),
    );
    let (_, first_done) = step(
        &mut first,
        "rhai",
        "final_result(2^10)",
        final_result(&json!(8)),
    );
    assert_eq!(resumed_done.next, first_done.next);
    assert!(matches!(resumed_done.next, Next::CheckResult { .. }));
    assert_eq!(resumed.refusals(), first.refusals());
}

#[test]
fn a_resumed_run_replays_a_rewrite_it_recorded_and_its_output_is_the_models_result() {
    let mut c = Conversation::new("task", &["python"], LoopConfig::default())
        .with_coach(Arc::new(SmallModelCoach::default()))
        .with_tools([(
            "list_orders".to_string(),
            "list_orders(customer=string)".to_string(),
        )]);
    let mut events = c.start().events;
    let script =
        "def list_orders(customer):\n    return [1]\n\nfinal_result(list_orders(customer='mia'))";
    let replied = c.on_reply(&reply("python", script));
    let ran = match &replied.next {
        Next::RunScript { code } => code.clone(),
        other => panic!("{other:?}"),
    };
    events.extend(replied.events);
    // Cut short before the script finished: the resumed run handles the
    // reply again and runs the same rewrite, recorded the same way.
    let mut progress = Progress::replayed(&events);
    let pending = progress.take_back_reply().expect("the reply is pending");
    let mut resumed = Conversation::resumed(progress, &["python"], LoopConfig::default())
        .with_coach(Arc::new(SmallModelCoach::default()))
        .with_tools([(
            "list_orders".to_string(),
            "list_orders(customer=string)".to_string(),
        )]);
    let again = resumed.resume(Some(&text_reply(pending.joined_text())));
    assert_eq!(again.next, Next::RunScript { code: ran });
    let (done, output) = resumed.on_completion(&final_result(&json!([2])), &LogBuffer::new(10));
    assert!(matches!(output, ScriptOutput::FinalResult { .. }));
    assert!(matches!(done.next, Next::CheckResult { .. }));
}

#[test]
fn the_language_comes_from_the_runtime_not_from_the_fence_tag() {
    let stub =
        "def list_orders(customer):\n    return [1]\n\nobservation(list_orders(customer='mia'))";
    let tools = [(
        "list_orders".to_string(),
        "list_orders(customer=string)".to_string(),
    )];
    // A runtime whose fence tag names no language the host knows, but which
    // says it runs Python: its Python stubs are Python's.
    let mut named = Conversation::new("task", &["code"], LoopConfig::default())
        .with_coach(Arc::new(SmallModelCoach::default()))
        .with_language("Python")
        .with_tools(tools.clone());
    assert_ne!(
        named.on_reply(&reply("code", stub)).next,
        Next::RunScript { code: stub.into() }
    );
    // The same tag said to be JavaScript: no Python stub to take out.
    let mut other = Conversation::new("task", &["code"], LoopConfig::default())
        .with_coach(Arc::new(SmallModelCoach::default()))
        .with_language("JavaScript")
        .with_tools(tools);
    assert_eq!(
        other.on_reply(&reply("code", stub)).next,
        Next::RunScript { code: stub.into() }
    );
}
