//! A job's convergence curve, fitted online from loss samples as Optimus does:
//!
//! l(k) = 1 / (β0·k + β1) + β2, β ≥ 0
//!
//! For a fixed β2 the curve is linear in (β0, β1) after the transform 1/(l − β2), so the fit searches β2
//! over [0, min loss) (golden section) and solves the rest by weighted least squares, later samples
//! weighted more (they say more about where the curve is going). Remaining steps are estimated as the
//! steps until the fitted excess loss l − β2 falls to `TOLERANCE` of its starting value.

/// Converged when the excess loss is this fraction of the excess at step 0.
pub const TOLERANCE: f64 = 0.05;
/// Samples needed before fitting.
pub const MIN_SAMPLES: usize = 5;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ConvergenceModel {
    pub beta: [f64; 3],
}

impl ConvergenceModel {
    pub fn loss_at(&self, step: f64) -> f64 {
        let [b0, b1, b2] = self.beta;
        1.0 / (b0 * step + b1).max(1e-12) + b2
    }

    /// The step at which the job is estimated to have converged.
    pub fn converged_step(&self) -> f64 {
        let [b0, b1, _] = self.beta;
        if b0 <= 0.0 {
            f64::INFINITY
        } else {
            b1 * (1.0 / TOLERANCE - 1.0) / b0
        }
    }

    /// Steps left after `step`, at least one.
    pub fn remaining_steps(&self, step: f64) -> f64 {
        (self.converged_step() - step).max(1.0)
    }

    /// Fits (step, loss) samples; `None` with too few samples or a curve that does not decrease.
    pub fn fit(samples: &[(u64, f64)]) -> Option<ConvergenceModel> {
        // At most 32 points, evenly thinned: enough for three parameters, cheap to refit.
        let stride = samples.len().div_ceil(32).max(1);
        let points: Vec<(f64, f64)> = samples
            .iter()
            .step_by(stride)
            .filter(|(_, l)| l.is_finite() && *l > 0.0)
            .map(|&(k, l)| (k as f64, l))
            .collect();
        if points.len() < MIN_SAMPLES {
            return None;
        }
        let min_loss = points.iter().map(|p| p.1).fold(f64::INFINITY, f64::min);
        // Later points weigh more: 1 + i/n, worked out once rather than twice per point for each of
        // the search's evaluations (the same values, so the same fit; the divisions were a third of
        // a fit's time).
        let n = points.len() as f64;
        let weights: Vec<f64> = (0..points.len()).map(|i| 1.0 + i as f64 / n).collect();
        let error = |b2: f64| -> (f64, [f64; 3]) {
            let Some((b0, b1)) = linear_part(&points, &weights, b2) else {
                return (f64::INFINITY, [0.0, 1.0, b2]);
            };
            let model = ConvergenceModel { beta: [b0, b1, b2] };
            let sse = points
                .iter()
                .zip(&weights)
                .map(|(&(k, l), &w)| w * (model.loss_at(k) - l).powi(2))
                .sum();
            (sse, model.beta)
        };
        // Golden-section search for β2 in [0, 0.999·min loss], one new evaluation per step; 24 steps
        // narrow the interval to about 1e-5 of its width.
        let (mut lo, mut hi) = (0.0, 0.999 * min_loss);
        let ratio = (5f64.sqrt() - 1.0) / 2.0;
        let (mut a, mut b) = (hi - ratio * (hi - lo), lo + ratio * (hi - lo));
        let (mut error_a, mut error_b) = (error(a).0, error(b).0);
        for _ in 0..24 {
            if error_a < error_b {
                hi = b;
                b = a;
                error_b = error_a;
                a = hi - ratio * (hi - lo);
                error_a = error(a).0;
            } else {
                lo = a;
                a = b;
                error_a = error_b;
                b = lo + ratio * (hi - lo);
                error_b = error(b).0;
            }
        }
        let (sse, beta) = error((lo + hi) / 2.0);
        (sse.is_finite() && beta[0] > 0.0).then_some(ConvergenceModel { beta })
    }
}

/// Least squares of 1/(l − b2) = b0·k + b1 with b0, b1 ≥ 0, each point weighted by `weights`.
fn linear_part(points: &[(f64, f64)], weights: &[f64], b2: f64) -> Option<(f64, f64)> {
    let (mut sw, mut sx, mut sy, mut sxx, mut sxy) = (0.0, 0.0, 0.0, 0.0, 0.0);
    for (&(k, l), &w) in points.iter().zip(weights) {
        let excess = l - b2;
        if excess <= 0.0 {
            return None;
        }
        let y = 1.0 / excess;
        sw += w;
        sx += w * k;
        sy += w * y;
        sxx += w * k * k;
        sxy += w * k * y;
    }
    let denominator = sw * sxx - sx * sx;
    if denominator.abs() < 1e-12 {
        return None;
    }
    let b0 = (sw * sxy - sx * sy) / denominator;
    let b1 = (sy - b0 * sx) / sw;
    Some((b0.max(0.0), b1.max(1e-9)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recovers_an_optimus_curve() {
        let truth = ConvergenceModel {
            beta: [0.002, 0.5, 0.3],
        };
        let samples: Vec<(u64, f64)> = (0..40)
            .map(|i| (i * 100, truth.loss_at((i * 100) as f64)))
            .collect();
        let fitted = ConvergenceModel::fit(&samples).unwrap();
        for (got, want) in fitted.beta.iter().zip(truth.beta) {
            assert!((got - want).abs() / want < 0.02, "{:?}", fitted.beta);
        }
        let estimate = fitted.converged_step();
        assert!((estimate - truth.converged_step()).abs() / truth.converged_step() < 0.05);
        assert!(fitted.remaining_steps(estimate + 10.0) >= 1.0);
    }

    #[test]
    fn too_few_or_flat_samples_give_no_fit() {
        assert!(ConvergenceModel::fit(&[(0, 1.0), (1, 0.9)]).is_none());
        let flat: Vec<(u64, f64)> = (0..10).map(|i| (i, 1.0)).collect();
        assert!(ConvergenceModel::fit(&flat).is_none_or(|m| m.converged_step().is_finite()));
    }
}
