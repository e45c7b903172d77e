//! Tools backed by an external command: JSON arguments on stdin, one JSON value on
//! stdout, a non-zero exit is a tool error carrying stderr.

use std::process::Stdio;
use std::time::Duration;

use codeact_runtime::ToolError;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;

use crate::tools::pid_namespace;
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

/// How long the host keeps reading a finished tool's output after killing its
/// process group: long enough for killed processes to close their ends of the
/// pipes, short enough that a process which left the group (see
/// the command tools' section of docs/cli.md) cannot hold the call open. Default: 1 s; it
/// is only ever waited in full when such an escaped process keeps a pipe open.
const DRAIN_AFTER_EXIT: Duration = Duration::from_secs(1);

async fn run_command(command: &CommandSpec, args: &Value) -> Result<Value, ToolError> {
    let program = &command.argv[0];
    // Its own PID namespace where the system allows one (see `pid_namespace`), so
    // nothing it starts outlives it; a program that cannot be found is started
    // directly, so the error is the system's own.
    // It dies with this process too, even killed with SIGKILL (a lost worker):
    // `setpriv` sets the parent-death signal, then runs the rest.
    let (tether, launcher) = match pid_namespace::on_path(program) {
        Some(_) => (
            pid_namespace::parent_death().await.unwrap_or_default(),
            pid_namespace::launcher().await.unwrap_or_default(),
        ),
        None => (&[][..], &[][..]),
    };
    let argv = [tether, launcher, &command.argv[..]].concat();
    let (first, rest) = argv.split_first().unwrap_or((program, &[]));
    // Its own process group too, so that everything it starts (a shell's commands,
    // a backgrounded child) can be killed with it at a timeout.
    let mut child = Command::new(first)
        .args(rest)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| ToolError::new(format!("could not start '{program}': {e}")))?;
    // Kills the whole group when the call ends, however it ends: finished, timed
    // out, or its future dropped.
    let group = ProcessGroup::of(child.id());
    let input = args.to_string();
    let stdin = child.stdin.take();
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let mut out = Captured::default();
    let mut err = Captured::default();

    let work = async {
        let write = async {
            if let Some(mut stdin) = stdin {
                // A command that exits without reading its input is not an error here;
                // its exit status says what happened.
                let _ = stdin.write_all(input.as_bytes()).await;
                let _ = stdin.shutdown().await;
            }
        };
        let io = async {
            tokio::join!(
                write,
                read_capped(stdout, MAX_STDOUT_BYTES, &mut out),
                read_capped(stderr, MAX_STDERR_BYTES, &mut err)
            )
        };
        tokio::pin!(io);
        // The call ends when the command itself exits, not when its pipes close: a
        // child it left running may hold them open.
        let mut io_done = false;
        let status = loop {
            tokio::select! {
                status = child.wait() => break status,
                _ = &mut io, if !io_done => io_done = true,
            }
        };
        // Whatever it left running dies now; what they wrote is already in the
        // pipes, so reading on until the pipes close loses nothing.
        group.kill();
        if !io_done {
            let _ = tokio::time::timeout(DRAIN_AFTER_EXIT, &mut io).await;
        }
        status
    };
    let status = match tokio::time::timeout(command.timeout, work).await {
        Ok(status) => status,
        Err(_) => {
            return Err(ToolError::new(format!(
                "'{program}' did not finish within {} ms and was killed",
                command.timeout.as_millis()
            )));
        }
    };
    drop(group);
    let (stdout, stderr) = (out, err);
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

/// A command's process group (its id is the command's pid), killed with SIGKILL
/// when dropped or by [`ProcessGroup::kill`]. The group outlives its leader while
/// any member lives, so its id is not reused before every member is gone.
///
/// A process that leaves the group (`setsid`, `setpgid`) is not reached by it; the
/// PID namespace (`pid_namespace`), where there is one, ends those.
struct ProcessGroup(Option<rustix::process::Pid>);

impl ProcessGroup {
    fn of(leader: Option<u32>) -> Self {
        Self(
            leader
                .and_then(|pid| i32::try_from(pid).ok())
                .and_then(rustix::process::Pid::from_raw),
        )
    }

    /// Sends SIGKILL to every process still in the group. Idempotent: a group with
    /// no process left is `ESRCH`, ignored.
    fn kill(&self) {
        if let Some(pgid) = self.0 {
            let _ = rustix::process::kill_process_group(pgid, rustix::process::Signal::KILL);
        }
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        self.kill();
    }
}

#[derive(Default)]
struct Captured {
    bytes: Vec<u8>,
    truncated: bool,
}

