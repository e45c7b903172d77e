//! The host side of a JavaScript session: a worker process it feeds scripts and
//! tool results, killed at the run's deadline. Workers are started with their
//! limits and this process's pid (`protocol::WORKER_ARG`), from one lasting
//! thread ([`spawn_from_lasting_thread`]).

use std::io::Write;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use codeact_runtime::{
    HostError, Interrupt, LimitKind, Limits, LogBuffer, RunClock, RunOutcome, ScriptError, Session,
    ToolDispatch,
};

use crate::protocol::{Namespaces, Reply, Request, ToolAnswer, WORKER_ARG, WORKER_ENV};

const RUNTIME: &str = "js";

/// A JavaScript session: one worker process, started on the first run and again
/// after a run that had to be stopped.
pub struct JsSession {
    mode: JsMode,
    worker_path: PathBuf,
    limits: Arc<Limits>,
    tools: Arc<dyn ToolDispatch>,
    worker: Option<Worker>,
}

impl std::fmt::Debug for JsSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JsSession")
            .field("worker_path", &self.worker_path)
            .field("running", &self.worker.is_some())
            .finish_non_exhaustive()
    }
}

/// Where a session's engine runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JsMode {
    /// A worker process, killed at the deadline and capped by RLIMIT_DATA: the
    /// guaranteed mode, and the default.
    Worker,
    /// A thread of this process: no process start, but a script stuck in a native
    /// builtin (a catastrophic regex) keeps its thread busy after the deadline,
    /// and memory is not capped. Opt in only for trusted scripts.
    InProcess,
}

enum Link {
    Process {
        child: Child,
        stdin: ChildStdin,
        /// Read on the session's thread: a reader thread of its own would add
        /// a wake-up to every reply.
        stdout: ChildStdout,
        lines: crate::wait::Lines,
    },
    Thread {
        requests: std::sync::mpsc::Sender<Request>,
        replies: Receiver<Reply>,
        /// Shared with the engine thread: cleared when this worker is dropped, so
        /// a script the session gave up on makes no more tool calls there.
        session_waiting: Arc<AtomicBool>,
    },
}

struct Worker {
    link: Link,
    /// Whether the worker has sent any reply: one that exits before its first
    /// reply is most likely not a worker at all (an app that skipped
    /// `run_worker_if_requested`).
    replied: bool,
    /// Whether the session's namespace objects went with a run yet: only a fresh
    /// worker's first run carries them.
    namespaces_sent: bool,
}

impl Worker {
    /// The worker's next reply within `wait`; `Timeout` when none came in
    /// time, `Disconnected` when its output ended or was not a reply.
    fn next_reply(&mut self, wait: Duration) -> Result<Reply, RecvTimeoutError> {
        let (stdout, lines) = match &mut self.link {
            Link::Thread { replies, .. } => return crate::wait::receive(replies, wait),
            Link::Process { stdout, lines, .. } => (stdout, lines),
        };
        let until = Instant::now() + wait;
        loop {
            if let Some(line) = lines.take_line() {
                return serde_json::from_slice(&line).map_err(|_| RecvTimeoutError::Disconnected);
            }
            let left = until.saturating_duration_since(Instant::now());
            {
                use std::os::fd::AsFd;
                match crate::wait::readable(stdout.as_fd(), Some(left)) {
                    Ok(true) | Err(_) => {}
                    Ok(false) if Instant::now() >= until => return Err(RecvTimeoutError::Timeout),
                    Ok(false) => continue,
                }
            }
            if !lines.fill(stdout) {
                return Err(RecvTimeoutError::Disconnected);
            }
        }
    }

    fn send(&mut self, request: Request) -> std::io::Result<()> {
        match &mut self.link {
            Link::Process { stdin, .. } => write_request(stdin, &request),
            Link::Thread { requests, .. } => requests
                .send(request)
                .map_err(|_| std::io::Error::other("the engine thread has ended")),
        }
    }

