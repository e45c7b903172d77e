//! Guests built against codeact's import ABI (`wasm:rhai` and `wasm:boa`, from
//! `guests/`): the host calls exported functions to start a session and run a
//! script, and the guest calls imported `codeact` functions to run a tool. No text
//! protocol, so nothing a script prints can pose as a host message.
//!
//! The guest sees no WASI context at all: the handful of WASI functions Rust's
//! standard library imports (clocks, random bytes, environment, writes to
//! stdout/stderr, exit) are defined here, so a guest has no files, no environment,
//! no sockets and no way to sleep, by construction rather than by configuration.
//!
//! Limits hold twice. Inside, the guest runs codeact's own engine code with the
//! session's [`Limits`] (Rhai with all its checks, Boa with its loop and recursion
//! limits): it stops a runaway script with a clear error and keeps the session.
//! Outside, wasmtime holds what the engine cannot count: an epoch deadline (for an
//! engine that checks the host's alarm flag, shortly after the time limit, so only
//! a builtin that runs long meets it) and a cap on linear memory. Those stops cost
//! the instance: the next run starts a fresh one, and the error says so.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use codeact_runtime::{
    ErrorFacts, HostError, Interrupt, LimitKind, Limits, LogBuffer, RunClock, RunOutcome,
    ScriptError, Snapshot, SnapshotError, ToolDispatch,
};
use serde_json::{Value, json};
use wasmtime::{
    Caller, Engine, InstancePre, Linker, Memory, Module, ResourceLimiter, Store, Trap, TypedFunc,
    UpdateDeadline,
};

use crate::engine::Ticking;

/// Memory a guest may grow to while it starts (the engine and its standard library),
/// on top of the memory limit.
const STARTUP_MEMORY: usize = 64 << 20;

/// The stderr a guest may leave (a panic message), kept for the error.
const STDERR_CAP: usize = 4 << 10;

/// The most the host reads of one answer or tool request: the limit on a script's
/// memory bounds what a guest can hold, and this bounds what the host copies.
fn max_transfer(limits: &Limits) -> usize {
    limits.max_memory_bytes.saturating_add(1 << 20)
}

/// How long after the time limit wasmtime stops a guest whose engine checks the
/// alarm flag but did not stop itself (inside one long builtin): 4% of the limit,
/// between 5 ms and 200 ms. The engine checks the flag on every operation, so it
/// gets there first on ordinary loops and the session keeps its state. A guest
/// without the flag gets no grace: wasmtime stops it at the deadline.
fn backstop_grace(limits: &Limits) -> Duration {
    (limits.wall_time / 25).clamp(Duration::from_millis(5), Duration::from_millis(200))
}

/// The largest input buffer a guest keeps between calls (`codeact-guest-abi`'s
/// `KEPT_INPUT_BYTES`): the host reuses a buffer up to this size and asks again
/// for a larger input.
const KEPT_INPUT_BYTES: usize = 64 << 10;

/// A generous bound on the time a guest takes to parse and convert `bytes` of a tool
/// reply: 50 ns a byte, several times what the Rhai guest needs here.
fn reading_time(bytes: usize) -> Duration {
    Duration::from_nanos(u64::try_from(bytes).unwrap_or(u64::MAX).saturating_mul(50))
}

/// A run found past its deadline when a tool call returned: a call cut short by
/// the total time answers with an error the script could otherwise catch and
/// carry on past its limit, so the guest, inside the call, is stopped there.
#[derive(Debug)]
struct OutOfTime(LimitKind);

impl std::fmt::Display for OutOfTime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the run's {} passed during a tool call", self.0)
    }
}

impl std::error::Error for OutOfTime {}

/// A guest exited through WASI's `proc_exit`.
#[derive(Debug)]
struct GuestExit(i32);

impl std::fmt::Display for GuestExit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the guest exited with status {}", self.0)
    }
}

impl std::error::Error for GuestExit {}

/// What every instance of an ABI guest needs.
pub(crate) struct AbiBlueprint {
    pub(crate) runtime_name: &'static str,
    pub(crate) pre: InstancePre<AbiState>,
    pub(crate) limits: Arc<Limits>,
    /// The sha256 of the guest's module, which its snapshots are bound to.
    pub(crate) guest_sha256: String,
}

/// The store's data.
pub(crate) struct AbiState {
    tools: Arc<dyn ToolDispatch>,
    /// The reply to the last tool call, until the guest takes it.
    reply: Vec<u8>,
    memory: MemoryCap,
    /// The current run's deadlines, its own time paused for each wait on tools.
    /// `None` between runs.
    clock: Option<RunClock>,
    /// The current run's time limit: at it, the host raises the guest's alarm flag
    /// and the engine stops the script at its next operation. `None` between runs.
    deadline: Option<Instant>,
    /// When wasmtime stops the guest itself: the deadline plus the grace, and never
    /// sooner than the grace after a tool call returns. `None` between calls.
    hard_deadline: Option<Instant>,
    grace: Duration,
    /// Raised from outside to stop the current run as at its deadline.
    interrupt: Option<Interrupt>,
    /// The guest's memory and the address of its alarm flag, once instantiated.
    alarm: Option<(Memory, usize)>,
    max_transfer: usize,
    stderr: Vec<u8>,
    /// The monotonic clock's zero, for `clock_time_get`.
    epoch: Instant,
}

impl AbiState {
    /// The state of a new instance whose scripts call `tools` under `limits`: no
    /// run yet, no deadline, memory capped for starting.
    pub(crate) fn new(tools: Arc<dyn ToolDispatch>, limits: &Limits) -> AbiState {
        AbiState {
            tools,
            reply: Vec::new(),
            memory: MemoryCap {
                limit: limits.max_memory_bytes,
                baseline: None,
                refused: false,
            },
            clock: None,
            deadline: None,
            hard_deadline: None,
            grace: Duration::ZERO,
            interrupt: None,
            alarm: None,
            max_transfer: max_transfer(limits),
            stderr: Vec::new(),
            epoch: Instant::now(),
        }
    }
}

