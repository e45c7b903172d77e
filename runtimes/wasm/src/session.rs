//! A session: one guest instance, kept alive across runs by a guest-side loop.
//!
//! The guest runs as a wasmtime async call on its own fiber. Between scripts it is
//! suspended inside a read of stdin; `run` queues the next script and polls the call
//! on the caller's thread until the guest sends its completion value and blocks
//! reading again. Tool calls come out as messages while the guest waits for the
//! answer: they are served here, on the caller's thread, outside the guest. So a
//! Python variable set in one script is there in the next, and a step costs a poll,
//! not an interpreter start-up.
//!
//! The deadline is enforced inside the engine: every epoch tick checks it and traps
//! the guest past it. A trap, an exit, or a guest stuck outside wasm (say, in a
//! host sleep) past its deadline drops the instance; the next run starts a fresh
//! one, and the error tells the model its variables are gone.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

use codeact_runtime::{
    FileView, HostError, Interrupt, LimitKind, Limits, RunClock, RunOutcome, ScriptError, Session,
    Snapshot, SnapshotError, ToolDispatch, js_hoist::hoist_top_level,
};
use wasmtime::{InstancePre, Store, Trap, TypedFunc, UpdateDeadline};
use wasmtime_wasi::I32Exit;
use wasmtime_wasi::{FsPerms, WasiCtxBuilder};

use crate::engine::{self, Ticking};
use crate::error_facts;
use crate::exchange::{Exchange, GuestOutput, GuestStdin, Phase, SharedExchange, locked};
use crate::files::{self, HostState, MemoryCap};
use crate::guests::{CPythonBuild, Guest, Launch};
use crate::protocol::{self, FailKind, GuestFacts, GuestMessage};
use crate::turns::{self, TurnStart};

/// How long past its deadline a guest that is not running wasm (blocked in a host
/// call such as a sleep) is waited for before it is dropped.
const STUCK_GRACE: Duration = Duration::from_millis(50);

/// What every instance of a guest needs: the pre-linked module, how it starts and
/// the text of its prelude.
pub(crate) struct Blueprint {
    pub(crate) runtime_name: &'static str,
    pub(crate) pre: InstancePre<HostState>,
    /// The same module with the file checks linked over WASI's writes
    /// ([`files::link_checks`]), for sessions with a working directory.
    pub(crate) pre_files: InstancePre<HostState>,
    pub(crate) guest: Guest,
    /// The prelude template, for guests that take one.
    pub(crate) prelude: Option<&'static str>,
    pub(crate) hoist_js: bool,
    pub(crate) limits: Arc<Limits>,
    /// How long a new instance may take to wait for its first script.
    pub(crate) startup_time: Duration,
    /// The memory templates of a guest started by turns (`wasm:python-sci`).
    pub(crate) templates: Arc<crate::turns::Templates>,
}

type GuestCall = Pin<Box<dyn Future<Output = wasmtime::Result<()>> + Send>>;

/// A live instance: its exchange and the suspended call that runs it.
struct LiveGuest {
    exchange: SharedExchange,
    call: GuestCall,
    /// The call returned (the guest exited or trapped) while messages were still
    /// waiting to be handled.
    ended: Option<wasmtime::Result<()>>,
}

/// One session of a wasm guest: a stdio-protocol guest (the interpreters from
/// PyPI, custom commands) or a guest built against codeact's import ABI
/// (`wasm:rhai`).
pub struct WasmSession {
    inner: Inner,
}

enum Inner {
    Stdio(StdioSession),
    Abi(Box<crate::abi::AbiSession>),
}

impl WasmSession {
    pub(crate) fn stdio(
        blueprint: Arc<Blueprint>,
        tools: Arc<dyn ToolDispatch>,
        files: Option<FileView>,
    ) -> Result<WasmSession, HostError> {
        StdioSession::start(blueprint, tools, files).map(|session| WasmSession {
            inner: Inner::Stdio(session),
        })
    }

    /// A session of a guest started by turns as `snapshot` left it.
    pub(crate) fn restore_stdio(
        blueprint: Arc<Blueprint>,
        tools: Arc<dyn ToolDispatch>,
        snapshot: &Snapshot,
    ) -> Result<WasmSession, SnapshotError> {
        StdioSession::restore(blueprint, tools, snapshot).map(|session| WasmSession {
            inner: Inner::Stdio(session),
        })
    }

