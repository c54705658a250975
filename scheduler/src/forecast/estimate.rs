//! Remaining work: what has been measured of a job (its step budget and speed, a fitted loss curve),
//! or how long its tenant's finished jobs ran, each as a 10th, 50th and 90th percentile.

use crate::perf::{ConvergenceModel, SpeedModel};
use crate::snapshot::{JobView, Shape};
use serde::Serialize;
use std::collections::BTreeMap;

/// Seconds of work a job has left, at its preferred shape with its GPUs to itself.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Remaining {
    pub p10: f64,
    pub p50: f64,
    pub p90: f64,
}

impl Remaining {
    pub(super) fn at(self, scenario: super::Scenario) -> f64 {
        match scenario {
            super::Scenario::Low => self.p10,
            super::Scenario::Median => self.p50,
            super::Scenario::High => self.p90,
        }
    }

    fn scaled(self, low: f64, high: f64) -> Remaining {
        Remaining {
            p10: self.p50 * low,
            p50: self.p50,
            p90: self.p50 * high,
        }
    }
}

/// Quantiles of how long finished jobs took (seconds at their preferred shape).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Quantiles {
    pub p10: f64,
    pub p50: f64,
    pub p90: f64,
    pub samples: usize,
}

impl Quantiles {
    /// `None` without usable samples (negative and non-finite ones are dropped).
    pub fn of(mut durations: Vec<f64>) -> Option<Quantiles> {
        durations.retain(|d| d.is_finite() && *d >= 0.0);
        if durations.is_empty() {
            return None;
        }
        durations.sort_by(f64::total_cmp);
        let at = |p: f64| {
            let position = p * (durations.len() - 1) as f64;
            let (lo, hi) = (position.floor() as usize, position.ceil() as usize);
            durations[lo] + (durations[hi] - durations[lo]) * (position - lo as f64)
        };
        Some(Quantiles {
            p10: at(0.1),
            p50: at(0.5),
            p90: at(0.9),
            samples: durations.len(),
        })
    }
}

/// How long jobs took, per tenant (index into the snapshot's tenants) and over all tenants.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Priors {
    pub overall: Option<Quantiles>,
    pub by_tenant: BTreeMap<u32, Quantiles>,
}

/// A tenant's own history is used once it has this many finished jobs.
pub const TENANT_HISTORY_MIN: usize = 5;

/// With no history at all: an hour, between ten minutes and eight hours.
pub const NO_HISTORY: Quantiles = Quantiles {
    p10: 600.0,
    p50: 3_600.0,
    p90: 28_800.0,
    samples: 0,
};

impl Priors {
    /// From finished jobs' (tenant, seconds at their preferred shape).
    pub fn from_history(history: &[(u32, f64)]) -> Priors {
        let all: Vec<f64> = history.iter().map(|&(_, d)| d).collect();
        let mut per: BTreeMap<u32, Vec<f64>> = BTreeMap::new();
        for &(tenant, duration) in history {
            per.entry(tenant).or_default().push(duration);
        }
        Priors {
            overall: Quantiles::of(all),
            by_tenant: per
                .into_iter()
                .filter_map(|(tenant, d)| Some((tenant, Quantiles::of(d)?)))
                .filter(|(_, q)| q.samples >= TENANT_HISTORY_MIN)
                .collect(),
        }
    }

    fn for_tenant(&self, tenant: u32) -> Quantiles {
        self.by_tenant
            .get(&tenant)
            .copied()
            .or(self.overall)
            .unwrap_or(NO_HISTORY)
    }
}

/// Seconds per step at `shape` from what was observed, when anything was.
pub(super) fn step_s(job: &JobView, shape: Shape) -> Option<f64> {
    if job.observed.step_stats.is_empty() {
        return None;
    }
    let model = SpeedModel::from_observations(&job.observed.step_stats);
    let s = model.step_s(shape);
    (s.is_finite() && s > 0.0).then_some(s)
}

/// A job's remaining work from what has been observed of it, else from its tenant's history.
pub fn estimate(job: &JobView, priors: &Priors) -> Remaining {
    let done = job.observed.steps_done as f64;
    let budget_left = job.observed.step_budget.map(|b| (b as f64 - done).max(0.0));
    let fitted_left = if job.observed.runs_to_budget {
        None
    } else {
        ConvergenceModel::fit(&job.observed.loss_samples).map(|m| m.remaining_steps(done))
    };
    if let (Some(step_s), Some(left)) = (step_s(job, job.preferred), budget_left) {
        // It stops at its budget, or at its target when it has one and the loss curve says it is
        // near: the speed (and the fit) are the only uncertainty.
        return match fitted_left {
            None => Remaining::scaled(Remaining::point(left * step_s), 0.9, 1.2),
            Some(fit) => Remaining::scaled(Remaining::point(left.min(fit) * step_s), 0.6, 1.3),
        };
    }
    // Without a budget a fitted loss curve says when training could stop, not when the job will:
    // how long its tenant's jobs ran is the better guide.
    // History: what is left of a job like its tenant's, given how long it has run already.
    let prior = priors.for_tenant(job.tenant);
    let ran = job.observed.executed_s;
    let left = |q: f64| {
        if ran < q {
            q - ran
        } else {
            // Past that quantile already: it has about as long again to go, by the usual rule of
            // thumb for heavy-tailed lengths.
            ran.max(60.0) * q / prior.p50.max(1.0)
        }
    };
    let (p10, p50, p90) = (left(prior.p10), left(prior.p50), left(prior.p90));
    Remaining {
        p10: p10.min(p50),
        p50,
        p90: p90.max(p50),
    }
}

impl Remaining {
    fn point(seconds: f64) -> Remaining {
        Remaining {
            p10: seconds,
            p50: seconds,
            p90: seconds,
        }
    }
}