/// Caps linear memory: while starting, at [`STARTUP_MEMORY`] plus the limit; from
/// the first run on, at what the started guest held plus one and a half times the
/// limit (the engine's meter stops scripts at the limit; the rest is room for the
/// allocator's fragmentation and the answer's JSON).
struct MemoryCap {
    limit: usize,
    baseline: Option<usize>,
    refused: bool,
}

impl MemoryCap {
    fn cap(&self) -> usize {
        match self.baseline {
            Some(baseline) => baseline
                .saturating_add(self.limit)
                .saturating_add(self.limit / 2),
            None => STARTUP_MEMORY.saturating_add(self.limit),
        }
    }
}

impl ResourceLimiter for MemoryCap {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired <= self.cap() {
            return Ok(true);
        }
        self.refused = true;
        Ok(false)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= 1 << 16)
    }
}

/// Links the `codeact` imports and the few WASI functions a Rust guest imports;
/// anything else the module imports traps when called.
pub(crate) fn link(engine: &Engine, module: &Module) -> wasmtime::Result<InstancePre<AbiState>> {
    let mut linker: Linker<AbiState> = Linker::new(engine);
    linker.func_wrap("codeact", "call_tool", call_tool)?;
    linker.func_wrap("codeact", "call_tools", call_tools)?;
    linker.func_wrap("codeact", "take_reply", take_reply)?;
    const WASI: &str = "wasi_snapshot_preview1";
    linker.func_wrap(WASI, "clock_time_get", clock_time_get)?;
    linker.func_wrap(WASI, "random_get", random_get)?;
    linker.func_wrap(WASI, "environ_sizes_get", environ_sizes_get)?;
    linker.func_wrap(WASI, "environ_get", |_: i32, _: i32| -> i32 {
        ERRNO_SUCCESS
    })?;
    linker.func_wrap(WASI, "args_sizes_get", environ_sizes_get)?;
    linker.func_wrap(WASI, "args_get", |_: i32, _: i32| -> i32 { ERRNO_SUCCESS })?;
    linker.func_wrap(WASI, "fd_write", fd_write)?;
    // Sleeping and waiting are not offered: a guest that tries gets "not supported".
    linker.func_wrap(
        WASI,
        "poll_oneoff",
        |_: i32, _: i32, _: i32, _: i32| -> i32 { ERRNO_NOTSUP },
    )?;
    linker.func_wrap(WASI, "proc_exit", |code: i32| -> wasmtime::Result<()> {
        Err(wasmtime::Error::new(GuestExit(code)))
    })?;
    linker.define_unknown_imports_as_traps(module)?;
    linker.instantiate_pre(module)
}

const ERRNO_SUCCESS: i32 = 0;
const ERRNO_BADF: i32 = 8;
const ERRNO_FAULT: i32 = 21;
const ERRNO_INVAL: i32 = 28;
const ERRNO_NOTSUP: i32 = 58;

fn guest_memory(caller: &mut Caller<'_, AbiState>) -> wasmtime::Result<Memory> {
    caller
        .get_export("memory")
        .and_then(|export| export.into_memory())
        .ok_or_else(|| wasmtime::Error::msg("the guest exports no memory"))
}

/// Reads `len` bytes at `ptr` of the guest's memory, refusing more than `cap`.
fn read_guest(
    caller: &mut Caller<'_, AbiState>,
    ptr: i32,
    len: i32,
    cap: usize,
) -> wasmtime::Result<Vec<u8>> {
    let memory = guest_memory(caller)?;
    let (ptr, len) = (ptr as u32 as usize, len as u32 as usize);
    if len > cap {
        return Err(wasmtime::Error::msg(format!(
            "the guest sent {len} bytes, over the {cap} a transfer may hold"
        )));
    }
    let mut bytes = vec![0; len];
    memory.read(&*caller, ptr, &mut bytes)?;
    Ok(bytes)
}

fn write_guest(caller: &mut Caller<'_, AbiState>, ptr: i32, bytes: &[u8]) -> bool {
    guest_memory(caller)
        .and_then(|memory| Ok(memory.write(&mut *caller, ptr as u32 as usize, bytes)?))
        .is_ok()
}

/// `codeact.call_tool(request, len) -> reply_len`: runs the tool named in the
/// request (`{"name", "args"}`) and keeps its reply for `take_reply`.
fn call_tool(mut caller: Caller<'_, AbiState>, ptr: i32, len: i32) -> wasmtime::Result<i32> {
    let cap = caller.data().max_transfer;
    let request = read_guest(&mut caller, ptr, len, cap)?;
    let reply = match serde_json::from_slice::<Value>(&request) {
        Ok(mut request) => {
            let name = request["name"].as_str().unwrap_or_default().to_string();
            let args = request["args"].take();
            let tools = caller.data().tools.clone();
            let started = Instant::now();
            let called = tools.call(&name, args);
            let state = caller.data_mut();
            if let Some(clock) = state.clock.as_mut() {
                // The wait is the host's: the deadline moves later by it (an
                // interrupt raised meanwhile brings it back at the next tick).
                clock.waited(started.elapsed());
                let clock = *clock;
                if clock.expired() {
                    return Err(wasmtime::Error::new(OutOfTime(clock.limit())));
                }
                state.deadline = Some(clock.deadline());
                state.hard_deadline = Some(clock.deadline() + state.grace);
            }
            match called {
                Ok(value) => json!({"ok": value}),
                Err(e) => json!({"error": format!("tool '{name}' failed: {}", e.message)}),
            }
        }
        Err(e) => json!({"error": format!("the tool request was not JSON: {e}")}),
    };
    let reply = reply.to_string().into_bytes();
    // Time in the tool is the host's, and so is the guest's reading of the reply
    // (it parses and converts it before the script's next operation): an engine
    // that checks the alarm gets its grace plus that reading's time after a tool
    // returns, so its own stop, which keeps the session, comes first. Only such an
    // engine: it stops at its next operation once the alarm is up, so a script
    // cannot stretch its time by calling tools. Any other guest keeps its
    // deadline.
    let state = caller.data_mut();
    if state.alarm.is_some()
        && let Some(hard) = state.hard_deadline.as_mut()
    {
        *hard = (*hard).max(Instant::now() + state.grace + reading_time(reply.len()));
    }
    let len = i32::try_from(reply.len())
        .map_err(|_| wasmtime::Error::msg("a tool reply over 2 GiB cannot be handed over"))?;
    caller.data_mut().reply = reply;
    Ok(len)
}