    /// An ABI guest's session as `snapshot` left it.
    pub(crate) fn restore_abi(
        blueprint: Arc<crate::abi::AbiBlueprint>,
        tools: Arc<dyn ToolDispatch>,
        snapshot: &Snapshot,
    ) -> Result<WasmSession, SnapshotError> {
        crate::abi::AbiSession::restore(blueprint, tools, snapshot).map(|session| WasmSession {
            inner: Inner::Abi(Box::new(session)),
        })
    }

    pub(crate) fn abi(
        blueprint: Arc<crate::abi::AbiBlueprint>,
        tools: Arc<dyn ToolDispatch>,
    ) -> Result<WasmSession, HostError> {
        crate::abi::AbiSession::start(blueprint, tools).map(|session| WasmSession {
            inner: Inner::Abi(Box::new(session)),
        })
    }
}

/// A session of a guest that speaks the stdio protocol.
struct StdioSession {
    blueprint: Arc<Blueprint>,
    tools: Arc<dyn ToolDispatch>,
    /// The guest's argv, its prelude rendered for this session's tools.
    argv: Vec<String>,
    /// The prelude rendered for this session's tools.
    prelude: String,
    /// The run's folders, preopened in every instance (a restart too).
    files: Option<FileView>,
    instance: Option<LiveGuest>,
}

/// Why a stdio guest's session has no snapshot.
pub(crate) fn stdio_unsupported(runtime: &str) -> SnapshotError {
    SnapshotError::Unsupported {
        runtime: runtime.to_string(),
        why: "the guest waits for its next script inside a call, on a stack wasmtime keeps outside its memory".into(),
    }
}

/// What the poll loop stopped for.
enum Event {
    /// The guest waits for a script.
    Ready,
    Message(GuestMessage),
    /// The guest's call returned.
    Ended(wasmtime::Result<()>),
    /// Past the deadline and not running wasm.
    Stuck,
    /// The guest wrote where it should have been reading (see
    /// [`Exchange::broken`]).
    Broken,
}

struct ThreadWaker(Thread);

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

impl StdioSession {
    /// The session's prelude and argv, rendered for its tools; no instance yet.
    fn unstarted(
        blueprint: Arc<Blueprint>,
        tools: Arc<dyn ToolDispatch>,
        files: Option<FileView>,
    ) -> StdioSession {
        let prelude = blueprint
            .prelude
            .map(|template| {
                // A guest started by turns leaves its serving loop for the
                // second turn (see the prelude's end).
                let by_turns = if blueprint.guest.launch.by_turns() {
                    "True"
                } else {
                    "False"
                };
                render_prelude(
                    template,
                    tools.specs(),
                    &blueprint.limits,
                    &[("__CODEACT_BY_TURNS__", by_turns)],
                )
            })
            .unwrap_or_default();
        let argv = blueprint.guest.argv(&prelude, &blueprint.limits);
        StdioSession {
            blueprint,
            tools,
            argv,
            prelude,
            files,
            instance: None,
        }
    }

    fn start(
        blueprint: Arc<Blueprint>,
        tools: Arc<dyn ToolDispatch>,
        files: Option<FileView>,
    ) -> Result<StdioSession, HostError> {
        let mut session = Self::unstarted(blueprint, tools, files);
        session.instance = Some(session.instantiate(None)?);
        Ok(session)
    }

