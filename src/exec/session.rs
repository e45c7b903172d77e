//! A runtime session driven from async code: each run happens on a blocking thread,
//! and its completion value is decoded into a [`ScriptOutput`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use codeact_runtime::{
    FileView, HostError, Interrupt, LogBuffer, Runtime, Session, Snapshot, SnapshotError,
    ToolDispatch,
};

use crate::exec::run_slots::Slot;
use crate::output::script_output::ScriptOutput;

/// One script run as the host sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct ScriptRun {
    /// The decoded completion value, or the script's error.
    pub output: ScriptOutput,
    /// The completion value before decoding, or the script's error, for a host
    /// that reads it its own way (the loop shows a bare value).
    pub completion: Result<serde_json::Value, codeact_runtime::ScriptError>,
    /// What the script printed.
    pub logs: LogBuffer,
    /// How long the script ran, from when it got its running slot to its end. Its
    /// limits' clock starts at about the same moment: waiting for a slot counts in
    /// neither.
    pub ran_for: Duration,
}

/// A session of some runtime, plus the bookkeeping to run it from async code.
pub struct ScriptSession {
    runtime: &'static str,
    session: Option<Box<dyn Session>>,
    /// The runtime's total time limit (waits on tools included): a script's
    /// tool calls end when it does (`codeact_runtime::call_deadline`).
    total_time: std::time::Duration,
}

impl std::fmt::Debug for ScriptSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScriptSession")
            .field("runtime", &self.runtime)
            .finish_non_exhaustive()
    }
}

impl ScriptSession {
    /// Starts a session of `runtime` whose scripts can call `tools`.
    pub fn start(runtime: &dyn Runtime, tools: Arc<dyn ToolDispatch>) -> Result<Self, HostError> {
        Ok(Self {
            runtime: runtime.info().name,
            session: Some(runtime.new_session(tools)?),
            total_time: runtime.limits().max_total_time,
        })
    }

    /// [`start`](Self::start) in a working directory: an engine with a file API of
    /// its own (the WASI guests: Python's `open`) sees `files`' folders directly,
    /// with its writes charged to the same disk limit as the helpers'
    /// ([`FileArea::view`](crate::files::FileArea::view)); the others reach them
    /// through the file helpers among `tools`.
    pub fn start_with_files(
        runtime: &dyn Runtime,
        tools: Arc<dyn ToolDispatch>,
        files: Option<&FileView>,
    ) -> Result<Self, HostError> {
        let session = match files {
            Some(files) => runtime.new_session_with_files(tools, files)?,
            None => runtime.new_session(tools)?,
        };
        Ok(Self {
            runtime: runtime.info().name,
            session: Some(session),
            total_time: runtime.limits().max_total_time,
        })
    }

    /// The session's state as a [`Snapshot`], for [`restore`](Self::restore); the
    /// session goes on unchanged. Refused for a backend that cannot snapshot its
    /// sessions (see its capability table), and for a value that cannot be kept.
    pub fn snapshot(&mut self) -> Result<Snapshot, SnapshotError> {
        match self.session.as_mut() {
            Some(session) => session.snapshot(),
            None => Err(SnapshotError::Session(format!(
                "the {} session was lost",
                self.runtime
            ))),
        }
    }

    /// A session of `runtime` as `snapshot` left it, whose scripts call `tools`.
    pub fn restore(
        runtime: &dyn Runtime,
        snapshot: &Snapshot,
        tools: Arc<dyn ToolDispatch>,
    ) -> Result<Self, SnapshotError> {
        Ok(Self {
            runtime: runtime.info().name,
            session: Some(runtime.restore(snapshot, tools)?),
            total_time: runtime.limits().max_total_time,
        })
    }

    /// Runs `script` where blocking is allowed (tool calls block the thread) and
    /// decodes the result. First waits, without holding a thread, for one of the
    /// process's running-script slots ([`crate::exec::set_max_running_scripts`]); the
    /// script's clock starts after. On a multi-threaded tokio runtime the script
    /// runs in place (`block_in_place`: the worker's other tasks move to another
    /// thread, and this task skips a round trip through the blocking pool);
    /// elsewhere on a blocking-pool thread. A panic inside the engine or a tool
    /// loses the session (later runs say so) but never the caller.
    pub async fn run(&mut self, script: impl Into<String>) -> Result<ScriptRun, HostError> {
        self.run_with(script.into(), None).await
    }

