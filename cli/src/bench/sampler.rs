//! Runs a measured closure until its budget is spent: some warm-up runs, then timed
//! runs until both a minimum count and a time budget are reached (or a maximum
//! count). Every run's result is checked, outside the timed span, so a case that
//! starts failing fast is reported as failing instead of as fast.

use std::time::{Duration, Instant};

use super::stats::Summary;

/// How many runs to time for one case.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// Untimed runs first (each still checked). They fill caches and pools.
    pub warmup: usize,
    /// Timed runs at least, whatever the time they take.
    pub min_runs: usize,
    /// Timed runs at most.
    pub max_runs: usize,
    /// Keep timing until this much time has passed (and `min_runs` are done).
    pub time: Duration,
}

impl Budget {
    /// For cases of microseconds to a few milliseconds.
    pub const fn fast(quick: bool) -> Self {
        if quick {
            Self {
                warmup: 3,
                min_runs: 10,
                max_runs: 20_000,
                time: Duration::from_millis(150),
            }
        } else {
            Self {
                warmup: 10,
                min_runs: 20,
                max_runs: 100_000,
                time: Duration::from_secs(1),
            }
        }
    }

    /// For cases of tens of milliseconds to a second or more.
    pub const fn slow(quick: bool) -> Self {
        if quick {
            Self {
                warmup: 1,
                min_runs: 3,
                max_runs: 50,
                time: Duration::from_millis(300),
            }
        } else {
            Self {
                warmup: 1,
                min_runs: 5,
                max_runs: 200,
                time: Duration::from_secs(3),
            }
        }
    }

    /// For cases that wait for a limit (each run lasts about as long as the limit).
    pub const fn waiting(quick: bool) -> Self {
        if quick {
            Self {
                warmup: 0,
                min_runs: 2,
                max_runs: 2,
                time: Duration::ZERO,
            }
        } else {
            Self {
                warmup: 1,
                min_runs: 5,
                max_runs: 10,
                time: Duration::from_secs(2),
            }
        }
    }
}

/// Times `run` under `budget`, checking each result with `check` after its clock
/// stops; the result is then dropped, also untimed (dropping a session can mean
/// killing a process). The first failed run or check ends the case with its
/// message.
pub fn measure<T>(
    budget: Budget,
    mut run: impl FnMut() -> Result<T, String>,
    mut check: impl FnMut(&T) -> Result<(), String>,
) -> Result<Summary, String> {
    for _ in 0..budget.warmup {
        let value = run()?;
        check(&value)?;
    }
    let mut samples = Vec::with_capacity(budget.min_runs.max(16));
    let started = Instant::now();
    while samples.len() < budget.max_runs.max(1) {
        let begin = Instant::now();
        let value = run();
        let took = begin.elapsed();
        let value = value?;
        check(&value)?;
        drop(value);
        samples.push(took);
        if samples.len() >= budget.min_runs && started.elapsed() >= budget.time {
            break;
        }
    }
    Summary::from_durations(&samples).ok_or_else(|| "no run was timed".to_string())
}

/// Like [`measure`], but `run` times itself and returns the span that counts (for
/// cases with untimed set-up inside each run, such as a fresh session before the
/// one step that is measured).
pub fn measure_spans(
    budget: Budget,
    mut run: impl FnMut() -> Result<Duration, String>,
) -> Result<Summary, String> {
    for _ in 0..budget.warmup {
        run()?;
    }
    let mut samples = Vec::with_capacity(budget.min_runs.max(4));
    let started = Instant::now();
    while samples.len() < budget.max_runs.max(1) {
        samples.push(run()?);
        if samples.len() >= budget.min_runs && started.elapsed() >= budget.time {
            break;
        }
    }
    Summary::from_durations(&samples).ok_or_else(|| "no run was timed".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    const TINY: Budget = Budget {
        warmup: 2,
        min_runs: 5,
        max_runs: 5,
        time: Duration::ZERO,
    };

    #[test]
    fn warm_up_runs_are_checked_but_not_counted() {
        let mut runs = 0;
        let mut checks = 0;
        let summary = measure(
            TINY,
            || {
                runs += 1;
                Ok(runs)
            },
            |_| {
                checks += 1;
                Ok(())
            },
        )
        .expect("measures");
        assert_eq!(summary.iterations, 5);
        assert_eq!((runs, checks), (7, 7));
    }

    #[test]
    fn a_failed_check_ends_the_case_with_its_message() {
        let mut n = 0;
        let result = measure(
            TINY,
            || {
                n += 1;
                Ok(n)
            },
            |&n| {
                if n < 4 {
                    Ok(())
                } else {
                    Err(format!("run {n} was wrong"))
                }
            },
        );
        assert_eq!(result, Err("run 4 was wrong".to_string()));
    }

    #[test]
    fn a_failed_run_ends_the_case_with_its_message() {
        let result = measure(
            TINY,
            || Err::<(), _>("engine broke".to_string()),
            |_| Ok(()),
        );
        assert_eq!(result, Err("engine broke".to_string()));
    }

    #[test]
    fn self_timed_runs_report_the_spans_they_return() {
        let summary = measure_spans(TINY, || Ok(Duration::from_micros(30))).expect("measures");
        assert_eq!(summary.median_us, 30.0);
        assert_eq!(summary.iterations, 5);
    }
}