    /// The session `snapshot` holds, of a guest started by turns
    /// (`wasm:python-sci`): refused unless it is a snapshot of this runtime and
    /// guest whose session had the same tools and limits (the prelude rendered
    /// for them) and no folders, and its memory fits this runtime's limit.
    fn restore(
        blueprint: Arc<Blueprint>,
        tools: Arc<dyn ToolDispatch>,
        snapshot: &Snapshot,
    ) -> Result<StdioSession, SnapshotError> {
        if !blueprint.guest.launch.by_turns() {
            return Err(stdio_unsupported(blueprint.runtime_name));
        }
        let identity = blueprint.guest.sha256.clone().unwrap_or_default();
        let (shared, range) = snapshot.open_shared(blueprint.runtime_name, &identity)?;
        let payload = &shared[range.clone()];
        let corrupt = |why: &str| SnapshotError::Corrupt(why.to_string());
        let (len, rest) = payload
            .split_first_chunk::<8>()
            .ok_or_else(|| corrupt("its guest state has no header"))?;
        let len = usize::try_from(u64::from_le_bytes(*len))
            .ok()
            .filter(|len| *len <= rest.len())
            .ok_or_else(|| corrupt("its guest state ends inside its header"))?;
        let (header, memory) = rest.split_at(len);
        let header: serde_json::Value = serde_json::from_slice(header)
            .map_err(|e| SnapshotError::Corrupt(format!("its guest state's header: {e}")))?;
        let mut session = Self::unstarted(blueprint, tools, None);
        if header["start"].as_str() != Some(session.start_digest().as_str()) {
            return Err(SnapshotError::Session(
                "the snapshot was made with other tools or limits than this session has; the guest keeps them in its memory, so restore it with the same ones".into(),
            ));
        }
        let limits = &session.blueprint.limits;
        let baseline = match &header["baseline"] {
            serde_json::Value::Null => None,
            value => Some(
                value
                    .as_u64()
                    .and_then(|n| usize::try_from(n).ok())
                    .ok_or_else(|| corrupt("its guest state's header has no usable baseline"))?,
            ),
        };
        // What a session of this runtime may hold: its start's room plus the
        // limit, or the baseline it had plus the limit.
        let most = baseline
            .unwrap_or(files::STARTUP_MEMORY)
            .saturating_add(limits.max_memory_bytes);
        if baseline
            .is_some_and(|b| b > files::STARTUP_MEMORY.saturating_add(limits.max_memory_bytes))
        {
            return Err(SnapshotError::Session(format!(
                "the snapshot says its session held {} bytes when its first script started, more than a session may start with under this runtime's memory limit; it is refused",
                baseline.unwrap_or_default()
            )));
        }
        let memory_at = range.end - memory.len()..range.end;
        let memory = crate::memory_image::MemoryTemplate::read(shared.clone(), memory_at, most)
            .map_err(SnapshotError::Corrupt)?;
        let image = Arc::new(crate::memory_image::SessionImage { memory, baseline });
        let instance = session
            .instantiate(Some(image))
            .map_err(|e| SnapshotError::Session(e.to_string()))?;
        session.instance = Some(instance);
        Ok(session)
    }

    /// The session's state at this step boundary, of a guest started by turns:
    /// its serving loop is paused (see [`turns`]) while the pages of its memory
    /// that differ from a fresh instance's are copied, then entered again.
    fn snapshot(&mut self) -> Result<Snapshot, SnapshotError> {
        if !self.blueprint.guest.launch.by_turns() {
            return Err(stdio_unsupported(self.blueprint.runtime_name));
        }
        if self.files.is_some() {
            return Err(SnapshotError::Unsupported {
                runtime: self.blueprint.runtime_name.to_string(),
                why: "a session with a working directory holds descriptors of its folders, which are the host's, not the guest's".into(),
            });
        }
        let mut instance = match self.instance.take() {
            Some(instance) => instance,
            None => self
                .instantiate(None)
                .map_err(|e| SnapshotError::Session(e.to_string()))?,
        };
        locked(&instance.exchange).pause();
        let deadline = Instant::now() + self.blueprint.startup_time;
        let image = match poll_guest(&mut instance, deadline) {
            Event::Ready => locked(&instance.exchange).paused_state.take(),
            _ => None,
        };
        let Some(image) = image else {
            // The guest did not come back to its loop: it is not used again.
            return Err(SnapshotError::Session(
                "the guest did not come back to its serving loop after its state was copied; the session's next run starts afresh".into(),
            ));
        };
        self.instance = Some(instance);
        let header = serde_json::json!({
            "start": self.start_digest(),
            "baseline": image.baseline,
        })
        .to_string();
        let header_len = (header.len() as u64).to_le_bytes();
        let (head, pages) = image.memory.to_parts();
        let identity = self.blueprint.guest.sha256.clone().unwrap_or_default();
        Ok(Snapshot::seal_parts(
            self.blueprint.runtime_name,
            &identity,
            &[&header_len, header.as_bytes(), &head, pages],
        ))
    }

    /// What a snapshot's session must have started with to be restored into this
    /// one: the sha256 of its prelude, which holds its tools and limits (a
    /// snapshot is never of a session with folders).
    fn start_digest(&self) -> String {
        crate::cache::sha256_hex(turns::template_key(&self.prelude, &[]).as_bytes())
    }

    fn host_error(&self, reason: String) -> HostError {
        HostError::SessionStart {
            runtime: self.blueprint.runtime_name,
            reason,
        }
    }

