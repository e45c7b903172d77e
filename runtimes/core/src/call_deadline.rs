//! When the running script's time is up, for the tool calls it makes: a call
//! that waits past it holds the script past its limit, since the engine waits
//! for the call. The host sets it on the thread that runs a script
//! ([`within`]); a tool dispatcher reads it on the same thread ([`current`]),
//! where backends make their tool calls.

use std::cell::Cell;
use std::time::Instant;

thread_local! {
    static DEADLINE: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// Runs `run` with `deadline` as the running script's, restoring the one
/// before after it (a script run inside another's tool call keeps the
/// earlier of the two).
pub fn within<R>(deadline: Instant, run: impl FnOnce() -> R) -> R {
    let before = DEADLINE.with(Cell::get);
    let deadline = before.map_or(deadline, |outer| outer.min(deadline));
    DEADLINE.with(|current| current.set(Some(deadline)));
    let result = run();
    DEADLINE.with(|current| current.set(before));
    result
}

/// The running script's deadline on this thread; `None` outside a script.
pub fn current() -> Option<Instant> {
    DEADLINE.with(Cell::get)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_deadline_holds_inside_its_run_keeps_the_earlier_one_and_is_gone_after() {
        let now = Instant::now();
        assert_eq!(current(), None);
        within(now + Duration::from_secs(5), || {
            assert_eq!(current(), Some(now + Duration::from_secs(5)));
            within(now + Duration::from_secs(9), || {
                assert_eq!(current(), Some(now + Duration::from_secs(5)));
            });
            within(now + Duration::from_secs(1), || {
                assert_eq!(current(), Some(now + Duration::from_secs(1)));
            });
            assert_eq!(current(), Some(now + Duration::from_secs(5)));
        });
        assert_eq!(current(), None);
    }
}
