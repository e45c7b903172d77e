//! Transcripts a real model produced (`fixtures/transcripts/*.jsonl`), replayed
//! through today's loop: each must end as it ended when recorded. If one fails, a
//! change altered what the same replies lead to: a script result, a feedback rule,
//! a limit. Runs use the demo tools (`fixtures/tools/demo.json`) and default limits.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use codeact::agent::read_transcript;
use codeact::chat::Role;
use codeact::model::ReplayModel;
use codeact::tools::load_tool_manifest;
use codeact::{Agent, Event, JsRuntime, Limits, LoopConfig, Runtime, runtime_by_name};

fn transcripts() -> Vec<PathBuf> {
    let dir = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/..")).join("fixtures/transcripts");
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "jsonl"))
        .collect();
    paths.sort();
    paths
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_recorded_transcript_replays_to_the_outcome_it_had() {
    let manifest =
        Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/..")).join("fixtures/tools/demo.json");
    let paths = transcripts();
    assert!(!paths.is_empty(), "no transcripts recorded");
    for path in paths {
        let events = read_transcript(&path).expect("transcript reads");
        let runtime_name = events
            .iter()
            .find_map(|e| match e {
                Event::RunStarted { runtime, .. } => Some(runtime.clone()),
                _ => None,
            })
            .expect("a run_started event");
        let task = events
            .iter()
            .find_map(|e| match e {
                Event::Message { message } if message.role == Role::User => {
                    Some(message.joined_text())
                }
                _ => None,
            })
            .expect("a task");
        let (recorded, recorded_steps) = events
            .iter()
            .find_map(|e| match e {
                Event::Finished { outcome, steps, .. } => Some((outcome.clone(), *steps)),
                _ => None,
            })
            .expect("a finished event");
        let tools =
            load_tool_manifest(&manifest, Duration::from_secs(30)).expect("demo tools load");
        let model = ReplayModel::from_file(&path).expect("replay loads");
        let runtime: Arc<dyn Runtime> = match runtime_name.as_str() {
            // JavaScript workers are the codeact binary, not this test binary.
            "js" => Arc::new(
                JsRuntime::new(Limits::default()).with_worker(env!("CARGO_BIN_EXE_codeact")),
            ),
            name => runtime_by_name(name, Limits::default()).expect("runtime"),
        };
        let agent = Agent::builder(Arc::new(model), runtime)
            .tools(tools)
            .config(LoopConfig {
                max_steps: recorded_steps,
                ..LoopConfig::default()
            })
            .build()
            .expect("agent builds");
        let run = agent.run(&task).await.expect("replay runs");
        assert_eq!(run.outcome, recorded, "{}", path.display());
        assert_eq!(run.steps, recorded_steps, "{}", path.display());
    }
}
