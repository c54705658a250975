//! What a job has left: seconds of work as a 10th, 50th and 90th percentile, and the quantile at
//! any level between (a split log-normal), which a replay's draw takes.

use super::scenario::Scenario;
use serde::Serialize;

/// Seconds of work a job has left, at its preferred shape with its GPUs to itself.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Remaining {
    pub p10: f64,
    pub p50: f64,
    pub p90: f64,
    /// Drawn on its own in a sampled replay rather than with its sweep: its estimate comes from
    /// its sweep's own lengths, so their spread is how its members differ from each other (a
    /// sweep of hundreds drawn together at one level would have its first members end no sooner
    /// than its median).
    pub alone: bool,
    /// What the estimate rests on.
    pub basis: Basis,
}

/// What a job's remaining-work estimate rests on, from the most to the least it knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Basis {
    /// Its step budget at its own measured speed.
    Measured,
    /// Its step budget at the speed measured of other jobs running the same program (it has not run
    /// long enough to be measured itself).
    Borrowed,
    /// How long the jobs of its own sweep ran.
    Sweep,
    /// How long finished (and running) jobs of its tenant or size ran.
    History,
    /// Nothing: no job like it has finished or been measured, and it is taken to run
    /// [`NO_HISTORY`](super::NO_HISTORY) (an hour, between ten minutes and eight hours).
    Guess,
}

/// The standard normal's 90th percentile.
const Z90: f64 = 1.281_551_565_544_600_5;

impl Remaining {
    /// The seconds left in `scenario` for a job of `cohort`.
    pub(super) fn at(self, scenario: Scenario, cohort: u64) -> f64 {
        self.at_level(scenario.level(cohort))
    }

    /// The quantile at `level` (in (0, 1)) of a distribution with these three percentiles: log-normal
    /// on each side of the median (a split log-normal), as durations of training jobs are. Seconds
    /// under one count as one on the log scale, and a job with nothing left has nothing left.
    pub fn at_level(self, level: f64) -> f64 {
        if self.p90 <= 0.0 || !self.p50.is_finite() {
            return self.p50.max(0.0);
        }
        let ln = |seconds: f64| seconds.max(1.0).ln();
        let z = drover_search::math::norm_ppf(level.clamp(1e-6, 1.0 - 1e-6));
        let (median, low, high) = (ln(self.p50), ln(self.p10), ln(self.p90));
        let spread = if z < 0.0 { median - low } else { high - median };
        (median + z * spread / Z90).exp()
    }

    /// Its median, with the 10th and 90th percentiles at `low` and `high` times it.
    pub(super) fn scaled(self, low: f64, high: f64) -> Remaining {
        Remaining {
            p10: self.p50 * low,
            p50: self.p50,
            p90: self.p50 * high,
            alone: self.alone,
            basis: self.basis,
        }
    }

    /// Exactly `seconds`, at every percentile.
    pub(super) fn point(seconds: f64, basis: Basis) -> Remaining {
        Remaining {
            p10: seconds,
            p50: seconds,
            p90: seconds,
            alone: false,
            basis,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_level_gives_back_the_three_percentiles_and_orders_between_them() {
        let r = Remaining {
            p10: 100.0,
            p50: 1_000.0,
            p90: 50_000.0,
            alone: false,
            basis: Basis::History,
        };
        assert!((r.at_level(0.1) - 100.0).abs() < 1e-6);
        assert!((r.at_level(0.5) - 1_000.0).abs() < 1e-6);
        assert!((r.at_level(0.9) - 50_000.0).abs() < 1e-3);
        assert!(r.at_level(0.3) > 100.0 && r.at_level(0.3) < 1_000.0);
        assert!(
            r.at_level(0.95) > 50_000.0,
            "the heavy side goes on past p90"
        );
        let done = Remaining {
            p10: 0.0,
            p50: 0.0,
            p90: 0.0,
            alone: false,
            basis: Basis::Measured,
        };
        assert_eq!(done.at_level(0.99), 0.0);
    }
}