    /// How a worker that stopped talking ended: the process's exit status.
    fn end(&mut self) -> Option<std::process::ExitStatus> {
        match &mut self.link {
            Link::Process { child, .. } => {
                // Usually the worker is dead or exiting (its stdout closes just
                // before it exits): give it 100 ms to end by itself, so its own
                // status is seen; if its output was merely unreadable, it must not
                // be waited for while alive.
                for _ in 0..20 {
                    if let Ok(Some(status)) = child.try_wait() {
                        return Some(status);
                    }
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
                let _ = child.kill();
                child.wait().ok()
            }
            Link::Thread { .. } => None,
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        // A process is killed; a thread is let go (its request channel closes, so
        // it ends once its current script does).
        match &mut self.link {
            Link::Process { child, .. } => {
                let _ = child.kill();
                let _ = child.wait();
            }
            Link::Thread {
                session_waiting, ..
            } => session_waiting.store(false, Ordering::Release),
        }
    }
}

impl JsSession {
    pub(crate) fn new(
        mode: JsMode,
        worker_path: PathBuf,
        limits: Arc<Limits>,
        tools: Arc<dyn ToolDispatch>,
    ) -> Self {
        Self {
            mode,
            worker_path,
            limits,
            tools,
            worker: None,
        }
    }

    fn start_worker(&self) -> Result<Worker, HostError> {
        match self.mode {
            JsMode::Worker => self.start_process(),
            JsMode::InProcess => self.start_thread(),
        }
    }

    fn start_thread(&self) -> Result<Worker, HostError> {
        let (request_sender, requests) = mpsc::channel();
        let (reply_sender, replies) = mpsc::channel();
        let limits = self.limits.clone();
        let tools = self.tools.clone();
        let session_waiting = Arc::new(AtomicBool::new(true));
        let engine_sees = session_waiting.clone();
        std::thread::Builder::new()
            .name("codeact-js-engine".into())
            .stack_size(16 << 20)
            .spawn(move || {
                crate::worker::use_channels(crate::worker::Channels {
                    requests,
                    replies: reply_sender,
                    tools,
                    session_waiting: engine_sees,
                });
                crate::worker::serve(&limits, crate::worker::Deadline::Host);
            })
            .map_err(|e| HostError::SessionStart {
                runtime: RUNTIME,
                reason: format!("cannot start an engine thread: {e}"),
            })?;
        Ok(Worker {
            link: Link::Thread {
                requests: request_sender,
                replies,
                session_waiting,
            },
            replied: false,
            namespaces_sent: false,
        })
    }

    fn start_process(&self) -> Result<Worker, HostError> {
        let start = |reason: String| HostError::SessionStart {
            runtime: RUNTIME,
            reason,
        };
        if std::env::var_os(WORKER_ENV).is_some() {
            return Err(start(format!(
                "this process was started as a JavaScript worker, but its `main` did not call \
                 `run_worker_if_requested()` first, so it is trying to start workers of its own; \
                 {CALL_THE_WORKER_FIRST}"
            )));
        }
        let limits = serde_json::to_string(&*self.limits).map_err(|e| start(e.to_string()))?;
        let mut command = Command::new(&self.worker_path);
        command
            .arg(WORKER_ARG)
            .arg(limits)
            .arg(std::process::id().to_string())
            .env_clear()
            .env(WORKER_ENV, "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let mut child = spawn_from_lasting_thread(command).map_err(|e| {
            start(format!(
                "cannot start the worker '{}': {e}",
                self.worker_path.display()
            ))
        })?;
        let stdin = child
            .stdin
            .take()
            .ok_or_else(|| start("the worker has no stdin".into()))?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| start("the worker has no stdout".into()))?;
        Ok(Worker {
            link: Link::Process {
                child,
                stdin,
                stdout,
                lines: crate::wait::Lines::default(),
            },
            replied: false,
            namespaces_sent: false,
        })
    }

    /// The error for a worker that ended by itself before its first reply: most
    /// likely an app whose `main` does not serve as a worker.
    fn not_a_worker(&self) -> HostError {
        HostError::SessionStart {
            runtime: RUNTIME,
            reason: format!(
                "the worker '{}' exited before it answered, so it does not speak the \
                 worker protocol; {CALL_THE_WORKER_FIRST}",
                self.worker_path.display()
            ),
        }
    }