/// `codeact.call_tools(request, len) -> reply_len`: runs the calls of a batch
/// (`[{"name", "args"}, …]`) together ([`ToolDispatch::call_many`]) and keeps
/// their answers, `{"results": [{"ok": …} | {"error": …}, …]}` in order, for
/// `take_reply`. The time in the tools is the host's, as for `call_tool`.
///
/// [`ToolDispatch::call_many`]: codeact_runtime::ToolDispatch::call_many
fn call_tools(mut caller: Caller<'_, AbiState>, ptr: i32, len: i32) -> wasmtime::Result<i32> {
    let cap = caller.data().max_transfer;
    let request = read_guest(&mut caller, ptr, len, cap)?;
    let reply = match serde_json::from_slice::<Vec<codeact_runtime::ToolCall>>(&request) {
        Ok(calls) => {
            let names: Vec<String> = calls.iter().map(|call| call.name.clone()).collect();
            let tools = caller.data().tools.clone();
            let results: Vec<Value> = names
                .iter()
                .zip(tools.call_many(calls))
                .map(|(name, result)| match result {
                    Ok(value) => json!({"ok": value}),
                    Err(e) => json!({"error": format!("tool '{name}' failed: {}", e.message)}),
                })
                .collect();
            json!({ "results": results })
        }
        Err(e) => json!({"error": format!("the batch of tool calls was not JSON: {e}")}),
    };
    hand_over(caller, reply.to_string().into_bytes())
}

/// Keeps `reply` for `take_reply` and returns its length, after giving an
/// engine that checks the alarm its grace for reading it (see `call_tool`).
fn hand_over(mut caller: Caller<'_, AbiState>, reply: Vec<u8>) -> wasmtime::Result<i32> {
    let state = caller.data_mut();
    if state.alarm.is_some()
        && let Some(hard) = state.hard_deadline.as_mut()
    {
        *hard = (*hard).max(Instant::now() + state.grace + reading_time(reply.len()));
    }
    let len = i32::try_from(reply.len())
        .map_err(|_| wasmtime::Error::msg("a tool reply over 2 GiB cannot be handed over"))?;
    caller.data_mut().reply = reply;
    Ok(len)
}

/// `codeact.take_reply(dest)`: copies the kept reply to `dest`.
fn take_reply(mut caller: Caller<'_, AbiState>, dest: i32) -> wasmtime::Result<()> {
    let reply = std::mem::take(&mut caller.data_mut().reply);
    if write_guest(&mut caller, dest, &reply) {
        Ok(())
    } else {
        Err(wasmtime::Error::msg(
            "the guest gave no room for the tool reply",
        ))
    }
}

fn clock_time_get(mut caller: Caller<'_, AbiState>, id: i32, _precision: i64, out: i32) -> i32 {
    let nanos = match id {
        // Realtime.
        0 => SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
        // Monotonic, and the process and thread CPU clocks (approximated by it).
        1..=3 => caller.data().epoch.elapsed().as_nanos(),
        _ => return ERRNO_INVAL,
    };
    let nanos = u64::try_from(nanos).unwrap_or(u64::MAX);
    if write_guest(&mut caller, out, &nanos.to_le_bytes()) {
        ERRNO_SUCCESS
    } else {
        ERRNO_FAULT
    }
}

fn random_get(mut caller: Caller<'_, AbiState>, ptr: i32, len: i32) -> i32 {
    let len = len as u32 as usize;
    if len > 1 << 16 {
        return ERRNO_INVAL;
    }
    let mut bytes = vec![0; len];
    if getrandom::fill(&mut bytes).is_err() {
        return ERRNO_NOTSUP;
    }
    if write_guest(&mut caller, ptr, &bytes) {
        ERRNO_SUCCESS
    } else {
        ERRNO_FAULT
    }
}

/// No environment and no arguments: zero entries of zero bytes.
fn environ_sizes_get(mut caller: Caller<'_, AbiState>, count: i32, size: i32) -> i32 {
    if write_guest(&mut caller, count, &0u32.to_le_bytes())
        && write_guest(&mut caller, size, &0u32.to_le_bytes())
    {
        ERRNO_SUCCESS
    } else {
        ERRNO_FAULT
    }
}

