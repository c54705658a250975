//! Early stopping for the searchers that do not stop trials themselves (grid, random, TPE).
//!
//! - **Median rule** (Golovin et al., "Google Vizier", 2017): a running trial whose best value so far
//!   is worse than the median, over finished trials, of their running averages up to the same step is
//!   stopped.
//! - **Learning-curve extrapolation** (after Domhan et al. 2015, with one model instead of their
//!   ensemble): a power law `y = a + b·k^(−c)` is fitted to the trial's curve and evaluated at the
//!   step finished trials ran to; a trial whose predicted value is worse than the best finished trial's
//!   final value is stopped.

use crate::decision::Decision;
use crate::trials::TrialRecord;
use drover_core::experiment::{EarlyStopping, ExperimentSpec};

pub fn decide(spec: &ExperimentSpec, trials: &[TrialRecord]) -> Vec<Decision> {
    if spec.searcher.is_multi_fidelity() {
        return Vec::new();
    }
    let goal = spec.metric.goal;
    let finished: Vec<&TrialRecord> = trials
        .iter()
        .filter(|trial| trial.final_value().is_some())
        .collect();
    let mut out = Vec::new();
    match spec.early_stopping {
        EarlyStopping::None => {}
        EarlyStopping::Median {
            warmup_steps,
            min_trials,
        } => {
            if finished.len() < min_trials as usize {
                return out;
            }
            for trial in trials.iter().filter(|t| t.is_active()) {
                let Some(&(step, _)) = trial.curve.last() else {
                    continue;
                };
                if step < warmup_steps {
                    continue;
                }
                let Some(best) = trial.best_loss(goal) else {
                    continue;
                };
                let mut averages: Vec<f64> = finished
                    .iter()
                    .filter_map(|done| {
                        let upto: Vec<f64> = done
                            .curve
                            .iter()
                            .filter(|&&(s, _)| s <= step)
                            .map(|&(_, v)| goal.loss(v))
                            .collect();
                        (!upto.is_empty()).then(|| upto.iter().sum::<f64>() / upto.len() as f64)
                    })
                    .collect();
                if averages.is_empty() {
                    continue;
                }
                averages.sort_by(f64::total_cmp);
                let median = median_of(&averages);
                if best > median {
                    out.push(Decision::Stop {
                        trial: trial.index,
                        reason: format!(
                            "median rule: its best {} by step {step} is worse than the median of \
                             finished trials' running averages ({})",
                            spec.metric.name,
                            goal.loss(median)
                        ),
                    });
                }
            }
        }
        EarlyStopping::Curve {
            min_points,
            min_trials,
        } => {
            if finished.len() < min_trials as usize {
                return out;
            }
            let Some(best_final) = finished
                .iter()
                .filter_map(|t| t.final_value().map(|v| goal.loss(v)))
                .reduce(f64::min)
            else {
                return out;
            };
            let horizon = finished
                .iter()
                .filter_map(|t| t.curve.last().map(|&(s, _)| s))
                .max()
                .unwrap_or(0);
            for trial in trials.iter().filter(|t| t.is_active()) {
                if trial.curve.len() < min_points as usize {
                    continue;
                }
                let points: Vec<(f64, f64)> = trial
                    .curve
                    .iter()
                    .map(|&(s, v)| (s.max(1) as f64, goal.loss(v)))
                    .collect();
                let Some(curve) = PowerLaw::fit(&points) else {
                    continue;
                };
                let last_step = points.last().map_or(1.0, |p| p.0);
                let predicted = curve.at((horizon as f64).max(last_step));
                if predicted > best_final {
                    out.push(Decision::Stop {
                        trial: trial.index,
                        reason: format!(
                            "curve extrapolation: {} predicted at step {horizon} is {}, worse than the \
                             best finished trial's {}",
                            spec.metric.name,
                            goal.loss(predicted),
                            goal.loss(best_final)
                        ),
                    });
                }
            }
        }
    }
    out
}

fn median_of(sorted: &[f64]) -> f64 {
    let n = sorted.len();
    if n % 2 == 1 {
        sorted[n / 2]
    } else {
        0.5 * (sorted[n / 2 - 1] + sorted[n / 2])
    }
}

/// `y = a + b·k^(−c)`, fitted by least squares: linear in (a, b) for each `c` of a log-spaced grid.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PowerLaw {
    pub a: f64,
    pub b: f64,
    pub c: f64,
}

impl PowerLaw {
    pub fn at(&self, step: f64) -> f64 {
        self.a + self.b * step.max(1.0).powf(-self.c)
    }

    pub fn fit(points: &[(f64, f64)]) -> Option<PowerLaw> {
        if points.len() < 3 || points.iter().any(|p| !p.1.is_finite()) {
            return None;
        }
        let mut best: Option<(f64, PowerLaw)> = None;
        for i in 0..40 {
            let c = 0.02 * (150f64).powf(f64::from(i) / 39.0);
            let n = points.len() as f64;
            let (mut sf, mut sy, mut sff, mut sfy) = (0.0, 0.0, 0.0, 0.0);
            for &(k, y) in points {
                let f = k.powf(-c);
                sf += f;
                sy += y;
                sff += f * f;
                sfy += f * y;
            }
            let det = n * sff - sf * sf;
            if det.abs() < 1e-300 {
                continue;
            }
            let b = (n * sfy - sf * sy) / det;
            let a = (sy - b * sf) / n;
            let law = PowerLaw { a, b, c };
            let sse: f64 = points.iter().map(|&(k, y)| (law.at(k) - y).powi(2)).sum();
            if best.is_none_or(|(top, _)| sse < top) {
                best = Some((sse, law));
            }
        }
        best.map(|(_, law)| law)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_power_law_is_recovered() {
        let truth = PowerLaw {
            a: 0.1,
            b: 2.0,
            c: 0.5,
        };
        let points: Vec<(f64, f64)> = (1..30)
            .map(|i| (f64::from(i) * 10.0, truth.at(f64::from(i) * 10.0)))
            .collect();
        let fit = PowerLaw::fit(&points).expect("fits");
        assert!((fit.at(1000.0) - truth.at(1000.0)).abs() < 0.01, "{fit:?}");
    }
}
