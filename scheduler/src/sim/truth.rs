//! The hidden ground truth of simulated jobs. Policies never see these types: they get observations
//! (noisy step times and losses) through the snapshot, and SRTF alone gets remaining times through
//! [`SimOracle`].

use super::parallel::ModelParallelTruth;
use super::speed::MeasuredModel;
use crate::policy::Oracle;
use crate::snapshot::Shape;
use drover_core::JobId;
use std::sync::{Arc, Mutex};

/// Seconds of run time between periodic checkpoints, and what one costs, fold into a job's true rate.
pub(crate) fn checkpoint_factor(every_s: f64, cost_s: f64) -> f64 {
    if every_s <= 0.0 {
        1.0
    } else {
        every_s / (every_s + cost_s)
    }
}

/// How a job's true speed depends on its shape.
#[derive(Debug, Clone)]
pub(crate) enum Surface {
    /// A measured model's, stretched: g_job(p, w) = s · g(p / s, w / s), in samples/s of its batch.
    Measured {
        model: Arc<MeasuredModel>,
        stretch: f64,
    },
    /// A model-parallel job's ([`super::parallel`]).
    ModelParallel(ModelParallelTruth),
}

impl Surface {
    /// True steps/s at `shape`, alone on GPUs of the job's fastest model.
    pub(crate) fn steps_per_s(&self, shape: Shape) -> f64 {
        if shape.workers == 0 {
            return 0.0;
        }
        match self {
            Surface::Measured { model, stretch } => {
                let s = *stretch;
                let samples =
                    s * model.speed(f64::from(shape.ps.max(1)) / s, f64::from(shape.workers) / s);
                samples / model.batch
            }
            Surface::ModelParallel(truth) => {
                let step_s = truth.step_s(shape.workers);
                if step_s.is_finite() && step_s > 0.0 {
                    1.0 / step_s
                } else {
                    0.0
                }
            }
        }
    }
}

/// What is true of one job.
#[derive(Debug, Clone)]
pub struct JobTruth {
    pub(crate) surface: Surface,
    /// Total steps to completion.
    pub(crate) total_steps: f64,
    /// Relative noise of observed step times.
    pub(crate) step_noise: f64,
    /// Loss curve a·(k + k0)^(−α) + c, flat after `total_steps`.
    pub(crate) loss: (f64, f64, f64, f64),
    /// On a cluster of several GPU models, its speed on each ([`super::Workload::gpu_models`]) as a
    /// fraction of its speed on its fastest; empty: the same on every GPU.
    pub(crate) model_speeds: Vec<f64>,
}

impl JobTruth {
    /// Its speed on GPU model `model` (an index into the workload's models) relative to its fastest.
    pub(crate) fn model_speed(&self, model: usize) -> f64 {
        self.model_speeds.get(model).copied().unwrap_or(1.0)
    }

    /// True throughput in steps/s at `shape`, alone on its GPUs of its fastest model.
    pub(crate) fn steps_per_s(&self, shape: Shape) -> f64 {
        self.surface.steps_per_s(shape)
    }

    /// The model-parallel layout, for a model-parallel job.
    pub(crate) fn model_parallel(&self) -> Option<&ModelParallelTruth> {
        match &self.surface {
            Surface::ModelParallel(truth) => Some(truth),
            Surface::Measured { .. } => None,
        }
    }

    pub(crate) fn loss_at(&self, step: f64) -> f64 {
        let (a, k0, alpha, c) = self.loss;
        a * (step.min(self.total_steps) + k0).powf(-alpha) + c
    }

    /// Scales the hidden truth (for tests that change it while observations stay put).
    #[doc(hidden)]
    pub fn scale_for_test(&mut self, speed: f64, steps: f64) {
        match &mut self.surface {
            Surface::Measured { stretch, .. } => *stretch *= speed,
            Surface::ModelParallel(truth) => truth.unit_s /= speed,
        }
        self.total_steps *= steps;
    }
}

/// Live progress the oracle reads: steps done per job index, updated by the engine before each round.
#[derive(Debug, Default)]
pub struct OracleState {
    pub(crate) steps_done: Vec<f64>,
}

/// SRTF's window on the truth.
#[derive(Debug)]
pub struct SimOracle {
    pub(crate) truths: Arc<Vec<JobTruth>>,
    pub(crate) state: Arc<Mutex<OracleState>>,
    pub(crate) checkpoint_factor: f64,
    /// The tags of the workload's GPU models ([`super::Workload::gpu_models`]), in order.
    pub(crate) model_tags: Vec<crate::cluster::GpuModelTag>,
}

impl Oracle for SimOracle {
    fn model_speed(&self, job: JobId, model: crate::cluster::GpuModelTag) -> f64 {
        let Some(truth) = self.truths.get(job.0.as_u128() as usize) else {
            return 1.0;
        };
        self.model_tags
            .iter()
            .position(|&t| t == model)
            .map_or(1.0, |m| truth.model_speed(m))
    }

    fn remaining_s(&self, job: JobId, shape: Shape) -> f64 {
        let index = job.0.as_u128() as usize;
        let Some(truth) = self.truths.get(index) else {
            return f64::INFINITY;
        };
        let done = self
            .state
            .lock()
            .map(|s| s.steps_done.get(index).copied().unwrap_or(0.0))
            .unwrap_or(0.0);
        let rate = truth.steps_per_s(shape) * self.checkpoint_factor;
        if rate <= 0.0 {
            f64::INFINITY
        } else {
            (truth.total_steps - done).max(0.0) / rate
        }
    }
}
