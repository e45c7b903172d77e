//! Approvals inside a running script (issue 17): a marked call waits for the
//! approver; approved it runs, denied it throws a tool error the script catches
//! and goes on from; a policy's "ask" routes to the approver; with no approver the
//! call is denied; a cancelled run stops waiting; `codeact run --approve`.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use codeact::agent::ApprovalReason;
use codeact::model::ReplayModel;
use codeact::{
    Agent, ApprovalDecision, ApprovalRequest, Approver, CancellationToken, Event, Limits, Outcome,
    RhaiRuntime, Tool,
};
use serde_json::json;

/// A tools manifest in `dir` with one command tool, `add`, marked as needing
/// approval.
fn add_needing_approval(dir: &std::path::Path) -> std::path::PathBuf {
    let manifest = dir.join("tools.json");
    std::fs::write(
        &manifest,
        json!([{
            "name": "add",
            "description": "Adds a and b.",
            "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}},
            "command": ["python3", "-c", "import json,sys; a=json.load(sys.stdin); print(a['a']+a['b'])"],
            "approval": true
        }])
        .to_string(),
    )
    .expect("written");
    manifest
}

/// A replay file in `dir` holding one reply.
fn replies_file(dir: &std::path::Path, reply: &str) -> std::path::PathBuf {
    let replies = dir.join("replies.json");
    std::fs::write(&replies, json!({ "replies": [reply] }).to_string()).expect("written");
    replies
}

fn send_tool() -> Tool {
    Tool::from_fn("send", "Sends a message.", |args| {
        Ok(json!(format!(
            "sent to {}",
            args["to"].as_str().unwrap_or("?")
        )))
    })
    .with_parameters(json!({"type": "object", "properties": {"to": {"type": "string"}}}))
}

fn replay(reply: &str) -> Arc<ReplayModel> {
    Arc::new(ReplayModel::new([format!("```rhai\n{reply}\n```")]))
}

const TWO_SENDS: &str = "let sent = send(#{to: \"ada@example.com\"});\nlet refused = \"\";\ntry { send(#{to: \"eve@elsewhere.org\"}); } catch (e) { refused = e; }\nfinal_result(#{sent: sent, refused: refused})";

/// If this fails, an approver cannot tell one call from another, a denied call
/// ends the script instead of throwing what it can catch, or the decisions go
/// unrecorded.
#[tokio::test]
async fn an_approved_call_runs_and_a_denied_one_throws_a_catchable_error() {
    let asked: Arc<Mutex<Vec<ApprovalRequest>>> = Arc::default();
    let seen = asked.clone();
    let approver = Approver::new(move |request: ApprovalRequest| {
        seen.lock().expect("unpoisoned").push(request.clone());
        async move {
            // A person takes a moment: the script waits inside the call.
            tokio::time::sleep(Duration::from_millis(50)).await;
            if request.args["to"]
                .as_str()
                .is_some_and(|to| to.ends_with("@example.com"))
            {
                ApprovalDecision::approve().by("ops")
            } else {
                ApprovalDecision::deny("only example.com addresses").by("ops")
            }
        }
    });
    let events: Arc<Mutex<Vec<Event>>> = Arc::default();
    let recorded = events.clone();
    let agent = Agent::builder(
        replay(TWO_SENDS),
        Arc::new(RhaiRuntime::new(Limits::default())),
    )
    .tool(send_tool())
    .needs_approval("send")
    .on_approval(approver)
    .listener(Arc::new(move |_: &str, event: &Event| {
        recorded.lock().expect("unpoisoned").push(event.clone());
    }))
    .build()
    .expect("builds");
    let run = agent.run("Send both.").await.expect("runs");
    let Outcome::FinalResult { value } = run.outcome else {
        panic!("no result: {:?}", run.outcome);
    };
    assert_eq!(value["sent"], json!("sent to ada@example.com"));
    let refused = value["refused"].as_str().unwrap_or_default();
    assert!(
        refused.contains("denied by ops: only example.com addresses"),
        "{refused}"
    );
    let asked = asked.lock().expect("unpoisoned");
    assert_eq!(asked.len(), 2);
    assert_eq!(asked[0].step, 1);
    assert_eq!(asked[0].reason, ApprovalReason::Marked);
    assert!(
        asked[0]
            .script
            .contains("send(#{to: \"eve@elsewhere.org\"})")
    );
    let decisions: Vec<(bool, String)> = events
        .lock()
        .expect("unpoisoned")
        .iter()
        .filter_map(|event| match event {
            Event::ApprovalDecided {
                approved,
                decided_by,
                decided_at,
                ..
            } => {
                assert!(decided_at.ends_with('Z'), "{decided_at}");
                Some((*approved, decided_by.clone()))
            }
            _ => None,
        })
        .collect();
    assert_eq!(decisions, vec![(true, "ops".into()), (false, "ops".into())]);
}