/// stdout and stderr are kept (capped) for an error message; nothing else opens.
fn fd_write(
    mut caller: Caller<'_, AbiState>,
    fd: i32,
    iovs: i32,
    iovs_len: i32,
    written: i32,
) -> i32 {
    if fd != 1 && fd != 2 {
        return ERRNO_BADF;
    }
    let Ok(memory) = guest_memory(&mut caller) else {
        return ERRNO_FAULT;
    };
    let mut total: u32 = 0;
    for index in 0..(iovs_len as u32).min(1024) {
        let mut iov = [0u8; 8];
        let at = (iovs as u32 as usize).saturating_add(index as usize * 8);
        if memory.read(&caller, at, &mut iov).is_err() {
            return ERRNO_FAULT;
        }
        let [a, b, c, d, e, f, g, h] = iov;
        let (ptr, len) = (
            u32::from_le_bytes([a, b, c, d]) as usize,
            u32::from_le_bytes([e, f, g, h]) as usize,
        );
        let room = STDERR_CAP.saturating_sub(caller.data().stderr.len());
        let mut kept = vec![0; len.min(room)];
        if memory.read(&caller, ptr, &mut kept).is_err() {
            return ERRNO_FAULT;
        }
        caller.data_mut().stderr.extend_from_slice(&kept);
        total = total.saturating_add(len as u32);
    }
    if write_guest(&mut caller, written, &total.to_le_bytes()) {
        ERRNO_SUCCESS
    } else {
        ERRNO_FAULT
    }
}

/// A live instance and its exports.
struct Live {
    store: Store<AbiState>,
    memory: Memory,
    input: TypedFunc<i32, i32>,
    start: TypedFunc<i32, i64>,
    run: TypedFunc<i32, i64>,
    /// The guest's input buffer, as last asked for: where, and how long at least.
    input_buffer: Option<(usize, usize)>,
}

/// The exports that read the input buffer and answer in JSON.
#[derive(Clone, Copy)]
enum EntryPoint {
    /// `codeact_start(len)`: the configuration.
    Start,
    /// `codeact_run(len)`: a script.
    Run,
}

/// One session of an ABI guest: one instance, kept across runs until a stop by
/// wasmtime costs it.
pub(crate) struct AbiSession {
    blueprint: Arc<AbiBlueprint>,
    tools: Arc<dyn ToolDispatch>,
    live: Option<Live>,
}

/// How a call into the guest ended, when it did not answer.
enum Stopped {
    /// wasmtime stopped it, or it crashed: the instance is gone.
    Lost(wasmtime::Error),
    /// Its answer was not what the ABI promises.
    Garbled(String),
}

impl AbiSession {
    pub(crate) fn start(
        blueprint: Arc<AbiBlueprint>,
        tools: Arc<dyn ToolDispatch>,
    ) -> Result<AbiSession, HostError> {
        let mut session = AbiSession {
            blueprint,
            tools,
            live: None,
        };
        session.live = Some(session.instantiate()?);
        Ok(session)
    }

    fn start_error(&self, reason: String) -> HostError {
        HostError::SessionStart {
            runtime: self.blueprint.runtime_name,
            reason,
        }
    }

    /// The configuration the guest is started with: the limits and the tools.
    fn config(&self) -> String {
        json!({"limits": &*self.blueprint.limits, "tools": self.tools.specs()}).to_string()
    }

    /// The session's linear memory, with the configuration it was started with
    /// and the memory it held when it started (its cap's baseline). Between runs
    /// the guest holds nothing on the stack wasmtime keeps, and its only mutable
    /// global, the stack pointer, is back where the instance started it. The
    /// memory is kept sparse ([`SparseMemory`]): pages that hold only zeros cost a
    /// bit, not 4 KiB, to copy, checksum, store and restore.
    pub(crate) fn snapshot(&mut self) -> Result<Snapshot, SnapshotError> {
        if self.live.is_none() {
            let fresh = self
                .instantiate()
                .map_err(|e| SnapshotError::Session(e.to_string()))?;
            self.live = Some(fresh);
        }
        let Some(live) = &self.live else {
            return Err(SnapshotError::Session("the session has no instance".into()));
        };
        let memory = live.memory.data(&live.store);
        let header = json!({
            "config": self.config(),
            "baseline": live.store.data().memory.baseline,
            "memory_bytes": memory.len(),
        })
        .to_string();
        let sparse = SparseMemory::of(memory);
        let header_len = (header.len() as u64).to_le_bytes();
        let mut parts: Vec<&[u8]> = Vec::with_capacity(sparse.pages.len() + 3);
        parts.extend([&header_len[..], header.as_bytes(), &sparse.map]);
        parts.extend(sparse.pages);
        Ok(Snapshot::seal_parts(
            self.blueprint.runtime_name,
            &self.blueprint.guest_sha256,
            &parts,
        ))
    }