    /// [`run`](Self::run), stopped when `interrupt` is raised (by another task: an
    /// app's cancel, a deadline) as the script's time limit stops it: its error is
    /// that limit's, and the session is left as that limit leaves it. A backend
    /// that cannot be interrupted ends at the time limit instead
    /// ([`Session::run_interruptible`]).
    pub async fn run_interruptible(
        &mut self,
        script: impl Into<String>,
        interrupt: Interrupt,
    ) -> Result<ScriptRun, HostError> {
        self.run_with(script.into(), Some(interrupt)).await
    }

    async fn run_with(
        &mut self,
        script: String,
        interrupt: Option<Interrupt>,
    ) -> Result<ScriptRun, HostError> {
        let mut session = self.take()?;
        let runtime = self.runtime;
        let total_time = self.total_time;
        let run = move |session: &mut Box<dyn Session>| {
            with_call_deadline(total_time, || match &interrupt {
                Some(interrupt) => session.run_interruptible(&script, interrupt),
                None => session.run(&script),
            })
        };
        let lost = |reason: String| HostError::SessionLost { runtime, reason };
        let in_place = tokio::runtime::Handle::try_current().is_ok_and(|handle| {
            handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread
        });
        let slot = Slot::wait().await;
        let (session, result) = if in_place {
            let result = tokio::task::block_in_place(|| {
                slot.run_here(|| {
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        timed(|| run(&mut session))
                    }))
                })
            });
            match result {
                Ok(result) => (session, result),
                Err(_) => return Err(lost("a run panicked".into())),
            }
        } else {
            tokio::task::spawn_blocking(move || {
                let result = slot.run_here(|| timed(|| run(&mut session)));
                (session, result)
            })
            .await
            .map_err(|e| lost(format!("a run panicked: {e}")))?
        };
        self.session = Some(session);
        Self::decode(result)
    }

    /// Runs `script` on this thread, for callers that are not async (and for
    /// benchmarks). The thread must be allowed to block: it waits here for a
    /// running-script slot unless its caller's script already holds one.
    pub fn run_blocking(&mut self, script: &str) -> Result<ScriptRun, HostError> {
        self.run_blocking_with(script, None)
    }

    /// [`run_blocking`](Self::run_blocking), stopped when `interrupt` is raised
    /// (by another thread) as [`run_interruptible`](Self::run_interruptible) is;
    /// raised while the run waits for its running-script slot, the run still
    /// starts, and stops at once.
    pub fn run_blocking_interruptible(
        &mut self,
        script: &str,
        interrupt: &Interrupt,
    ) -> Result<ScriptRun, HostError> {
        self.run_blocking_with(script, Some(interrupt))
    }

    fn run_blocking_with(
        &mut self,
        script: &str,
        interrupt: Option<&Interrupt>,
    ) -> Result<ScriptRun, HostError> {
        let mut session = self.take()?;
        let slot = Slot::wait_blocking();
        let total_time = self.total_time;
        let result = slot.run_here(|| {
            timed(|| {
                with_call_deadline(total_time, || match interrupt {
                    Some(interrupt) => session.run_interruptible(script, interrupt),
                    None => session.run(script),
                })
            })
        });
        drop(slot);
        self.session = Some(session);
        Self::decode(result)
    }

    fn take(&mut self) -> Result<Box<dyn Session>, HostError> {
        self.session.take().ok_or_else(|| HostError::SessionLost {
            runtime: self.runtime,
            reason: "an earlier run panicked".into(),
        })
    }

    fn decode(
        (result, ran_for): (Result<codeact_runtime::RunOutcome, HostError>, Duration),
    ) -> Result<ScriptRun, HostError> {
        let outcome = result?;
        Ok(ScriptRun {
            output: ScriptOutput::from_completion(outcome.completion.clone()),
            completion: outcome.completion,
            logs: outcome.logs,
            ran_for,
        })
    }
}

fn timed<T>(run: impl FnOnce() -> T) -> (T, Duration) {
    let started = Instant::now();
    let result = run();
    (result, started.elapsed())
}

/// Runs `run` with its tool calls bounded by `total_time` from now
/// (`codeact_runtime::call_deadline`): the run's total time, since its own
/// time stops while it waits; a time too far off to name bounds nothing.
fn with_call_deadline<R>(total_time: Duration, run: impl FnOnce() -> R) -> R {
    match Instant::now().checked_add(total_time) {
        Some(deadline) => codeact_runtime::call_deadline::within(deadline, run),
        None => run(),
    }
}