/// If this fails, a policy's "ask" no longer reaches the approver (or its
/// answer is ignored).
#[tokio::test]
async fn a_policy_asking_routes_the_call_to_the_approver() {
    let policy = codeact::agent::RhaiPolicy::compile(
        "policy.rhai",
        "fn check_call(tool, args) { if args.to == \"ada@example.com\" { \"ask\" } else { \"only ada\" } }",
        Limits::default(),
    )
    .expect("compiles");
    let approver = Approver::new(|request: ApprovalRequest| async move {
        assert_eq!(request.reason, ApprovalReason::Policy);
        ApprovalDecision::approve()
    });
    let agent = Agent::builder(
        replay(TWO_SENDS),
        Arc::new(RhaiRuntime::new(Limits::default())),
    )
    .tool(send_tool())
    .policy(policy)
    .on_approval(approver)
    .build()
    .expect("builds");
    let run = agent.run("Send both.").await.expect("runs");
    let Outcome::FinalResult { value } = run.outcome else {
        panic!("no result: {:?}", run.outcome);
    };
    assert_eq!(value["sent"], json!("sent to ada@example.com"));
    assert!(
        value["refused"]
            .as_str()
            .unwrap_or_default()
            .contains("the host's policy refused this call of 'send': only ada"),
        "{value}"
    );
}

/// If this fails, a tool marked as needing approval runs when nobody can be
/// asked (the rule must fail closed).
#[tokio::test]
async fn without_an_approver_a_marked_call_is_denied() {
    let agent = Agent::builder(
        replay("let got = \"\";\ntry { got = send(#{to: \"ada@example.com\"}); } catch (e) { got = e; }\nfinal_result(got)"),
        Arc::new(RhaiRuntime::new(Limits::default())),
    )
    .tool(send_tool().needing_approval())
    .build()
    .expect("builds");
    let run = agent.run("Send.").await.expect("runs");
    let Outcome::FinalResult { value } = run.outcome else {
        panic!("no result: {:?}", run.outcome);
    };
    assert!(
        value
            .as_str()
            .unwrap_or_default()
            .contains("the call of 'send' was denied by no approver: this host has no one to ask"),
        "{value}"
    );
}

/// If this fails, cancelling a run whose script waits for an approval that never
/// comes leaves the run hanging.
#[tokio::test]
async fn a_run_cancelled_while_a_call_waits_for_approval_stops_at_once() {
    let agent = Agent::builder(
        replay(TWO_SENDS),
        Arc::new(RhaiRuntime::new(Limits::default())),
    )
    .tool(send_tool())
    .needs_approval("send")
    .on_approval(Approver::new(|_| std::future::pending()))
    .build()
    .expect("builds");
    let cancel = CancellationToken::new();
    let later = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        later.cancel();
    });
    let started = Instant::now();
    let run = agent
        .request("Send both.")
        .cancel_on(cancel)
        .run()
        .await
        .expect("runs");
    assert_eq!(run.outcome, Outcome::Cancelled);
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
}

