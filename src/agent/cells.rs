//! Cells: scripts a run's script starts that go on while the model thinks.
//!
//! A script calls `start_cell(code)` with a script of its own language as a
//! string; the host runs that script in a new session of the same runtime, on a
//! thread of its own, and answers at once with the cell's id. Later scripts of the
//! run look at it with `poll_cell(id)`, wait for it with `wait_cell(id, seconds)`
//! and stop it with `cancel_cell(id)`; inside a cell, `notify(message)` records
//! progress for the next poll. The engines run one script per session at a time,
//! so a cell is a session of its own rather than a task inside the script's.
//!
//! A cell is bounded the way a script is: it runs under the runtime's
//! [`Limits`](codeact_runtime::Limits) (its time limit ends a runaway cell, and
//! the cell's error says so) and its tool calls go through the run's tools, so the
//! run's budgets, policy and approvals apply to each of them and each is an
//! [`Event::ToolCall`]. [`CellLimits`] bounds how many cells run at once and in
//! all, how long their code may be, and what they may report. A cell's start,
//! progress and end are events ([`Event::CellStarted`], [`Event::CellProgress`],
//! [`Event::CellEnded`]); what it printed or returned reaches the model only
//! through a script that polled it, as part of that script's value, which the
//! loop fences like any other.
//!
//! Cells end with their run: when the run's tools are dropped (the run or chat
//! ends, or its future is dropped), every cell still running is interrupted, as
//! its time limit would stop it, and its thread joined, waiting at most
//! [`JOIN_BOUND`]. A resumed run replays the recorded answers of cell calls and
//! starts no cell again, so a cell of the interrupted run is unknown to it.

pub(crate) use super::cell_news::{
    CANCEL_CELL_TOOL, CellNews, NOTIFY_TOOL, POLL_CELL_TOOL, START_CELL_TOOL, WAIT_CELL_TOOL,
};
use std::collections::BTreeMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use codeact_runtime::{FileView, Interrupt, Runtime, ToolCall, ToolDispatch, ToolError, ToolSpec};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::events::{Event, Listener};
use super::host_tools::HostTools;
use crate::exec::session::ScriptSession;
use crate::output::script_output::ScriptOutput;
use crate::tools::toolbox::Tool;

/// The cell functions, by name.
const CELL_TOOLS: [&str; 5] = [
    START_CELL_TOOL,
    POLL_CELL_TOOL,
    WAIT_CELL_TOOL,
    CANCEL_CELL_TOOL,
    NOTIFY_TOOL,
];

/// How long dropping a run's cells waits for their threads to end after
/// interrupting them. An interrupted engine stops at its next operation, but a
/// cell inside a tool call stops only when the call returns; past this bound the
/// thread is left to end on its own (it holds nothing of the run's but a weak
/// reference) and a warning is logged.
pub const JOIN_BOUND: Duration = Duration::from_secs(5);

/// How long `cancel_cell` waits for the cell's thread to end, so that the cell no
/// longer counts against [`CellLimits::max_live`] when it answers.
const CANCEL_WAIT: Duration = Duration::from_secs(2);

/// How many cells a run may have and how much each may say. Every bound is
/// finite; a call past one is refused with a tool error saying which.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CellLimits {
    /// Cells running at once in one run (nested cells included); a cell counts
    /// until its thread has ended. Each holds a thread and a session of the
    /// runtime (a worker process for `js`, a guest instance for `wasm:…`).
    /// Default: 4.
    pub max_live: usize,
    /// Cells one run may start in all. Default: 32.
    pub max_started: usize,
    /// Bytes of one cell's code. Default: 65,536.
    pub max_code_bytes: usize,
    /// `notify` calls one cell may make; the one past it is a tool error in the
    /// cell. Each is an [`Event::CellProgress`]. Default: 100.
    pub max_notes: usize,
    /// Characters of one `notify` message kept; the rest is cut, with a marker.
    /// Default: 1,000.
    pub max_note_chars: usize,
    /// The longest one `wait_cell` waits, whatever it asks; it also never waits
    /// past the calling script's own time limit. Default: 60 s.
    pub max_wait: Duration,
}