    /// Drives one run to its end: tool calls served, logs collected, the deadline
    /// kept by killing the worker.
    fn drive(
        &mut self,
        script: &str,
        logs: &mut LogBuffer,
        interrupt: Option<&Interrupt>,
    ) -> Result<Result<serde_json::Value, ScriptError>, HostError> {
        let limits = self.limits.clone();
        // The script's own time stops while it waits on tools: the deadline
        // moves later by each wait, never past the total time.
        let mut clock = RunClock::start(&limits);
        let lost = |reason: String| HostError::SessionLost {
            runtime: RUNTIME,
            reason,
        };
        if self.worker.is_none() {
            self.worker = Some(self.start_worker()?);
        }
        let Some(worker) = self.worker.as_mut() else {
            return Err(lost("the worker did not start".into()));
        };
        let namespaces = if worker.namespaces_sent {
            Namespaces::new()
        } else {
            worker.namespaces_sent = true;
            codeact_runtime::namespaces(self.tools.specs())
        };
        if let Err(e) = worker.send(Request::Run {
            script: script.to_string(),
            namespaces,
        }) {
            let status = worker.end();
            let replied = worker.replied;
            self.worker = None;
            if !replied && exited_normally(status) {
                return Err(self.not_a_worker());
            }
            return Err(lost(format!("cannot send the script to the worker: {e}")));
        }
        loop {
            let deadline = clock.deadline();
            let remaining = deadline.saturating_duration_since(Instant::now());
            let wait = match interrupt {
                Some(_) => remaining.min(INTERRUPT_POLL),
                None => remaining,
            };
            let reply = match worker.next_reply(wait) {
                Ok(reply) => {
                    worker.replied = true;
                    reply
                }
                Err(RecvTimeoutError::Timeout)
                    if Instant::now() < deadline
                        && !interrupt.is_some_and(Interrupt::is_raised) =>
                {
                    continue;
                }
                Err(RecvTimeoutError::Timeout) => {
                    self.worker = None;
                    return Ok(Err(
                        ScriptError::limit(clock.limit(), &limits, None).restarting()
                    ));
                }
                Err(RecvTimeoutError::Disconnected) => {
                    let status = worker.end();
                    let replied = worker.replied;
                    self.worker = None;
                    if !replied && exited_normally(status) {
                        return Err(self.not_a_worker());
                    }
                    return Ok(Err(died(status, &limits)));
                }
            };
            match reply {
                Reply::Log { text } => logs.push(&text),
                Reply::ToolCall { name, args } => {
                    let result = clock.pause(|| self.tools.call(&name, args));
                    if clock.expired() {
                        self.worker = None;
                        return Ok(Err(out_of_time(&clock, &limits)));
                    }
                    let answer = Request::tool_result(result.map_err(|error| error.message));
                    worker
                        .send(answer)
                        .map_err(|e| lost(format!("cannot answer the worker's tool call: {e}")))?;
                }
                Reply::ToolCalls { calls } => {
                    let results = clock.pause(|| self.tools.call_many(calls));
                    if clock.expired() {
                        self.worker = None;
                        return Ok(Err(out_of_time(&clock, &limits)));
                    }
                    let results = results
                        .into_iter()
                        .map(|result| ToolAnswer::from_result(result.map_err(|e| e.message)))
                        .collect();
                    worker
                        .send(Request::ToolResults { results })
                        .map_err(|e| lost(format!("cannot answer the worker's tool calls: {e}")))?;
                }
                Reply::Done {
                    completion,
                    dropped_log_bytes,
                } => {
                    logs.count_dropped(dropped_log_bytes);
                    return Ok(completion.map_err(|failure| failure.into_script_error(&limits)));
                }
                Reply::Fatal { message } => {
                    self.worker = None;
                    return Err(lost(message));
                }
            }
        }
    }
}

impl Session for JsSession {
    fn run(&mut self, script: &str) -> Result<RunOutcome, HostError> {
        let mut logs = LogBuffer::new(self.limits.max_output_bytes);
        let completion = self.drive(script, &mut logs, None)?;
        Ok(RunOutcome { completion, logs })
    }

    /// An interrupt is handled as the deadline is: the worker (a process, or the
    /// in-process engine's thread) is given up on within [`INTERRUPT_POLL`], and
    /// the next run starts a fresh one.
    fn run_interruptible(
        &mut self,
        script: &str,
        interrupt: &Interrupt,
    ) -> Result<RunOutcome, HostError> {
        let mut logs = LogBuffer::new(self.limits.max_output_bytes);
        let completion = self.drive(script, &mut logs, Some(interrupt))?;
        Ok(RunOutcome { completion, logs })
    }

    /// Refused, saying why: see [`unsupported`].
    fn snapshot(&mut self) -> Result<codeact_runtime::Snapshot, codeact_runtime::SnapshotError> {
        Err(unsupported(self.mode))
    }
}

/// Why a Boa session has no snapshot: its variables are objects in Boa's heap
/// (closures over their scopes, prototypes, the prelude's helpers), which Boa
/// cannot write out or read back, in a worker process or in this one.
pub(crate) fn unsupported(mode: JsMode) -> codeact_runtime::SnapshotError {
    codeact_runtime::SnapshotError::Unsupported {
        runtime: match mode {
            JsMode::Worker => "js",
            JsMode::InProcess => "js-in-process",
        }
        .to_string(),
        why: "Boa keeps a session's variables as objects in its own heap (closures over their scopes, prototypes, the helpers), which it has no way to write out or read back; wasm:boa and wasm:js sessions can be snapshotted".into(),
    }
}

