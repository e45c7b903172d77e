use std::sync::Mutex;

use super::*;
use crate::Agent;
use crate::agent::Outcome;
use crate::model::ReplayModel;
use crate::tools::toolbox::ToolBox;
use codeact_rhai::RhaiRuntime;
use codeact_runtime::Limits;

type Events = Arc<Mutex<Vec<Event>>>;

/// Limits under which only the time limit stops a script.
fn timed(wall_time: Duration) -> Limits {
    Limits {
        wall_time,
        max_operations: u64::MAX,
        ..Limits::default()
    }
}

async fn run(
    replies: &[&str],
    limits: Limits,
    cells: CellLimits,
) -> (crate::RunResult, Vec<Event>) {
    let events: Events = Arc::new(Mutex::new(Vec::new()));
    let seen = events.clone();
    let agent = Agent::builder(
        Arc::new(ReplayModel::new(replies.iter().copied())),
        Arc::new(RhaiRuntime::new(limits)),
    )
    .cells(cells)
    .on_event(move |event| seen.lock().expect("not poisoned").push(event.clone()))
    .build()
    .expect("agent builds");
    let run = agent.run("Use cells.").await.expect("the run finishes");
    let events = events.lock().expect("not poisoned").clone();
    (run, events)
}

fn observations(events: &[Event]) -> Vec<Value> {
    events
        .iter()
        .filter_map(|event| match event {
            Event::Observation { value, .. } => Some(value.clone()),
            _ => None,
        })
        .collect()
}

