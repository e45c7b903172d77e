//! Chats across processes (issue 17): a chat's transcript resumed with the
//! session's variables rebuilt, a turn cut short finished on resume, and
//! `codeact run --chat --resume`.

use std::sync::Arc;

use codeact::agent::ResumePoint;
use codeact::model::ReplayModel;
use codeact::{Agent, Limits, Outcome, RhaiRuntime, Transcript};
use serde_json::json;

const REPLIES: [&str; 3] = [
    "```rhai\nlet kept = 41;\nfinal_result(\"noted\")\n```",
    "```rhai\nfinal_result(\"second\")\n```",
    "```rhai\nfinal_result(kept + 1)\n```",
];

fn agent(transcript: &Transcript) -> Agent {
    Agent::builder(
        Arc::new(ReplayModel::new(REPLIES)),
        Arc::new(RhaiRuntime::new(Limits::default())),
    )
    .listener(transcript.listener())
    .build()
    .expect("builds")
}

/// Chats two turns (turn 1 keeps 41) into a transcript at `path`.
async fn two_turn_chat(path: &std::path::Path) {
    let transcript = Transcript::create(path).expect("created");
    let agent = agent(&transcript);
    let mut chat = agent.chat().expect("a chat");
    chat.send("Keep 41.").await.expect("turn 1");
    chat.send("Say second.").await.expect("turn 2");
}

/// If this fails, a chat cannot go on in another process: its variables, its
/// history or its turn count are lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_resumed_from_its_transcript_keeps_its_variables_and_turns() {
    let scratch = tempfile::tempdir().expect("scratch");
    let path = scratch.path().join("chat.jsonl");
    two_turn_chat(&path).await;
    let events = codeact::agent::read_transcript(&path).expect("reads");
    assert!(
        ResumePoint::from_events(&events).is_err(),
        "a plain resume refuses a chat's transcript, whose turns each finished"
    );
    let point = ResumePoint::from_chat_events(&events).expect("resumable");
    let transcript = Transcript::append(&path).expect("appends");
    let agent = agent(&transcript);
    let (mut chat, cut_short) = agent.resume_chat(&point).await.expect("resumes");
    assert!(cut_short.is_none(), "both turns had finished");
    let third = chat
        .send("Add one to what you kept.")
        .await
        .expect("turn 3");
    assert_eq!(third.outcome, Outcome::FinalResult { value: json!(42) });
    assert_eq!(chat.turns(), 3);
}