    /// A fresh instance of the guest, not started, given the snapshot's memory:
    /// refused unless the snapshot is of this guest, with the same tools and
    /// limits (the guest keeps them in its memory), and its memory fits this
    /// runtime's cap. The guest's start is skipped: the memory holds its result.
    pub(crate) fn restore(
        blueprint: Arc<AbiBlueprint>,
        tools: Arc<dyn ToolDispatch>,
        snapshot: &Snapshot,
    ) -> Result<AbiSession, SnapshotError> {
        let payload = snapshot.open(blueprint.runtime_name, &blueprint.guest_sha256)?;
        let corrupt = |why: &str| SnapshotError::Corrupt(why.to_string());
        let (len, rest) = payload
            .split_first_chunk::<8>()
            .ok_or_else(|| corrupt("its guest state has no header"))?;
        let len = usize::try_from(u64::from_le_bytes(*len))
            .map_err(|_| corrupt("its guest state's header is too long"))?;
        if rest.len() < len {
            return Err(corrupt("its guest state ends inside its header"));
        }
        let (header, memory) = rest.split_at(len);
        let header: serde_json::Value = serde_json::from_slice(header)
            .map_err(|e| SnapshotError::Corrupt(format!("its guest state's header: {e}")))?;
        let mut session = AbiSession {
            blueprint,
            tools,
            live: None,
        };
        if header["config"].as_str() != Some(session.config().as_str()) {
            return Err(SnapshotError::Session(
                "the snapshot was made with other tools or limits than this session has; the guest keeps them in its memory, so restore it with the same ones".into(),
            ));
        }
        let number = |key: &str| {
            header[key]
                .as_u64()
                .and_then(|n| usize::try_from(n).ok())
                .ok_or_else(|| {
                    SnapshotError::Corrupt(format!("its guest state's header has no {key}"))
                })
        };
        let baseline = number("baseline")?;
        // The cap comes from this runtime's limits: a started guest never held
        // more than the cap it started under, so a larger baseline is not one
        // this host wrote.
        let most = STARTUP_MEMORY.saturating_add(session.blueprint.limits.max_memory_bytes);
        if baseline > most {
            return Err(SnapshotError::Session(format!(
                "the snapshot says its guest held {baseline} bytes when it started, more than a guest may start with under this runtime's memory limit ({most}); it is refused"
            )));
        }
        let memory_bytes = number("memory_bytes")?;
        let sparse = SparseMemory::read(memory_bytes, memory).map_err(SnapshotError::Corrupt)?;
        let (mut live, alarm) = session
            .instance()
            .map_err(|e| SnapshotError::Session(e.to_string()))?;
        live.store.data_mut().memory.baseline = Some(baseline);
        let image = live.memory.data_size(&live.store);
        if memory_bytes < image {
            return Err(corrupt(
                "its memory is smaller than the guest's memory when it is instantiated",
            ));
        }
        let pages = ((memory_bytes - image) / WASM_PAGE) as u64;
        if pages > 0 {
            live.memory.grow(&mut live.store, pages).map_err(|e| {
                SnapshotError::Session(format!(
                    "the snapshot's memory ({memory_bytes} bytes) does not fit this runtime's memory limit: {e}"
                ))
            })?;
        }
        sparse.write_over(live.memory.data_mut(&mut live.store), image);
        session
            .arm(&mut live, alarm)
            .map_err(|e| SnapshotError::Session(e.to_string()))?;
        session.live = Some(live);
        Ok(session)
    }

    /// A fresh instance, started with the session's limits and tools.
    fn instantiate(&self) -> Result<Live, HostError> {
        let (mut live, alarm) = self.instance()?;
        let config = self.config();
        let answer = match call(&mut live, EntryPoint::Start, config.as_bytes()) {
            Ok(answer) => answer,
            Err(Stopped::Lost(e)) => {
                return Err(
                    self.start_error(with_stderr(format!("{e:#}"), &live.store.data().stderr))
                );
            }
            Err(Stopped::Garbled(why)) => return Err(self.start_error(why)),
        };
        if let Some(error) = answer.get("error") {
            return Err(self.start_error(error.as_str().unwrap_or("refused").to_string()));
        }
        self.arm(&mut live, alarm)?;
        Ok(live)
    }

    /// A fresh instance of the guest's module, not started (its memory the
    /// module's copy-on-write image), with its optional alarm export; on the
    /// startup deadline until [`arm`](Self::arm)ed.
    fn instance(&self) -> Result<(Live, Option<TypedFunc<(), i32>>), HostError> {
        let engine = crate::engine::engine().map_err(|e| self.start_error(e))?;
        let limits = &*self.blueprint.limits;
        let mut state = AbiState::new(self.tools.clone(), limits);
        state.hard_deadline = Some(Instant::now() + crate::engine::STARTUP_TIME);
        let mut store = Store::new(engine, state);
        store.limiter(|state| &mut state.memory);
        store.set_epoch_deadline(1);
        store.epoch_deadline_callback(|mut context| {
            let now = Instant::now();
            let state = context.data();
            if state.hard_deadline.is_some_and(|hard| now >= hard) {
                return Ok(UpdateDeadline::Interrupt);
            }
            let interrupted = state.interrupt.as_ref().is_some_and(Interrupt::is_raised);
            if interrupted && state.deadline.is_some_and(|deadline| now < deadline) {
                // From now on, as at the deadline: the alarm, then the grace.
                let grace = state.grace;
                let state = context.data_mut();
                state.deadline = Some(now);
                state.hard_deadline = Some(now + grace);
            }
            let state = context.data();
            if state.deadline.is_some_and(|deadline| now >= deadline)
                && let Some((memory, address)) = state.alarm
                && let Some(flag) = memory.data_mut(&mut context).get_mut(address)
            {
                *flag = 1;
            }
            Ok(UpdateDeadline::Continue(1))
        });
        let failed = |store: &Store<AbiState>, e: wasmtime::Error| {
            self.start_error(with_stderr(format!("{e:#}"), &store.data().stderr))
        };
        let _ticking = Ticking::start().map_err(|e| self.start_error(e))?;
        let instance = match block_on(self.blueprint.pre.instantiate_async(&mut store)) {
            Ok(instance) => instance,
            Err(e) => {
                let why = crate::engine::instantiation_error(&e);
                return Err(self.start_error(with_stderr(why, &store.data().stderr)));
            }
        };
        let exports = (|| -> wasmtime::Result<_> {
            let memory = instance
                .get_memory(&mut store, "memory")
                .ok_or_else(|| wasmtime::Error::msg("the guest exports no memory"))?;
            Ok((
                memory,
                instance.get_typed_func::<i32, i32>(&mut store, "codeact_input")?,
                instance.get_typed_func::<i32, i64>(&mut store, "codeact_start")?,
                instance.get_typed_func::<i32, i64>(&mut store, "codeact_run")?,
                // Optional: only an engine that checks the flag exports it.
                instance
                    .get_typed_func::<(), i32>(&mut store, "codeact_alarm")
                    .ok(),
            ))
        })();
        let (memory, input, start, run, alarm) = match exports {
            Ok(exports) => exports,
            Err(e) => return Err(failed(&store, e)),
        };
        let live = Live {
            store,
            memory,
            input,
            start,
            run,
            input_buffer: None,
        };
        Ok((live, alarm))
    }

