//! One run's two time limits as deadlines: the script's own time
//! ([`Limits::wall_time`]), which stops while the script waits on host tools,
//! and the total ([`Limits::max_total_time`]), which never stops.
//!
//! A backend starts a clock when a run starts, stops the script at
//! [`RunClock::deadline`], and calls [`RunClock::waited`] after each wait on
//! tools: the own-time deadline moves later by exactly the time waited, never
//! past the total deadline. Only the wait moves it, so a script that calls an
//! instant tool in a loop gains next to nothing, and its own work still counts
//! in full. [`RunClock::limit`] says which limit a stop at the deadline is.

use std::time::{Duration, Instant};

use crate::{LimitKind, Limits};

/// The deadlines of one run; see the module docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunClock {
    /// When the script's own time runs out, waits so far added; may lie past
    /// `total`.
    own: Instant,
    /// When the run's total time runs out.
    total: Instant,
}

/// A time this far off stands for "never": what `Instant + Duration` can hold
/// on every platform, about 30 years.
const FAR: Duration = Duration::from_secs(60 * 60 * 24 * 365 * 30);

fn after(start: Instant, wait: Duration) -> Instant {
    start
        .checked_add(wait)
        .or_else(|| start.checked_add(FAR))
        .unwrap_or(start)
}

impl RunClock {
    /// A run under `limits` starting now.
    pub fn start(limits: &Limits) -> Self {
        Self::starting_at(Instant::now(), limits)
    }

    /// A run under `limits` that started at `start`.
    pub fn starting_at(start: Instant, limits: &Limits) -> Self {
        Self {
            own: after(start, limits.wall_time),
            total: after(start, limits.max_total_time),
        }
    }

    /// When the run must stop: the earlier of its own-time and total deadlines.
    pub fn deadline(&self) -> Instant {
        self.own.min(self.total)
    }

    /// When the run's total time runs out, waits included: the bound for the
    /// tool calls it makes ([`call_deadline`](crate::call_deadline)).
    pub fn total_deadline(&self) -> Instant {
        self.total
    }

    /// The limit a stop at [`deadline`](Self::deadline) is: the total time
    /// when it comes first, else the script's own time.
    pub fn limit(&self) -> LimitKind {
        if self.total < self.own {
            LimitKind::TotalTime
        } else {
            LimitKind::WallTime
        }
    }

    /// Whether the deadline has passed.
    pub fn expired(&self) -> bool {
        Instant::now() >= self.deadline()
    }

    /// Counts `wait` (time the script spent waiting on tools) out of its own
    /// time: the own-time deadline moves that much later.
    pub fn waited(&mut self, wait: Duration) {
        self.own = after(self.own, wait);
    }

    /// Runs `wait` (a tool call, or a batch of calls) and counts the time it
    /// took out of the script's own time ([`waited`](Self::waited)).
    pub fn pause<R>(&mut self, wait: impl FnOnce() -> R) -> R {
        let started = Instant::now();
        let result = wait();
        self.waited(started.elapsed());
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(own_ms: u64, total_ms: u64) -> Limits {
        Limits {
            wall_time: Duration::from_millis(own_ms),
            max_total_time: Duration::from_millis(total_ms),
            ..Limits::default()
        }
    }

    #[test]
    fn a_run_that_never_waits_stops_at_its_own_time_and_says_so() {
        let start = Instant::now();
        let clock = RunClock::starting_at(start, &limits(100, 1_000));
        assert_eq!(clock.deadline(), start + Duration::from_millis(100));
        assert_eq!(clock.limit(), LimitKind::WallTime);
        assert_eq!(clock.total_deadline(), start + Duration::from_millis(1_000));
    }

    #[test]
    fn a_wait_moves_the_own_deadline_by_the_wait_and_no_more() {
        let start = Instant::now();
        let mut clock = RunClock::starting_at(start, &limits(100, 1_000));
        clock.waited(Duration::from_millis(300));
        assert_eq!(clock.deadline(), start + Duration::from_millis(400));
        assert_eq!(clock.limit(), LimitKind::WallTime);
    }

    #[test]
    fn waits_past_the_total_leave_the_total_deadline_and_name_it() {
        let start = Instant::now();
        let mut clock = RunClock::starting_at(start, &limits(100, 1_000));
        clock.waited(Duration::from_millis(950));
        assert_eq!(clock.deadline(), start + Duration::from_millis(1_000));
        assert_eq!(clock.limit(), LimitKind::TotalTime);
    }

    #[test]
    fn an_own_time_longer_than_the_total_stops_at_the_total() {
        let start = Instant::now();
        let clock = RunClock::starting_at(start, &limits(5_000, 1_000));
        assert_eq!(clock.deadline(), start + Duration::from_millis(1_000));
        assert_eq!(clock.limit(), LimitKind::TotalTime);
    }

    #[test]
    fn instant_waits_in_a_loop_do_not_reset_the_budget() {
        let mut clock = RunClock::start(&limits(50, 60_000));
        let first = clock.deadline();
        for _ in 0..1_000 {
            clock.pause(|| ());
        }
        assert!(clock.deadline() < first + Duration::from_millis(50));
    }

    #[test]
    fn unlimited_limits_give_far_deadlines_without_overflow() {
        let mut clock = RunClock::start(&Limits::unlimited());
        clock.waited(Duration::MAX);
        assert!(clock.deadline() > Instant::now() + Duration::from_secs(3_600));
        assert!(!clock.expired());
    }
}
