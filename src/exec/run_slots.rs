//! A process-wide cap on scripts running at once.
//!
//! Every limit is wall-clock time checked inside the engine. With more scripts
//! running than cores, each gets a slice of a core: a runaway script gets less work
//! done before its deadline, and once past it waits its turn on a core to notice,
//! so it stops late (measured with 500 sessions on 2 cores: up to 15 s late for a
//! 200 ms limit, and hundreds of threads each holding a large string). Waiting for a
//! slot happens before a script's clock starts, so a script that runs gets the
//! cores it was promised and its limits hold to the millisecond.
//!
//! A script in a tool call is not running: it gives its slot back for the call (a
//! slow HTTP tool does not hold up other sessions) and takes it back on return,
//! even over the cap, because its clock is running and must not wait behind new
//! scripts. A thread that already holds a slot (a session run from inside another
//! run, not through a tool) does not take a second one, so nesting cannot deadlock.
//!
//! Default: twice the cores the process may use; `CODEACT_MAX_RUNNING_SCRIPTS`
//! overrides it at first use (`0` = no cap), [`set_max_running_scripts`] at any time.

use std::cell::Cell;
use std::num::NonZeroUsize;
use std::pin::pin;
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock};

use tokio::sync::Notify;

/// Sets how many scripts may run at once in this process; `None` lifts the cap.
/// Scripts already running keep running; waiting ones start as slots free up.
pub fn set_max_running_scripts(limit: Option<NonZeroUsize>) {
    let slots = slots();
    slots.count().limit = limit;
    slots.wake_all();
}

/// How many scripts may run at once in this process (`None`: no cap).
pub fn max_running_scripts() -> Option<NonZeroUsize> {
    slots().count().limit
}

struct Slots {
    count: Mutex<Count>,
    freed_for_threads: Condvar,
    freed_for_tasks: Notify,
}

struct Count {
    limit: Option<NonZeroUsize>,
    running: usize,
}

impl Count {
    fn has_room(&self) -> bool {
        self.limit.is_none_or(|limit| self.running < limit.get())
    }
}

thread_local! {
    /// Whether the script running on this thread holds a slot right now.
    static HOLDING: Cell<bool> = const { Cell::new(false) };
}

fn slots() -> &'static Slots {
    static SLOTS: OnceLock<Slots> = OnceLock::new();
    SLOTS.get_or_init(|| Slots {
        count: Mutex::new(Count {
            limit: default_limit(),
            running: 0,
        }),
        freed_for_threads: Condvar::new(),
        freed_for_tasks: Notify::new(),
    })
}

fn default_limit() -> Option<NonZeroUsize> {
    limit_from(
        std::env::var("CODEACT_MAX_RUNNING_SCRIPTS").ok().as_deref(),
        cores_twice(),
    )
}

/// The cap `CODEACT_MAX_RUNNING_SCRIPTS` sets (`0`: none), or `default` when it
/// is unset or not a number.
fn limit_from(value: Option<&str>, default: Option<NonZeroUsize>) -> Option<NonZeroUsize> {
    let Some(value) = value else {
        return default;
    };
    match value.trim().parse::<usize>() {
        Ok(limit) => NonZeroUsize::new(limit),
        Err(_) => {
            tracing::warn!(
                value,
                "CODEACT_MAX_RUNNING_SCRIPTS is not a number; using the default"
            );
            default
        }
    }
}

fn cores_twice() -> Option<NonZeroUsize> {
    let cores = std::thread::available_parallelism().map_or(1, NonZeroUsize::get);
    NonZeroUsize::new(cores.saturating_mul(2))
}

impl Slots {
    fn count(&self) -> MutexGuard<'_, Count> {
        // The count stays consistent even if a holder panicked mid-update: every
        // update is one statement.
        self.count.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn try_take(&self) -> bool {
        let mut count = self.count();
        if count.has_room() {
            count.running += 1;
            true
        } else {
            false
        }
    }

    fn give_back(&self) {
        self.count().running -= 1;
        self.freed_for_threads.notify_one();
        self.freed_for_tasks.notify_one();
    }

    fn wake_all(&self) {
        self.freed_for_threads.notify_all();
        self.freed_for_tasks.notify_waiters();
    }
}

/// A slot held for one run; given back when dropped.
#[must_use = "the slot is given back when this is dropped"]
pub(crate) struct Slot {
    taken: bool,
}

impl Slot {
    /// Waits for a slot without holding a thread.
    pub(crate) async fn wait() -> Slot {
        let slots = slots();
        loop {
            let mut freed = pin!(slots.freed_for_tasks.notified());
            freed.as_mut().enable();
            if slots.try_take() {
                return Slot { taken: true };
            }
            freed.await;
        }
    }

    /// Waits for a slot on this thread, unless the thread's script holds one.
    pub(crate) fn wait_blocking() -> Slot {
        if HOLDING.get() {
            return Slot { taken: false };
        }
        let slots = slots();
        let mut count = slots.count();
        while !count.has_room() {
            count = slots
                .freed_for_threads
                .wait(count)
                .unwrap_or_else(|e| e.into_inner());
        }
        count.running += 1;
        Slot { taken: true }
    }

    /// Runs `run` on this thread as the holder of this slot, so that tool calls
    /// made inside it can give the slot back while they wait.
    pub(crate) fn run_here<T>(&self, run: impl FnOnce() -> T) -> T {
        if !self.taken {
            return run();
        }
        struct Restore(bool);
        impl Drop for Restore {
            fn drop(&mut self) {
                HOLDING.set(self.0);
            }
        }
        let _restore = Restore(HOLDING.replace(true));
        run()
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if self.taken {
            slots().give_back();
        }
    }
}

/// Runs `call` (a tool call that has to wait) with this thread's slot given back,
/// and takes the slot back afterwards, over the cap if need be.
pub(crate) fn released_during<T>(call: impl FnOnce() -> T) -> T {
    if !HOLDING.get() {
        return call();
    }
    /// Takes the slot back even if the call panics: the run's `Slot` gives it
    /// back once more when dropped.
    struct TakeBack;
    impl Drop for TakeBack {
        fn drop(&mut self) {
            slots().count().running += 1;
            HOLDING.set(true);
        }
    }
    slots().give_back();
    HOLDING.set(false);
    let _take_back = TakeBack;
    call()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// If this fails, `CODEACT_MAX_RUNNING_SCRIPTS` or the default cap does not
    /// mean what the docs say.
    #[test]
    fn the_cap_comes_from_the_environment_or_twice_the_cores() {
        let four = NonZeroUsize::new(4);
        assert_eq!(limit_from(None, four), four);
        assert_eq!(limit_from(Some(" 3 "), four), NonZeroUsize::new(3));
        assert_eq!(limit_from(Some("0"), four), None);
        assert_eq!(limit_from(Some("many"), four), four);
        let cores = std::thread::available_parallelism().map_or(1, NonZeroUsize::get);
        assert_eq!(cores_twice(), NonZeroUsize::new(2 * cores));
    }
}
