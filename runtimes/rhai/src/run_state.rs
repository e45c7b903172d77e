//! Per-run state the shared engine's callbacks can find.
//!
//! Rhai's `on_print`, `on_progress`, `on_var` and registered functions belong to the
//! engine, which every session shares. A run installs its own state (deadline, tools,
//! log buffer, memory-meter schedule) in thread-local slots for its duration; the
//! callbacks read those slots. The previous occupant is restored when the run ends,
//! so a tool that runs another script on the same thread nests correctly.
//!
//! The state read on every operation or variable read (deadline, meter counters)
//! lives in `Cell`s; the rest behind a `RefCell`.

use std::cell::{Cell, RefCell};
use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use codeact_alloc_meter::Metering;
use codeact_runtime::{Interrupt, LimitKind, LogBuffer, RunClock, ToolDispatch};
use rhai::Map;

/// What a run installs.
pub(crate) struct RunState {
    /// The run's deadlines: its own time, moved later by each wait on tools,
    /// and its total time.
    pub clock: RunClock,
    /// Raised by the deadline timer when the clock's deadline passes, and by
    /// the interrupt; `None` when no timer thread could be started (the clock
    /// is then read every 1,024 operations).
    pub alarm: Option<Arc<AtomicBool>>,
    /// The run's interrupt, read when the alarm is up after a wait moved the
    /// deadline (the alarm may be the timer's at the deadline before).
    pub interrupt: Option<Interrupt>,
    pub tools: Arc<dyn ToolDispatch>,
    pub logs: LogBuffer,
    pub meter: MeterSchedule,
    /// The bytes the run may allocate beyond what it frees (see
    /// [`over_allocation_budget`]).
    pub allocation_budget: isize,
}

/// When the memory meter scans next. Kept by the session across runs, so scanning
/// stays amortised over all its reads rather than restarting with each run.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct MeterSchedule {
    pub variable_reads: u64,
    pub next_scan: u64,
    /// What the session's own variables held at the last scan of its scope: the
    /// frames of a run's functions count it before the run scans the scope again.
    pub session_bytes: usize,
}

struct ColdState {
    tools: Arc<dyn ToolDispatch>,
    interrupt: Option<Interrupt>,
    logs: LogBuffer,
    /// The output the run's last result helper made (`observation(…)`,
    /// `final_result(…)`, …), for a script that ends in a statement.
    last_output: Option<Map>,
}

/// What the memory meter last found in one call level's frame.
#[derive(Debug, Default)]
pub(crate) struct FrameRecord {
    bytes: usize,
    /// Values the scan visited: its cost.
    visited: u64,
    /// Shared cells and large string buffers this frame counted first, so the
    /// frames above do not count them again.
    addresses: HashSet<usize>,
}

impl FrameRecord {
    /// Whether this frame counted the value at `address`.
    pub(crate) fn counted(&self, address: usize) -> bool {
        self.addresses.contains(&address)
    }
}

/// The meter's per-run view of the call stack.
#[derive(Debug)]
struct Frames {
    /// One record per call level, 0 being the session's scope.
    records: Vec<FrameRecord>,
    /// The level of the last hook call.
    level: usize,
    /// Whether the frame at `level` defined a variable since its last scan.
    defined: bool,
}

impl Frames {
    /// A run's frames before its first access: the session's scope as last
    /// measured, and a level no access has, so the first access scans.
    fn starting(session_bytes: usize) -> Self {
        Self {
            records: vec![FrameRecord {
                bytes: session_bytes,
                visited: u64::MAX,
                addresses: HashSet::new(),
            }],
            level: usize::MAX,
            defined: false,
        }
    }
}

thread_local! {
    static CLOCK: Cell<Option<RunClock>> = const { Cell::new(None) };
    /// Whether the active run waited on tools, so its deadline moved since its
    /// alarm was armed: a raised alarm is then checked against the clock.
    static PAUSED: Cell<bool> = const { Cell::new(false) };
    /// The active run's alarm, checked on every operation.
    static ALARM: RefCell<Option<Arc<AtomicBool>>> = const { RefCell::new(None) };
    static FRAMES: RefCell<Frames> = RefCell::new(Frames::starting(0));
    /// Variable reads so far; read and bumped on every variable read.
    static READS: Cell<u64> = const { Cell::new(0) };
    /// The read count at which the next memory scan is due; `u64::MAX` when no run
    /// is active, so reads outside a run never scan.
    static NEXT_SCAN: Cell<u64> = const { Cell::new(u64::MAX) };
    static COLD: RefCell<Option<ColdState>> = const { RefCell::new(None) };
    /// The active run's allocation budget; `isize::MAX` when no run is active.
    static ALLOCATION_BUDGET: Cell<isize> = const { Cell::new(isize::MAX) };
}