impl Default for CellLimits {
    fn default() -> Self {
        Self {
            max_live: 4,
            max_started: 32,
            max_code_bytes: 64 * 1024,
            max_notes: 100,
            max_note_chars: 1_000,
            max_wait: Duration::from_secs(60),
        }
    }
}

/// Where a cell is: running, or how it ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CellState {
    /// Its script is still running.
    Running,
    /// Its script ended with a value.
    Done,
    /// Its script failed: it threw, hit a limit, or could not start.
    Failed,
    /// `cancel_cell` stopped it, or its run ended first.
    Cancelled,
}

impl CellState {
    fn name(self) -> &'static str {
        match self {
            CellState::Running => "running",
            CellState::Done => "done",
            CellState::Failed => "failed",
            CellState::Cancelled => "cancelled",
        }
    }
}

/// The cell functions as tools, for the agent's tool list and prompt: their
/// calls never reach these handlers, since a run's [`Cells`] answers them first.
pub(crate) fn cell_tools(language: &str, limits: &CellLimits) -> Vec<Tool> {
    let unavailable = |name: &'static str| {
        move |_args: Value| -> Result<Value, ToolError> {
            Err(ToolError::new(format!(
                "'{name}' works only inside an agent's run"
            )))
        }
    };
    let id_only = json!({"type": "object", "properties": {
        "id": {"type": "string", "description": "the id start_cell returned, e.g. cell-1"}
    }, "required": ["id"]});
    let view = json!({"type": "object", "properties": {
        "id": {"type": "string"},
        "state": {"type": "string"},
        "progress": {"type": "array", "items": {"type": "string"}},
        "result": {},
        "error": {"type": "string"},
        "printed": {"type": "string"},
    }});
    vec![
        Tool::from_fn(
            START_CELL_TOOL,
            format!(
                "Starts a cell: runs `code`, a {language} script given as a string, in a session of its own that goes on after this script ends, and returns the cell's id at once. The cell does not see this script's variables; its last value is its result. At most {} cells run at once.",
                limits.max_live
            ),
            unavailable(START_CELL_TOOL),
        )
        .with_parameters(json!({"type": "object", "properties": {
            "code": {"type": "string", "description": format!("the cell's {language} script")}
        }, "required": ["code"]}))
        .with_returns(json!({"type": "string"})),
        Tool::from_fn(
            POLL_CELL_TOOL,
            "Returns a cell's state (running, done, failed or cancelled), the progress it reported since the last poll, and once it ended its result or error and what it printed.",
            unavailable(POLL_CELL_TOOL),
        )
        .with_parameters(id_only.clone())
        .with_returns(view.clone()),
        Tool::from_fn(
            WAIT_CELL_TOOL,
            format!(
                "Waits up to `seconds` (at most {} s, and never past this script's time limit) for a cell to end, then returns what poll_cell does.",
                limits.max_wait.as_secs()
            ),
            unavailable(WAIT_CELL_TOOL),
        )
        .with_parameters(json!({"type": "object", "properties": {
            "id": {"type": "string", "description": "the id start_cell returned"},
            "seconds": {"type": "number", "description": "how long to wait at most"}
        }, "required": ["id", "seconds"]}))
        .with_returns(view.clone()),
        Tool::from_fn(
            CANCEL_CELL_TOOL,
            "Stops a running cell and returns what poll_cell does; a cell that already ended is left as it is.",
            unavailable(CANCEL_CELL_TOOL),
        )
        .with_parameters(id_only)
        .with_returns(view),
        Tool::from_fn(
            NOTIFY_TOOL,
            format!(
                "Inside a cell's code: records a progress message (at most {} per cell) that the next poll_cell or wait_cell returns; returns how many the cell has sent.",
                limits.max_notes
            ),
            unavailable(NOTIFY_TOOL),
        )
        .with_parameters(json!({"type": "object", "properties": {
            "message": {"type": "string", "description": "what the cell has done so far"}
        }, "required": ["message"]}))
        .with_returns(json!({"type": "integer"})),
    ]
}

