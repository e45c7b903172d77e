//! `codeact run --resume` on real processes: a run killed with SIGKILL in the
//! middle of a tool call, and a run that failed on its model, each continued from
//! its transcript without calling the recorded tools again. A command tool that
//! appends to a counter file shows which calls were made.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use codeact::agent::read_transcript;
use codeact::{Event, ToolCallOutcome};
use serde_json::json;

use crate::support::reliability::{self, Section};

const SECTION: Section = Section {
    name: "resume",
    title: "Resuming interrupted runs",
    intro: "`codeact run --resume TRANSCRIPT` on a real process (Rhai, a replay model, a command tool that appends to a counter file): the finished scripts run again with their recorded tool results, the loop goes on from where it stopped, and the transcript grows.",
    binary: "suite resume::",
    columns: &["outcome"],
};

const STEP_ONE: &str = "```rhai\nlet first = bump(#{tag: \"s1\"});\nobservation(first)\n```";
const STEP_TWO: &str = "```rhai\nlet a = bump(#{tag: \"s2a\"});\nlet b = bump(#{tag: \"s2b\"});\nobservation([a, b])\n```";
const STEP_THREE: &str = "```rhai\nfinal_result(#{first: first, a: a, b: b})\n```";

/// A fresh directory for one test, with the tool manifest and a replay file.
struct Scene {
    dir: PathBuf,
}

impl Scene {
    fn new(name: &str, replies: &[&str]) -> Scene {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join("resume")
            .join(name);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("the scene directory is made");
        let counter = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/tools/counter.py");
        let manifest = json!([{
            "name": "bump",
            "description": "Appends tag to the counter file; returns its line count.",
            "parameters": {"type": "object", "properties": {"tag": {"type": "string"}}},
            "command": ["python3", counter.to_string_lossy()]
        }]);
        std::fs::write(dir.join("tools.json"), manifest.to_string()).expect("manifest written");
        let scene = Scene { dir };
        scene.replies("replies.json", replies);
        scene
    }

