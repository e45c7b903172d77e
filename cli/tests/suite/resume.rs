//! `codeact run --resume` on real processes: a run killed with SIGKILL in the
//! middle of a tool call, and a run that failed on its model, each continued from
//! its transcript without calling the recorded tools again. A command tool that
//! appends to a counter file shows which calls were made.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use codeact::Event;
use codeact::agent::read_transcript;
use codeact::agent::{ResumedSession, ToolCallOutcome};
use codeact::exec::Snapshot;
use serde_json::json;

use crate::support::reliability::{self, Section};

const SECTION: Section = Section {
    name: "resume",
    title: "Resuming interrupted runs",
    intro: "`codeact run --resume TRANSCRIPT` on a real process (Rhai, a replay model, a command tool that appends to a counter file): the finished scripts run again with their recorded tool results, the loop goes on from where it stopped, and the transcript grows. With `--snapshot-dir`, the session is restored from the snapshot of the last finished step instead, and a snapshot that does not fit falls back to the replay, saying why.",
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
        let counter =
            Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/..")).join("fixtures/tools/counter.py");
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
            replayed_tool_calls: 1,
            ..
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
    if rows.len() == 9 {
        rows.sort();
        let result = reliability::submit(&SECTION, "outcome", rows.clone());
        assert_eq!(result, Ok(()));
    }
}

/// Step 1 and 2 keep a tool's answer in a variable; step 3 returns both.
const KEEP_ONE: &str = "```rhai\nlet first = bump(#{tag: \"s1\"});\nobservation(first)\n```";
const KEEP_TWO: &str = "```rhai\nlet second = bump(#{tag: \"s2\"});\nobservation(second)\n```";
const RETURN_BOTH: &str = "```rhai\nfinal_result(#{first: first, second: second})\n```";

impl Scene {
    /// A run of `replies` with snapshots in `snaps/`, which fails when the
    /// replies run out (exit 1): a run to resume.
    fn run_out_of_replies(&self, replies: &[&str], snapshots: bool) {
        let model = format!("replay:{}", self.replies("first.json", replies).display());
        let mut args = vec!["run", "--model", &model, "--tools", "tools.json"];
        let transcript = self.path("run.jsonl");
        let transcript = transcript.to_string_lossy().into_owned();
        if !transcript_exists(self) {
            args.extend(["--transcript", &transcript, "Keep two numbers."]);
        } else {
            args.extend(["--resume", "run.jsonl"]);
        }
        if snapshots {
            args.extend(["--snapshot-dir", "snaps"]);
        }
        let failed = self.run(&args);
        assert_eq!(failed.status.code(), Some(1), "{}", text(&failed.stderr));
        assert!(text(&failed.stderr).contains("ran out of replies"));
    }

    /// Resumes `run.jsonl` with all three replies; with `snaps/` when
    /// `snapshots`.
    fn resume_to_the_end(&self, snapshots: bool) -> Output {
        let full = self.replies("full.json", &[KEEP_ONE, KEEP_TWO, RETURN_BOTH]);
        let model = format!("replay:{}", full.display());
        let mut args = vec![
            "run",
            "--resume",
            "run.jsonl",
            "--model",
            &model,
            "--tools",
            "tools.json",
        ];
        if snapshots {
            args.extend(["--snapshot-dir", "snaps"]);
        }
        let resumed = self.run(&args);
        assert!(resumed.status.success(), "{}", text(&resumed.stderr));
        resumed
    }