/// One run's cells: the layer between the run's tools ([`HostTools`]) and the
/// agent's toolbox that answers the cell functions and passes every other call
/// on. Dropped with the run's tools, it interrupts and joins its cells.
pub(crate) struct Cells {
    inner: Arc<dyn ToolDispatch>,
    runtime: Arc<dyn Runtime>,
    files: Option<FileView>,
    limits: CellLimits,
    /// The run's tools, which a cell's session calls through; set once they are
    /// built around this layer.
    outer: OnceLock<Weak<HostTools>>,
    agent: String,
    listeners: Vec<Listener>,
    shared: Arc<Shared>,
    /// The run's step when a cell function was last called, for the events of
    /// cells the run's end stops (the run's tools are gone by then).
    last_step: std::sync::atomic::AtomicUsize,
}

/// What a run's cells and their threads share.
struct Shared {
    table: Mutex<Table>,
    /// Signalled when a cell ends, is cancelled, or reports progress.
    changed: Condvar,
}

#[derive(Default)]
struct Table {
    cells: BTreeMap<u64, CellRecord>,
    /// Set when the run ended: no cell starts any more.
    closed: bool,
    started: usize,
    /// Cells whose thread has not ended.
    live: usize,
}

struct CellRecord {
    state: CellState,
    /// Progress not yet returned by a poll, oldest first.
    unseen: Vec<String>,
    /// `notify` calls made so far.
    notes: usize,
    result: Option<Value>,
    error: Option<String>,
    printed: String,
    interrupt: Interrupt,
    thread: Option<JoinHandle<()>>,
    /// Whether the thread has ended (it then no longer counts as live).
    ended: bool,
    /// Whether the caller knows the cell ended (a poll returned it, or a note
    /// told the model).
    end_told: bool,
    /// `notify` calls the caller knows of.
    notes_told: usize,
    started: Instant,
    finished: Option<Instant>,
}

impl Shared {
    fn table(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }
}

thread_local! {
    /// The interrupt of the cell running on this thread, so that its waits end
    /// when it is cancelled.
    static CELL_INTERRUPT: std::cell::RefCell<Option<Interrupt>> = const { std::cell::RefCell::new(None) };
}

