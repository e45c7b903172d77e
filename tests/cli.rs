//! `codeact exec` as a user runs it: the real binary, real files, real tool commands.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

fn codeact(args: &[&str], stdin: Option<&[u8]>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_codeact"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("codeact starts");
    if let Some(input) = stdin {
        child
            .stdin
            .take()
            .expect("stdin is piped")
            .write_all(input)
            .expect("stdin accepts the script");
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
    let cases: [(&[&str], &str); 5] = [
        (
            &["exec", "--runtime", "cobol", "x.rhai"],
            "codeact: unknown runtime 'cobol'; available: rhai\n",
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
