//! How long jobs like one run: a distribution estimated from finished jobs and from jobs still
//! running (Kaplan-Meier), with a heavy tail past the data, and the remaining time it gives a job of
//! a given age.

use super::history::TENANT_HISTORY_MIN;
use super::remaining::{Basis, Remaining};
use serde::Serialize;

/// Quantiles of how long jobs take (seconds at their preferred shape).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Quantiles {
    pub p10: f64,
    pub p50: f64,
    pub p90: f64,
    pub samples: usize,
}

/// Levels kept of a history bucket's lengths: every 1/64th.
const LEVELS: usize = 64;

/// How long jobs like one run (seconds at their preferred shape), as a distribution estimated from
/// finished jobs and from jobs still running (Kaplan-Meier: a running job says its length is at least
/// its age). Finished jobs alone under-count long ones, which are the ones still running; those
/// hold most of the GPUs a waiting job waits for. Kept as its quantile function at every 1/64th
/// level up to the highest level the data reach; past it, a Pareto tail of shape 1 (the chance
/// of running past `t` falls as 1/t), which makes a job's expected remaining time grow with its age.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Lengths {
    /// Finished jobs among the data.
    pub samples: usize,
    /// (level, seconds), increasing in both (levels flat only at the end), from (0, shortest) to
    /// (`top`, the longest length or the oldest running job's age).
    knots: Vec<(f64, f64)>,
}

impl Lengths {
    /// Finished jobs' lengths alone. `None` without usable samples (negative and non-finite ones
    /// are dropped).
    pub fn of(durations: Vec<f64>) -> Option<Lengths> {
        Lengths::estimate(durations, Vec::new())
    }

    /// Kaplan-Meier over `finished` lengths and the ages of jobs still `running`. `None` without a
    /// usable finished length.
    pub fn estimate(mut finished: Vec<f64>, mut running: Vec<f64>) -> Option<Lengths> {
        finished.retain(|d| d.is_finite() && *d >= 0.0);
        running.retain(|d| d.is_finite() && *d > 0.0);
        if finished.is_empty() {
            return None;
        }
        finished.sort_by(f64::total_cmp);
        running.sort_by(f64::total_cmp);
        // The step points (length, share ended by then), one per distinct finished length.
        let mut steps: Vec<(f64, f64)> = Vec::with_capacity(finished.len());
        let mut at_risk = (finished.len() + running.len()) as f64;
        let mut surviving = 1.0;
        let (mut f, mut r) = (0, 0);
        while f < finished.len() {
            let t = finished[f];
            // Running jobs younger than t left the risk set before it.
            while r < running.len() && running[r] < t {
                at_risk -= 1.0;
                r += 1;
            }
            let mut ended = 0.0;
            while f < finished.len() && finished[f] == t {
                ended += 1.0;
                f += 1;
            }
            surviving *= 1.0 - ended / at_risk.max(ended);
            at_risk -= ended;
            steps.push((t, 1.0 - surviving));
        }
        let top = steps.last().map_or(0.0, |&(_, level)| level);
        // Quantiles at every 1/64th up to `top`, linear between the step points.
        let mut knots = vec![(0.0, finished[0])];
        let mut i = 0;
        for k in 1..=LEVELS {
            let level = k as f64 / LEVELS as f64;
            if level > top {
                break;
            }
            while steps[i].1 < level {
                i += 1;
            }
            let (t_hi, l_hi) = steps[i];
            let (t_lo, l_lo) = if i == 0 {
                (finished[0], 0.0)
            } else {
                steps[i - 1]
            };
            let t = if l_hi > l_lo {
                t_lo + (t_hi - t_lo) * (level - l_lo) / (l_hi - l_lo)
            } else {
                t_hi
            };
            knots.push((level, t));
        }
        if let Some(&(t, level)) = steps.last()
            && knots.last().is_some_and(|&(l, _)| l < level)
        {
            knots.push((level, t));
        }
        // No job ended between the longest finished length and the oldest running job: the share
        // still running stays flat until then, and the tail starts there.
        if let (Some(&oldest), Some(&(level, longest))) = (running.last(), knots.last())
            && oldest > longest
            && level < 1.0
        {
            knots.push((level, oldest));
        }
        Some(Lengths {
            samples: finished.len(),
            knots,
        })
    }