impl Cells {
    /// The cell layer over `inner` for one run of `runtime` (whose sessions see
    /// `files`), reporting to `listeners` as `agent`.
    pub(crate) fn new(
        inner: Arc<dyn ToolDispatch>,
        runtime: Arc<dyn Runtime>,
        files: Option<FileView>,
        limits: CellLimits,
        agent: String,
        listeners: Vec<Listener>,
    ) -> Self {
        Self {
            inner,
            runtime,
            files,
            limits,
            outer: OnceLock::new(),
            agent,
            listeners,
            shared: Arc::new(Shared {
                table: Mutex::new(Table::default()),
                changed: Condvar::new(),
            }),
            last_step: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    /// Names the run's tools built around this layer: a cell's session calls
    /// through them, and events carry their step.
    pub(crate) fn attach(&self, outer: &Arc<HostTools>) {
        let _ = self.outer.set(Arc::downgrade(outer));
    }

    fn step(&self) -> usize {
        use std::sync::atomic::Ordering;
        match self.outer.get().and_then(Weak::upgrade) {
            Some(tools) => {
                let step = tools.step();
                self.last_step.store(step, Ordering::Relaxed);
                step
            }
            None => self.last_step.load(Ordering::Relaxed),
        }
    }

    fn report(&self, event: Event) {
        report(&self.agent, &self.listeners, &event);
    }

    fn start(&self, args: &Value) -> Result<Value, ToolError> {
        let language = self.runtime.info().language;
        let code = match args.get("code") {
            Some(Value::String(code)) => code,
            Some(other) => {
                return Err(ToolError::new(format!(
                    "start_cell needs `code` as a string of {language}, not {}",
                    kind_of(other)
                )));
            }
            None => {
                return Err(ToolError::new(format!(
                    "start_cell needs `code`: the cell's script, a string of {language}"
                )));
            }
        };
        if code.trim().is_empty() {
            return Err(ToolError::new(
                "start_cell needs `code` with something to run: it is empty",
            ));
        }
        if code.len() > self.limits.max_code_bytes {
            return Err(ToolError::new(format!(
                "start_cell was refused: its code is {} bytes, and a cell's code may be {} bytes",
                code.len(),
                self.limits.max_code_bytes
            )));
        }
        let Some(outer) = self.outer.get().cloned() else {
            return Err(ToolError::new(
                "start_cell works only inside an agent's run",
            ));
        };
        let mut table = self.shared.table();
        if table.closed {
            return Err(ToolError::new(
                "start_cell was refused: the run that would own the cell has ended",
            ));
        }
        if table.live >= self.limits.max_live {
            let running: Vec<String> = table
                .cells
                .iter()
                .filter(|(_, cell)| !cell.ended)
                .map(|(n, _)| cell_id(*n))
                .collect();
            return Err(ToolError::new(format!(
                "start_cell was refused: a run may have {} cells running at once, and {} are running ({}); wait for one to end or cancel one first",
                self.limits.max_live,
                table.live,
                running.join(", ")
            )));
        }
        if table.started >= self.limits.max_started {
            return Err(ToolError::new(format!(
                "start_cell was refused: a run may start {} cells, and this one has started them all",
                self.limits.max_started
            )));
        }
        let number = table.started as u64 + 1;
        let id = cell_id(number);
        let interrupt = Interrupt::new();
        let scope = Arc::new(CellScope {
            number,
            outer,
            shared: self.shared.clone(),
            specs: self.inner.specs().to_vec(),
            limits: self.limits,
            agent: self.agent.clone(),
            listeners: self.listeners.clone(),
        });
        let job = CellJob {
            number,
            code: code.clone(),
            runtime: self.runtime.clone(),
            files: self.files.clone(),
            interrupt: interrupt.clone(),
            scope,
            handle: tokio::runtime::Handle::try_current().ok(),
        };
        let thread = std::thread::Builder::new()
            .name(format!("codeact-{id}"))
            .spawn(move || job.run())
            .map_err(|e| ToolError::new(format!("start_cell could not start a thread: {e}")))?;
        table.started += 1;
        table.live += 1;
        table.cells.insert(
            number,
            CellRecord {
                state: CellState::Running,
                unseen: Vec::new(),
                notes: 0,
                result: None,
                error: None,
                printed: String::new(),
                interrupt,
                thread: Some(thread),
                ended: false,
                end_told: false,
                notes_told: 0,
                started: Instant::now(),
                finished: None,
            },
        );
        drop(table);
        self.report(Event::CellStarted {
            step: self.step(),
            id: id.clone(),
            code: code.clone(),
        });
        Ok(Value::String(id))
    }

    /// The cell `args.id` names, as its number; an error listing the known ids
    /// otherwise.
    fn number(&self, tool: &str, args: &Value) -> Result<u64, ToolError> {
        let known = || {
            let table = self.shared.table();
            if table.cells.is_empty() {
                "this run has started no cell (a resumed run starts none again)".to_string()
            } else {
                let ids: Vec<String> = table.cells.keys().map(|n| cell_id(*n)).collect();
                format!("this run's cells are {}", ids.join(", "))
            }
        };
        let id = match args.get("id") {
            Some(Value::String(id)) => id,
            Some(other) => {
                return Err(ToolError::new(format!(
                    "{tool} needs `id` as the string start_cell returned, not {}",
                    kind_of(other)
                )));
            }
            None => {
                return Err(ToolError::new(format!(
                    "{tool} needs `id`, the string start_cell returned"
                )));
            }
        };
        id.strip_prefix("cell-")
            .and_then(|n| n.parse::<u64>().ok())
            .filter(|n| self.shared.table().cells.contains_key(n))
            .ok_or_else(|| {
                ToolError::new(format!(
                    "{tool}: there is no cell {}; {}",
                    serde_json::to_string(&codeact_runtime::text::shorten(id, 40))
                        .unwrap_or_default(),
                    known()
                ))
            })
    }

    fn poll(&self, args: &Value) -> Result<Value, ToolError> {
        let number = self.number(POLL_CELL_TOOL, args)?;
        Ok(view(&mut self.shared.table(), number))
    }

    fn wait(&self, args: &Value) -> Result<Value, ToolError> {
        let number = self.number(WAIT_CELL_TOOL, args)?;
        let seconds = match args.get("seconds") {
            Some(Value::Number(n)) => n.as_f64().unwrap_or(0.0),
            None | Some(Value::Null) => self.limits.max_wait.as_secs_f64(),
            Some(other) => {
                return Err(ToolError::new(format!(
                    "wait_cell needs `seconds` as a number, not {}",
                    kind_of(other)
                )));
            }
        };
        if !seconds.is_finite() || seconds < 0.0 {
            return Err(ToolError::new(
                "wait_cell needs `seconds` as a number of seconds, 0 or more",
            ));
        }
        let asked = Duration::from_secs_f64(seconds.min(self.limits.max_wait.as_secs_f64()));
        let now = Instant::now();
        // Never past the calling script's own time limit, less a margin for the
        // script to use the answer: a wait cut by it answers "running".
        let until = match codeact_runtime::call_deadline::current() {
            Some(deadline) => {
                let left = deadline.saturating_duration_since(now);
                now + asked.min(left.saturating_sub((left / 10).min(Duration::from_millis(250))))
            }
            None => now + asked,
        };
        let own = CELL_INTERRUPT.with(|own| own.borrow().clone());
        crate::exec::run_slots::released_during(|| {
            let mut table = self.shared.table();
            loop {
                let running = table
                    .cells
                    .get(&number)
                    .is_some_and(|cell| cell.state == CellState::Running);
                let cancelled = own.as_ref().is_some_and(Interrupt::is_raised);
                let left = until.saturating_duration_since(Instant::now());
                if !running || cancelled || left.is_zero() {
                    return Ok(view(&mut table, number));
                }
                table = self
                    .shared
                    .changed
                    .wait_timeout(table, left)
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
            }
        })
    }

    fn cancel(&self, args: &Value) -> Result<Value, ToolError> {
        let number = self.number(CANCEL_CELL_TOOL, args)?;
        let mut table = self.shared.table();
        let Some(cell) = table.cells.get_mut(&number) else {
            return Err(ToolError::new("cancel_cell: the cell is gone"));
        };
        if cell.state == CellState::Running {
            cell.state = CellState::Cancelled;
            cell.finished = Some(Instant::now());
            cell.interrupt.raise();
            drop(table);
            self.shared.changed.notify_all();
            self.report(Event::CellEnded {
                step: self.step(),
                id: cell_id(number),
                state: CellState::Cancelled,
                error: None,
            });
            table = self.shared.table();
        }
        // Wait a moment for the thread to end, so the cell no longer counts
        // against the cells running at once.
        let until = Instant::now() + CANCEL_WAIT;
        crate::exec::run_slots::released_during(|| {
            while table.cells.get(&number).is_some_and(|cell| !cell.ended) {
                let left = until.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                table = self
                    .shared
                    .changed
                    .wait_timeout(table, left)
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
            }
            Ok(view(&mut table, number))
        })
    }
}

impl Cells {
    /// The cells that ended, or sent progress, since a script or an earlier
    /// note last told of them, in id order; each is told once.
    pub(crate) fn news(&self) -> Vec<CellNews> {
        let mut table = self.shared.table();
        let mut news = Vec::new();
        for (number, cell) in &mut table.cells {
            let progress = cell.notes - cell.notes_told.min(cell.notes);
            let ended = cell.state != CellState::Running && !cell.end_told;
            if progress == 0 && !ended {
                continue;
            }
            cell.notes_told = cell.notes;
            cell.end_told |= ended;
            news.push(CellNews {
                id: cell_id(*number),
                state: cell.state.name(),
                progress,
            });
        }
        news
    }
}

impl ToolDispatch for Cells {
    fn specs(&self) -> &[ToolSpec] {
        self.inner.specs()
    }

    fn call(&self, name: &str, args: Value) -> Result<Value, ToolError> {
        if CELL_TOOLS.contains(&name) {
            self.step();
        }
        match name {
            START_CELL_TOOL => self.start(&args),
            POLL_CELL_TOOL => self.poll(&args),
            WAIT_CELL_TOOL => self.wait(&args),
            CANCEL_CELL_TOOL => self.cancel(&args),
            NOTIFY_TOOL => Err(ToolError::new(
                "notify reports a cell's progress: call it in the code you give start_cell, not in the script itself",
            )),
            _ => self.inner.call(name, args),
        }
    }

    fn is_immediate(&self, name: &str) -> bool {
        !CELL_TOOLS.contains(&name) && self.inner.is_immediate(name)
    }

    /// The toolbox's own batch, unless a cell function is among the calls:
    /// then each call on a thread of its own, so that a wait does not hold up
    /// the others.
    fn call_many(&self, calls: Vec<ToolCall>) -> Vec<Result<Value, ToolError>> {
        if calls
            .iter()
            .any(|call| CELL_TOOLS.contains(&call.name.as_str()))
        {
            return codeact_runtime::call_on_threads(self, calls);
        }
        self.inner.call_many(calls)
    }
}

impl Drop for Cells {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Ends a run's cells when dropped: the run or the chat that holds it ended.
/// Its tools may live on a moment longer (an engine thread that lets go of them
/// once its script is over), so the end of the run does not wait for that.
#[derive(Default)]
pub(crate) struct CellsGuard(Option<Arc<Cells>>);

impl CellsGuard {
    pub(crate) fn new(cells: Option<Arc<Cells>>) -> Self {
        Self(cells)
    }

    /// The run's cells' news ([`Cells::news`]); none without cells.
    pub(crate) fn news(&self) -> Vec<CellNews> {
        self.0
            .as_ref()
            .map(|cells| cells.news())
            .unwrap_or_default()
    }
}

impl Drop for CellsGuard {
    fn drop(&mut self) {
        if let Some(cells) = &self.0 {
            cells.shutdown();
        }
    }
}

impl Cells {
    /// Interrupts every cell still running and joins the threads that end within
    /// [`JOIN_BOUND`]; a cell started afterwards is refused. Once done, doing it
    /// again does nothing.
    pub(crate) fn shutdown(&self) {
        let here = std::thread::current().id();
        let mut table = self.shared.table();
        table.closed = true;
        let mut ended_by_run = Vec::new();
        for (number, cell) in &mut table.cells {
            if cell.state == CellState::Running {
                cell.state = CellState::Cancelled;
                cell.finished = Some(Instant::now());
                ended_by_run.push(*number);
            }
            cell.interrupt.raise();
        }
        // A drop on a cell's own thread (its call held the run's tools last)
        // cannot wait for that thread.
        let own = table
            .cells
            .values()
            .filter(|cell| {
                !cell.ended
                    && cell
                        .thread
                        .as_ref()
                        .is_some_and(|thread| thread.thread().id() == here)
            })
            .count();
        self.shared.changed.notify_all();
        let until = Instant::now() + JOIN_BOUND;
        while table.live > own {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                tracing::warn!(
                    cells = table.live - own,
                    "cells still running {} s after their run ended were left to end on their own",
                    JOIN_BOUND.as_secs()
                );
                break;
            }
            table = self
                .shared
                .changed
                .wait_timeout(table, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        let threads: Vec<JoinHandle<()>> = table
            .cells
            .values_mut()
            .filter(|cell| cell.ended)
            .filter_map(|cell| cell.thread.take())
            .collect();
        drop(table);
        for thread in threads {
            let _ = thread.join();
        }
        let step = self.step();
        for number in ended_by_run {
            self.report(Event::CellEnded {
                step,
                id: cell_id(number),
                state: CellState::Cancelled,
                error: Some("the run that started it ended".into()),
            });
        }
    }
}

/// What a cell's thread needs to run it.
struct CellJob {
    number: u64,
    code: String,
    runtime: Arc<dyn Runtime>,
    files: Option<FileView>,
    interrupt: Interrupt,
    scope: Arc<CellScope>,
    /// The run's tokio runtime, for the tools the cell calls.
    handle: Option<tokio::runtime::Handle>,
}

impl CellJob {
    fn run(self) {
        let _entered = self.handle.as_ref().map(tokio::runtime::Handle::enter);
        CELL_INTERRUPT.with(|own| *own.borrow_mut() = Some(self.interrupt.clone()));
        let scope = self.scope.clone();
        let ended = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let tools: Arc<dyn ToolDispatch> = self.scope.clone();
            let mut session =
                ScriptSession::start_with_files(&*self.runtime, tools, self.files.as_ref())
                    .map_err(|e| format!("the cell's session could not start: {e}"))?;
            session
                .run_blocking_interruptible(&self.code, &self.interrupt)
                .map_err(|e| format!("the cell's session failed: {e}"))
        }));
        let (state, result, error, printed) = match ended {
            Err(_) => (
                CellState::Failed,
                None,
                Some("the cell's engine panicked".to_string()),
                String::new(),
            ),
            Ok(Err(error)) => (CellState::Failed, None, Some(error), String::new()),
            Ok(Ok(run)) => {
                let printed = run.logs.render();
                match completion_of(run.completion) {
                    Ok(value) => (CellState::Done, Some(value), None, printed),
                    Err(error) => (CellState::Failed, None, Some(error), printed),
                }
            }
        };
        scope.finish(self.number, state, result, error, printed);
    }
}

/// A cell's result from its script's completion value: the value of
/// `observation(v)` or `final_result(v)`, or a plain last value; an error for
/// `error(m)`, a transfer, or a script error.
fn completion_of(completion: Result<Value, codeact_runtime::ScriptError>) -> Result<Value, String> {
    let value = completion.map_err(|e| e.to_string())?;
    let is_output = value
        .get("type")
        .and_then(Value::as_str)
        .is_some_and(|kind| {
            ["observation", "final_result", "error", "transfer_to_agent"].contains(&kind)
        });
    if !is_output {
        return Ok(value);
    }
    match ScriptOutput::decode(value) {
        ScriptOutput::Observation { value } | ScriptOutput::FinalResult { value, .. } => Ok(value),
        ScriptOutput::Error { message } => Err(message),
        ScriptOutput::TransferToAgent { .. } => {
            Err("a cell cannot hand the task to another agent".into())
        }
    }
}

/// The tools a cell's session calls: `notify` is answered here, for this cell;
/// every other call goes to the run's tools, while the run lasts.
struct CellScope {
    number: u64,
    outer: Weak<HostTools>,
    shared: Arc<Shared>,
    specs: Vec<ToolSpec>,
    limits: CellLimits,
    agent: String,
    listeners: Vec<Listener>,
}

impl CellScope {
    fn step(&self) -> usize {
        self.outer.upgrade().map_or(0, |tools| tools.step())
    }

