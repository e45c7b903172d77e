//! Order statistics over timing samples: the median and the 10th and 90th
//! percentiles, which say more about a noisy machine than a mean does.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// What a set of timed runs looked like, in microseconds.
///
/// Percentiles are nearest-rank (the smallest sample with at least that share of
/// samples at or below it), so every figure is a time that was actually measured;
/// the median of an even count is the mean of the two middle samples.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Timed runs (warm-up runs excluded).
    pub iterations: usize,
    /// The median run, in µs.
    pub median_us: f64,
    /// The 10th percentile, in µs.
    pub p10_us: f64,
    /// The 90th percentile, in µs.
    pub p90_us: f64,
    /// The fastest run, in µs.
    pub min_us: f64,
    /// The slowest run, in µs.
    pub max_us: f64,
}

impl Summary {
    /// Summarises `samples`; `None` when there are none.
    pub fn from_durations(samples: &[Duration]) -> Option<Self> {
        let micros: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1e6).collect();
        Self::from_micros(&micros)
    }

    /// Summarises `samples` given in µs; `None` when there are none or one is not a
    /// finite number.
    pub fn from_micros(samples: &[f64]) -> Option<Self> {
        if samples.is_empty() || samples.iter().any(|s| !s.is_finite()) {
            return None;
        }
        let mut sorted = samples.to_vec();
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len();
        let median = if !n.is_multiple_of(2) {
            sorted[n / 2]
        } else {
            (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
        };
        Some(Self {
            iterations: n,
            median_us: median,
            p10_us: nearest_rank(&sorted, 10),
            p90_us: nearest_rank(&sorted, 90),
            min_us: sorted[0],
            max_us: sorted[n - 1],
        })
    }
}

/// The nearest-rank `percent`th percentile of `sorted` (ascending, not empty).
fn nearest_rank(sorted: &[f64], percent: usize) -> f64 {
    let n = sorted.len();
    // ceil(percent / 100 * n), as a 1-based rank, clamped into the slice.
    let rank = (percent * n).div_ceil(100).clamp(1, n);
    sorted[rank - 1]
}

/// `numerator / denominator`, or `None` when the denominator is not positive.
pub fn ratio(numerator: f64, denominator: f64) -> Option<f64> {
    (denominator > 0.0 && numerator.is_finite() && denominator.is_finite())
        .then(|| numerator / denominator)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_odd_count_has_its_middle_sample_as_median() {
        let s = Summary::from_micros(&[5.0, 1.0, 3.0]).expect("samples");
        assert_eq!(s.median_us, 3.0);
        assert_eq!((s.min_us, s.max_us, s.iterations), (1.0, 5.0, 3));
    }

    #[test]
    fn an_even_count_has_the_mean_of_the_middle_two_as_median() {
        let s = Summary::from_micros(&[4.0, 1.0, 3.0, 2.0]).expect("samples");
        assert_eq!(s.median_us, 2.5);
    }

    #[test]
    fn percentiles_are_nearest_rank_samples() {
        let samples: Vec<f64> = (1..=20).map(f64::from).collect();
        let s = Summary::from_micros(&samples).expect("samples");
        assert_eq!(s.p10_us, 2.0);
        assert_eq!(s.p90_us, 18.0);
    }

    #[test]
    fn one_sample_is_every_statistic() {
        let s = Summary::from_micros(&[7.0]).expect("one sample");
        assert_eq!(
            (s.p10_us, s.median_us, s.p90_us, s.iterations),
            (7.0, 7.0, 7.0, 1)
        );
    }

    #[test]
    fn no_samples_or_a_nan_give_no_summary() {
        assert_eq!(Summary::from_micros(&[]), None);
        assert_eq!(Summary::from_micros(&[1.0, f64::NAN]), None);
    }

    #[test]
    fn durations_are_summarised_in_microseconds() {
        let s = Summary::from_durations(&[Duration::from_millis(2)]).expect("one sample");
        assert!((s.median_us - 2000.0).abs() < 1e-9);
    }

    #[test]
    fn a_ratio_over_zero_is_none() {
        assert_eq!(ratio(1.0, 0.0), None);
        assert_eq!(ratio(3.0, 2.0), Some(1.5));
    }
}