/// If this fails, `codeact run` does not put marked calls to the operator's
/// choice: `--approve allow` must run them, `deny` refuse them, and `ask` without
/// a terminal refuse them, saying so.
#[test]
fn codeact_run_approves_denies_or_asks_as_told() {
    let scratch = tempfile::tempdir().expect("scratch");
    let manifest = add_needing_approval(scratch.path());
    let replies = replies_file(
        scratch.path(),
        "```rhai\nlet got = \"\";\ntry { got = add(2, 3); } catch (e) { got = e; }\nfinal_result(got)\n```",
    );
    let model = format!("replay:{}", replies.display());
    let run = |mode: &str| {
        let out = std::process::Command::new("setsid")
            .arg(env!("CARGO_BIN_EXE_codeact"))
            .args([
                "run",
                "--model",
                &model,
                "--tools",
                &manifest.to_string_lossy(),
                "--approve",
                mode,
                "Add.",
            ])
            .stdin(std::process::Stdio::null())
            .output()
            .expect("codeact runs");
        (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (allowed, stderr) = run("allow");
    assert!(allowed.contains(r#""value":5"#), "{allowed} {stderr}");
    assert!(
        stderr.contains("approved a call of add (policy: allow)"),
        "{stderr}"
    );
    let (denied, _) = run("deny");
    assert!(denied.contains("denied by policy: deny"), "{denied}");
    let (asked, _) = run("ask");
    assert!(asked.contains("no terminal to ask"), "{asked}");
}

const EACH_CAUGHT: &str = "let out = [];\nfor to in [\"ada\", \"bob\"] { try { out.push(send(#{to: to})); } catch (e) { out.push(`refused: ${e}`); } }\nfinal_result(out)";

/// `send` that counts who it really sent to.
fn counted_send(sent: &Arc<Mutex<Vec<String>>>) -> Tool {
    let sent = sent.clone();
    Tool::from_fn("send", "Sends a message.", move |args| {
        let to = args["to"].as_str().unwrap_or("?").to_string();
        sent.lock().expect("unpoisoned").push(to.clone());
        Ok(json!(format!("sent to {to}")))
    })
    .with_parameters(json!({"type": "object", "properties": {"to": {"type": "string"}}}))
}

/// Runs `EACH_CAUGHT` with every `send` deferred, into a transcript at `path`.
async fn deferred_run(path: &std::path::Path, sent: &Arc<Mutex<Vec<String>>>) -> Outcome {
    let transcript = codeact::Transcript::create(path).expect("a transcript");
    let agent = Agent::builder(
        replay(EACH_CAUGHT),
        Arc::new(RhaiRuntime::new(Limits::default())),
    )
    .tool(counted_send(sent))
    .needs_approval("send")
    .on_approval(Approver::defer_all())
    .listener(transcript.listener())
    .build()
    .expect("builds");
    agent.run("Send to both.").await.expect("runs").outcome
}

async fn resumed(
    path: &std::path::Path,
    sent: &Arc<Mutex<Vec<String>>>,
    grant_args: serde_json::Value,
    approver: Approver,
) -> serde_json::Value {
    let events = codeact::agent::read_transcript(path).expect("reads");
    let point = codeact::agent::ResumePoint::from_events(&events).expect("resumable");
    let pending = point.pending_approval.clone().expect("a pending approval");
    assert_eq!(pending.id, "s1c1");
    let agent = Agent::builder(
        Arc::new(ReplayModel::new(Vec::<String>::new())),
        Arc::new(RhaiRuntime::new(Limits::default())),
    )
    .tool(counted_send(sent))
    .needs_approval("send")
    .on_approval(approver)
    .build()
    .expect("builds");
    let run = agent
        .resume_request(&point)
        .grant(
            pending.tool,
            grant_args,
            ApprovalDecision::approve().by("ops, later"),
        )
        .run()
        .await
        .expect("resumes");
    let Outcome::FinalResult { value } = run.outcome else {
        panic!("no result: {:?}", run.outcome);
    };
    value
}

/// If this fails, an approval that takes hours cannot stop a run and continue
/// it later: the deferred call ran anyway, the script went on past it, the
/// transcript lost it, or a grant applied to other arguments.
#[tokio::test]
async fn a_deferred_approval_stops_the_run_and_a_grant_for_those_exact_arguments_resumes_it() {
    let scratch = tempfile::tempdir().expect("scratch");
    let first = scratch.path().join("run.jsonl");
    let sent: Arc<Mutex<Vec<String>>> = Arc::default();
    let outcome = deferred_run(&first, &sent).await;
    assert_eq!(
        outcome,
        Outcome::AwaitingApproval {
            id: "s1c1".into(),
            tool: "send".into(),
            args: json!({"to": "ada"}),
        }
    );
    assert!(
        sent.lock().expect("unpoisoned").is_empty(),
        "nothing was sent"
    );

    let second = scratch.path().join("copy.jsonl");
    std::fs::copy(&first, &second).expect("copied");
    let value = resumed(&first, &sent, json!({"to": "ada"}), Approver::allow_all()).await;
    assert_eq!(value, json!(["sent to ada", "sent to bob"]));
    assert_eq!(*sent.lock().expect("unpoisoned"), vec!["ada", "bob"]);

    // A grant for other arguments does not cover the call: it is asked again.
    sent.lock().expect("unpoisoned").clear();
    let value = resumed(
        &second,
        &sent,
        json!({"to": "mallory"}),
        Approver::deny_all("not now"),
    )
    .await;
    let shown = value.to_string();
    assert!(shown.contains("denied by policy: deny: not now"), "{shown}");
    assert!(sent.lock().expect("unpoisoned").is_empty());
}

/// If this fails, `codeact run --approve defer` does not stop with its own exit
/// status, or `--resume … --approve-call` cannot continue the run (or accepts an
/// id the transcript does not wait on).
#[test]
fn codeact_run_defers_and_resumes_with_approve_call() {
    let scratch = tempfile::tempdir().expect("scratch");
    let manifest = add_needing_approval(scratch.path());
    let replies = replies_file(scratch.path(), "```rhai\nfinal_result(add(2, 3))\n```");
    let transcript = scratch.path().join("run.jsonl");
    let codeact = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_codeact"))
            .args(args)
            .stdin(std::process::Stdio::null())
            .output()
            .expect("codeact runs");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let manifest = manifest.to_string_lossy();
    let transcript = transcript.to_string_lossy();
    let (code, _, stderr) = codeact(&[
        "run",
        "--model",
        &format!("replay:{}", replies.display()),
        "--tools",
        &manifest,
        "--approve",
        "defer",
        "--transcript",
        &transcript,
        "Add.",
    ]);
    assert_eq!(code, Some(4), "{stderr}");
    assert!(stderr.contains("--approve-call s1c1"), "{stderr}");
    let (code, _, stderr) = codeact(&[
        "run",
        "--resume",
        &transcript,
        "--tools",
        &manifest,
        "--approve-call",
        "s9c9",
    ]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("waits for approval of call s1c1 (add), not s9c9"),
        "{stderr}"
    );
    let (code, stdout, stderr) = codeact(&[
        "run",
        "--resume",
        &transcript,
        "--tools",
        &manifest,
        "--approve-call",
        "s1c1",
    ]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stdout.contains(r#"{"type":"final_result","value":5}"#),
        "{stdout}"
    );
    assert!(
        stderr.contains("approved a call of add (--approve-call s1c1)"),
        "{stderr}"
    );
}

/// If this fails, a resumed run that waited for approval goes on when its script
/// no longer makes the calls it made before that approval (a changed transcript,
/// or a script that is not deterministic): the grant would apply to a different
/// situation than the one approved.
#[tokio::test]
async fn a_resumed_script_taking_another_path_before_the_awaited_call_is_refused() {
    let scratch = tempfile::tempdir().expect("scratch");
    let path = scratch.path().join("run.jsonl");
    let lookups: Arc<Mutex<Vec<String>>> = Arc::default();
    let lookup = |seen: &Arc<Mutex<Vec<String>>>| {
        let seen = seen.clone();
        Tool::from_fn("lookup", "Finds a name.", move |args| {
            seen.lock().expect("unpoisoned").push(args.to_string());
            Ok(json!("ada"))
        })
    };
    let script = "let out = [];\ntry { let who = lookup(#{id: 1}); out.push(who); out.push(send(#{to: who})); } catch (e) { out.push(`refused: ${e}`); }\nfinal_result(out)";
    let sent: Arc<Mutex<Vec<String>>> = Arc::default();
    let transcript = codeact::Transcript::create(&path).expect("a transcript");
    let agent = Agent::builder(
        replay(script),
        Arc::new(RhaiRuntime::new(Limits::default())),
    )
    .tools([lookup(&lookups), counted_send(&sent)])
    .needs_approval("send")
    .on_approval(Approver::defer_all())
    .listener(transcript.listener())
    .build()
    .expect("builds");
    let outcome = agent.run("Send.").await.expect("runs").outcome;
    assert!(
        matches!(outcome, Outcome::AwaitingApproval { .. }),
        "{outcome:?}"
    );
    drop(transcript);
    // The record of the call before the awaited one now says something else.
    let text = std::fs::read_to_string(&path).expect("reads");
    let tampered = text.replace(r#""args":{"id":1}"#, r#""args":{"id":2}"#);
    assert_ne!(text, tampered, "the lookup was recorded");
    std::fs::write(&path, tampered).expect("written");
    lookups.lock().expect("unpoisoned").clear();

    let events = codeact::agent::read_transcript(&path).expect("reads");
    let point = codeact::agent::ResumePoint::from_events(&events).expect("resumable");
    let pending = point.pending_approval.clone().expect("pending");
    let agent = Agent::builder(
        Arc::new(ReplayModel::new(Vec::<String>::new())),
        Arc::new(RhaiRuntime::new(Limits::default())),
    )
    .tools([lookup(&lookups), counted_send(&sent)])
    .needs_approval("send")
    .build()
    .expect("builds");
    let run = agent
        .resume_request(&point)
        .grant(pending.tool, pending.args, ApprovalDecision::approve())
        .run()
        .await
        .expect("resumes");
    let Outcome::FinalResult { value } = run.outcome else {
        panic!("no result: {:?}", run.outcome);
    };
    assert!(value.to_string().contains("took another path"), "{value}");
    assert!(
        lookups.lock().expect("unpoisoned").is_empty(),
        "no real lookup"
    );
    assert!(sent.lock().expect("unpoisoned").is_empty(), "nothing sent");
}

/// If this fails, `--approve ask` at a real terminal (a pseudo-terminal made by
/// util-linux's `script`) no longer asks there, or ignores the answer.
#[test]
fn approve_ask_asks_at_the_terminal_and_takes_the_answer_as_the_reason() {
    if std::process::Command::new("script")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("SKIPPED: util-linux `script` is not installed, so no terminal can be made");
        return;
    }
    let scratch = tempfile::tempdir().expect("scratch");
    let manifest = add_needing_approval(scratch.path());
    let replies = replies_file(
        scratch.path(),
        "```rhai\nlet got = \"\";\ntry { got = add(2, 3); } catch (e) { got = e; }\nfinal_result(got)\n```",
    );
    let command = format!(
        "{} run --model replay:{} --tools {} --approve ask Add.",
        env!("CARGO_BIN_EXE_codeact"),
        replies.display(),
        manifest.display()
    );
    let mut child = std::process::Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("script starts");
    use std::io::Write;
    child
        .stdin
        .take()
        .expect("piped")
        .write_all(b"over budget\n")
        .expect("answered");
    let out = child.wait_with_output().expect("finishes");
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        shown.contains("approve? [y/N, or a reason to deny]"),
        "{shown}"
    );
    assert!(
        shown.contains("the call of 'add' was denied by terminal: over budget"),
        "{shown}"
    );
}

/// A tools manifest in `dir` with one command tool, `pay`, marked as needing
/// approval, that leaves `paid` in `dir` when it runs; and that file's path.
pub(crate) fn pay_needing_approval(
    dir: &std::path::Path,
) -> (std::path::PathBuf, std::path::PathBuf) {
    let manifest = dir.join("pay.json");
    let paid = dir.join("paid");
    std::fs::write(
        &manifest,
        json!([{
            "name": "pay",
            "description": "Pays an amount.",
            "parameters": {"type": "object", "properties": {"amount": {"type": "integer"}}},
            "command": ["python3", "-c", "import sys; open(sys.argv[1], 'w').write('paid'); print(1)", paid.to_str().expect("utf-8")],
            "approval": true
        }])
        .to_string(),
    )
    .expect("written");
    (manifest, paid)
}

/// A Rhai script that calls `pay` and answers with what happened.
pub(crate) const PAY_AND_SAY: &str = r#"let said = "paid";
try { pay(#{amount: 1000}); } catch (e) { said = `${e}`; }
final_result(said)"#;

#[test]
fn codeact_exec_denies_a_tool_that_needs_approval_unless_the_operator_allows_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (manifest, paid) = pay_needing_approval(dir.path());
    let manifest = manifest.to_str().expect("utf-8");
    let out = crate::cli::codeact(
        &["exec", "--tools", manifest, "-"],
        Some(PAY_AND_SAY.as_bytes()),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("approval was denied"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!paid.exists(), "the tool ran without approval");

    let out = crate::cli::codeact(
        &["exec", "--tools", manifest, "--approve", "deny", "-"],
        Some(PAY_AND_SAY.as_bytes()),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("approval was denied"), "{stdout}");
    assert!(!paid.exists(), "the tool ran although denied");

    let out = crate::cli::codeact(
        &["exec", "--tools", manifest, "--approve", "allow", "-"],
        Some(PAY_AND_SAY.as_bytes()),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains(r#""value":"paid""#), "{stdout}");
    assert!(paid.exists(), "the approved call did not run");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codeact_mcp_denies_a_tool_that_needs_approval_to_every_client() {
    use codeact::tools::ToolDispatch;
    use codeact::{McpServer, ToolBox};

    let dir = tempfile::tempdir().expect("temp dir");
    let (manifest, paid) = pay_needing_approval(dir.path());
    let server = McpServer::stdio(
        "codeact",
        env!("CARGO_BIN_EXE_codeact"),
        [
            "mcp",
            "--runtimes",
            "rhai",
            "--tools",
            manifest.to_str().expect("utf-8"),
        ],
    );
    let tools = server.tools().await.expect("the server lists its tools");
    let toolbox = Arc::new(ToolBox::new(tools).expect("valid names"));
    let ran = tokio::task::spawn_blocking(move || {
        toolbox.call(
            "codeact_run_script",
            json!({"runtime": "rhai", "code": PAY_AND_SAY}),
        )
    })
    .await
    .expect("the call's thread finishes")
    .expect("the script ran");
    let said = ran["output"]["value"].as_str().unwrap_or_default();
    assert!(said.contains("approval was denied"), "{ran}");
    assert!(
        !paid.exists(),
        "an MCP client's script ran the tool unapproved"
    );
}

#[test]
fn a_toolbox_used_without_an_agent_asks_its_approver_and_denies_without_one() {
    use codeact::ToolBox;
    use codeact::tools::ToolDispatch;

    let calls = Arc::new(Mutex::new(0));
    let counted = calls.clone();
    let pay = Tool::from_fn("pay", "Pays.", move |_| {
        *counted.lock().expect("not poisoned") += 1;
        Ok(json!("paid"))
    })
    .needing_approval();
    let unattended = ToolBox::new([pay.clone()]).expect("valid");
    assert!(!unattended.is_immediate("pay"));
    let refused = unattended.call("pay", json!({})).expect_err("denied");
    assert!(refused.message.contains("needs approval"), "{refused:?}");

    let asked = Arc::new(Mutex::new(Vec::new()));
    let seen = asked.clone();
    let approving = ToolBox::new([pay.clone()])
        .expect("valid")
        .approved_by(Approver::new(move |request: ApprovalRequest| {
            seen.lock()
                .expect("not poisoned")
                .push(request.args.clone());
            async { ApprovalDecision::approve() }
        }));
    assert_eq!(
        approving.call("pay", json!({"amount": 5})),
        Ok(json!("paid"))
    );
    assert_eq!(*asked.lock().expect("not poisoned"), [json!({"amount": 5})]);

    let deferring = ToolBox::new([pay])
        .expect("valid")
        .approved_by(Approver::defer_all());
    let refused = deferring
        .call("pay", json!({}))
        .expect_err("no deferral here");
    assert!(
        refused.message.contains("cannot be deferred"),
        "{refused:?}"
    );
    assert_eq!(
        *calls.lock().expect("not poisoned"),
        1,
        "only the approved call ran"
    );
}
