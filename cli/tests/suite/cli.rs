//! `codeact exec` as a user runs it: the real binary, real files, real tool commands.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

pub(crate) fn codeact(args: &[&str], stdin: Option<&[u8]>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_codeact"))
        .args(args)
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("codeact starts");
    if let Some(input) = stdin {
        let written = child.stdin.take().expect("stdin is piped").write_all(input);
        // A command that fails before reading its input (a usage error) closes
        // the pipe first; its exit status and stderr are what the test checks.
        if let Err(e) = written
            && e.kind() != std::io::ErrorKind::BrokenPipe
        {
            panic!("stdin refused the script: {e}");
        }
    }
    drop(child.stdin.take());
    child.wait_with_output().expect("codeact finishes")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn script_file(name: &str, text: &[u8]) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let path = dir.join(name);
    std::fs::write(&path, text).expect("temp script is written");
    path
}

#[test]
fn exec_prints_one_wire_line_on_stdout_and_the_scripts_prints_on_stderr() {
    let out = codeact(
        &[
            "exec",
            "--runtime",
            "rhai",
            "--tool",
            "add=python3 fixtures/tools/add.py",
            "examples/hello.rhai",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    assert_eq!(
        stdout(&out),
        "{\"type\":\"final_result\",\"value\":{\"first_plus_last\":49,\"primes\":[2,3,5,7,11,13,17,19,23,29,31,37,41,43,47]}}\n"
    );
    assert_eq!(stderr(&out), "found 15 primes below 50\n");
}

#[test]
fn an_error_output_still_exits_zero() {
    let out = codeact(&["exec", "-"], Some(b"throw \"boom\""));
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        stdout(&out),
        "{\"type\":\"error\",\"message\":\"Runtime error: boom (line 1, position 1)\"}\n"
    );
}

#[test]
fn limit_flags_reach_the_engine() {
    let out = codeact(
        &[
            "exec",
            "--timeout-ms",
            "150",
            "--max-operations",
            "1000000000000",
            "-",
        ],
        Some(b"let x = 0; loop { x += 1; }"),
    );
    assert!(
        stdout(&out).contains("time limit of 150 ms"),
        "{}",
        stdout(&out)
    );
    let out = codeact(
        &["exec", "--max-memory-mb", "1", "-"],
        Some(b"let s = \"x\"; loop { s += s; }"),
    );
    assert!(
        stdout(&out).contains("memory limit of 1 MiB"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn a_failing_tool_command_is_an_error_carrying_its_stderr() {
    let out = codeact(
        &["exec", "--tool", "add=python3 fixtures/tools/add.py", "-"],
        Some(br#"call_tool("add", #{a: "one", b: 2})"#),
    );
    assert_eq!(out.status.code(), Some(0));
    assert!(
        stdout(&out).contains("tool 'add' failed: add needs numbers a and b"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn a_hanging_tool_command_is_killed_at_its_timeout() {
    let started = std::time::Instant::now();
    let out = codeact(
        &[
            "exec",
            "--tool",
            "wait=sleep 30",
            "--tool-timeout-ms",
            "300",
            "-",
        ],
        Some(br#"call_tool("wait")"#),
    );
    assert!(
        stdout(&out).contains("'sleep' did not finish within 300 ms and was killed"),
        "{}",
        stdout(&out)
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
}

#[test]
fn tool_arguments_are_never_interpreted_by_a_shell() {
    let marker = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("shell-was-here");
    let _ = std::fs::remove_file(&marker);
    let tool = "echo=python3 -c 'import sys; print(sys.stdin.read())'";
    let script = format!(
        r#"final_result(call_tool("echo", #{{text: "$(touch {})"}}))"#,
        marker.display()
    );
    let out = codeact(&["exec", "--tool", tool, "-"], Some(script.as_bytes()));
    assert!(stdout(&out).contains("$(touch"), "{}", stdout(&out));
    assert!(!marker.exists());
}

#[test]
fn usage_errors_exit_two_with_one_line_naming_the_problem() {
    let cases: [(&[&str], &str); 8] = [
        (
            &["exec", "--runtime", "cobol", "x.rhai"],
            "codeact: unknown runtime 'cobol'; available: rhai, js, js-in-process, wasm:js, wasm:js-stdio, wasm:micropython, wasm:python, wasm:python-sci, wasm:rhai, wasm:boa, or wasm:PATH for a WASI guest file\n",
        ),
        (
            &["exec", "/no/such/file.rhai"],
            "codeact: cannot read '/no/such/file.rhai': No such file or directory (os error 2)\n",
        ),
        (
            &["exec", "--frobnicate", "x.rhai"],
            "codeact: unexpected argument '--frobnicate' found\n",
        ),
        (
            &["exec", "--tool", "add", "-"],
            "codeact: --tool 'add' must be NAME=COMMAND\n",
        ),
        (
            &["exec", "--tool", "my-tool=true", "-"],
            "codeact: --tool: tool name 'my-tool' must be letters, digits and '_', not starting with a digit\n",
        ),
        (
            &["exec", "--allow-private-network", "127.0.0.1", "-"],
            "codeact: --allow-private-network and --fetch-header need --allow-host\n",
        ),
        (
            &["exec", "--allow-host", "*", "-"],
            "codeact: --allow-host: '*' is not a host name or a pattern such as *.example.com\n",
        ),
        (
            &[
                "exec",
                "--allow-host",
                "api.example.com",
                "--fetch-header",
                "api.example.com: Authorization: Bearer $CODEACT_CLI_TEST_UNSET_TOKEN",
                "-",
            ],
            "codeact: --fetch-header: the environment variable CODEACT_CLI_TEST_UNSET_TOKEN is not set\n",
        ),
    ];
    for (args, expected) in cases {
        let out = codeact(args, Some(b""));
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert_eq!(stderr(&out), expected, "{args:?}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
}

#[test]
fn a_script_that_is_not_utf8_is_a_usage_error() {
    let path = script_file("not-utf8.rhai", b"final_result(\"\xff\xfe\")");
    let out = codeact(&["exec", path.to_str().expect("utf-8 temp path")], None);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("is not UTF-8 text (invalid byte at offset 14)"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_print_flood_reaches_stderr_truncated_with_a_marker() {
    let out = codeact(&["exec", "-"], Some(b"for i in 0..200000 { print(\"0123456789012345678901234567890123456789\"); } observation(1)"));
    assert_eq!(stdout(&out), "{\"type\":\"observation\",\"value\":1}\n");
    let err = stderr(&out);
    assert!(err.len() < 70_000, "{} bytes on stderr", err.len());
    assert!(
        err.ends_with("more bytes dropped past the 65536-byte limit]\n"),
        "{}",
        &err[err.len() - 100..]
    );
}

fn replay_file(name: &str, replies: &[&str]) -> PathBuf {
    let body = serde_json::json!({ "replies": replies }).to_string();
    script_file(name, body.as_bytes())
}

/// If this fails, `codeact run` cannot bound a run's tool calls, or reports the
/// spent budget as success.
#[test]
fn a_run_past_its_tool_call_budget_exits_three_and_says_so() {
    let replies = replay_file(
        "replies-tool-budget.json",
        &[
            "```rhai\nlet x = add(#{a: 1, b: 2});\nobservation(x)\n```",
            "```rhai\nlet y = add(#{a: 3, b: 4});\nobservation(y)\n```",
            "```rhai\nfinal_result(x)\n```",
        ],
    );
    let model = format!("replay:{}", replies.display());
    let out = codeact(
        &[
            "run",
            "--model",
            &model,
            "--tools",
            "fixtures/tools/demo.json",
            "--max-tool-calls",
            "1",
            "Add.",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(3), "stderr: {}", stderr(&out));
    assert!(stdout(&out).is_empty());
    assert!(
        stderr(&out)
            .contains("stopped: the tool-call budget ran out after 1 call(s) after 2 step(s)"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn run_with_a_replay_model_prints_the_final_line_and_writes_a_replayable_transcript() {
    let replies = replay_file(
        "replies-ok.json",
        &[
            "Look first.\n```rhai\nlet xs = [1, 2, 3];\nprint(\"three items\");\nobservation(xs.len())\n```",
            "```rhai\nthrow \"oops\";\n```",
            "```rhai\nfinal_result(xs.len() * 2)\n```",
        ],
    );
    let transcript = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("run-ok.jsonl");
    let model = format!("replay:{}", replies.display());
    let out = codeact(
        &[
            "run",
            "--model",
            &model,
            "--transcript",
            transcript.to_str().expect("utf-8"),
            "Double the count.",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    assert_eq!(stdout(&out), "{\"type\":\"final_result\",\"value\":6}\n");
    let err = stderr(&out);
    assert!(
        err.contains("│ three items") && err.contains("observation: 3"),
        "{err}"
    );
    assert!(err.contains("error: Runtime error: oops"), "{err}");
    assert!(err.contains("final result after 3 step(s)"), "{err}");

    let events = codeact::agent::read_transcript(&transcript).expect("transcript reads");
    assert!(matches!(
        events.first(),
        Some(codeact::Event::RunStarted { .. })
    ));
    assert!(matches!(
        events.last(),
        Some(codeact::Event::Finished { steps: 3, .. })
    ));

    let again = format!("replay:{}", transcript.display());
    let out = codeact(&["run", "--model", &again, "Double the count."], None);
    assert_eq!(
        stdout(&out),
        "{\"type\":\"final_result\",\"value\":6}\n",
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_run_whose_replay_runs_out_exits_one_naming_how_many_replies_there_were() {
    let replies = replay_file("replies-short.json", &["```rhai\nobservation(1)\n```"]);
    let out = codeact(
        &[
            "run",
            "--model",
            &format!("replay:{}", replies.display()),
            "Go.",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    assert!(
        stderr(&out).contains(
            "codeact: the replay model ran out of replies: it had 1 and was asked for reply 2"
        ),
        "{}",
        stderr(&out)
    );
}

/// If this fails, a run that keeps failing is reported as a success or a host
/// failure instead of a spent budget.
#[test]
fn a_run_out_of_its_error_budget_exits_three() {
    let replies = replay_file("replies-errors.json", &["```rhai\nthrow \"no\";\n```"; 3]);
    let out = codeact(
        &[
            "run",
            "--model",
            &format!("replay:{}", replies.display()),
            "--max-errors",
            "2",
            "Go.",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(out.stdout.is_empty());
    assert!(
        stderr(&out).contains("stopped: 2 errors in a row"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_run_that_hits_its_step_limit_exits_three() {
    let replies = replay_file("replies-loop.json", &["```rhai\nobservation(1)\n```"; 3]);
    let out = codeact(
        &[
            "run",
            "--model",
            &format!("replay:{}", replies.display()),
            "--max-steps",
            "2",
            "Go.",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(3));
    assert!(out.stdout.is_empty());
    assert!(
        stderr(&out).contains("the step limit of 2 ran out"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_run_ends_on_a_transfer_to_a_declared_target() {
    let replies = replay_file(
        "replies-transfer.json",
        &[
            "```rhai\ntransfer_to_agent(\"sales\")\n```",
            "```rhai\ntransfer_to_agent(\"billing\")\n```",
        ],
    );
    let out = codeact(
        &[
            "run",
            "--model",
            &format!("replay:{}", replies.display()),
            "--transfer-target",
            "billing",
            "Go.",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        "{\"type\":\"transfer_to_agent\",\"agent_name\":\"billing\"}\n"
    );
    assert!(
        stderr(&out).contains("there is no agent 'sales' to transfer to; valid names: billing")
    );
}

#[test]
fn run_usage_errors_exit_two() {
    let out = codeact(&["run", "--model", "gpt-4o", "Go."], None);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stderr(&out),
        "codeact: --model 'gpt-4o' must be openai:NAME, ollama:NAME, anthropic:NAME or replay:FILE\n"
    );
    let out = codeact(&["run", "--model", "replay:/no/such.json", "Go."], None);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).starts_with("codeact: replay is not configured: cannot read '/no/such.json'"),
        "{}",
        stderr(&out)
    );
    let manifest = script_file(
        "bad-manifest.json",
        br#"[{"name": "x", "description": "d"}]"#,
    );
    let replies = replay_file("replies-unused.json", &["```rhai\nfinal_result(1)\n```"]);
    let model = format!("replay:{}", replies.display());
    let out = codeact(
        &[
            "run",
            "--model",
            &model,
            "--tools",
            manifest.to_str().expect("utf-8"),
            "Go.",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("entry 0 ('x')") && stderr(&out).contains("command"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn run_with_a_team_file_hands_over_and_names_the_agent_that_answered() {
    let transcript = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("team.jsonl");
    let out = codeact(
        &[
            "run",
            "--agents",
            "fixtures/teams/refund.toml",
            "--transcript",
            transcript.to_str().expect("utf-8"),
            "Refund everything ada bought.",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        "{\"type\":\"final_result\",\"value\":{\"customer\":\"ada\",\"refund\":49.75}}\n"
    );
    let err = stderr(&out);
    assert!(
        err.contains("'triage' hands over to 'billing', carrying 4 message(s)"),
        "{err}"
    );
    assert!(
        err.contains("the result comes from agent 'billing' after 1 handover(s)"),
        "{err}"
    );
    let lines = std::fs::read_to_string(&transcript).expect("transcript written");
    assert!(
        lines
            .lines()
            .any(|l| l.contains("\"event\":\"handover\"") && l.contains("\"agent\":\"triage\""))
    );
    assert!(
        lines
            .lines()
            .any(|l| l.contains("\"event\":\"finished\"") && l.contains("\"agent\":\"billing\""))
    );
}

#[test]
fn a_team_file_naming_an_undeclared_target_is_a_usage_error() {
    replay_file("team-a.json", &["```rhai\nfinal_result(1)\n```"]);
    let file = script_file(
        "bad-team.toml",
        b"[[agent]]\nname = \"a\"\nmodel = \"replay:team-a.json\"\ntargets = [\"ghost\"]\n",
    );
    let out = codeact(
        &["run", "--agents", file.to_str().expect("utf-8"), "Go."],
        None,
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("agent 'a' names target 'ghost', which is not declared"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn exec_runs_javascript_in_a_worker_and_keeps_the_host_alive_through_a_memory_bomb() {
    let out = codeact(
        &[
            "exec",
            "--runtime",
            "js",
            "--tool",
            "add=python3 fixtures/tools/add.py",
            "-",
        ],
        Some(b"console.log('adding', {a: 40});\nfinal_result(tools.add({a: 40, b: 2}))"),
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "{\"type\":\"final_result\",\"value\":42}\n");
    assert_eq!(stderr(&out), "adding {\"a\":40}\n");
    let out = codeact(
        &["exec", "--runtime", "js", "-"],
        Some(b"let s = 'x'; while (true) s += s;"),
    );
    assert_eq!(out.status.code(), Some(0));
    assert!(
        stdout(&out).contains("exceeded the memory limit of 64 MiB"),
        "{}",
        stdout(&out)
    );
}

// --- codeact validate, and output specs on codeact run ------------------------

const HAS_TOTAL: &str = "fixtures/validators/has_total.rhai";

#[test]
fn validate_prints_valid_and_exits_zero() {
    let out = codeact(
        &["validate", "--validator", HAS_TOTAL],
        Some(b"{\"total\": 3}\n"),
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "{\"verdict\":\"valid\"}\n");
}

#[test]
fn validate_prints_the_validators_reason_and_exits_one_when_invalid() {
    let out = codeact(
        &["validate", "--validator", HAS_TOTAL],
        Some(b"{\"total\": -1}"),
    );
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stdout(&out),
        "{\"reason\":\"total must not be negative, got -1\",\"verdict\":\"invalid\"}\n"
    );
}

#[test]
fn validate_reports_a_broken_validator_as_unusable_and_exits_one() {
    let out = codeact(
        &["validate", "--validator", "fixtures/validators/throws.rhai"],
        Some(b"x"),
    );
    assert_eq!(out.status.code(), Some(1));
    let line: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("one JSON line");
    assert_eq!(line["verdict"], "unusable");
    assert!(
        line["reason"]
            .as_str()
            .is_some_and(|r| r.contains("the validator broke on purpose")),
        "{line}"
    );
}

#[test]
fn validate_reads_the_input_file_and_checks_the_schema_first() {
    let input = script_file("validate-input.json", b"{\"total\": \"3\"}");
    let out = codeact(
        &[
            "validate",
            "--validator",
            HAS_TOTAL,
            "--schema",
            "fixtures/validators/total.schema.json",
            "--input",
            input.to_str().expect("utf-8"),
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(1));
    let line: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("one JSON line");
    assert_eq!(line["verdict"], "invalid");
    assert!(
        line["reason"]
            .as_str()
            .is_some_and(|r| r.contains("at /total")),
        "{line}"
    );
}

#[test]
fn validate_with_format_json_refuses_content_that_does_not_parse() {
    let out = codeact(
        &["validate", "--validator", HAS_TOTAL, "--format", "json"],
        Some(b"total: 3"),
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(stdout(&out).contains("does not parse"), "{}", stdout(&out));
}

#[test]
fn validate_exits_two_naming_the_file_when_the_validator_or_schema_cannot_load() {
    let bad_schema = script_file("bad.schema.json", b"{\"type\": 5}");
    let not_json = script_file("not-json.schema.json", b"{type");
    for (args, expected) in [
        (
            vec!["--validator", "fixtures/validators/syntax_error.rhai"],
            "validator 'fixtures/validators/syntax_error.rhai': Syntax error",
        ),
        (
            vec!["--validator", "fixtures/validators/no_validate.rhai"],
            "defines no `fn validate(content)`",
        ),
        (
            vec!["--validator", "fixtures/validators/wrong_arity.rhai"],
            "`validate` takes 2 parameter(s)",
        ),
        (
            vec!["--validator", "fixtures/validators/missing.rhai"],
            "validator 'fixtures/validators/missing.rhai': cannot read it",
        ),
        (
            vec!["--schema", bad_schema.to_str().expect("utf-8")],
            "bad.schema.json': not a valid JSON Schema",
        ),
        (
            vec!["--schema", not_json.to_str().expect("utf-8")],
            "not-json.schema.json': not JSON",
        ),
    ] {
        let mut all = vec!["validate"];
        all.extend(args);
        let out = codeact(&all, Some(b"{}"));
        assert_eq!(out.status.code(), Some(2), "{all:?}: {}", stderr(&out));
        assert!(out.stdout.is_empty());
        assert!(stderr(&out).contains(expected), "{all:?}: {}", stderr(&out));
    }
}

#[test]
fn run_with_a_validator_refuses_then_accepts_the_fixed_result() {
    let replies = replay_file(
        "replies-validated.json",
        &[
            "```rhai\nfinal_result(#{total: -1})\n```",
            "```rhai\nfinal_result(#{total: 2})\n```",
        ],
    );
    let out = codeact(
        &[
            "run",
            "--model",
            &format!("replay:{}", replies.display()),
            "--validator",
            HAS_TOTAL,
            "--format",
            "json",
            "Count.",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        "{\"type\":\"final_result\",\"value\":{\"total\":2}}\n"
    );
    assert!(
        stderr(&out).contains("final result refused (1): total must not be negative, got -1"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_run_whose_results_keep_failing_the_schema_exits_three() {
    let replies = replay_file(
        "replies-refused.json",
        &["```rhai\nfinal_result(#{sum: 1})\n```"; 2],
    );
    let out = codeact(
        &[
            "run",
            "--model",
            &format!("replay:{}", replies.display()),
            "--schema",
            "fixtures/validators/total.schema.json",
            "--max-refusals",
            "2",
            "Count.",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(out.stdout.is_empty());
    assert!(
        stderr(&out).contains("stopped: 2 final results refused"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_run_with_an_unloadable_validator_is_a_usage_error_before_any_model_call() {
    let out = codeact(
        &[
            "run",
            "--model",
            "replay:/nonexistent/replies.json",
            "--validator",
            "fixtures/validators/no_validate.rhai",
            "Go.",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("no_validate.rhai': defines no `fn validate(content)`"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_run_with_a_broken_validator_in_accept_mode_is_flagged_on_stderr() {
    let replies = replay_file(
        "replies-accepted.json",
        &["```rhai\nfinal_result(\"done\")\n```"],
    );
    let out = codeact(
        &[
            "run",
            "--model",
            &format!("replay:{}", replies.display()),
            "--validator",
            "fixtures/validators/throws.rhai",
            "--on-validator-error",
            "accept",
            "Go.",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out)
            .contains("warning: the validator is broken, so the result was accepted unchecked"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_team_file_declares_output_specs_per_agent_and_for_the_stage() {
    let replies = replay_file(
        "replies-team-output.json",
        &[
            "```rhai\nfinal_result(#{total: -5})\n```",
            "```rhai\nfinal_result(#{total: 5})\n```",
        ],
    );
    let validator = std::fs::canonicalize(
        std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/..")).join(HAS_TOTAL),
    )
    .expect("the fixture exists");
    let team = format!(
        "[output]\ninstructions = \"One JSON object.\"\n\n[[agent]]\nname = \"counter\"\nmodel = \"replay:{}\"\n\n[agent.output]\nformat = \"json\"\nschema = {{ type = \"object\" }}\nvalidator = \"{}\"\n",
        replies.display(),
        validator.display()
    );
    let file = script_file("team-output.toml", team.as_bytes());
    let out = codeact(
        &["run", "--agents", file.to_str().expect("utf-8"), "Count."],
        None,
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        "{\"type\":\"final_result\",\"value\":{\"total\":5}}\n"
    );
    assert!(
        stderr(&out).contains("final result refused (1)"),
        "{}",
        stderr(&out)
    );

    let broken = script_file(
        "team-broken-output.toml",
        format!(
            "[[agent]]\nname = \"a\"\nmodel = \"replay:{}\"\n\n[agent.output]\nvalidator = \"no-such.rhai\"\n",
            replies.display()
        )
        .as_bytes(),
    );
    let out = codeact(
        &["run", "--agents", broken.to_str().expect("utf-8"), "Go."],
        None,
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("no-such.rhai': cannot read it"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn exec_runs_python_on_each_python_guest_with_a_command_tool() {
    for runtime in ["wasm:micropython", "wasm:python"] {
        let out = codeact(
            &[
                "exec",
                "--runtime",
                runtime,
                "--tool",
                "add=python3 fixtures/tools/add.py",
                "-",
            ],
            Some(b"total = add(a=40, b=2)\nprint('total is', total)\nfinal_result(total)\n"),
        );
        assert_eq!(out.status.code(), Some(0), "{runtime}: {}", stderr(&out));
        assert_eq!(
            stdout(&out),
            "{\"type\":\"final_result\",\"value\":42}\n",
            "{runtime}"
        );
        assert_eq!(stderr(&out), "total is 42\n", "{runtime}");
    }
}

#[test]
fn exec_runs_javascript_on_the_quickjs_guest_under_its_time_limit() {
    let out = codeact(
        &["exec", "--runtime", "wasm:js", "--timeout-ms", "300", "-"],
        Some(b"while (true) {}"),
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("exceeded the time limit of 300 ms"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn exec_runs_a_custom_guest_by_path() {
    let out = codeact(
        &["exec", "--runtime", "wasm:fixtures/guests/probe.wat", "-"],
        Some(b"a"),
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "{\"type\":\"final_result\",\"value\":42}\n");
}

#[test]
fn a_missing_guest_is_a_usage_error_naming_the_fetch_script() {
    let out = Command::new(env!("CARGO_BIN_EXE_codeact"))
        .args(["exec", "--runtime", "wasm:python", "-"])
        .env("CODEACT_GUEST_DIR", "/nonexistent/codeact-guests")
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .stdin(Stdio::null())
        .output()
        .expect("codeact runs");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("guests/fetch-guests.sh"),
        "{}",
        stderr(&out)
    );
}

/// Fails if `codeact guests list` leaves out `wasm:python-sci`, or counts the
/// optional guest's absence as a failure.
#[test]
fn guests_list_names_python_sci_with_how_to_fetch_it() {
    let out = Command::new(env!("CARGO_BIN_EXE_codeact"))
        .args(["guests", "list"])
        .env("CODEACT_GUEST_DIR", "/nonexistent/codeact-guests")
        .stdin(Stdio::null())
        .output()
        .expect("codeact runs");
    let listed = stdout(&out);
    let line = listed
        .lines()
        .find(|line| line.starts_with("wasm:python-sci "))
        .unwrap_or_else(|| panic!("not listed:\n{listed}"));
    assert!(line.contains("not fetched"), "{line}");
    assert!(
        line.contains("guests/fetch-guests.sh --python-sci"),
        "{line}"
    );
    // The default guests are missing too, which is what fails the listing.
    assert_eq!(out.status.code(), Some(1), "{listed}");
}

/// The control characters of `text` other than newline and tab.
fn raw_controls(text: &str) -> Vec<char> {
    text.chars()
        .filter(|c| c.is_control() && *c != '\n' && *c != '\t')
        .collect()
}

/// If this fails, a script's print can retitle, clear or rewrite the operator's
/// terminal through `codeact exec`.
#[test]
fn exec_shows_control_characters_a_script_prints_as_visible_escapes() {
    let out = codeact(
        &["exec", "-"],
        Some(br#"print("\x1b]0;title\x07\x1b[2Jafter"); observation(1)"#),
    );
    assert_eq!(out.status.code(), Some(0), "stderr: {:?}", stderr(&out));
    let err = stderr(&out);
    assert_eq!(raw_controls(&err), Vec::<char>::new(), "{err:?}");
    assert_eq!(err, "\\x1b]0;title\\x07\\x1b[2Jafter\n");
    // Stdout is one JSON line, where JSON's own escapes already apply.
    assert_eq!(stdout(&out), "{\"type\":\"observation\",\"value\":1}\n");
}

/// If this fails, text from a model, a script or a tool reaches the operator's
/// terminal raw through `codeact run`'s progress on stderr.
#[test]
fn run_shows_control_characters_from_the_model_and_the_script_as_visible_escapes() {
    let replies = replay_file(
        "replies-escapes.json",
        &[
            "Clearing \u{1b}[2J now.\n```rhai\nprint(\"\\x1b]0;pwned\\x07\");\nobservation(\"\\x1b[31mred\")\n```",
            "```rhai\nfinal_result(\"\\x1b[2J\")\n```",
        ],
    );
    let model = format!("replay:{}", replies.display());
    let out = codeact(&["run", "--model", &model, "Go."], None);
    assert_eq!(out.status.code(), Some(0), "stderr: {:?}", stderr(&out));
    let err = stderr(&out);
    assert_eq!(raw_controls(&err), Vec::<char>::new(), "{err:?}");
    assert!(err.contains("Clearing \\x1b[2J now."), "{err}");
    assert!(err.contains("│ \\x1b]0;pwned\\x07"), "{err}");
    assert!(err.contains("observation: \"\\u001b[31mred\""), "{err}");
    assert_eq!(
        stdout(&out),
        "{\"type\":\"final_result\",\"value\":\"\\u001b[2J\"}\n"
    );
}

/// If this fails, `codeact eval` no longer runs a task file end to end (here
/// against a replayed model, so it needs no server) or its report misjudges.
#[test]
fn eval_runs_a_task_file_and_reports_each_answer_judged() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let tasks = dir.path().join("tasks.jsonl");
    std::fs::write(
        &tasks,
        "{\"id\":\"sum\",\"category\":\"math\",\"task\":\"2+2?\",\"answer\":4}\n{\"id\":\"orders\",\"category\":\"tools\",\"task\":\"Count ada's orders.\",\"tools\":[\"list_orders\"],\"answer\":3}\n",
    )
    .expect("tasks written");
    let replies = dir.path().join("replies.json");
    std::fs::write(
        &replies,
        // Each task replays from the first reply: a bare value shown as an
        // observation, then the final result (4 for both tasks).
        r#"{"replies": ["```rhai\nlet x = 2 + 2;\nx\n```", "```rhai\nfinal_result(x)\n```"]}"#,
    )
    .expect("replies written");
    let results = dir.path().join("results");
    let out = codeact(
        &[
            "eval",
            "run",
            "--tasks",
            tasks.to_str().expect("utf-8"),
            "--tools",
            "fixtures/tools/demo.json",
            "--model",
            &format!("replay:{}", replies.display()),
            "--runtime",
            "rhai",
            "--label",
            "test",
            "--out",
            results.to_str().expect("utf-8"),
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stderr(&out).contains("test rhai run 1 sum: right (final_result) in 2 step(s)"));
    assert!(stderr(&out).contains("test rhai run 1 orders: wrong (final_result) in 2 step(s)"));
    assert!(results.join("test__codeact__rhai__run1.json").is_file());
    assert!(
        results
            .join("transcripts/test/rhai/run1/orders.jsonl")
            .is_file()
    );
    let report = codeact(
        &[
            "eval",
            "report",
            "--tasks",
            tasks.to_str().expect("utf-8"),
            "--results",
            results.to_str().expect("utf-8"),
        ],
        None,
    );
    assert_eq!(report.status.code(), Some(0), "{}", stderr(&report));
    let text = stdout(&report);
    assert!(text.contains("| test | codeact | rhai | 1 |"), "{text}");
    assert!(text.contains("| 1/2 (50%) | 1/1 | 0/1 |"), "{text}");
    assert!(
        text.contains("  - orders: final_result after 2 step(s), answered `4`"),
        "{text}"
    );
}

#[test]
fn eval_refuses_a_task_naming_a_tool_the_manifest_lacks() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let tasks = dir.path().join("tasks.jsonl");
    std::fs::write(
        &tasks,
        "{\"id\":\"a\",\"task\":\"t\",\"tools\":[\"nope\"],\"answer\":1}\n",
    )
    .expect("tasks written");
    let out = codeact(
        &[
            "eval",
            "run",
            "--tasks",
            tasks.to_str().expect("utf-8"),
            "--tools",
            "fixtures/tools/demo.json",
            "--model",
            "replay:/dev/null",
            "--runtime",
            "rhai",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("task 'a' names the tool 'nope'"),
        "{}",
        stderr(&out)
    );
}

/// Ctrl-C while the model is thinking: the run stops cleanly (exit 130), its
/// transcript ends with a `cancelled` outcome, and `--resume` goes on from there.
#[test]
fn ctrl_c_cancels_a_run_cleanly_and_the_transcript_resumes() {
    use std::io::Read;
    // A model server that accepts the connection and never answers.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    let port = listener.local_addr().expect("an address").port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming().flatten() {
            held.push(stream);
        }
    });
    let dir = tempfile::tempdir().expect("temp dir");
    let transcript = dir.path().join("run.jsonl");
    let mut child = Command::new(env!("CARGO_BIN_EXE_codeact"))
        .args([
            "run",
            "--model",
            "openai:stalled",
            "--base-url",
            &format!("http://127.0.0.1:{port}/v1"),
            "--transcript",
            &transcript.to_string_lossy(),
            "Add 2 and 2.",
        ])
        .env("OPENAI_API_KEY", "none")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("codeact starts");
    // Once the model call is under way, as a terminal's Ctrl-C would.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !std::fs::read_to_string(&transcript).is_ok_and(|text| text.contains("run_started")) {
        assert!(
            std::time::Instant::now() < deadline,
            "the run did not start"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    let sent = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(sent.success());
    let status = child.wait().expect("codeact ends");
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut stderr)
        .expect("read");
    assert_eq!(status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("cancelling the run"), "{stderr}");
    let text = std::fs::read_to_string(&transcript).expect("the transcript");
    let last: serde_json::Value =
        serde_json::from_str(text.lines().last().expect("a line")).expect("JSON");
    assert_eq!(last["outcome"]["outcome"], "cancelled", "{last}");
    // The transcript resumes: with a replay model that answers, the run goes on.
    let replies = dir.path().join("replies.json");
    std::fs::write(
        &replies,
        serde_json::json!({"replies": ["```rhai\nfinal_result(4)\n```"]}).to_string(),
    )
    .expect("replies written");
    let out = Command::new(env!("CARGO_BIN_EXE_codeact"))
        .args([
            "run",
            "--model",
            &format!("replay:{}", replies.display()),
            "--resume",
            &transcript.to_string_lossy(),
        ])
        .output()
        .expect("codeact runs");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        r#"{"type":"final_result","value":4}"#,
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The README's first command: a recorded run of the local model that fails
/// on a syntax error, takes the lines the host's feedback rewrote, observes
/// the average and answers it, right. The feedback is recomputed by this
/// tree, so a change that no longer hands back those lines fails here.
#[test]
fn the_readmes_first_command_replays_a_recovery_from_an_error_to_the_right_answer() {
    let stdout = replay_demo_with_events(
        "demo-rhai-average.jsonl",
        "What is the average temperature in Paris, Oslo and Madrid, rounded to one decimal place? Return the number.",
    );
    let lines: Vec<&str> = stdout.lines().collect();
    let (last, events) = lines.split_last().expect("lines");
    assert_eq!(*last, r#"{"type":"final_result","value":13.0}"#);
    let events: Vec<serde_json::Value> = events
        .iter()
        .map(|line| serde_json::from_str(line).expect("a JSON line"))
        .collect();
    let kind = |event: &serde_json::Value| event["event"].as_str().unwrap_or_default().to_string();
    let order: Vec<String> = events
        .iter()
        .map(kind)
        .filter(|k| ["error", "observation", "finished"].contains(&k.as_str()))
        .collect();
    assert_eq!(order, ["error", "observation", "finished"]);
    assert_eq!(events.iter().filter(|e| kind(e) == "tool_call").count(), 3);
    let fed_back = events
        .iter()
        .filter(|e| kind(e) == "message" && e["message"]["role"] == "user")
        .map(|e| e["message"].to_string())
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        fed_back.contains("give a variable two names")
            && fed_back.contains("weather.paris = get_weather"),
        "{fed_back}"
    );
}

/// What `codeact run --coach small-model --events jsonl` prints replaying the
/// recorded transcript `fixtures/transcripts/{transcript}` (a small model's)
/// with the demo tools on `task`, after asserting it succeeded.
fn replay_demo_with_events(transcript: &str, task: &str) -> String {
    let model = format!("replay:fixtures/transcripts/{transcript}");
    let out = Command::new(env!("CARGO_BIN_EXE_codeact"))
        .args([
            "run",
            "--model",
            &model,
            "--tools",
            "fixtures/tools/demo.json",
            "--coach",
            "small-model",
            "--events",
            "jsonl",
            task,
        ])
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .output()
        .expect("codeact runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `--events jsonl`: every event on stdout as a JSON line, as it happens, and the
/// final ScriptOutput still the last line.
#[test]
fn events_jsonl_streams_every_event_to_stdout_before_the_final_line() {
    let stdout = replay_demo_with_events(
        "demo-rhai-weather.jsonl",
        "Which is warmer right now, Paris or Oslo? Return the name of the city.",
    );
    let lines: Vec<&str> = stdout.lines().collect();
    let (last, events) = lines.split_last().expect("lines");
    assert_eq!(*last, r#"{"type":"final_result","value":"Paris"}"#);
    let kinds: Vec<String> = events
        .iter()
        .map(|line| {
            let event: serde_json::Value = serde_json::from_str(line).expect("a JSON line");
            event["event"].as_str().expect("an event").to_string()
        })
        .collect();
    assert_eq!(kinds.first().map(String::as_str), Some("run_started"));
    assert_eq!(kinds.last().map(String::as_str), Some("finished"));
    assert!(
        kinds.iter().filter(|k| *k == "tool_call").count() >= 2,
        "{kinds:?}"
    );
    let bad = Command::new(env!("CARGO_BIN_EXE_codeact"))
        .args(["run", "--model", "replay:x.json", "--events", "xml", "task"])
        .output()
        .expect("codeact runs");
    assert_eq!(bad.status.code(), Some(2));
}

/// `--chat`: a line per turn; the second turn uses the first's variable; one
/// answer line per turn; the transcript records both turns.
#[test]
fn chat_runs_a_turn_per_line_keeping_the_session() {
    let dir = tempfile::tempdir().expect("temp dir");
    let replies = dir.path().join("replies.json");
    std::fs::write(
        &replies,
        serde_json::json!({"replies": [
            "```rhai\nlet total = 40;\nfinal_result(total)\n```",
            "```rhai\nfinal_result(total + 2)\n```",
        ]})
        .to_string(),
    )
    .expect("replies written");
    let transcript = dir.path().join("chat.jsonl");
    let out = codeact(
        &[
            "run",
            "--chat",
            "--model",
            &format!("replay:{}", replies.display()),
            "--transcript",
            &transcript.to_string_lossy(),
        ],
        Some(b"Start a total at 40.\n\nAdd 2 to it.\n"),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "{\"type\":\"final_result\",\"value\":40}\n{\"type\":\"final_result\",\"value\":42}\n"
    );
    let text = std::fs::read_to_string(&transcript).expect("the transcript");
    assert_eq!(text.matches("\"event\":\"turn_started\"").count(), 2);
    assert_eq!(text.matches("\"event\":\"finished\"").count(), 2);
}

/// `--policy`: a Rhai rule refuses a call (the script is told why and goes on);
/// a policy file without a rule is a usage error.
#[test]
fn a_policy_file_refuses_calls_and_a_file_without_rules_is_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let policy = dir.path().join("policy.rhai");
    std::fs::write(
        &policy,
        r#"fn check_call(tool, args) { if args.city == "Oslo" { return "Oslo is off limits"; } }"#,
    )
    .expect("policy written");
    let run = |policy: &std::path::Path| {
        Command::new(env!("CARGO_BIN_EXE_codeact"))
            .args([
                "run",
                "--policy",
                &policy.to_string_lossy(),
                "--model",
                "replay:fixtures/transcripts/demo-rhai-weather.jsonl",
                "--tools",
                "fixtures/tools/demo.json",
                "Which is warmer right now, Paris or Oslo? Return the name of the city.",
            ])
            .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
            .output()
            .expect("codeact runs")
    };
    let out = run(&policy);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("the host's policy refused this call of 'get_weather': Oslo is off limits"),
        "{stderr}"
    );
    let empty = dir.path().join("empty.rhai");
    std::fs::write(&empty, "fn other() {}").expect("written");
    let out = run(&empty);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("defines neither"));
}

/// `codeact validate --policy F --call TOOL --args JSON`: one call's verdict.
#[test]
fn validate_checks_one_call_against_a_policy() {
    let dir = tempfile::tempdir().expect("temp dir");
    let policy = dir.path().join("policy.rhai");
    std::fs::write(
        &policy,
        r#"fn check_call(tool, args) { if args.amount > 100 { return "over 100"; } if args.amount > 50 { "ask" } }"#,
    )
    .expect("policy written");
    let policy = policy.to_string_lossy().into_owned();
    for (args, line, code) in [
        (r#"{"amount": 10}"#, r#"{"verdict":"allowed"}"#, 0),
        (r#"{"amount": 60}"#, r#"{"verdict":"ask"}"#, 1),
        (
            r#"{"amount": 200}"#,
            r#"{"reason":"over 100","verdict":"refused"}"#,
            1,
        ),
    ] {
        let out = codeact(
            &[
                "validate", "--policy", &policy, "--call", "pay", "--args", args,
            ],
            None,
        );
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), line, "{args}");
        assert_eq!(out.status.code(), Some(code), "{args}");
    }
    let out = codeact(
        &[
            "validate", "--policy", &policy, "--call", "pay", "--args", "[1]",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(2));
}