    /// Creates a store and instance and runs the guest until it waits for its first
    /// script: from `restore`'s state when given (a guest started by turns).
    fn instantiate(
        &self,
        restore: Option<Arc<crate::memory_image::SessionImage>>,
    ) -> Result<LiveGuest, HostError> {
        let engine = engine::engine().map_err(|e| self.host_error(e))?;
        let limits = &self.blueprint.limits;
        let exchange = Exchange::new(limits.max_output_bytes, protocol::max_message_bytes(limits));
        let mut wasi = WasiCtxBuilder::new();
        wasi.stdin(GuestStdin(exchange.clone()))
            .stdout(GuestOutput {
                exchange: exchange.clone(),
                parse: true,
            })
            .stderr(GuestOutput {
                exchange: exchange.clone(),
                parse: false,
            });
        if self.blueprint.guest.launch != Launch::QuickJsReactor {
            wasi.args(&self.argv);
        }
        wasi.envs(&self.blueprint.guest.env);
        // The run's folders first: the file checks find each preopen by its
        // descriptor (3, 4… in this order), then the guest's own read-only ones.
        if let Some(view) = &self.files {
            files::preopen(&mut wasi, view).map_err(|e| self.host_error(e))?;
        }
        for mount in &self.blueprint.guest.mounts {
            wasi.preopened_dir(&mount.host, &mount.guest, FsPerms::ReadOnly)
                .map_err(|e| {
                    self.host_error(format!(
                        "cannot give the guest {} at {}: {e:#}",
                        mount.host.display(),
                        mount.guest
                    ))
                })?;
        }
        let state = HostState {
            wasi: wasi.build_p1(),
            memory: MemoryCap {
                limit: limits.max_memory_bytes,
                baseline: None,
                exchange: exchange.clone(),
            },
            exchange: exchange.clone(),
            files: None,
        };
        let mut store = Store::new(engine, state);
        let pre = match &self.files {
            Some(view) => {
                let own: Vec<&std::path::Path> = (self.blueprint.guest.mounts.iter())
                    .map(|mount| mount.host.as_path())
                    .collect();
                files::install(&mut store, view, &own).map_err(|e| self.host_error(e))?;
                self.blueprint.pre_files.clone()
            }
            None => self.blueprint.pre.clone(),
        };
        store.limiter(|state| &mut state.memory);
        store.set_epoch_deadline(1);
        store.epoch_deadline_callback(|context| {
            let past = locked(&context.data().exchange).must_stop();
            Ok(if past {
                UpdateDeadline::Interrupt
            } else {
                UpdateDeadline::Continue(1)
            })
        });
        let deadline = Instant::now() + self.blueprint.startup_time;
        locked(&exchange).deadline = Some(deadline);

        let turns = self.blueprint.guest.launch.by_turns().then(|| {
            let folders: Vec<(String, bool)> = (self.files.iter())
                .flat_map(|view| view.dirs.iter())
                .map(|dir| (dir.guest.clone(), dir.writable))
                .collect();
            TurnStart {
                key: turns::template_key(&self.prelude, &folders),
                prelude: self.prelude.clone(),
                templates: self.blueprint.templates.clone(),
                restore,
            }
        });
        let call = guest_call(
            pre,
            store,
            self.blueprint.guest.launch,
            self.argv.clone(),
            turns,
        );
        let mut instance = LiveGuest {
            exchange,
            call,
            ended: None,
        };
        match poll_guest(&mut instance, deadline) {
            Event::Ready => {
                let mut exchange = locked(&instance.exchange);
                exchange.deadline = None;
                exchange.end_run();
                drop(exchange);
                Ok(instance)
            }
            other => {
                let logs = locked(&instance.exchange).end_run().render();
                let why = match other {
                    Event::Ended(Err(e)) => engine::instantiation_error(&e),
                    Event::Ended(Ok(())) => "the guest exited while starting".into(),
                    Event::Stuck => "the guest did not start in time".into(),
                    Event::Broken => "the guest wrote past a protocol message".into(),
                    Event::Message(m) => format!("the guest sent {m:?} before any script"),
                    Event::Ready => "the guest was ready".into(),
                };
                let logs = logs.trim();
                Err(self.host_error(if logs.is_empty() {
                    why
                } else {
                    format!(
                        "{why}; it printed: {}",
                        codeact_runtime::text::prefix_within(logs, 2000)
                    )
                }))
            }
        }
    }

