//! A job's speed as a function of its shape, fitted online from observed step times (Optimus's
//! synchronous model, Peng et al. EuroSys'18):
//!
//! step time t(p, w) = θ0/w + θ1 + θ2·w/p + θ3·w + θ4·p, θ ≥ 0
//!
//! (Optimus writes θ0·M/w with M the global batch; M is fixed for a job, so it folds into θ0.) The fit is
//! non-negative least squares on relative error. Until a job has been seen at `MIN_SHAPES` shapes it
//! falls back to a prior whose scale is set by what has been observed.

use super::least_squares::nnls;
use crate::snapshot::{Shape, StepStats};

/// Distinct shapes needed before the fit replaces the prior.
pub const MIN_SHAPES: usize = 3;

/// The prior's relative weights: mostly compute that divides over workers, some fixed overhead, and PS
/// traffic that grows with workers per shard.
const PRIOR: [f64; 5] = [0.7, 0.1, 0.2, 0.0, 0.0];

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SpeedModel {
    pub theta: [f64; 5],
    /// Whether `theta` was fitted (true) or is the scaled prior.
    pub fitted: bool,
}

fn features(shape: Shape) -> [f64; 5] {
    let p = f64::from(shape.ps.max(1));
    let w = f64::from(shape.workers.max(1));
    [1.0 / w, 1.0, w / p, w, p]
}

impl SpeedModel {
    /// Fits the model to a job's observations, or scales the prior to them when there are too few shapes.
    pub fn from_observations(stats: &[StepStats]) -> SpeedModel {
        let usable: Vec<&StepStats> = stats
            .iter()
            .filter(|s| !s.shared && s.samples > 0 && s.mean_step_s > 0.0 && s.shape.workers > 0)
            .collect();
        if usable.len() >= MIN_SHAPES {
            let rows: Vec<([f64; 5], f64)> = usable
                .iter()
                .map(|s| {
                    // Weighted by sample count (as a repeated row would be), in relative error.
                    let weight = f64::from(s.samples).sqrt();
                    (
                        features(s.shape).map(|x| weight * x / s.mean_step_s),
                        weight,
                    )
                })
                .collect();
            let theta = nnls(&rows);
            if theta.iter().any(|&t| t > 0.0) {
                return SpeedModel {
                    theta,
                    fitted: true,
                };
            }
        }
        // The prior, scaled to match the best-observed shape (or unit scale with nothing observed).
        let scale = usable
            .iter()
            .max_by_key(|s| s.samples)
            .map_or(1.0, |s| s.mean_step_s / Self::dot(&PRIOR, s.shape));
        SpeedModel {
            theta: PRIOR.map(|t| t * scale),
            fitted: false,
        }
    }

    fn dot(theta: &[f64; 5], shape: Shape) -> f64 {
        features(shape).iter().zip(theta).map(|(x, t)| x * t).sum()
    }

    /// Predicted seconds per step at `shape`.
    pub fn step_s(&self, shape: Shape) -> f64 {
        Self::dot(&self.theta, shape)
    }

    /// Predicted steps per second at `shape`.
    pub fn steps_per_s(&self, shape: Shape) -> f64 {
        let t = self.step_s(shape);
        if t > 0.0 { 1.0 / t } else { 0.0 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(theta: [f64; 5], shapes: &[(u32, u32)]) -> Vec<StepStats> {
        shapes
            .iter()
            .map(|&(ps, workers)| {
                let shape = Shape { ps, workers };
                StepStats {
                    shape,
                    shared: false,
                    spread_samples: 0,
                    spread_mean_step_s: 0.0,
                    samples: 10,
                    mean_step_s: SpeedModel::dot(&theta, shape),
                    gpu: Default::default(),
                }
            })
            .collect()
    }

    #[test]
    fn recovers_a_true_model_from_enough_shapes() {
        let truth = [2.0, 0.3, 0.1, 0.05, 0.02];
        let model = SpeedModel::from_observations(&stats(
            truth,
            &[(1, 1), (1, 2), (2, 4), (4, 4), (2, 8), (3, 6)],
        ));
        assert!(model.fitted);
        for shape in [Shape { ps: 2, workers: 3 }, Shape { ps: 8, workers: 16 }] {
            let want = SpeedModel::dot(&truth, shape);
            assert!(
                (model.step_s(shape) - want).abs() / want < 1e-6,
                "{shape:?}"
            );
        }
    }

    #[test]
    fn falls_back_to_a_scaled_prior() {
        let seen = stats([1.0, 0.0, 0.0, 0.0, 0.0], &[(1, 2)]);
        let model = SpeedModel::from_observations(&seen);
        assert!(!model.fitted);
        assert!(
            (model.step_s(Shape { ps: 1, workers: 2 }) - 0.5).abs() < 1e-9,
            "matches what was seen"
        );
        assert!(
            model.steps_per_s(Shape { ps: 2, workers: 4 })
                > model.steps_per_s(Shape { ps: 1, workers: 2 })
        );
        let blind = SpeedModel::from_observations(&[]);
        assert!(blind.steps_per_s(Shape { ps: 1, workers: 1 }) > 0.0);
    }
}