/// Reads at most `cap` bytes into `captured`, then drains the rest so the command
/// never blocks on a full pipe. What was read stays in `captured` if the read is
/// abandoned.
async fn read_capped(pipe: Option<impl AsyncRead + Unpin>, cap: u64, captured: &mut Captured) {
    let Some(mut pipe) = pipe else {
        return;
    };
    let mut chunk = [0u8; 8192];
    while let Ok(n) = pipe.read(&mut chunk).await {
        if n == 0 {
            break;
        }
        let room = usize::try_from(cap)
            .unwrap_or(usize::MAX)
            .saturating_sub(captured.bytes.len());
        if n > room {
            captured.truncated = true;
        }
        captured.bytes.extend_from_slice(&chunk[..n.min(room)]);
    }
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

    /// A `sleep` argument no other process has: the tool's processes are found by
    /// it in `/proc`, since a pid printed inside the tool's PID namespace is not
    /// the host's.
    fn marker() -> String {
        use std::sync::atomic::{AtomicU32, Ordering};
        static NEXT: AtomicU32 = AtomicU32::new(1);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        format!("30.{}{:04}", std::process::id(), n)
    }

    /// True when a process sleeping for `marker` runs (not a zombie).
    fn sleeper_runs(marker: &str) -> bool {
        let wanted = format!("sleep\0{marker}\0");
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return false;
        };
        entries.flatten().any(|entry| {
            let dir = entry.path();
            let cmdline = std::fs::read(dir.join("cmdline")).unwrap_or_default();
            if !cmdline.ends_with(wanted.as_bytes()) {
                return false;
            }
            let stat = std::fs::read_to_string(dir.join("stat")).unwrap_or_default();
            let state = stat
                .rsplit_once(") ")
                .and_then(|(_, rest)| rest.chars().next());
            !matches!(state, None | Some('Z' | 'X'))
        })
    }

    /// True when no process sleeping for `marker` runs within 2 s (SIGKILL is
    /// delivered asynchronously; a survivor sleeps 30 s).
    fn sleeper_dies_soon(marker: &str) -> bool {
        for _ in 0..40 {
            if !sleeper_runs(marker) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }

    /// If this fails, a tool that backgrounds a child leaves it running after the
    /// call returned.
    #[tokio::test]
    async fn a_backgrounded_child_is_dead_when_its_call_returns() {
        let marker = marker();
        let script = format!("sleep {marker} >/dev/null 2>&1 & echo 1");
        let result = run_command(&spec(&["sh", "-c", &script], 20_000), &json!({})).await;
        assert_eq!(result, Ok(json!(1)));
        assert!(
            sleeper_dies_soon(&marker),
            "the backgrounded sleep still runs"
        );
    }

    /// If this fails, a tool that leaves a child holding its stdout makes every
    /// call wait for the whole timeout.
    #[tokio::test]
    async fn a_finished_command_returns_at_once_though_its_child_holds_stdout() {
        let started = std::time::Instant::now();
        let marker = marker();
        let script = format!("sleep {marker} & echo 1");
        let result = run_command(&spec(&["sh", "-c", &script], 20_000), &json!({})).await;
        assert_eq!(result, Ok(json!(1)));
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "waited {:?} for a command that had finished",
            started.elapsed()
        );
        assert!(sleeper_dies_soon(&marker));
    }

    /// If this fails, a timed-out tool's grandchildren keep running.
    #[tokio::test]
    async fn a_timeout_kills_the_commands_grandchildren_too() {
        let marker = marker();
        let script = format!("sleep {marker} & wait");
        let result = run_command(&spec(&["sh", "-c", &script], 500), &json!({})).await;
        assert!(
            result
                .expect_err("times out")
                .message
                .contains("within 500 ms")
        );
        assert!(
            sleeper_dies_soon(&marker),
            "the grandchild outlived the timeout"
        );
    }

    /// If this fails, cancelling a call (dropping its future) leaves the tool's
    /// processes running.
    #[tokio::test]
    async fn a_dropped_call_kills_the_commands_processes() {
        let marker = marker();
        let script = format!("sleep {marker} & wait");
        let command = spec(&["sh", "-c", &script], 20_000);
        let args = json!({});
        let call = run_command(&command, &args);
        let cancelled = tokio::time::timeout(Duration::from_millis(500), call).await;
        assert!(cancelled.is_err(), "the call should still be running");
        assert!(
            sleeper_dies_soon(&marker),
            "the grandchild outlived its dropped call"
        );
    }

    /// If this fails, a process that left the tool's process group (`setsid`, a
    /// daemon's double fork) holds the call open, or, where the host runs tools in
    /// a PID namespace of their own (here: wherever `unshare` can create one), it
    /// outlives the call.
    #[tokio::test]
    async fn a_process_that_leaves_the_group_neither_holds_the_call_nor_outlives_it() {
        let (detached, daemon) = (marker(), marker());
        let script = format!(
            "setsid sleep {detached} & (setsid sh -c 'sleep {daemon} &' &) ; sleep 0.2; echo 1"
        );
        let started = std::time::Instant::now();
        let result = run_command(&spec(&["sh", "-c", &script], 20_000), &json!({})).await;
        assert_eq!(result, Ok(json!(1)));
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "an escaped process held the call open for {:?}",
            started.elapsed()
        );
        if pid_namespace::launcher().await.is_some() {
            assert!(
                sleeper_dies_soon(&detached),
                "the setsid child outlived its call"
            );
            assert!(
                sleeper_dies_soon(&daemon),
                "the double-forked daemon outlived its call"
            );
        } else {
            // The gap docs/cli.md states for systems without the namespace; end
            // them here.
            for marker in [detached, daemon] {
                let _ = std::process::Command::new("pkill")
                    .args(["-f", &format!("sleep {marker}")])
                    .status();
            }
        }
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