    fn run_script(
        &mut self,
        script: &str,
        interrupt: Option<&Interrupt>,
    ) -> Result<RunOutcome, HostError> {
        let limits = self.blueprint.limits.clone();
        let mut instance = match self.instance.take() {
            Some(instance) => instance,
            None => self.instantiate(None)?,
        };
        let code = if self.blueprint.hoist_js {
            hoist_top_level(script)
        } else {
            script.to_string()
        };
        let nonce = protocol::new_nonce();
        // The script's own time stops while it waits on tools: the deadline
        // moves later by each wait, never past the total time.
        let mut clock = RunClock::start(&limits);
        locked(&instance.exchange).begin_run(
            &nonce,
            protocol::script_line(&nonce, &code),
            limits.max_output_bytes,
            protocol::max_message_bytes(&limits),
            clock.deadline(),
            interrupt,
        );
        // The completion, and whether the instance may serve the next run.
        let (completion, keep) = loop {
            match poll_guest(&mut instance, clock.deadline()) {
                Event::Message(GuestMessage::ToolCall { name, args }) => {
                    let result = clock.pause(|| self.tools.call(&name, args));
                    if let Some(stop) = out_of_time(&instance, &clock, &limits) {
                        break stop;
                    }
                    let line = match result {
                        Ok(value) => protocol::tool_answer_line(Ok(&value)),
                        Err(e) => protocol::tool_answer_line(Err(&format!(
                            "tool '{name}' failed: {}",
                            e.message
                        ))),
                    };
                    locked(&instance.exchange).answer_tool(line);
                }
                Event::Message(GuestMessage::ToolCalls(calls)) => {
                    let names: Vec<String> = calls.iter().map(|call| call.name.clone()).collect();
                    let results = clock.pause(|| self.tools.call_many(calls));
                    if let Some(stop) = out_of_time(&instance, &clock, &limits) {
                        break stop;
                    }
                    let answers: Vec<Result<serde_json::Value, String>> = names
                        .iter()
                        .zip(results)
                        .map(|(name, result)| {
                            result.map_err(|e| format!("tool '{name}' failed: {}", e.message))
                        })
                        .collect();
                    let line = protocol::tool_answers_line(&answers);
                    locked(&instance.exchange).answer_tool(line);
                }
                Event::Message(GuestMessage::Done(value)) => break (Ok(value), true),
                Event::Message(GuestMessage::Failed {
                    kind,
                    message,
                    values,
                    facts,
                }) => {
                    let refused = locked(&instance.exchange).memory_refused;
                    let failure = Failure {
                        kind,
                        message,
                        values,
                        facts,
                    };
                    let language = self.blueprint.runtime_name;
                    match script_failure(failure, language, refused, &limits) {
                        // The script's values still fill the memory, and an
                        // interpreter that ran out may not run reliably again: the
                        // next run gets a fresh instance.
                        error @ ScriptError::LimitExceeded {
                            limit: LimitKind::Memory,
                            ..
                        } => break (Err(error.restarting()), false),
                        error => break (Err(error), true),
                    }
                }
                // The guest may still be writing it, or waiting for a tool answer
                // it will never get: it is not used again.
                Event::Message(GuestMessage::Oversized(cap)) => {
                    let detail = format!(
                        "the value or tool arguments are over {} as JSON, the most a script may send under this limit",
                        shown_bytes(cap),
                    );
                    let error =
                        ScriptError::limit(LimitKind::Memory, &limits, Some(detail)).restarting();
                    break (Err(error), false);
                }
                Event::Message(GuestMessage::Malformed(what)) => {
                    let message = format!("the guest sent a malformed protocol message: {what}");
                    break (Err(ScriptError::thrown(message)), true);
                }
                // Unreachable while a run is on (reads end-of-file then), but a guest
                // found waiting for a script has no value to give.
                Event::Ready => {
                    let message = "the guest ended the script without a value".to_string();
                    break (Err(ScriptError::thrown(message)), true);
                }
                Event::Ended(result) => {
                    let refused = locked(&instance.exchange).memory_refused;
                    let error = ended(result, refused, &limits, clock.limit());
                    break (Err(error), false);
                }
                Event::Stuck => {
                    let error = ScriptError::limit(clock.limit(), &limits, None);
                    break (Err(error.restarting()), false);
                }
                Event::Broken => break (Err(self.broken()), false),
            }
        };
        // A result counts only once the guest is back in its read of the next
        // script, having written nothing more: a script that sent a result itself
        // and kept running is found here, before its result is taken.
        let (completion, keep) = if keep {
            self.settle(&mut instance, &clock, completion, &limits)
        } else {
            (completion, keep)
        };
        let logs = locked(&instance.exchange).end_run();
        if keep {
            self.instance = Some(instance);
        }
        Ok(RunOutcome { completion, logs })
    }
}

