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
use std::sync::Arc;
use std::time::Instant;

use codeact_runtime::{LogBuffer, ToolDispatch};

/// What a run installs.
pub(crate) struct RunState {
    pub deadline: Instant,
    pub tools: Arc<dyn ToolDispatch>,
    pub logs: LogBuffer,
    pub meter: MeterSchedule,
}

/// When the memory meter scans next. Kept by the session across runs, so scanning
/// stays amortised over all its reads rather than restarting with each run.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct MeterSchedule {
    pub variable_reads: u64,
    pub next_scan: u64,
}

struct ColdState {
    tools: Arc<dyn ToolDispatch>,
    logs: LogBuffer,
}

thread_local! {
    static DEADLINE: Cell<Option<Instant>> = const { Cell::new(None) };
    /// Variable reads so far; read and bumped on every variable read.
    static READS: Cell<u64> = const { Cell::new(0) };
    /// The read count at which the next memory scan is due; `u64::MAX` when no run
    /// is active, so reads outside a run never scan.
    static NEXT_SCAN: Cell<u64> = const { Cell::new(u64::MAX) };
    static COLD: RefCell<Option<ColdState>> = const { RefCell::new(None) };
}

/// Installs a run's state on this thread until [`RunGuard::finish`] or drop.
pub(crate) struct RunGuard {
    previous_deadline: Option<Instant>,
    previous_meter: MeterSchedule,
    previous_cold: Option<ColdState>,
    finished: bool,
}

impl RunGuard {
    pub fn install(state: RunState) -> Self {
        let cold = ColdState {
            tools: state.tools,
            logs: state.logs,
        };
        Self {
            previous_deadline: DEADLINE.replace(Some(state.deadline)),
            previous_meter: swap_meter(state.meter),
            previous_cold: COLD.with(|slot| slot.replace(Some(cold))),
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
        DEADLINE.replace(self.previous_deadline.take());
        (
            swap_meter(self.previous_meter),
            COLD.with(|slot| slot.replace(self.previous_cold.take())),
        )
    }
}

/// Installs `meter` in the thread's counters and returns what they held.
fn swap_meter(meter: MeterSchedule) -> MeterSchedule {
    MeterSchedule {
        variable_reads: READS.replace(meter.variable_reads),
        next_scan: NEXT_SCAN.replace(meter.next_scan),
    }
}

impl Drop for RunGuard {
    fn drop(&mut self) {
        if !self.finished {
            self.restore();
        }
    }
}

/// True when a run is active on this thread and its deadline has passed.
pub(crate) fn deadline_passed() -> bool {
    DEADLINE
        .get()
        .is_some_and(|deadline| Instant::now() >= deadline)
}

/// Appends a printed line to the active run's logs (dropped when no run is active).
pub(crate) fn log_line(line: &str) {
    COLD.with(|slot| {
        if let Some(state) = slot.borrow_mut().as_mut() {
            state.logs.push_line(line);
        }
    });
}

/// The active run's tools. Cloned out so the slot is free while the tool runs.
pub(crate) fn tools() -> Option<Arc<dyn ToolDispatch>> {
    COLD.with(|slot| slot.borrow().as_ref().map(|state| state.tools.clone()))
}

/// Counts a variable read; true when a memory scan is due.
pub(crate) fn count_variable_read() -> bool {
    let reads = READS.get() + 1;
    READS.set(reads);
    reads >= NEXT_SCAN.get()
}

/// Schedules the next memory scan `reads` variable reads from now.
pub(crate) fn schedule_next_scan(reads: u64) {
    NEXT_SCAN.set(READS.get().saturating_add(reads));
}