/// A command to start, and where to send the started process.
type SpawnRequest = (Command, mpsc::Sender<std::io::Result<Child>>);

/// Starts `command` from a thread that lasts as long as this process. A worker
/// asks the kernel to kill it when its parent dies (`PR_SET_PDEATHSIG`, see
/// `confine.rs`), and the kernel means the parent *thread*: a worker started from
/// a thread that ends (a pooled blocking thread, a request's thread) would be
/// killed with it, mid-session. The thread starts on the first call and never
/// ends; each start costs a channel round trip on top of the process start.
fn spawn_from_lasting_thread(command: Command) -> std::io::Result<Child> {
    static SPAWNER: OnceLock<Result<mpsc::Sender<SpawnRequest>, String>> = OnceLock::new();
    let spawner = SPAWNER.get_or_init(|| {
        let (sender, requests) = mpsc::channel::<SpawnRequest>();
        std::thread::Builder::new()
            .name("codeact-js-spawner".into())
            .spawn(move || {
                for (mut command, reply) in requests {
                    let _ = reply.send(command.spawn());
                }
            })
            .map(|_| sender)
            .map_err(|e| format!("cannot start the thread that starts workers: {e}"))
    });
    let spawner = spawner
        .as_ref()
        .map_err(|e| std::io::Error::other(e.clone()))?;
    let (reply, started) = mpsc::channel();
    spawner
        .send((command, reply))
        .map_err(|_| std::io::Error::other("the thread that starts workers has ended"))?;
    started
        .recv()
        .map_err(|_| std::io::Error::other("the thread that starts workers has ended"))?
}

/// How often a run that can be interrupted looks at its interrupt while it waits
/// for the worker: the most an interrupt waits to be noticed.
const INTERRUPT_POLL: Duration = Duration::from_millis(10);

/// Writes `request` as one line, in one write: a line written in pieces
/// wakes the worker for each.
fn write_request(stdin: &mut ChildStdin, request: &Request) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(request).map_err(std::io::Error::other)?;
    line.push(b'\n');
    stdin.write_all(&line)?;
    stdin.flush()
}

/// The fix for a program that starts workers of itself without serving as one.
const CALL_THE_WORKER_FIRST: &str = "a program that hosts JavaScript sessions must call \
    `codeact::run_worker_if_requested()` first thing in `main` and return its exit code \
    when it gives one (see examples/embed.rs)";

/// Whether a worker process ended by itself (an exit code, not a signal): a
/// worker killed for memory or crashed ends by a signal.
fn exited_normally(status: Option<std::process::ExitStatus>) -> bool {
    status.is_some_and(|status| status.code().is_some())
}

/// The error for a run found past its deadline when a wait on tools returned
/// (a call cut short by the total time answers with an error the script could
/// otherwise catch and carry on past its limit): the worker, waiting for the
/// answer, is given up on as at the deadline.
fn out_of_time(clock: &RunClock, limits: &Limits) -> ScriptError {
    ScriptError::limit(clock.limit(), limits, None).restarting()
}

/// Why a worker ended without finishing its run: killed by the kernel for memory
/// (an abort after a failed allocation), at its own deadline (SIGXCPU, when the
/// host was late to kill it), or something else.
fn died(status: Option<std::process::ExitStatus>, limits: &Limits) -> ScriptError {
    use std::os::unix::process::ExitStatusExt;
    match status.and_then(|s| s.signal()) {
        Some(6 | 9) => ScriptError::limit(LimitKind::Memory, limits, None).restarting(),
        Some(24) => ScriptError::limit(LimitKind::WallTime, limits, None).restarting(),
        other => ScriptError::EngineLost {
            message: format!("the JavaScript worker ended unexpectedly ({other:?})"),
            detail: None,
        },
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt;

    use super::*;

    /// If this fails, a worker that ended at its own deadline (when its host was
    /// late to kill it) is reported as a crash, not as the time limit.
    #[test]
    fn a_worker_ended_by_its_own_deadline_is_reported_as_the_time_limit() {
        let status = std::process::ExitStatus::from_raw(24);
        assert_eq!(status.signal(), Some(24), "SIGXCPU");
        let error = died(Some(status), &Limits::default());
        assert!(
            matches!(
                error,
                ScriptError::LimitExceeded {
                    limit: LimitKind::WallTime,
                    restarted: true,
                    ..
                }
            ),
            "{error:?}"
        );
    }
}