    fn notify(&self, args: &Value) -> Result<Value, ToolError> {
        let message = match args.get("message") {
            Some(Value::String(text)) => text.clone(),
            Some(Value::Null) | None => {
                return Err(ToolError::new("notify needs `message`, a string"));
            }
            Some(other) => other.to_string(),
        };
        let message = cut(&message, self.limits.max_note_chars);
        let sent = {
            let mut table = self.shared.table();
            let Some(cell) = table.cells.get_mut(&self.number) else {
                return Err(ToolError::new("notify: this cell is gone"));
            };
            if cell.notes >= self.limits.max_notes {
                return Err(ToolError::new(format!(
                    "notify was refused: a cell may send {} progress messages, and this one has sent them all",
                    self.limits.max_notes
                )));
            }
            cell.notes += 1;
            cell.unseen.push(message.clone());
            cell.notes
        };
        self.shared.changed.notify_all();
        report(
            &self.agent,
            &self.listeners,
            &Event::CellProgress {
                step: self.step(),
                id: cell_id(self.number),
                message,
            },
        );
        Ok(json!(sent))
    }

    /// Records how the cell ended (a cancelled cell stays cancelled) and that its
    /// thread is done.
    fn finish(
        &self,
        number: u64,
        state: CellState,
        result: Option<Value>,
        error: Option<String>,
        printed: String,
    ) {
        let reported = {
            let mut table = self.shared.table();
            table.live = table.live.saturating_sub(1);
            let Some(cell) = table.cells.get_mut(&number) else {
                return;
            };
            cell.ended = true;
            cell.printed = printed;
            if cell.state == CellState::Running {
                cell.state = state;
                cell.result = result;
                cell.error = error.clone();
                cell.finished = Some(Instant::now());
                Some((state, error))
            } else {
                None
            }
        };
        self.shared.changed.notify_all();
        if let Some((state, error)) = reported {
            report(
                &self.agent,
                &self.listeners,
                &Event::CellEnded {
                    step: self.step(),
                    id: cell_id(number),
                    state,
                    error,
                },
            );
        }
    }
}

impl ToolDispatch for CellScope {
    fn specs(&self) -> &[ToolSpec] {
        &self.specs
    }

