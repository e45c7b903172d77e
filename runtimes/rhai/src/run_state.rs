//! Per-run state the shared engine's callbacks can find.
//!
//! Rhai's `on_print`, `on_progress` and registered functions belong to the engine,
//! which every session shares. A run installs its own state (deadline, tools, log
//! buffer) in a thread-local slot for its duration; the callbacks read that slot. The
//! previous occupant is restored when the run ends, so a tool that runs another
//! script on the same thread nests correctly.

use std::cell::RefCell;
use std::sync::Arc;
use std::time::Instant;

use codeact_runtime::{LogBuffer, ToolDispatch};

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

thread_local! {
    static CURRENT: RefCell<Option<RunState>> = const { RefCell::new(None) };
}

/// Installs `state` for the current thread until [`RunGuard::finish`] or drop.
pub(crate) struct RunGuard {
    previous: Option<RunState>,
    finished: bool,
}

impl RunGuard {
    pub fn install(state: RunState) -> Self {
        let previous = CURRENT.with(|slot| slot.replace(Some(state)));
        Self {
            previous,
            finished: false,
        }
    }

    /// Ends the run and hands back its state.
    pub fn finish(mut self) -> Option<RunState> {
        self.finished = true;
        let previous = self.previous.take();
        CURRENT.with(|slot| slot.replace(previous))
    }
}

impl Drop for RunGuard {
    fn drop(&mut self) {
        if !self.finished {
            let previous = self.previous.take();
            CURRENT.with(|slot| slot.replace(previous));
        }
    }
}

/// True when a run is active on this thread and its deadline has passed.
pub(crate) fn deadline_passed() -> bool {
    CURRENT.with(|slot| {
        slot.borrow()
            .as_ref()
            .is_some_and(|state| Instant::now() >= state.deadline)
    })
}

/// Appends a printed line to the active run's logs (dropped when no run is active).
pub(crate) fn log_line(line: &str) {
    CURRENT.with(|slot| {
        if let Some(state) = slot.borrow_mut().as_mut() {
            state.logs.push_line(line);
        }
    });
}

/// The active run's tools. Cloned out so the slot is free while the tool runs.
pub(crate) fn tools() -> Option<Arc<dyn ToolDispatch>> {
    CURRENT.with(|slot| slot.borrow().as_ref().map(|state| state.tools.clone()))
}

/// Counts a variable read; true when a memory scan is due.
pub(crate) fn count_variable_read() -> bool {
    CURRENT.with(|slot| match slot.borrow_mut().as_mut() {
        Some(state) => {
            state.meter.variable_reads += 1;
            state.meter.variable_reads >= state.meter.next_scan
        }
        None => false,
    })
}

/// Schedules the next memory scan `reads` variable reads from now.
pub(crate) fn schedule_next_scan(reads: u64) {
    CURRENT.with(|slot| {
        if let Some(state) = slot.borrow_mut().as_mut() {
            state.meter.next_scan = state.meter.variable_reads.saturating_add(reads);
        }
    });
}