    /// The lengths of a distribution known only by three percentiles (see [`Remaining::at_level`]).
    pub(super) fn from_quantiles(q: Quantiles) -> Lengths {
        let r = Remaining {
            p10: q.p10,
            p50: q.p50,
            p90: q.p90,
            alone: false,
            basis: Basis::History,
        };
        let knots = (0..LEVELS)
            .map(|k| {
                let level = k as f64 / LEVELS as f64;
                (level, if k == 0 { 0.0 } else { r.at_level(level) })
            })
            .collect();
        Lengths {
            samples: q.samples,
            knots,
        }
    }

    /// The highest level the data reach, and the length there.
    fn top(&self) -> (f64, f64) {
        self.knots.last().copied().unwrap_or((0.0, 0.0))
    }

    /// The length at `level` in [0, 1].
    pub fn quantile(&self, level: f64) -> f64 {
        let level = level.clamp(0.0, 1.0);
        let (top, longest) = self.top();
        if level >= top {
            // The Pareto tail: the share still running falls as 1/t past the longest length seen.
            return if level >= 1.0 || top >= 1.0 {
                longest
            } else {
                longest.max(1.0) * (1.0 - top) / (1.0 - level)
            };
        }
        let i = self.knots.partition_point(|&(l, _)| l < level);
        let (l_hi, t_hi) = self.knots[i];
        let Some(&(l_lo, t_lo)) = i.checked_sub(1).and_then(|j| self.knots.get(j)) else {
            return t_hi;
        };
        t_lo + (t_hi - t_lo) * (level - l_lo) / (l_hi - l_lo).max(f64::MIN_POSITIVE)
    }

    /// The share of lengths at most `seconds`.
    fn cdf(&self, seconds: f64) -> f64 {
        let (top, longest) = self.top();
        if seconds >= longest {
            return if top >= 1.0 || seconds <= 0.0 {
                top
            } else {
                1.0 - (1.0 - top) * longest.max(1.0) / seconds.max(longest.max(1.0))
            };
        }
        let i = self.knots.partition_point(|&(_, t)| t <= seconds);
        let Some(&(l_lo, t_lo)) = i.checked_sub(1).and_then(|j| self.knots.get(j)) else {
            return 0.0;
        };
        let (l_hi, t_hi) = self.knots[i];
        l_lo + (l_hi - l_lo) * (seconds - t_lo) / (t_hi - t_lo).max(f64::MIN_POSITIVE)
    }

    pub fn quantiles(&self) -> Quantiles {
        Quantiles {
            p10: self.quantile(0.1),
            p50: self.quantile(0.5),
            p90: self.quantile(0.9),
            samples: self.samples,
        }
    }

    /// What is left of a job like these that has run `ran` seconds: the lengths longer than `ran`,
    /// less `ran`, at levels 0.1, 0.5 and 0.9. Past every length seen, and where the data end
    /// without a tail beyond (every job finished), it has as long again to go at the median (the
    /// Pareto tail's rule: a ninth as long at p10 and nine times as long at p90).
    pub(super) fn remaining_after(&self, ran: f64) -> Remaining {
        if ran <= 0.0 {
            // Not started: nothing known beyond its kind.
            return Remaining {
                p10: self.quantile(0.1),
                p50: self.quantile(0.5),
                p90: self.quantile(0.9),
                alone: false,
                basis: Basis::History,
            };
        }
        let below = self.cdf(ran);
        if below >= 1.0 - 1e-9 || (1.0 - below) * (self.samples as f64) < TENANT_HISTORY_MIN as f64
        {
            let ran = ran.max(60.0);
            return Remaining {
                p10: ran / 9.0,
                p50: ran,
                p90: ran * 9.0,
                alone: false,
                basis: Basis::History,
            };
        }
        let left = |u: f64| (self.quantile(below + u * (1.0 - below)) - ran).max(0.0);
        Remaining {
            p10: left(0.1),
            p50: left(0.5),
            p90: left(0.9),
            alone: false,
            basis: Basis::History,
        }
    }
}