/// Installs a run's state on this thread until [`RunGuard::finish`] or drop.
pub(crate) struct RunGuard {
    previous_clock: Option<RunClock>,
    previous_paused: bool,
    previous_alarm: Option<Arc<AtomicBool>>,
    previous_frames: Frames,
    previous_meter: MeterSchedule,
    previous_cold: Option<ColdState>,
    previous_budget: isize,
    /// Counts the run's allocations (nothing unless the process installed
    /// `MeteredAllocator`); ends with the guard.
    metering: Option<Metering>,
    finished: bool,
}

impl RunGuard {
    pub fn install(state: RunState) -> Self {
        let cold = ColdState {
            tools: state.tools,
            interrupt: state.interrupt,
            logs: state.logs,
            last_output: None,
        };
        Self {
            previous_clock: CLOCK.replace(Some(state.clock)),
            previous_paused: PAUSED.replace(false),
            previous_alarm: ALARM.replace(state.alarm),
            previous_frames: FRAMES.replace(Frames::starting(state.meter.session_bytes)),
            previous_meter: swap_meter(state.meter),
            previous_cold: COLD.with(|slot| slot.replace(Some(cold))),
            previous_budget: ALLOCATION_BUDGET.replace(state.allocation_budget),
            metering: Some(Metering::start()),
            finished: false,
        }
    }

    /// Ends the run: restores the previous occupant and returns this run's logs and
    /// meter schedule.
    pub fn finish(mut self) -> (LogBuffer, MeterSchedule) {
        self.finished = true;
        let (meter, cold) = self.restore();
        (cold.map(|cold| cold.logs).unwrap_or_default(), meter)
    }

    /// Puts the previous occupant back; returns this run's meter and cold state.
    fn restore(&mut self) -> (MeterSchedule, Option<ColdState>) {
        self.metering = None;
        ALLOCATION_BUDGET.set(self.previous_budget);
        CLOCK.replace(self.previous_clock.take());
        PAUSED.set(self.previous_paused);
        ALARM.replace(self.previous_alarm.take());
        let frames = FRAMES.replace(std::mem::replace(
            &mut self.previous_frames,
            Frames::starting(0),
        ));
        let mut meter = swap_meter(self.previous_meter);
        meter.session_bytes = frames.records.first().map_or(0, |record| record.bytes);
        (
            meter,
            COLD.with(|slot| slot.replace(self.previous_cold.take())),
        )
    }
}

/// Installs `meter` in the thread's counters and returns what they held.
fn swap_meter(meter: MeterSchedule) -> MeterSchedule {
    MeterSchedule {
        variable_reads: READS.replace(meter.variable_reads),
        next_scan: NEXT_SCAN.replace(meter.next_scan),
        session_bytes: meter.session_bytes,
    }
}

impl Drop for RunGuard {
    fn drop(&mut self) {
        if !self.finished {
            self.restore();
        }
    }
}

/// Operations between two clock reads when the run has no alarm.
const CLOCK_CHECK_INTERVAL: u64 = 1_024;

/// True when a run is active on this thread and its deadline has passed (or it
/// was interrupted). Called on every operation: the alarm costs an atomic load;
/// without one (no timer thread), the clock is read every
/// [`CLOCK_CHECK_INTERVAL`] operations.
pub(crate) fn time_is_up(operations: u64) -> bool {
    let raised =
        ALARM.with_borrow(|alarm| alarm.as_ref().map(|alarm| alarm.load(Ordering::Relaxed)));
    match raised {
        Some(false) => false,
        Some(true) => !PAUSED.get() || alarm_stands(),
        None => operations.is_multiple_of(CLOCK_CHECK_INTERVAL) && deadline_passed(),
    }
}

/// For a run whose deadline moved (it waited on tools) and whose alarm is up:
/// whether the alarm stands (the run was interrupted, or its deadline passed).
/// If not, it was the timer's at a deadline the waits moved: the alarm is
/// lowered and armed again at the present deadline, and the run goes on.
///
/// Compiled to WebAssembly the host raises the alarm, at its own clock that
/// pauses for the same waits, so the alarm always stands.
fn alarm_stands() -> bool {
    if cfg!(target_family = "wasm") {
        return true;
    }
    let Some(alarm) = ALARM.with_borrow(Clone::clone) else {
        return true;
    };
    // Lowered first: an interrupt raised from here on raises it again.
    alarm.store(false, Ordering::SeqCst);
    let interrupted = COLD.with_borrow(|cold| {
        cold.as_ref()
            .and_then(|cold| cold.interrupt.as_ref())
            .is_some_and(Interrupt::is_raised)
    });
    if interrupted || deadline_passed() {
        alarm.store(true, Ordering::SeqCst);
        return true;
    }
    match CLOCK.get() {
        Some(clock) if crate::alarm::rearm(clock.deadline(), &alarm) => false,
        // No timer to raise it again: stop now rather than run unbounded.
        _ => true,
    }
}