    /// The snapshot files in `snaps/`, sorted.
    fn snapshot_files(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.path("snaps"))
            .map(|entries| {
                entries
                    .flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    }

    /// Changes the results the transcript recorded for the two calls to 100 and
    /// 200: a replay serves those, so an answer of 1 and 2 can only come from a
    /// restored session.
    fn change_recorded_results(&self) {
        let path = self.path("run.jsonl");
        let changed: String = std::fs::read_to_string(&path)
            .expect("the transcript reads")
            .lines()
            .map(|line| {
                let mut value: serde_json::Value = serde_json::from_str(line).expect("a line");
                if value["event"] == "tool_call" {
                    let n = value["outcome"]["ok"].as_i64().expect("a number");
                    value["outcome"]["ok"] = json!(n * 100);
                }
                format!("{value}\n")
            })
            .collect();
        std::fs::write(&path, changed).expect("the transcript is changed");
    }

    /// How the last resume rebuilt the session, from the transcript.
    fn resumed_by(&self) -> (usize, ResumedSession) {
        read_transcript(self.path("run.jsonl"))
            .expect("the transcript reads")
            .into_iter()
            .filter_map(|event| match event {
                Event::Resumed {
                    replayed_scripts,
                    session,
                    ..
                } => Some((replayed_scripts, session)),
                _ => None,
            })
            .last()
            .expect("a resumed event")
    }
}

fn transcript_exists(scene: &Scene) -> bool {
    scene.path("run.jsonl").exists()
}

fn final_line(output: &Output) -> String {
    text(&output.stdout).trim().to_string()
}

fn both(first: i64, second: i64) -> String {
    json!({"type": "final_result", "value": {"first": first, "second": second}}).to_string()
}

/// If this fails, `--snapshot-dir` does not spare a resumed run its replay: the
/// session's variables must come from the snapshot, not from the scripts run
/// again (whose recorded results were changed to tell them apart).
#[test]
fn a_run_resumed_with_its_snapshot_dir_restores_the_session_without_running_its_scripts_again() {
    let scene = Scene::new("snapshot-restored", &[]);
    scene.run_out_of_replies(&[KEEP_ONE, KEEP_TWO], true);
    let files = scene.snapshot_files();
    assert_eq!(files.len(), 1, "only the latest is kept: {files:?}");
    assert!(files[0].ends_with(".step-2.snapshot"), "{files:?}");
    let kept: Vec<usize> = read_transcript(scene.path("run.jsonl"))
        .expect("the transcript reads")
        .into_iter()
        .filter_map(|event| match event {
            Event::SnapshotKept { step, file } => {
                assert!(file.ends_with(&format!(".step-{step}.snapshot")));
                Some(step)
            }
            _ => None,
        })
        .collect();
    assert_eq!(kept, [1, 2], "each finished step is recorded");
    // The same transcript resumed without snapshots, for the same answer.
    let replayed = Scene::new("snapshot-restored-replay", &[]);
    std::fs::copy(scene.path("run.jsonl"), replayed.path("run.jsonl")).expect("copied");
    std::fs::write(replayed.path("counter.txt"), "s1\ns2\n").expect("counter");
    let replay = replayed.resume_to_the_end(false);

    scene.change_recorded_results();
    let resumed = scene.resume_to_the_end(true);
    assert_eq!(
        final_line(&resumed),
        both(1, 2),
        "{}",
        text(&resumed.stderr)
    );
    assert_eq!(final_line(&replay), both(1, 2), "the replay agrees");
    assert_eq!(scene.counter(), ["s1", "s2"], "no tool was called again");
    assert_eq!(
        scene.resumed_by(),
        (
            0,
            ResumedSession::Snapshot {
                step: 2,
                file: files[0].clone()
            }
        )
    );
    assert!(
        text(&resumed.stderr).contains("restored from the snapshot of step 2"),
        "{}",
        text(&resumed.stderr)
    );
    record(
        "resumed_with_a_snapshot_of_the_last_step",
        "✓ restored from the snapshot of step 2: no script ran again (changed recorded results unused), the same answer as a replay",
    );
}

/// A resume that fell back, by replaying the scripts: it must say why, in one
/// line, and answer with the (changed) recorded results.
fn falls_back(scene: &Scene, because: &str) {
    scene.change_recorded_results();
    let resumed = scene.resume_to_the_end(true);
    assert_eq!(
        final_line(&resumed),
        both(100, 200),
        "{}",
        text(&resumed.stderr)
    );
    let stderr = text(&resumed.stderr);
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|line| line.contains("no snapshot restored, so the scripts run again"))
        .collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(lines[0].contains(because), "{}", lines[0]);
    let (replayed_scripts, session) = scene.resumed_by();
    assert_eq!(replayed_scripts, 2);
    assert!(
        matches!(&session, ResumedSession::Replay { fallback: Some(why) } if why.contains(because)),
        "{session:?}"
    );
    assert_eq!(scene.counter(), ["s1", "s2"], "no tool was called again");
}

