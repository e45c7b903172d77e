//! Deadline alarms: flags one shared timer thread raises when a run's deadline
//! passes, so `on_progress` can check the deadline on every operation for the cost
//! of an atomic load (reading the clock on every operation costs about +55% on
//! tight loops, which is why it used to be read only every 1,024 operations, and a
//! script could spend that many slow builtin calls past its deadline).
//!
//! The thread only raises flags; the engine stops the run at its next operation,
//! so this is not a watchdog that abandons work it cannot stop. Arming costs a lock
//! and a heap push; a run that ends early leaves its entry behind, dropped when its
//! deadline comes (the entry holds the flag weakly), so the queue holds at most the
//! runs started within one `wall_time`.

// Compiled to WebAssembly, the timer thread is not built (see `host_alarm`).
#![cfg_attr(target_family = "wasm", allow(dead_code, unused_imports))]

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, Weak};
use std::time::Instant;

struct Entry {
    at: Instant,
    flag: Weak<AtomicBool>,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.at == other.at
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Entry {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.at.cmp(&other.at)
    }
}

#[derive(Default)]
struct Timer {
    queue: Mutex<BinaryHeap<Reverse<Entry>>>,
    wake: Condvar,
}

impl Timer {
    /// Raises every flag whose deadline has passed, sleeping until the next one.
    fn serve(&self) {
        let Ok(mut queue) = self.queue.lock() else {
            return;
        };
        loop {
            let now = Instant::now();
            while let Some(Reverse(next)) = queue.peek()
                && next.at <= now
            {
                if let Some(Reverse(entry)) = queue.pop()
                    && let Some(flag) = entry.flag.upgrade()
                {
                    flag.store(true, Ordering::Relaxed);
                }
            }
            let wait = queue
                .peek()
                .map(|Reverse(next)| next.at.saturating_duration_since(now));
            queue = match wait {
                Some(wait) => match self.wake.wait_timeout(queue, wait) {
                    Ok((queue, _)) => queue,
                    Err(_) => return,
                },
                None => match self.wake.wait(queue) {
                    Ok(queue) => queue,
                    Err(_) => return,
                },
            };
        }
    }
}

/// Compiled to WebAssembly (the `wasm:rhai` guest) there are no threads: the host
/// raises this flag, at its address in the guest's memory, when the run's deadline
/// passes (see [`host_alarm`]).
#[cfg(target_family = "wasm")]
static HOST_ALARM: OnceLock<Arc<AtomicBool>> = OnceLock::new();

/// The flag a WebAssembly host raises at a run's deadline: its address is what the
/// guest exports for the host to write to. Lowered by each run as it starts.
#[cfg(target_family = "wasm")]
pub fn host_alarm() -> &'static Arc<AtomicBool> {
    HOST_ALARM.get_or_init(|| Arc::new(AtomicBool::new(false)))
}

/// The run's alarm: the flag the host raises (see [`host_alarm`]).
#[cfg(target_family = "wasm")]
pub(crate) fn arm(_deadline: Instant) -> Option<Arc<AtomicBool>> {
    let flag = host_alarm();
    flag.store(false, Ordering::Relaxed);
    Some(flag.clone())
}

/// The process's timer, started on first use; `None` if its thread cannot start.
#[cfg(not(target_family = "wasm"))]
fn timer() -> Option<&'static Arc<Timer>> {
    static TIMER: OnceLock<Option<Arc<Timer>>> = OnceLock::new();
    TIMER
        .get_or_init(|| {
            let timer = Arc::new(Timer::default());
            let served = timer.clone();
            std::thread::Builder::new()
                .name("codeact-rhai-deadlines".into())
                .spawn(move || served.serve())
                .ok()
                .map(|_| timer)
        })
        .as_ref()
}

/// A flag raised once `deadline` passes, or `None` when no timer thread could be
/// started (the caller then reads the clock itself).
#[cfg(not(target_family = "wasm"))]
pub(crate) fn arm(deadline: Instant) -> Option<Arc<AtomicBool>> {
    let flag = Arc::new(AtomicBool::new(false));
    rearm(deadline, &flag).then_some(flag)
}

/// Raises `flag` once `deadline` passes, as [`arm`] does for a new flag: for a
/// run whose deadline moved after its flag was armed. False when there is no
/// timer to raise it.
#[cfg(not(target_family = "wasm"))]
pub(crate) fn rearm(deadline: Instant, flag: &Arc<AtomicBool>) -> bool {
    let Some(timer) = timer() else {
        return false;
    };
    let Ok(mut queue) = timer.queue.lock() else {
        return false;
    };
    let earliest = queue.peek().is_none_or(|Reverse(next)| deadline < next.at);
    queue.push(Reverse(Entry {
        at: deadline,
        flag: Arc::downgrade(flag),
    }));
    drop(queue);
    if earliest {
        timer.wake.notify_one();
    }
    true
}

/// The host raises the flag (see [`host_alarm`]): nothing to arm.
#[cfg(target_family = "wasm")]
pub(crate) fn rearm(_deadline: Instant, _flag: &Arc<AtomicBool>) -> bool {
    true
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// If this fails, runs are stopped by the slow clock fallback only, or never.
    #[test]
    fn an_alarm_is_raised_after_its_deadline_and_not_before() {
        let late = arm(Instant::now() + Duration::from_secs(3_600)).expect("timer starts");
        let soon = arm(Instant::now() + Duration::from_millis(20)).expect("timer starts");
        let started = Instant::now();
        while !soon.load(Ordering::Relaxed) {
            assert!(started.elapsed() < Duration::from_secs(5), "never raised");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(started.elapsed() >= Duration::from_millis(10));
        assert!(!late.load(Ordering::Relaxed));
    }
}