    /// Readies a started (or restored) instance for runs: the alarm flag's
    /// address, the backstop grace, the memory cap's baseline (what it holds now,
    /// unless a restore set the snapshot's), and no startup deadline.
    fn arm(&self, live: &mut Live, alarm: Option<TypedFunc<(), i32>>) -> Result<(), HostError> {
        let limits = &*self.blueprint.limits;
        let failed = |store: &Store<AbiState>, e: wasmtime::Error| {
            self.start_error(with_stderr(format!("{e:#}"), &store.data().stderr))
        };
        if let Some(alarm) = alarm {
            let address = match block_on(alarm.call_async(&mut live.store, ())) {
                Ok(address) => address as u32 as usize,
                Err(e) => return Err(failed(&live.store, e)),
            };
            let state = live.store.data_mut();
            state.alarm = Some((live.memory, address));
            state.grace = backstop_grace(limits);
        }
        let held = live.memory.data_size(&live.store);
        let state = live.store.data_mut();
        state.memory.baseline.get_or_insert(held);
        state.hard_deadline = None;
        Ok(())
    }

    pub(crate) fn run_script(
        &mut self,
        script: &str,
        interrupt: Option<&Interrupt>,
    ) -> Result<RunOutcome, HostError> {
        let limits = self.blueprint.limits.clone();
        let mut live = match self.live.take() {
            Some(live) => live,
            None => self.instantiate()?,
        };
        {
            let state = live.store.data_mut();
            let clock = RunClock::start(&limits);
            state.clock = Some(clock);
            state.deadline = Some(clock.deadline());
            state.hard_deadline = Some(clock.deadline() + state.grace);
            state.memory.refused = false;
            state.stderr.clear();
            state.interrupt = interrupt.cloned();
        }
        let answer = call(&mut live, EntryPoint::Run, script.as_bytes());
        let state = live.store.data_mut();
        let time = state
            .clock
            .take()
            .map_or(LimitKind::WallTime, |clock| clock.limit());
        state.deadline = None;
        state.hard_deadline = None;
        state.interrupt = None;
        match answer {
            Ok(answer) => {
                let outcome = outcome_from(answer, &limits, self.blueprint.runtime_name, time);
                if outcome.is_ok() {
                    self.live = Some(live);
                }
                outcome
            }
            Err(Stopped::Lost(error)) => {
                let state = live.store.data();
                let completion = Err(self.stopped(&error, state, time));
                Ok(RunOutcome {
                    completion,
                    logs: LogBuffer::new(limits.max_output_bytes),
                })
            }
            Err(Stopped::Garbled(why)) => Err(HostError::Engine {
                runtime: self.blueprint.runtime_name,
                reason: why,
            }),
        }
    }

    /// The error for a run wasmtime stopped or the guest crashed out of; `time`
    /// is the limit a stop at the run's deadline is.
    fn stopped(&self, error: &wasmtime::Error, state: &AbiState, time: LimitKind) -> ScriptError {
        let limits = &*self.blueprint.limits;
        let limit = |kind, detail: Option<&str>| {
            ScriptError::limit(kind, limits, detail.map(str::to_string)).restarting()
        };
        if let Some(OutOfTime(kind)) = error.downcast_ref::<OutOfTime>() {
            return limit(*kind, None);
        }
        match error.downcast_ref::<Trap>() {
            // An engine that checks the alarm stops itself on ordinary loops: a
            // trap means one long operation.
            Some(Trap::Interrupt) if state.alarm.is_some() => {
                limit(time, Some("stopped inside a single long operation"))
            }
            Some(Trap::Interrupt) => limit(time, None),
            Some(Trap::StackOverflow) => limit(LimitKind::CallDepth, None),
            // The guests are Rust, memory-safe but for their stack, which lies first
            // in linear memory: running off its end is an access below address 0.
            Some(Trap::MemoryOutOfBounds) => {
                limit(LimitKind::CallDepth, Some("the guest's stack overflowed"))
            }
            _ if state.memory.refused => limit(
                LimitKind::Memory,
                Some("the guest's memory grew past its cap"),
            ),
            _ => ScriptError::EngineLost {
                message: "the guest crashed".into(),
                detail: Some(with_stderr(first_line(error), &state.stderr)),
            },
        }
    }
}

/// The bytes of a page, as the kernel maps them: the unit a snapshot keeps or
/// leaves out, and a restore writes or leaves alone.
const PAGE: usize = 4096;

/// The bytes of a wasm page, the unit linear memory grows by.
const WASM_PAGE: usize = 65_536;

/// A guest's linear memory as its snapshot keeps it: a map of the pages that
/// hold anything but zeros (a bit each, the first page in the first byte's
/// lowest bit), then those pages, in order. Memory a guest grew and never wrote,
/// or whose allocator left zeros, costs a bit a page; the rest is copied once.
struct SparseMemory<'a> {
    map: Vec<u8>,
    pages: Vec<&'a [u8]>,
}