/// If this fails, a damaged snapshot file is loaded (or crashes the host)
/// instead of being refused for a replay.
#[test]
fn a_corrupted_or_truncated_snapshot_falls_back_to_replay_saying_why() {
    for (name, damage) in [
        ("snapshot-bit-flipped", 0usize),
        ("snapshot-truncated", 1),
        ("snapshot-empty", 2),
    ] {
        let scene = Scene::new(name, &[]);
        scene.run_out_of_replies(&[KEEP_ONE, KEEP_TWO], true);
        let file = scene.path("snaps").join(&scene.snapshot_files()[0]);
        let mut bytes = std::fs::read(&file).expect("the snapshot reads");
        match damage {
            0 => {
                let middle = bytes.len() / 2;
                bytes[middle] ^= 0x01;
            }
            1 => bytes.truncate(bytes.len() - 100),
            _ => bytes.clear(),
        }
        std::fs::write(&file, bytes).expect("damaged");
        falls_back(&scene, "not a usable snapshot");
    }
    record(
        "resumed_with_a_corrupted_snapshot",
        "✓ a flipped bit, a cut and an empty file are refused (not a usable snapshot): the scripts run again, one line says why",
    );
}

/// If this fails, a snapshot made by another runtime (or guest, or codeact
/// version) is handed to this one.
#[test]
fn a_snapshot_of_another_runtime_falls_back_to_replay_saying_why() {
    let scene = Scene::new("snapshot-foreign", &[]);
    scene.run_out_of_replies(&[KEEP_ONE, KEEP_TWO], true);
    let file = scene.path("snaps").join(&scene.snapshot_files()[0]);
    let foreign = Snapshot::seal("wasm:rhai", &"0".repeat(64), b"a guest's memory");
    std::fs::write(&file, foreign.as_bytes()).expect("replaced");
    falls_back(&scene, "the snapshot is of wasm:rhai");
    record(
        "resumed_with_a_snapshot_of_another_runtime",
        "✓ refused (the snapshot is of wasm:rhai): the scripts run again, one line says why",
    );
}

/// If this fails, a resume restores a snapshot that misses the steps after it.
#[test]
fn a_snapshot_older_than_the_last_finished_step_falls_back_to_replay() {
    let scene = Scene::new("snapshot-older", &[]);
    // Step 1 with snapshots; step 2 resumed without them: the directory holds
    // the snapshot of step 1 only.
    scene.run_out_of_replies(&[KEEP_ONE], true);
    scene.run_out_of_replies(&[KEEP_ONE, KEEP_TWO], false);
    assert!(scene.snapshot_files()[0].ends_with(".step-1.snapshot"));
    falls_back(&scene, "no snapshot of step 2");
    record(
        "resumed_with_a_snapshot_older_than_the_last_step",
        "✓ not restored (no snapshot of step 2): the scripts run again, one line says why",
    );
}

/// If this fails, a runtime that cannot snapshot its sessions stops a run
/// kept with `--snapshot-dir`, or is asked again every step.
#[test]
fn a_runtime_without_snapshots_says_so_once_and_the_run_goes_on() {
    let scene = Scene::new("snapshot-unsupported", &[]);
    let replies = scene.replies(
        "js.json",
        &[
            "```js\nvar first = 1;\nobservation(first)\n```",
            "```js\nvar second = first + 1;\nobservation(second)\n```",
            "```js\nfinal_result(second)\n```",
        ],
    );
    let model = format!("replay:{}", replies.display());
    let run = scene.run(&[
        "run",
        "--model",
        &model,
        "--runtime",
        "js-in-process",
        "--snapshot-dir",
        "snaps",
        "--transcript",
        "run.jsonl",
        "Count.",
    ]);
    assert!(run.status.success(), "{}", text(&run.stderr));
    assert_eq!(
        final_line(&run),
        json!({"type": "final_result", "value": 2}).to_string()
    );
    let failed: Vec<(usize, String)> = read_transcript(scene.path("run.jsonl"))
        .expect("the transcript reads")
        .into_iter()
        .filter_map(|event| match event {
            Event::SnapshotFailed { step, reason } => Some((step, reason)),
            Event::SnapshotKept { .. } => panic!("a snapshot was kept"),
            _ => None,
        })
        .collect();
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert!(failed[0].1.contains("cannot be snapshotted"), "{failed:?}");
    assert!(scene.snapshot_files().is_empty());
    record(
        "run_on_a_runtime_without_snapshots",
        "✓ one snapshot_failed line (cannot be snapshotted); the run goes on to its result",
    );
}