    fn replies(&self, name: &str, replies: &[&str]) -> PathBuf {
        let path = self.dir.join(name);
        std::fs::write(&path, json!({ "replies": replies }).to_string()).expect("replies written");
        path
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_codeact"));
        command
            .args(args)
            .current_dir(&self.dir)
            .env("COUNTER_FILE", self.path("counter.txt"))
            .env_remove("BUMP_SLEEP_TAG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        command
    }

    /// The run to interrupt: the scene's replies and tools, its transcript in
    /// `run.jsonl`.
    fn first_run(&self, task: &str) -> Command {
        let model = format!("replay:{}", self.path("replies.json").display());
        let transcript = self.path("run.jsonl");
        let transcript = transcript.to_string_lossy();
        let args = ["run", "--model", &model, "--tools", "tools.json"];
        let mut command = self.command(&args);
        command.args(["--transcript", &transcript, task]);
        command
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("codeact runs")
    }

    fn counter(&self) -> Vec<String> {
        std::fs::read_to_string(self.path("counter.txt"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    fn tool_calls(&self) -> Vec<(usize, String)> {
        read_transcript(self.path("run.jsonl"))
            .expect("the transcript reads")
            .into_iter()
            .filter_map(|event| match event {
                Event::ToolCall { step, args, .. } => {
                    Some((step, args["tag"].as_str().unwrap_or_default().to_string()))
                }
                _ => None,
            })
            .collect()
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// If this fails, a crash loses work or repeats a tool's side effect on resume.
#[test]
fn a_run_killed_mid_tool_call_resumes_without_calling_the_recorded_tools_again() {
    let scene = Scene::new("killed", &[STEP_ONE, STEP_TWO, STEP_THREE]);
    let transcript = scene.path("run.jsonl");
    let mut child = scene
        .first_run("Bump the counter.")
        .env("BUMP_SLEEP_TAG", "s2b")
        .spawn()
        .expect("codeact starts");
    // Step 2's second call appends its line, then sleeps: kill the run there.
    let started = Instant::now();
    while scene.counter().len() < 3 {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the run never reached its second step: {:?}",
            scene.counter()
        );
        if let Ok(Some(status)) = child.try_wait() {
            panic!("the run ended before it was killed: {status}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().expect("SIGKILL is sent");
    let _ = child.wait();
    assert_eq!(
        scene.tool_calls(),
        [(1, "s1".to_string()), (2, "s2a".to_string())],
        "the transcript holds the answered calls, not the one cut short"
    );

    let resumed = scene.run(&["run", "--resume", "run.jsonl", "--tools", "tools.json"]);
    assert!(
        resumed.status.success(),
        "resume failed: {}",
        text(&resumed.stderr)
    );
    // first and a come from the transcript; b is the call that was cut short,
    // made again (the fourth line).
    let expected = json!({"type": "final_result", "value": {"first": 1, "a": 2, "b": 4}});
    assert_eq!(text(&resumed.stdout).trim(), expected.to_string());
    assert_eq!(scene.counter(), ["s1", "s2a", "s2b", "s2b"]);
    let events = read_transcript(&transcript).expect("the transcript reads");
    assert!(events.iter().any(|e| matches!(
        e,
        Event::Resumed {
            steps: 1,
            replayed_scripts: 1,
            replayed_tool_calls: 1
        }
    )));
    assert_eq!(
        scene.tool_calls(),
        [
            (1, "s1".to_string()),
            (2, "s2a".to_string()),
            (2, "s2b".to_string())
        ]
    );
    assert!(matches!(
        events.last(),
        Some(Event::Finished { steps: 3, .. })
    ));
    record(
        "killed_with_sigkill_during_a_tool_call",
        "✓ resumed to the final result; 2 recorded calls replayed, the interrupted call made again, none repeated",
    );
}

#[test]
fn a_run_that_failed_on_its_model_resumes_with_another_model_spec() {
    let scene = Scene::new("model-failed", &[STEP_ONE]);
    let transcript = scene.path("run.jsonl");
    let failed = scene
        .first_run("Bump once.")
        .output()
        .expect("codeact runs");
    assert_eq!(failed.status.code(), Some(1), "{}", text(&failed.stderr));
    assert!(text(&failed.stderr).contains("ran out of replies"));
    let full = scene.replies(
        "full.json",
        &[STEP_ONE, "```rhai\nfinal_result(first * 10)\n```"],
    );
    let full_model = format!("replay:{}", full.display());
    let resumed = scene.run(&[
        "run",
        "--resume",
        "run.jsonl",
        "--model",
        &full_model,
        "--tools",
        "tools.json",
    ]);
    assert!(
        resumed.status.success(),
        "resume failed: {}",
        text(&resumed.stderr)
    );
    assert_eq!(
        text(&resumed.stdout).trim(),
        json!({"type": "final_result", "value": 10}).to_string()
    );
    assert_eq!(
        scene.counter(),
        ["s1"],
        "the recorded call is not made again"
    );
    let events = read_transcript(&transcript).expect("the transcript reads");
    assert!(events.iter().any(|e| matches!(e, Event::Failed { .. })));
    assert!(matches!(
        events.last(),
        Some(Event::Finished { steps: 2, .. })
    ));
    assert!(events.iter().any(|e| matches!(
        e,
        Event::ToolCall { outcome: ToolCallOutcome::Ok(v), .. } if v == &json!(1)
    )));
    record(
        "failed_on_a_model_error_then_resumed",
        "✓ resumed with --model replay:other.json; the recorded call replayed, not made again",
    );

    // A finished run has nothing to resume: a usage error.
    let again = scene.run(&["run", "--resume", "run.jsonl", "--tools", "tools.json"]);
    assert_eq!(again.status.code(), Some(2));
    assert!(text(&again.stderr).contains("already finished (final_result)"));
    record(
        "resuming_a_finished_run",
        "✓ usage error (exit 2): the run already finished",
    );
}

#[test]
fn a_transcript_cut_mid_line_resumes_from_its_last_whole_event() {
    let scene = Scene::new("cut-line", &[STEP_ONE]);
    let transcript = scene.path("run.jsonl");
    let failed = scene
        .first_run("Bump once.")
        .output()
        .expect("codeact runs");
    assert_eq!(failed.status.code(), Some(1));
    // A crash while a line was being written leaves half of it.
    let mut bytes = std::fs::read(&transcript).expect("transcript");
    bytes.extend_from_slice(b"{\"agent\":\"main\",\"event\":\"model_req");
    std::fs::write(&transcript, bytes).expect("transcript cut");
    let full = scene.replies(
        "full.json",
        &[STEP_ONE, "```rhai\nfinal_result(first + 1)\n```"],
    );
    let resumed = scene.run(&[
        "run",
        "--resume",
        "run.jsonl",
        "--model",
        &format!("replay:{}", full.display()),
        "--tools",
        "tools.json",
    ]);
    assert!(resumed.status.success(), "{}", text(&resumed.stderr));
    let events = read_transcript(&transcript).expect("the transcript reads");
    assert!(
        matches!(events.last(), Some(Event::Finished { .. })),
        "the appended events follow the last whole line"
    );
    assert_eq!(scene.counter(), ["s1"]);
    record(
        "transcript_whose_last_line_was_cut_by_the_crash",
        "✓ the cut line is dropped; the resumed events are readable after it",
    );
}

/// Each test records its row; the section is checked when all three are in.
fn record(case: &str, outcome: &str) {
    static ROWS: std::sync::Mutex<Vec<(String, String)>> = std::sync::Mutex::new(Vec::new());
    let mut rows = ROWS.lock().unwrap_or_else(|p| p.into_inner());
    rows.push((case.to_string(), outcome.to_string()));
    if rows.len() == 4 {
        rows.sort();
        let result = reliability::submit(&SECTION, "outcome", rows.clone());
        assert_eq!(result, Ok(()));
    }
}