impl<'a> SparseMemory<'a> {
    /// `memory` (a whole number of pages, as linear memory always is) made sparse.
    fn of(memory: &'a [u8]) -> SparseMemory<'a> {
        let mut map = vec![0u8; memory.len().div_ceil(PAGE).div_ceil(8)];
        let mut pages = Vec::new();
        for (at, page) in memory.chunks(PAGE).enumerate() {
            if !is_zero(page) {
                map[at / 8] |= 1 << (at % 8);
                pages.push(page);
            }
        }
        SparseMemory { map, pages }
    }

    /// The sparse form of a memory of `len` bytes from `bytes` (its map, then its
    /// pages); why not, when they do not fit together.
    fn read(len: usize, bytes: &'a [u8]) -> Result<SparseMemory<'a>, String> {
        if !len.is_multiple_of(WASM_PAGE) {
            return Err(format!("its memory of {len} bytes is not whole wasm pages"));
        }
        let count = len / PAGE;
        let map_len = count.div_ceil(8);
        if bytes.len() < map_len {
            return Err("its guest state ends inside its page map".into());
        }
        let (map, stored) = bytes.split_at(map_len);
        if !count.is_multiple_of(8) && map.last().is_some_and(|last| last >> (count % 8) != 0) {
            return Err("its page map marks pages past the end of its memory".into());
        }
        let kept: usize = map.iter().map(|byte| byte.count_ones() as usize).sum();
        if stored.len() != kept * PAGE {
            return Err(format!(
                "its page map marks {kept} pages, and it holds {} bytes of pages",
                stored.len()
            ));
        }
        Ok(SparseMemory {
            map: map.to_vec(),
            pages: stored.chunks(PAGE).collect(),
        })
    }

    /// Writes this memory over `memory`, a fresh instance's, as long as it (see
    /// [`read`](Self::read)), whose first `image` bytes are the module's
    /// copy-on-write image and the rest grown, so zero. An image page is written
    /// only where it differs (a page written is a page the kernel must copy); a
    /// grown page only where this memory kept one, without reading it first (a
    /// read of an untouched page is a page fault too).
    fn write_over(&self, memory: &mut [u8], image: usize) {
        let mut kept = self.pages.iter();
        for (at, page) in memory.chunks_mut(PAGE).enumerate() {
            let stored = if self
                .map
                .get(at / 8)
                .is_some_and(|byte| byte & (1 << (at % 8)) != 0)
            {
                kept.next().copied()
            } else {
                None
            };
            match stored {
                Some(stored) if at * PAGE >= image || page != stored => {
                    page.copy_from_slice(stored)
                }
                Some(_) => {}
                None if at * PAGE < image && !is_zero(page) => page.fill(0),
                None => {}
            }
        }
    }
}

/// Whether `page` holds only zeros: read 64 bytes at a time, which the compiler
/// turns into a few vector instructions, stopping at the first that is not.
fn is_zero(page: &[u8]) -> bool {
    page.chunks(64)
        .all(|chunk| chunk.iter().fold(0, |all, &byte| all | byte) == 0)
}

/// Hands `input` to the guest's `entry` point and reads its JSON answer. A step
/// costs one call into the guest: the input buffer is asked for only when the
/// input outgrows it.
fn call(live: &mut Live, entry: EntryPoint, input: &[u8]) -> Result<Value, Stopped> {
    let _ticking = Ticking::start().map_err(Stopped::Garbled)?;
    let len = i32::try_from(input.len())
        .map_err(|_| Stopped::Garbled("the input is over 2 GiB".into()))?;
    let buffer = match live.input_buffer {
        Some((at, room)) if room >= input.len() => at,
        _ => {
            let ask = live.input.clone();
            let at = block_on(ask.call_async(&mut live.store, len)).map_err(Stopped::Lost)?;
            let at = at as u32 as usize;
            live.input_buffer = (input.len() <= KEPT_INPUT_BYTES).then_some((at, input.len()));
            at
        }
    };
    live.memory
        .write(&mut live.store, buffer, input)
        .map_err(|e| Stopped::Garbled(format!("the guest's input buffer is out of bounds: {e}")))?;
    let function = match entry {
        EntryPoint::Start => live.start.clone(),
        EntryPoint::Run => live.run.clone(),
    };
    let answer = block_on(function.call_async(&mut live.store, len)).map_err(Stopped::Lost)?;
    let (at, answer_len) = (
        (answer as u64 >> 32) as usize,
        answer as u64 as u32 as usize,
    );
    if answer_len > live.store.data().max_transfer {
        return Err(Stopped::Garbled(format!(
            "the guest's answer of {answer_len} bytes is over what a transfer may hold"
        )));
    }
    let mut answer = vec![0; answer_len];
    live.memory
        .read(&live.store, at, &mut answer)
        .map_err(|e| Stopped::Garbled(format!("the guest's answer is out of bounds: {e}")))?;
    serde_json::from_slice(&answer)
        .map_err(|e| Stopped::Garbled(format!("the guest's answer is not JSON: {e}")))
}

/// The run's outcome from the guest's answer (see `guests/rhai`).
fn outcome_from(
    answer: Value,
    limits: &Limits,
    runtime: &'static str,
    time: LimitKind,
) -> Result<RunOutcome, HostError> {
    if let Some(reason) = answer.get("host_error") {
        return Err(HostError::Engine {
            runtime,
            reason: reason.as_str().unwrap_or("unknown").to_string(),
        });
    }
    let mut logs = LogBuffer::new(limits.max_output_bytes);
    logs.push(answer["logs"]["kept"].as_str().unwrap_or_default());
    let dropped = answer["logs"]["dropped"].as_u64().unwrap_or(0);
    logs.count_dropped(usize::try_from(dropped).unwrap_or(usize::MAX));
    let completion = &answer["completion"];
    let completion = if let Some(value) = completion.get("ok") {
        Ok(value.clone())
    } else {
        Err(script_error(&completion["error"], limits, runtime, time))
    };
    Ok(RunOutcome { completion, logs })
}

/// A [`ScriptError`] from its JSON form in the guest's answer, from a guest of
/// `runtime`: its facts as the guest sent them (`"facts"`), else, for a
/// JavaScript guest that sends only text, read from the text.
/// A time limit the guest reports (it stops at the alarm the host raises) is
/// the one `time` says the deadline was.
fn script_error(error: &Value, limits: &Limits, runtime: &str, time: LimitKind) -> ScriptError {
    let message = error["message"].as_str().unwrap_or_default().to_string();
    let facts = |syntax: bool| {
        let sent = error
            .get("facts")
            .and_then(|facts| serde_json::from_value::<ErrorFacts>(facts.clone()).ok());
        sent.or_else(|| {
            matches!(runtime, "wasm:js" | "wasm:boa").then(|| {
                let name = syntax.then_some("SyntaxError");
                codeact_runtime::js_errors::facts(name, &message, "script")
            })
        })
    };
    let with = |error: ScriptError, facts: Option<ErrorFacts>| match facts {
        Some(facts) => error.with_facts(facts),
        None => error,
    };
    match error["kind"].as_str() {
        Some("syntax") => with(ScriptError::syntax(message.clone()), facts(true)),
        Some("no_value") => ScriptError::NoValue { message },
        Some("unrepresentable") => ScriptError::Unrepresentable { message },
        Some("limit") => match serde_json::from_value::<LimitKind>(error["limit"].clone()) {
            Ok(limit) => {
                let limit = match limit {
                    LimitKind::WallTime => time,
                    other => other,
                };
                let stopped =
                    ScriptError::limit(limit, limits, error["detail"].as_str().map(str::to_string));
                // The guest started its engine afresh (the QuickJS guest, when
                // a session's variables fill its memory limit).
                if error["restarted"] == true {
                    stopped.restarting()
                } else {
                    stopped
                }
            }
            Err(_) => ScriptError::thrown(error["described"].as_str().unwrap_or_default()),
        },
        _ => with(ScriptError::thrown(message.clone()), facts(false)),
    }
}

fn with_stderr(message: String, stderr: &[u8]) -> String {
    let stderr = String::from_utf8_lossy(stderr);
    let stderr = stderr.trim();
    if stderr.is_empty() {
        message
    } else {
        format!("{message} (the guest wrote: {stderr})")
    }
}

/// The cause of a guest failure in one line.
fn first_line(error: &wasmtime::Error) -> String {
    if let Some(trap) = error.downcast_ref::<Trap>() {
        return trap.to_string();
    }
    let text = error.root_cause().to_string();
    text.lines().next().unwrap_or_default().to_string()
}

struct NoopWake;

impl Wake for NoopWake {
    fn wake(self: Arc<Self>) {}
}

/// Drives a guest call to its end on this thread. Every host function of an ABI
/// guest is synchronous, so the call never waits on anything but the guest: it is
/// ready at its first poll, and the loop only guards against that changing.
pub(crate) fn block_on<F: Future>(future: F) -> F::Output {
    let waker = Waker::from(Arc::new(NoopWake));
    let mut context = Context::from_waker(&waker);
    let mut future = pin!(future);
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut context) {
            return output;
        }
        std::thread::yield_now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A memory of `pages` wasm pages, with `fill(page)` as each 4 KiB page's byte.
    fn memory(pages: usize, fill: impl Fn(usize) -> u8) -> Vec<u8> {
        (0..pages * WASM_PAGE).map(|at| fill(at / PAGE)).collect()
    }

    fn packed(memory: &[u8]) -> Vec<u8> {
        let sparse = SparseMemory::of(memory);
        let mut bytes = sparse.map.clone();
        for page in sparse.pages {
            bytes.extend_from_slice(page);
        }
        bytes
    }

    /// Fails if a restore leaves a byte of the fresh instance where the snapshot
    /// had another (a zero page over the image included), or keeps a zero page.
    #[test]
    fn sparse_memory_written_over_a_fresh_instance_gives_back_the_same_bytes() {
        // Every third page zero, the rest numbered.
        let original = memory(3, |page| if page % 3 == 0 { 0 } else { page as u8 });
        let bytes = packed(&original);
        let zero_pages = original.len() / PAGE / 3;
        assert_eq!(
            bytes.len(),
            (original.len() / PAGE).div_ceil(8) + original.len() - zero_pages * PAGE,
            "zero pages are not kept"
        );
        let sparse = SparseMemory::read(original.len(), &bytes).expect("reads back");
        // A fresh instance: a one-wasm-page image of 0xAA (pages the snapshot
        // holds as zero included), then grown zeros.
        let mut fresh = memory(3, |page| if page < 16 { 0xAA } else { 0 });
        sparse.write_over(&mut fresh, WASM_PAGE);
        assert!(fresh == original, "the restored memory differs");
    }

    /// Fails if a page map that does not match its pages is read (and a restore
    /// writes the wrong pages, or panics) instead of being refused.
    #[test]
    fn a_page_map_that_does_not_fit_its_pages_is_refused_not_trusted() {
        let original = memory(1, |page| (page % 2) as u8);
        let bytes = packed(&original);
        assert!(SparseMemory::read(original.len(), &bytes).is_ok());
        // A length that is not whole wasm pages, or another number of pages.
        assert!(SparseMemory::read(original.len() - PAGE, &bytes).is_err());
        assert!(SparseMemory::read(2 * WASM_PAGE, &bytes).is_err());
        // A page cut off, a page too many, the map alone, nothing.
        assert!(SparseMemory::read(original.len(), &bytes[..bytes.len() - 1]).is_err());
        let mut longer = bytes.clone();
        longer.extend_from_slice(&[1; PAGE]);
        assert!(SparseMemory::read(original.len(), &longer).is_err());
        assert!(SparseMemory::read(original.len(), &bytes[..2]).is_err());
        assert!(SparseMemory::read(original.len(), &[]).is_err());
        // A bit flipped in the map: the count of pages no longer fits.
        let mut flipped = bytes.clone();
        flipped[0] ^= 1;
        assert!(SparseMemory::read(original.len(), &flipped).is_err());
        // A huge length claimed: refused before anything is allocated for it.
        assert!(SparseMemory::read(usize::MAX - usize::MAX % WASM_PAGE, &bytes).is_err());
    }

    #[test]
    fn a_page_is_zero_only_when_every_byte_is() {
        let mut page = vec![0u8; PAGE];
        assert!(is_zero(&page));
        page[PAGE - 1] = 1;
        assert!(!is_zero(&page));
        page[PAGE - 1] = 0;
        page[0] = 0x80;
        assert!(!is_zero(&page));
    }
}