impl StdioSession {
    /// Polls the guest after its terminal message until it waits for the next
    /// script; `completion` stands only if it gets there within the deadline
    /// without writing anything.
    fn settle(
        &self,
        instance: &mut LiveGuest,
        clock: &RunClock,
        completion: Result<serde_json::Value, ScriptError>,
        limits: &Limits,
    ) -> (Result<serde_json::Value, ScriptError>, bool) {
        match poll_guest(instance, clock.deadline()) {
            Event::Ready => (completion, true),
            Event::Broken | Event::Message(_) => (Err(self.broken()), false),
            Event::Ended(result) => {
                let refused = locked(&instance.exchange).memory_refused;
                (Err(ended(result, refused, limits, clock.limit())), false)
            }
            Event::Stuck => {
                let error = ScriptError::limit(clock.limit(), limits, None);
                (Err(error.restarting()), false)
            }
        }
    }

    /// The error for a guest that wrote where it should have read.
    fn broken(&self) -> ScriptError {
        ScriptError::EngineLost {
            message: "the script wrote to the host's protocol channel itself (a message after its tool call or its result)".into(),
            detail: None,
        }
    }
}

/// `bytes` for a model: in MiB when whole, else in KiB.
fn shown_bytes(bytes: usize) -> String {
    if bytes.is_multiple_of(1 << 20) {
        format!("{} MiB", bytes >> 20)
    } else {
        format!("{} KiB", bytes >> 10)
    }
}

/// The guest's whole life as one async call: instantiate, then run `_start` (a
/// command), `_initialize` and `qjs_init_argv` (the QuickJS reactor, whose argv
/// is written into its own memory), or `_initialize` if exported and two turns
/// (the CPython reactor: see [`turns`]). It returns only when the guest exits or
/// traps.
fn guest_call(
    pre: InstancePre<HostState>,
    mut store: Store<HostState>,
    launch: Launch,
    argv: Vec<String>,
    turns: Option<TurnStart>,
) -> GuestCall {
    Box::pin(async move {
        let instance = pre.instantiate_async(&mut store).await?;
        match launch {
            Launch::QuickJsReactor => {
                let initialize: TypedFunc<(), ()> =
                    instance.get_typed_func(&mut store, "_initialize")?;
                initialize.call_async(&mut store, ()).await?;
                let malloc: TypedFunc<i32, i32> = instance.get_typed_func(&mut store, "malloc")?;
                let memory = instance
                    .get_memory(&mut store, "memory")
                    .ok_or_else(|| wasmtime::Error::msg("the guest exports no memory"))?;
                let mut pointers = Vec::with_capacity(argv.len() * 4);
                for arg in &argv {
                    let mut bytes = arg.as_bytes().to_vec();
                    bytes.push(0);
                    let size = i32::try_from(bytes.len())?;
                    let at = malloc.call_async(&mut store, size).await?;
                    memory.write(&mut store, usize::try_from(at)?, &bytes)?;
                    pointers.extend_from_slice(&at.to_le_bytes());
                }
                let array = malloc
                    .call_async(&mut store, i32::try_from(pointers.len())?)
                    .await?;
                memory.write(&mut store, usize::try_from(array)?, &pointers)?;
                let init_argv: TypedFunc<(i32, i32), i32> =
                    instance.get_typed_func(&mut store, "qjs_init_argv")?;
                init_argv
                    .call_async(&mut store, (i32::try_from(argv.len())?, array))
                    .await?;
            }
            Launch::CPython(CPythonBuild::Reactor) => {
                if let Ok(initialize) = instance.get_typed_func::<(), ()>(&mut store, "_initialize")
                {
                    initialize.call_async(&mut store, ()).await?;
                }
                let start = turns.ok_or_else(|| wasmtime::Error::msg("no prelude to start by"))?;
                let status = turns::serve(instance, &mut store, start).await?;
                // A turn returns the status `python` would exit with; a command's
                // `_start` reports it as an exit instead: make them alike.
                if status != 0 {
                    return Err(I32Exit(status).into());
                }
            }
            _ => {
                let start: TypedFunc<(), ()> = instance.get_typed_func(&mut store, "_start")?;
                start.call_async(&mut store, ()).await?;
            }
        }
        Ok(())
    })
}

