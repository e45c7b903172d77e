//! Tools backed by an external command: JSON arguments on stdin, one JSON value on
//! stdout, a non-zero exit is a tool error carrying stderr.

use std::process::Stdio;
use std::time::Duration;

use codeact_runtime::ToolError;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;

use crate::tools::toolbox::Tool;

/// How long a command tool may run before it is killed. Default: 30 s.
pub const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(30);

/// Bytes of stdout kept from a command tool; more is a tool error. 16 MiB.
const MAX_STDOUT_BYTES: u64 = 16 << 20;

/// Bytes of stderr kept for the error message. 8 KiB.
const MAX_STDERR_BYTES: u64 = 8 << 10;

/// A command to run for each call: the program and its arguments, never passed
/// through a shell, so nothing in the call's arguments is interpolated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandSpec {
    /// The program and its arguments.
    pub argv: Vec<String>,
    /// Kill the command after this long. Default: [`DEFAULT_COMMAND_TIMEOUT`].
    pub timeout: Duration,
}

impl CommandSpec {
    /// Splits `command` the way a POSIX shell splits words (quotes and backslashes),
    /// without expanding anything.
    pub fn parse(command: &str) -> Result<Self, String> {
        let argv =
            shell_words::split(command).map_err(|e| format!("cannot split '{command}': {e}"))?;
        if argv.is_empty() {
            return Err("the command is empty".into());
        }
        Ok(Self {
            argv,
            timeout: DEFAULT_COMMAND_TIMEOUT,
        })
    }
}

/// A tool that runs `command` once per call.
pub fn command_tool(
    name: impl Into<String>,
    description: impl Into<String>,
    command: CommandSpec,
) -> Tool {
    Tool::new(name, description, move |args| {
        let command = command.clone();
        async move { run_command(&command, &args).await }
    })
}

async fn run_command(command: &CommandSpec, args: &Value) -> Result<Value, ToolError> {
    let program = &command.argv[0];
    let mut child = Command::new(program)
        .args(&command.argv[1..])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| ToolError::new(format!("could not start '{program}': {e}")))?;
    let input = args.to_string();
    let mut stdin = child.stdin.take();
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();

    let work = async {
        let write = async {
            if let Some(stdin) = stdin.as_mut() {
                // A command that exits without reading its input is not an error here;
                // its exit status says what happened.
                let _ = stdin.write_all(input.as_bytes()).await;
                let _ = stdin.shutdown().await;
            }
            drop(stdin.take());
        };
        let (_, out, err, status) = tokio::join!(
            write,
            read_capped(stdout, MAX_STDOUT_BYTES),
            read_capped(stderr, MAX_STDERR_BYTES),
            child.wait()
        );
        (out, err, status)
    };
    let (stdout, stderr, status) = match tokio::time::timeout(command.timeout, work).await {
        Ok(done) => done,
        Err(_) => {
            return Err(ToolError::new(format!(
                "'{program}' did not finish within {} ms and was killed",
                command.timeout.as_millis()
            )));
        }
    };
    let status =
        status.map_err(|e| ToolError::new(format!("waiting for '{program}' failed: {e}")))?;
    if !status.success() {
        let stderr = String::from_utf8_lossy(&stderr.bytes);
        let stderr = stderr.trim();
        return Err(ToolError::new(if stderr.is_empty() {
            format!("'{program}' failed ({status}) and printed nothing on stderr")
        } else {
            stderr.to_string()
        }));
    }
    if stdout.truncated {
        return Err(ToolError::new(format!(
            "'{program}' printed more than {MAX_STDOUT_BYTES} bytes"
        )));
    }
    serde_json::from_slice(&stdout.bytes).map_err(|e| {
        let shown = String::from_utf8_lossy(&stdout.bytes);
        let shown: String = shown.chars().take(200).collect();
        ToolError::new(format!(
            "'{program}' must print one JSON value on stdout ({e}); it printed: {shown:?}"
        ))
    })
}

struct Captured {
    bytes: Vec<u8>,
    truncated: bool,
}

/// Reads at most `cap` bytes, then drains the rest so the command never blocks on a
/// full pipe.
async fn read_capped(pipe: Option<impl AsyncRead + Unpin>, cap: u64) -> Captured {
    let mut captured = Captured {
        bytes: Vec::new(),
        truncated: false,
    };
    let Some(mut pipe) = pipe else {
        return captured;
    };
    let _ = (&mut pipe).take(cap).read_to_end(&mut captured.bytes).await;
    let mut rest = [0u8; 8192];
    while let Ok(n) = pipe.read(&mut rest).await {
        if n == 0 {
            break;
        }
        captured.truncated = true;
    }
    captured
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(argv: &[&str], timeout_ms: u64) -> CommandSpec {
        CommandSpec {
            argv: argv.iter().map(|s| s.to_string()).collect(),
            timeout: Duration::from_millis(timeout_ms),
        }
    }

    #[test]
    fn commands_are_split_like_a_shell_without_expansion() {
        let parsed = CommandSpec::parse(r#"python3 -c 'print($HOME)' "a b""#).expect("splits");
        assert_eq!(parsed.argv, ["python3", "-c", "print($HOME)", "a b"]);
        assert!(CommandSpec::parse("   ").is_err());
        assert!(CommandSpec::parse("echo 'unclosed").is_err());
    }

    #[tokio::test]
    async fn a_command_reads_its_arguments_and_prints_its_result() {
        let result = run_command(&spec(&["sh", "-c", "cat"], 5_000), &json!({"a": [1, 2]})).await;
        assert_eq!(result, Ok(json!({"a": [1, 2]})));
    }

    #[tokio::test]
    async fn a_failing_command_reports_its_stderr() {
        let result = run_command(
            &spec(&["sh", "-c", "echo 'bad input' >&2; exit 3"], 5_000),
            &json!({}),
        )
        .await;
        assert_eq!(result, Err(ToolError::new("bad input")));
    }

    #[tokio::test]
    async fn a_hanging_command_is_killed_at_its_timeout() {
        let started = std::time::Instant::now();
        let result = run_command(&spec(&["sleep", "30"], 200), &json!({})).await;
        assert!(
            result
                .expect_err("times out")
                .message
                .contains("within 200 ms")
        );
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[tokio::test]
    async fn output_that_is_not_json_is_a_tool_error() {
        let result = run_command(&spec(&["sh", "-c", "echo hello"], 5_000), &json!({})).await;
        assert!(
            result
                .expect_err("not JSON")
                .message
                .contains("must print one JSON value")
        );
    }

    #[tokio::test]
    async fn a_missing_program_is_a_tool_error() {
        let result = run_command(&spec(&["/nonexistent/tool"], 5_000), &json!({})).await;
        assert!(
            result
                .expect_err("no program")
                .message
                .contains("could not start")
        );
    }
}