/// Counts `wait`, time the active run spent waiting on tools, out of its own
/// time: its deadline moves that much later, never past its total time.
pub(crate) fn waited(wait: Duration) {
    if let Some(mut clock) = CLOCK.get() {
        clock.waited(wait);
        CLOCK.set(Some(clock));
        PAUSED.set(true);
    }
}

/// Which limit a stop at the active run's deadline is: its own time, or its
/// total time once the waits moved the own deadline past it.
pub(crate) fn time_limit() -> LimitKind {
    CLOCK
        .get()
        .map_or(LimitKind::WallTime, |clock| clock.limit())
}

/// True when the active run on this thread holds more newly allocated bytes than
/// its budget: everything the run allocated and has not freed, wherever the engine
/// keeps it (in flight, in a closure, in a frame). Always false unless the process
/// installed `codeact_alloc_meter::MeteredAllocator` (the `codeact` binary does).
/// Called on every operation: two thread-local reads.
pub(crate) fn over_allocation_budget() -> bool {
    Metering::net_bytes() > ALLOCATION_BUDGET.get()
}

/// True when a run is active on this thread and its deadline has passed.
pub(crate) fn deadline_passed() -> bool {
    CLOCK.get().is_some_and(|clock| clock.expired())
}

/// Appends a printed line to the active run's logs (dropped when no run is active).
pub(crate) fn log_line(line: &str) {
    COLD.with(|slot| {
        if let Some(state) = slot.borrow_mut().as_mut() {
            state.logs.push_line(line);
        }
    });
}

/// Keeps `output` as the active run's last helper output (nothing when no run
/// is active).
pub(crate) fn remember_output(output: &Map) {
    COLD.with(|slot| {
        if let Some(state) = slot.borrow_mut().as_mut() {
            state.last_output = Some(output.clone());
        }
    });
}

/// Takes the output the active run's last result helper made, if any.
pub(crate) fn take_last_output() -> Option<Map> {
    COLD.with(|slot| slot.borrow_mut().as_mut()?.last_output.take())
}

/// The active run's tools. Cloned out so the slot is free while the tool runs.
pub(crate) fn tools() -> Option<Arc<dyn ToolDispatch>> {
    COLD.with(|slot| slot.borrow().as_ref().map(|state| state.tools.clone()))
}

/// Values a function's frame may hold and still be scanned on every access.
const SMALL_FRAME_VALUES: u64 = 64;

/// Counts a variable access at call `level`; true when the memory meter should
/// scan that level's frame: its amortised turn came; the run entered a call since
/// the last access; or, in a function's frame, it defined a variable since its last
/// scan (a definition is seen before its value exists) or it is small (at most
/// [`SMALL_FRAME_VALUES`] values at its last scan), so its record is current
/// whenever it calls deeper, at a cost of a few value visits per access. Never true
/// outside a run.
pub(crate) fn scan_due(level: usize, defining: bool) -> bool {
    let reads = READS.get() + 1;
    READS.set(reads);
    let next = NEXT_SCAN.get();
    if next == u64::MAX {
        return false;
    }
    FRAMES.with_borrow_mut(|frames| {
        let entered = frames.level < level || frames.level == usize::MAX;
        let defined = frames.defined && frames.level == level;
        frames.level = level;
        frames.defined = defining;
        // The session's own scope (level 0) is scanned on its amortised turn only:
        // it may be large, and loops at the top level define variables all the time.
        let small = frames
            .records
            .get(level)
            .is_some_and(|record| record.visited <= SMALL_FRAME_VALUES);
        reads >= next || entered || (level > 0 && (defined || small))
    })
}

/// Runs `scan` with the records of the frames below `level`.
pub(crate) fn with_frames_below<R>(level: usize, scan: impl FnOnce(&[FrameRecord]) -> R) -> R {
    FRAMES.with_borrow(|frames| {
        let below = level.min(frames.records.len());
        scan(&frames.records[..below])
    })
}

/// Records what a scan found at `level` and forgets the levels above it (they have
/// returned); returns the total over the frames up to `level`.
pub(crate) fn record_frame(
    level: usize,
    bytes: usize,
    visited: u64,
    addresses: HashSet<usize>,
) -> usize {
    FRAMES.with_borrow_mut(|frames| {
        frames.records.resize_with(level + 1, FrameRecord::default);
        frames.records[level] = FrameRecord {
            bytes,
            visited,
            addresses,
        };
        frames
            .records
            .iter()
            .fold(0usize, |total, record| total.saturating_add(record.bytes))
    })
}

/// Schedules the next memory scan `reads` variable reads from now.
pub(crate) fn schedule_next_scan(reads: u64) {
    NEXT_SCAN.set(READS.get().saturating_add(reads));
}