fn ended(events: &[Event]) -> Vec<(String, CellState, Option<String>)> {
    events
        .iter()
        .filter_map(|event| match event {
            Event::CellEnded {
                id, state, error, ..
            } => Some((id.clone(), *state, error.clone())),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cell_started_in_one_step_is_awaited_in_the_next_with_its_progress_and_result() {
    let (run, events) = run(
        &[
            "```rhai\nlet c = start_cell(\"notify(`half way`); 40 + 2\");\nobservation(c)\n```",
            "```rhai\nobservation(wait_cell(c, 3))\n```",
            "```rhai\nfinal_result(poll_cell(c).state)\n```",
        ],
        timed(Duration::from_secs(5)),
        CellLimits::default(),
    )
    .await;
    assert_eq!(
        run.outcome,
        Outcome::FinalResult {
            value: json!("done")
        }
    );
    let seen = observations(&events);
    assert_eq!(seen[0], json!("cell-1"));
    assert_eq!(seen[1]["state"], "done", "{seen:?}");
    assert_eq!(seen[1]["result"], 42);
    assert_eq!(seen[1]["progress"], json!(["half way"]));
    assert!(events.iter().any(|e| matches!(e, Event::CellStarted { step: 1, id, code } if id == "cell-1" && code.contains("40 + 2"))));
    assert!(events.iter().any(|e| matches!(e, Event::CellProgress { id, message, .. } if id == "cell-1" && message == "half way")));
    assert_eq!(ended(&events), [("cell-1".into(), CellState::Done, None)]);
    // The cell functions are tool calls like any other: recorded, so a
    // resumed run replays them.
    assert!(
        events
            .iter()
            .any(|e| matches!(e, Event::ToolCall { name, .. } if name == START_CELL_TOOL))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_cell_stops_at_once_and_is_reported_cancelled() {
    let started = Instant::now();
    let (run, events) = run(
        &[
            "```rhai\nlet c = start_cell(\"let i = 0; loop { i += 1; }\");\nobservation(poll_cell(c).state)\n```",
            "```rhai\nobservation(cancel_cell(c))\n```",
            "```rhai\nfinal_result(poll_cell(c).state)\n```",
        ],
        timed(Duration::from_secs(60)),
        CellLimits::default(),
    )
    .await;
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        run.outcome,
        Outcome::FinalResult {
            value: json!("cancelled")
        }
    );
    let seen = observations(&events);
    assert_eq!(seen[0], json!("running"));
    assert_eq!(seen[1]["state"], "cancelled", "{seen:?}");
    assert_eq!(
        ended(&events),
        [("cell-1".into(), CellState::Cancelled, None)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runaway_cell_is_stopped_at_the_runtimes_time_limit_and_says_so() {
    let (_, events) = run(
        &[
            "```rhai\nlet c = start_cell(\"let i = 0; loop { i += 1; }\");\nobservation(c)\n```",
            "```rhai\nobservation(wait_cell(c, 1).state)\n```",
            "```rhai\nobservation(wait_cell(c, 1).state)\n```",
            "```rhai\nobservation(wait_cell(c, 1))\n```",
            "```rhai\nfinal_result(0)\n```",
        ],
        timed(Duration::from_millis(300)),
        CellLimits::default(),
    )
    .await;
    let last = observations(&events).pop().expect("observations");
    assert_eq!(last["state"], "failed", "{last}");
    let error = last["error"].as_str().expect("an error");
    assert!(error.contains("time limit of 300 ms"), "{error}");
    let ends = ended(&events);
    assert!(
        matches!(&ends[..], [(_, CellState::Failed, Some(e))] if e.contains("time limit")),
        "{ends:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cell_past_the_live_limit_is_refused_naming_the_running_ones_and_all_die_with_the_run() {
    let started = Instant::now();
    let (run, events) = run(
        &[concat!(
            "```rhai\n",
            "let a = start_cell(\"loop { }\");\n",
            "let b = start_cell(\"loop { }\");\n",
            "let refused = \"\";\n",
            "try { start_cell(\"1\"); } catch (err) { refused = err; }\n",
            "final_result(refused)\n```"
        )],
        timed(Duration::from_secs(60)),
        CellLimits {
            max_live: 2,
            ..CellLimits::default()
        },
    )
    .await;
    let Outcome::FinalResult { value } = run.outcome else {
        panic!("{:?}", run.outcome);
    };
    let refused = value.as_str().expect("a message");
    assert!(
        refused.contains("2 cells running at once") && refused.contains("cell-1, cell-2"),
        "{refused}"
    );
    // The run ended with both cells running: they were stopped and joined,
    // long before their 60 s.
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    let ends = ended(&events);
    assert_eq!(ends.len(), 2, "{ends:?}");
    assert!(
        ends.iter()
            .all(|(_, state, error)| *state == CellState::Cancelled
                && error.as_deref() == Some("the run that started it ended"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_arguments_are_refused_with_errors_that_say_why() {
    let (run, _) = run(
        &[concat!(
            "```rhai\n",
            "let out = [];\n",
            "try { start_cell(42); } catch (err) { out.push(err); }\n",
            "let big = \"\"; for i in 0..7000 { big += \"1234567890\"; }\n",
            "try { start_cell(big); } catch (err) { out.push(err); }\n",
            "try { start_cell(\"  \"); } catch (err) { out.push(err); }\n",
            "try { poll_cell(\"cell-9\"); } catch (err) { out.push(err); }\n",
            "try { poll_cell(#{}); } catch (err) { out.push(err); }\n",
            "try { wait_cell(\"cell-1\", -1); } catch (err) { out.push(err); }\n",
            "try { notify(\"hi\"); } catch (err) { out.push(err); }\n",
            "final_result(out)\n```"
        )],
        timed(Duration::from_secs(5)),
        CellLimits::default(),
    )
    .await;
    let Outcome::FinalResult { value } = run.outcome else {
        panic!("{:?}", run.outcome);
    };
    let messages: Vec<&str> = value
        .as_array()
        .expect("a list")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let expected = [
        "`code` as a string of Rhai, not a number",
        "its code is 70000 bytes, and a cell's code may be 65536 bytes",
        "it is empty",
        "there is no cell \"cell-9\"; this run has started no cell",
        "poll_cell needs `id`, the string start_cell returned",
        "there is no cell \"cell-1\"",
        "call it in the code you give start_cell",
    ];
    assert_eq!(messages.len(), expected.len(), "{messages:?}");
    for (message, part) in messages.iter().zip(expected) {
        assert!(message.contains(part), "{message:?} should say {part:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cell_starting_cells_is_held_to_the_same_bound_and_cannot_wait_for_itself() {
    let (run, _) = run(
        &[
            concat!(
                "```rhai\n",
                "let c = start_cell(\"let inner = start_cell(`loop { }`); let r = []; ",
                "try { start_cell(`1`); } catch (err) { r.push(err); } ",
                "try { wait_cell(`cell-1`, 1); } catch (err) { r.push(err); } r\");\n",
                "observation(c)\n```"
            ),
            "```rhai\nfinal_result(wait_cell(c, 3))\n```",
        ],
        timed(Duration::from_secs(30)),
        CellLimits {
            max_live: 2,
            ..CellLimits::default()
        },
    )
    .await;
    let Outcome::FinalResult { value } = run.outcome else {
        panic!("{:?}", run.outcome);
    };
    assert_eq!(value["state"], "done", "{value}");
    let said = value["result"].to_string();
    assert!(said.contains("2 cells running at once"), "{said}");
    assert!(said.contains("a cell cannot wait for itself"), "{said}");
}

/// If this fails, resuming a run starts its cells again (their tool calls
/// would run twice) or a poll of one of them is not told why it is unknown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_run_replays_start_cell_and_starts_no_cell_again() {
    let first = "```rhai\nlet c = start_cell(\"notify(`once`); 1\");\nobservation(c)\n```";
    let second = "```rhai\nlet r = \"\"; try { poll_cell(c); } catch (err) { r = err; } final_result([c, r])\n```";
    let events: Events = Arc::new(Mutex::new(Vec::new()));
    let seen = events.clone();
    let agent = |replies: Vec<&str>, events: Events| {
        Agent::builder(
            Arc::new(ReplayModel::new(replies)),
            Arc::new(RhaiRuntime::new(timed(Duration::from_secs(5)))),
        )
        .cells(CellLimits::default())
        .on_event(move |event| events.lock().expect("not poisoned").push(event.clone()))
        .build()
        .expect("agent builds")
    };
    // The replay runs out after step 1: the run fails there, its cell started.
    let interrupted = agent(vec![first], seen).run("Use cells.").await;
    assert!(interrupted.is_err());
    let recorded = events.lock().expect("not poisoned").clone();
    assert!(
        recorded
            .iter()
            .any(|e| matches!(e, Event::CellStarted { .. }))
    );
    let point = crate::agent::ResumePoint::from_events(&recorded).expect("resumable");
    let resumed_events: Events = Arc::new(Mutex::new(Vec::new()));
    let resumed = agent(vec![first, second], resumed_events.clone())
        .resume(&point, &crate::OutputSpec::default())
        .await
        .unwrap_or_else(|e| {
            panic!(
                "the resumed run failed: {e}; {:#?}",
                resumed_events.lock().expect("not poisoned")
            )
        });
    let Outcome::FinalResult { value } = resumed.outcome else {
        panic!("{:?}", resumed.outcome);
    };
    assert_eq!(value[0], "cell-1", "the id is the recorded answer");
    let said = value[1].as_str().expect("a message");
    assert!(said.contains("a resumed run starts none again"), "{said}");
    let resumed_events = resumed_events.lock().expect("not poisoned");
    assert!(
        !resumed_events
            .iter()
            .any(|e| matches!(e, Event::CellStarted { .. } | Event::CellProgress { .. })),
        "{resumed_events:?}"
    );
}

/// If this fails, a run's end leaves a cell's thread running.
#[test]
fn dropping_the_runs_tools_interrupts_and_joins_every_cell_within_the_bound() {
    let limits = CellLimits::default();
    let runtime: Arc<dyn Runtime> = Arc::new(RhaiRuntime::new(timed(Duration::from_secs(60))));
    let toolbox = Arc::new(ToolBox::new(cell_tools("Rhai", &limits)).expect("valid"));
    let cells = Arc::new(Cells::new(
        toolbox,
        runtime.clone(),
        None,
        limits,
        "main".into(),
        Vec::new(),
    ));
    let tools = Arc::new(HostTools::new(cells.clone(), "main", Vec::new()));
    cells.attach(&tools);
    let shared = cells.shared.clone();
    drop(cells);
    let mut session = ScriptSession::start(&*runtime, tools.clone()).expect("a session");
    let run = session
        .run_blocking("[start_cell(\"loop { }\"), start_cell(\"let x = 0; loop { x += 1; }\")]")
        .expect("the host stays up");
    assert_eq!(run.completion, Ok(json!(["cell-1", "cell-2"])));
    assert_eq!(shared.table().live, 2);
    let started = Instant::now();
    drop(session);
    drop(tools);
    assert!(started.elapsed() < JOIN_BOUND, "{:?}", started.elapsed());
    let table = shared.table();
    assert_eq!(table.live, 0);
    assert!(
        table
            .cells
            .values()
            .all(|cell| cell.ended && cell.thread.is_none() && cell.state == CellState::Cancelled)
    );
}

#[test]
fn a_long_note_is_cut_with_a_marker() {
    assert_eq!(cut("abc", 5), "abc");
    assert_eq!(cut("héllo wörld", 5), "héllo… [cut at 5 characters]");
}

/// If this fails, the model is told of a cell twice, is told of one its
/// script already saw end, or reads a cell's own words outside a poll.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cell_is_noted_in_the_feedback_at_most_once_and_a_polled_one_not_at_all() {
    let (run, _) = run(
        &[
            "```rhai\nlet a = start_cell(\"notify(`hello from the cell`); 1\");\nobservation(a)\n```",
            "```rhai\nlet b = start_cell(\"2\");\nobservation(wait_cell(b, 3).state)\n```",
            "```rhai\nobservation(wait_cell(a, 3).state)\n```",
            "```rhai\nfinal_result(0)\n```",
        ],
        timed(Duration::from_secs(5)),
        CellLimits::default(),
    )
    .await;
    let feedback: Vec<String> = run
        .messages
        .iter()
        .filter(|m| m.role == crate::chat::Role::User)
        .map(crate::chat::Message::joined_text)
        .collect();
    let noted = |id: &str| {
        feedback
            .iter()
            .filter(|text| text.contains(&format!("`{id}` ended (done)")))
            .count()
    };
    // Once at most: under load the cell may not have run before the script
    // that waits for it (cells wait for a running-script slot like any
    // script), and a wait tells of it instead.
    assert!(noted("cell-1") <= 1, "{feedback:#?}");
    assert_eq!(noted("cell-2"), 0, "{feedback:#?}");
    assert!(
        feedback
            .iter()
            .all(|text| !text.contains("hello from the cell")),
        "a cell's own words reach the model only through a poll: {feedback:#?}"
    );
}

/// If this fails, a chat's cells do not last from turn to turn, or outlive
/// the chat.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chats_cells_last_from_turn_to_turn_and_end_with_the_chat() {
    let events: Events = Arc::new(Mutex::new(Vec::new()));
    let seen = events.clone();
    let agent = Agent::builder(
        Arc::new(ReplayModel::new([
            "```rhai\nlet c = start_cell(\"loop { }\");\nfinal_result(c)\n```",
            "```rhai\nfinal_result(poll_cell(c).state)\n```",
        ])),
        Arc::new(RhaiRuntime::new(timed(Duration::from_secs(60)))),
    )
    .cells(CellLimits::default())
    .on_event(move |event| seen.lock().expect("not poisoned").push(event.clone()))
    .build()
    .expect("agent builds");
    let mut chat = agent.chat().expect("a chat");
    let first = chat.send("Start it.").await.expect("turn 1");
    assert_eq!(
        first.outcome,
        Outcome::FinalResult {
            value: json!("cell-1")
        }
    );
    let second = chat.send("Is it running?").await.expect("turn 2");
    assert_eq!(
        second.outcome,
        Outcome::FinalResult {
            value: json!("running")
        }
    );
    assert!(ended(&events.lock().expect("not poisoned")).is_empty());
    let started = Instant::now();
    drop(chat);
    assert!(started.elapsed() < JOIN_BOUND, "{:?}", started.elapsed());
    assert_eq!(
        ended(&events.lock().expect("not poisoned")),
        [(
            "cell-1".into(),
            CellState::Cancelled,
            Some("the run that started it ended".into())
        )]
    );
}

/// If this fails, cell functions cannot be called together with other tools,
/// or a cell's calls made together do not reach the run's tools.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cell_functions_and_a_cells_own_calls_work_in_a_parallel_batch() {
    let (run, events) = run(
        &[
            concat!(
                "```rhai\n",
                "let ids = parallel([|| start_cell(\"notify(`a`); parallel_settled([|| notify(`b`), || poll_cell(`cell-9`)]).len()\"), || start_cell(\"7\")]);\n",
                "observation(ids)\n```"
            ),
            "```rhai\nfinal_result(parallel([|| wait_cell(ids[0], 3), || wait_cell(ids[1], 3)]))\n```",
        ],
        timed(Duration::from_secs(5)),
        CellLimits::default(),
    )
    .await;
    let ids = observations(&events)[0].clone();
    assert!(
        ids == json!(["cell-1", "cell-2"]) || ids == json!(["cell-2", "cell-1"]),
        "{ids}"
    );
    let Outcome::FinalResult { value } = run.outcome else {
        panic!("{:?}", run.outcome);
    };
    assert_eq!(value[0]["state"], "done", "{value}");
    assert_eq!(value[0]["result"], 2, "{value}");
    assert_eq!(value[0]["progress"], json!(["a", "b"]), "{value}");
    assert_eq!(value[1]["result"], 7, "{value}");
}

/// If this fails, a cell that ended or sent progress unseen is not news, is
/// news twice, or a poll does not count as seeing it.
#[test]
fn news_tells_each_end_and_progress_once_and_not_what_a_poll_returned() {
    let limits = CellLimits::default();
    let runtime: Arc<dyn Runtime> = Arc::new(RhaiRuntime::new(timed(Duration::from_secs(5))));
    let toolbox = Arc::new(ToolBox::new(cell_tools("Rhai", &limits)).expect("valid"));
    let cells = Arc::new(Cells::new(
        toolbox,
        runtime.clone(),
        None,
        limits,
        "main".into(),
        Vec::new(),
    ));
    let tools = Arc::new(HostTools::new(cells.clone(), "main", Vec::new()));
    cells.attach(&tools);
    let mut session = ScriptSession::start(&*runtime, tools.clone()).expect("a session");
    let started = session
        .run_blocking("[start_cell(\"notify(`one`); notify(`two`); 1\"), start_cell(\"2\")]")
        .expect("the host stays up");
    assert_eq!(started.completion, Ok(json!(["cell-1", "cell-2"])));
    let until = Instant::now() + Duration::from_secs(10);
    while cells.shared.table().live > 0 {
        assert!(Instant::now() < until, "the cells did not end");
        std::thread::sleep(Duration::from_millis(5));
    }
    let polled = session
        .run_blocking("poll_cell(\"cell-2\").state")
        .expect("the host stays up");
    assert_eq!(polled.completion, Ok(json!("done")));
    assert_eq!(
        cells.news(),
        [CellNews {
            id: "cell-1".into(),
            state: "done",
            progress: 2,
        }]
    );
    assert_eq!(cells.news(), []);
}