/// Polls the guest's call until something needs the host.
fn poll_guest(instance: &mut LiveGuest, deadline: Instant) -> Event {
    let _ticking = Ticking::start();
    let waker = Waker::from(Arc::new(ThreadWaker(thread::current())));
    let mut context = Context::from_waker(&waker);
    loop {
        {
            let mut exchange = locked(&instance.exchange);
            if let Some(message) = exchange.inbox.pop_front() {
                return Event::Message(message);
            }
            if exchange.broken() {
                return Event::Broken;
            }
        }
        if let Some(result) = instance.ended.take() {
            return Event::Ended(result);
        }
        let call = &mut instance.call;
        let poll =
            wasmtime_wasi::runtime::with_ambient_tokio_runtime(|| call.as_mut().poll(&mut context));
        match poll {
            Poll::Ready(result) => {
                instance.ended = Some(result);
                continue;
            }
            Poll::Pending => {
                let exchange = locked(&instance.exchange);
                if !exchange.inbox.is_empty() || exchange.broken() {
                    continue;
                }
                if exchange.phase == Phase::Idle && exchange.waiting_for_script() {
                    return Event::Ready;
                }
            }
        }
        // The guest waits on something else (a timer, say): sleep until woken or
        // until the deadline, past which it is given up on; an interrupted run is
        // given up on at once.
        let now = Instant::now();
        if now >= deadline + STUCK_GRACE || locked(&instance.exchange).interrupted() {
            return Event::Stuck;
        }
        thread::park_timeout((deadline + STUCK_GRACE - now).min(Duration::from_millis(20)));
    }
}

/// A failure as the guest reported it.
struct Failure {
    kind: FailKind,
    message: String,
    values: Vec<(String, String)>,
    facts: GuestFacts,
}

/// The error for a failure the guest of `runtime` reported.
fn script_failure(failure: Failure, runtime: &str, refused: bool, limits: &Limits) -> ScriptError {
    let Failure {
        kind,
        message,
        values,
        facts,
    } = failure;
    let facts = |syntax: bool| error_facts::from_guest(runtime, &facts, &message, syntax);
    match kind {
        FailKind::Syntax => {
            let facts = facts(true);
            ScriptError::syntax(message).with_facts(facts)
        }
        FailKind::Unrepresentable => ScriptError::Unrepresentable { message },
        FailKind::Memory => ScriptError::limit(LimitKind::Memory, limits, Some(message)),
        FailKind::CallDepth => ScriptError::limit(LimitKind::CallDepth, limits, Some(message)),
        FailKind::Thrown if refused => ScriptError::limit(LimitKind::Memory, limits, Some(message)),
        FailKind::Thrown => {
            let facts = facts(false);
            ScriptError::Thrown {
                message,
                values,
                facts,
            }
        }
        FailKind::NoValue => ScriptError::NoValue { message },
    }
}

/// After a wait on tools: the run's deadline, moved by the wait, goes to the
/// epoch check; a run found past it (a call cut short by the total time answers
/// with an error the script could otherwise catch and carry on past its limit)
/// ends there, with the instance, which waits for an answer it will not get.
fn out_of_time(
    instance: &LiveGuest,
    clock: &RunClock,
    limits: &Limits,
) -> Option<(Result<serde_json::Value, ScriptError>, bool)> {
    locked(&instance.exchange).deadline = Some(clock.deadline());
    clock.expired().then(|| {
        let error = ScriptError::limit(clock.limit(), limits, None).restarting();
        (Err(error), false)
    })
}

/// The error for a guest whose call returned during a run: it exited or trapped
/// (at the epoch deadline: the limit `time` says fired).
fn ended(
    result: wasmtime::Result<()>,
    refused: bool,
    limits: &Limits,
    time: LimitKind,
) -> ScriptError {
    let error = match result {
        Ok(()) => {
            return ScriptError::EngineLost {
                message: "the interpreter exited before the script finished".into(),
                detail: None,
            };
        }
        Err(error) => error,
    };
    if let Some(exit) = error.downcast_ref::<I32Exit>() {
        return ScriptError::EngineLost {
            message: format!("the script ended the interpreter (exit status {})", exit.0),
            detail: None,
        };
    }
    let limit = |kind, detail| ScriptError::limit(kind, limits, detail).restarting();
    match error.downcast_ref::<Trap>() {
        Some(Trap::Interrupt) => limit(time, None),
        Some(Trap::StackOverflow) => limit(LimitKind::CallDepth, None),
        _ if refused => limit(LimitKind::Memory, Some(first_line(&error))),
        _ => ScriptError::EngineLost {
            message: "the interpreter crashed".into(),
            detail: Some(first_line(&error)),
        },
    }
}

/// The cause of a guest failure in one line (a trap's name, not its backtrace).
fn first_line(error: &wasmtime::Error) -> String {
    if let Some(trap) = error.downcast_ref::<Trap>() {
        return trap.to_string();
    }
    let text = error.root_cause().to_string();
    text.lines().next().unwrap_or_default().to_string()
}

impl Session for WasmSession {
    fn run(&mut self, script: &str) -> Result<RunOutcome, HostError> {
        match &mut self.inner {
            Inner::Stdio(session) => session.run_script(script, None),
            Inner::Abi(session) => session.run_script(script, None),
        }
    }