    fn call(&self, name: &str, args: Value) -> Result<Value, ToolError> {
        if name == NOTIFY_TOOL {
            return self.notify(&args);
        }
        if name == WAIT_CELL_TOOL
            && args.get("id").and_then(Value::as_str) == Some(&cell_id(self.number))
        {
            return Err(ToolError::new("wait_cell: a cell cannot wait for itself"));
        }
        match self.outer.upgrade() {
            Some(tools) => tools.call(name, args),
            None => Err(run_ended(name)),
        }
    }

    /// The run's batch, unless `notify` or `wait_cell` is among the calls: then
    /// each call on a thread of its own, answered here or by the run's tools.
    fn call_many(&self, calls: Vec<ToolCall>) -> Vec<Result<Value, ToolError>> {
        if calls
            .iter()
            .any(|call| call.name == NOTIFY_TOOL || call.name == WAIT_CELL_TOOL)
        {
            return codeact_runtime::call_on_threads(self, calls);
        }
        match self.outer.upgrade() {
            Some(tools) => tools.call_many(calls),
            None => calls
                .iter()
                .map(|call| Err(run_ended(&call.name)))
                .collect(),
        }
    }
}

/// A cell's call made after its run ended.
fn run_ended(name: &str) -> ToolError {
    ToolError::new(format!(
        "'{name}' was not called: the run that started this cell has ended"
    ))
}

/// A cell's state as the cell functions return it; takes the progress not yet
/// returned.
fn view(table: &mut Table, number: u64) -> Value {
    let Some(cell) = table.cells.get_mut(&number) else {
        return json!({"id": cell_id(number), "state": "unknown"});
    };
    let elapsed = cell
        .finished
        .unwrap_or_else(Instant::now)
        .duration_since(cell.started);
    let mut view = serde_json::Map::new();
    view.insert("id".into(), json!(cell_id(number)));
    view.insert("state".into(), json!(cell.state.name()));
    view.insert(
        "seconds".into(),
        json!((elapsed.as_secs_f64() * 100.0).round() / 100.0),
    );
    view.insert(
        "progress".into(),
        Value::from(std::mem::take(&mut cell.unseen)),
    );
    cell.notes_told = cell.notes;
    cell.end_told |= cell.state != CellState::Running;
    if let Some(result) = &cell.result {
        view.insert("result".into(), result.clone());
    }
    if let Some(error) = &cell.error {
        view.insert("error".into(), json!(error));
    }
    if !cell.printed.is_empty() {
        view.insert("printed".into(), json!(cell.printed));
    }
    Value::Object(view)
}

fn report(agent: &str, listeners: &[Listener], event: &Event) {
    for listener in listeners {
        listener(agent, event);
    }
}

fn cell_id(number: u64) -> String {
    format!("cell-{number}")
}

/// `text` cut to `max` characters, with a marker saying so.
fn cut(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        None => text.to_string(),
        Some((at, _)) => format!("{}… [cut at {max} characters]", &text[..at]),
    }
}

/// What kind of JSON value `value` is, for an error.
fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a map",
    }
}

#[cfg(test)]
mod tests;