/// If this fails, a chat killed in the middle of a turn loses that turn on
/// resume instead of finishing it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_cut_short_inside_a_turn_finishes_that_turn_on_resume() {
    let scratch = tempfile::tempdir().expect("scratch");
    let path = scratch.path().join("chat.jsonl");
    two_turn_chat(&path).await;
    // As if the process died right after turn 2's reply arrived.
    let text = std::fs::read_to_string(&path).expect("reads");
    let lines: Vec<&str> = text.lines().collect();
    let reply = lines
        .iter()
        .rposition(|line| line.contains(r#""role":"assistant""#))
        .expect("turn 2's reply");
    std::fs::write(&path, lines[..=reply].join("\n") + "\n").expect("cut");
    let events = codeact::agent::read_transcript(&path).expect("reads");
    let point = ResumePoint::from_chat_events(&events).expect("resumable");
    let transcript = Transcript::append(&path).expect("appends");
    let agent = agent(&transcript);
    let (mut chat, cut_short) = agent.resume_chat(&point).await.expect("resumes");
    assert_eq!(
        cut_short.map(|run| run.outcome),
        Some(Outcome::FinalResult {
            value: json!("second")
        })
    );
    let third = chat
        .send("Add one to what you kept.")
        .await
        .expect("turn 3");
    assert_eq!(third.outcome, Outcome::FinalResult { value: json!(42) });
}

/// If this fails, `codeact run --chat --resume T` does not continue the chat
/// the transcript holds.
#[test]
fn codeact_run_chat_resumes_a_chat() {
    let scratch = tempfile::tempdir().expect("scratch");
    let replies = scratch.path().join("replies.json");
    std::fs::write(&replies, json!({ "replies": REPLIES }).to_string()).expect("written");
    let transcript = scratch.path().join("chat.jsonl");
    let run = |args: &[&str], input: &str| {
        let output = crate::cli::codeact(args, Some(input.as_bytes()));
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    let model = format!("replay:{}", replies.display());
    let transcript = transcript.to_string_lossy();
    let (code, stdout, stderr) = run(
        &[
            "run",
            "--chat",
            "--model",
            &model,
            "--transcript",
            &transcript,
        ],
        "Keep 41.\nSay second.\n",
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(stdout.lines().count(), 2, "{stdout}");
    let (code, stdout, stderr) = run(
        &["run", "--chat", "--model", &model, "--resume", &transcript],
        "Add one to what you kept.\n",
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        stdout.trim(),
        r#"{"type":"final_result","value":42}"#,
        "{stderr}"
    );
}

/// Answers like its replay, but never answers a message saying "hang".
struct HangsOnRequest(ReplayModel);

#[async_trait::async_trait]
impl codeact::model::ModelClient for HangsOnRequest {
    fn label(&self) -> String {
        "hangs".into()
    }

    async fn complete(
        &self,
        request: &codeact::chat::ModelRequest,
    ) -> Result<codeact::chat::ModelResponse, codeact::model::ModelError> {
        let last = request.messages.last().map(|m| m.joined_text());
        if last.is_some_and(|text| text.contains("hang")) {
            std::future::pending::<()>().await;
        }
        self.0.complete(request).await
    }
}

/// If this fails, an app cannot stop one turn of a chat (a model that never
/// answers holds the chat forever), or the chat is unusable afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_turn_is_cancelled_and_the_chat_goes_on() {
    let model = HangsOnRequest(ReplayModel::new([
        "```rhai\nlet kept = 41;\nfinal_result(\"noted\")\n```",
        "```rhai\nfinal_result(kept + 1)\n```",
    ]));
    let agent = Agent::builder(
        Arc::new(model),
        Arc::new(RhaiRuntime::new(Limits::default())),
    )
    .build()
    .expect("builds");
    let mut chat = agent.chat().expect("a chat");
    chat.send("Keep 41.").await.expect("turn 1");
    let token = codeact::CancellationToken::new();
    chat.cancel_on(token.clone());
    let later = token.clone();
    tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        later.cancel();
    });
    let stuck = tokio::time::timeout(std::time::Duration::from_secs(5), chat.send("Now hang."))
        .await
        .expect("the cancel ended the turn")
        .expect("turn 2");
    assert_eq!(stuck.outcome, Outcome::Cancelled);
    chat.cancel_on(codeact::CancellationToken::new());
    let third = chat.send("Add one.").await.expect("turn 3");
    assert_eq!(third.outcome, Outcome::FinalResult { value: json!(42) });
}

/// If this fails, Ctrl-C in `codeact run --chat` ends the whole chat (or
/// nothing) instead of the turn under way.
#[test]
fn ctrl_c_in_a_chat_cancels_the_turn_and_the_chat_goes_on() {
    use std::io::Write;
    let scratch = tempfile::tempdir().expect("scratch");
    let replies = scratch.path().join("replies.json");
    std::fs::write(
        &replies,
        json!({"replies": [
            "```rhai\nlet n = 0;\nloop { n += 1; }\n```",
            "```rhai\nfinal_result(\"still here\")\n```"
        ]})
        .to_string(),
    )
    .expect("written");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_codeact"))
        .args([
            "run",
            "--chat",
            "--model",
            &format!("replay:{}", replies.display()),
            "--timeout-ms",
            "3000",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("starts");
    let mut stdin = child.stdin.take().expect("piped");
    stdin.write_all(b"Spin.\n").expect("written");
    std::thread::sleep(std::time::Duration::from_millis(700));
    let sent = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(sent.success());
    stdin.write_all(b"Are you there?\n").expect("written");
    drop(stdin);
    let out = child.wait_with_output().expect("finishes");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("cancelling this turn"), "{stderr}");
    assert!(
        stdout.contains(r#"{"type":"final_result","value":"still here"}"#),
        "{stdout}\n{stderr}"
    );
}