    fn snapshot(&mut self) -> Result<Snapshot, SnapshotError> {
        match &mut self.inner {
            Inner::Stdio(session) => session.snapshot(),
            Inner::Abi(session) => session.snapshot(),
        }
    }

    /// An interrupt stops the guest as its deadline does: at the next epoch tick
    /// (every 5 ms) while it runs wasm, at once while it waits outside wasm.
    fn run_interruptible(
        &mut self,
        script: &str,
        interrupt: &Interrupt,
    ) -> Result<RunOutcome, HostError> {
        match &mut self.inner {
            Inner::Stdio(session) => session.run_script(script, Some(interrupt)),
            Inner::Abi(session) => session.run_script(script, Some(interrupt)),
        }
    }
}

/// Fills the prelude's placeholders for a session with these tools and limits:
/// the tools' names (a JSON array), each tool's parameter names in the order its
/// signature shows them (a JSON object), for positional calls, and the namespace
/// objects (`codeact_runtime::namespaces`), and `also`'s. In one pass over the
/// template: a tool's or parameter's name that spells a placeholder (an MCP
/// server chooses them) is never expanded.
pub(crate) fn render_prelude(
    template: &str,
    tools: &[codeact_runtime::ToolSpec],
    limits: &Limits,
    also: &[(&str, &str)],
) -> String {
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
    let params: serde_json::Map<String, serde_json::Value> = tools
        .iter()
        .map(|t| {
            let order: Vec<String> = t.argument_names().into_iter().map(|(n, _)| n).collect();
            (t.name.clone(), serde_json::json!(order))
        })
        .collect();
    let namespaces =
        serde_json::to_string(&codeact_runtime::namespaces(tools)).unwrap_or_else(|_| "{}".into());
    let names = serde_json::to_string(&names).unwrap_or_else(|_| "[]".into());
    let params = serde_json::to_string(&params).unwrap_or_else(|_| "{}".into());
    let max_depth = limits.max_nesting_depth.to_string();
    let max_call_depth = limits.max_call_depth.to_string();
    let mut values: Vec<(&str, &str)> = vec![
        ("__CODEACT_TOOLS__", &names),
        ("__CODEACT_TOOL_PARAMS__", &params),
        ("__CODEACT_NAMESPACES__", &namespaces),
        ("__CODEACT_MAX_DEPTH__", &max_depth),
        ("__CODEACT_MAX_CALL_DEPTH__", &max_call_depth),
        ("__CODEACT_ENCODER__", codeact_runtime::JS_ENCODER),
    ];
    values.extend_from_slice(also);
    fill_placeholders(template, &values)
}

/// `template` with each of `values`' placeholders replaced, scanning the
/// template once, left to right: what a value brings in is never read again as
/// a placeholder.
fn fill_placeholders(template: &str, values: &[(&str, &str)]) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(at) = rest.find("__CODEACT_") {
        out.push_str(&rest[..at]);
        let here = &rest[at..];
        match values
            .iter()
            .find(|(placeholder, _)| here.starts_with(placeholder))
        {
            Some((placeholder, value)) => {
                out.push_str(value);
                rest = &here[placeholder.len()..];
            }
            None => {
                out.push_str("__CODEACT_");
                rest = &here["__CODEACT_".len()..];
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_parameter_named_like_a_placeholder_is_not_expanded_in_the_prelude() {
        let tools = [
            codeact_runtime::ToolSpec::new("convert", "").with_parameters(serde_json::json!({
                "type": "object",
                "properties": {
                    "x__CODEACT_NAMESPACES__": {"type": "string"},
                    "y__CODEACT_ENCODER__": {"type": "string"},
                    "z__CODEACT_BY_TURNS__": {"type": "string"},
                }
            })),
        ];
        let template = "P = __CODEACT_TOOL_PARAMS__\nN = __CODEACT_NAMESPACES__\nB = __CODEACT_BY_TURNS__\n__CODEACT_UNKNOWN__";
        let rendered = render_prelude(
            template,
            &tools,
            &Limits::default(),
            &[("__CODEACT_BY_TURNS__", "True")],
        );
        let params_line = rendered.lines().next().expect("a first line");
        for name in [
            "x__CODEACT_NAMESPACES__",
            "y__CODEACT_ENCODER__",
            "z__CODEACT_BY_TURNS__",
        ] {
            assert!(params_line.contains(name), "{params_line}");
        }
        assert!(
            rendered.contains("\nN = {}\nB = True\n__CODEACT_UNKNOWN__"),
            "{rendered}"
        );
    }
}
