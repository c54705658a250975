//! What a job's page (`GET /api/v1/jobs/{id}`, the dashboard) shows of its performance models: Optimus's speed model and
//! convergence curve fitted to what its leader reported (the same aggregates and fits the scheduling
//! loop's policies use), and the remaining time they predict.

use drover_core::JobState;
use drover_runtime::{Budget, Observed};
use drover_scheduler::JobView;
use drover_scheduler::Shape;
use drover_scheduler::perf::{ConvergenceModel, Layout, SpeedModel};
use drover_store::Job;
use serde::Serialize;
use utoipa::ToSchema;

#[derive(Debug, Serialize, ToSchema)]
pub struct JobModels {
    /// The step of the leader's last report.
    pub steps_done: u64,
    pub speed: SpeedFit,
    /// Absent until enough loss samples have arrived, or while the loss does not fall.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub convergence: Option<ConvergenceFit>,
    /// Absent once the job has ended, and for a job with neither a step budget nor a fitted curve.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remaining: Option<Remaining>,
}

/// Seconds per step at a shape: at p PS shards (1 without any) and w workers,
/// θ0/w + θ1 + θ2·w/p + θ3·w + θ4·p; for a model-parallel job, in R replicas of S pipeline stages ×
/// tensor degree T with M micro-batches, θ0·(M+S−1)/(M·S·T·R) + θ1 + θ2·(R−1)/(R·S·T) (`formula`
/// says which, with the job's S, T and M).
#[derive(Debug, Serialize, ToSchema)]
pub struct SpeedFit {
    /// The form θ weighs, with this job's figures.
    pub formula: String,
    pub theta: [f64; 5],
    /// False while the job has been measured at fewer than 3 shapes: θ is then a prior scaled to
    /// what was measured.
    pub fitted: bool,
    /// The measurements, one per shape.
    pub shapes: Vec<ShapeSpeed>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ShapeSpeed {
    pub ps: u32,
    pub workers: u32,
    /// Metric reports averaged (each covers several steps).
    pub samples: u32,
    pub mean_step_ms: f64,
    /// What the model says for this shape.
    pub predicted_step_ms: f64,
}

/// Loss at step k: 1 / (β0·k + β1) + β2.
#[derive(Debug, Serialize, ToSchema)]
pub struct ConvergenceFit {
    pub beta: [f64; 3],
    /// Loss samples fitted (thinned evenly to a bounded count).
    pub samples: usize,
    /// The step at which the excess loss falls to 5% of its start; absent when the curve is flat.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub converged_step: Option<f64>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Remaining {
    pub steps: u64,
    /// At (`ps`, `workers`), from the speed model; absent before any step time was measured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seconds: Option<f64>,
    /// The shape the estimate is for: the job's current one, or the largest it may have.
    pub ps: u32,
    pub workers: u32,
    /// `step_budget`: the steps left to `max_steps` (a job with no target stops only there; one with
    /// a target when the curve does not predict it sooner); `convergence`: the steps the fitted
    /// curve needs to converge (Optimus's estimate), fewer than the budget's.
    pub basis: RemainingBasis,
}

#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RemainingBasis {
    StepBudget,
    Convergence,
}

impl JobModels {
    /// The models of `job` from its aggregates, the remaining time at `shape`.
    pub fn of(job: &Job, observed: &Observed, shape: Shape) -> JobModels {
        let spec = job.spec();
        // The form the scheduler's policies fit for it (a job whose document does not parse is
        // taken for a PS job; it never reaches a policy).
        let layout = spec.as_ref().map_or(Layout::ParameterServers, |doc| {
            Layout::of(&JobView::of_document(job.id, doc))
        });
        let speed = SpeedModel::fit(layout, &observed.step_stats);
        let convergence = ConvergenceModel::fit(&observed.loss_samples);
        let done = observed.steps_done;
        let by_curve = convergence.map(|m| m.remaining_steps(done as f64).ceil() as u64);
        let left = spec
            .as_ref()
            .map(Budget::of)
            .unwrap_or_default()
            .remaining(done, by_curve)
            .map(|(steps, budget)| {
                let basis = if budget {
                    RemainingBasis::StepBudget
                } else {
                    RemainingBasis::Convergence
                };
                (steps, basis)
            });
        let measured = !observed.step_stats.is_empty();
        let remaining = left
            .filter(|_| !job.state.is_final() && job.state != JobState::Paused)
            .map(|(steps, basis)| Remaining {
                steps,
                seconds: measured.then(|| steps as f64 * speed.step_s(shape)),
                ps: shape.ps,
                workers: shape.workers,
                basis,
            });
        JobModels {
            steps_done: done,
            speed: SpeedFit {
                formula: speed.layout.formula(),
                theta: speed.theta,
                fitted: speed.fitted,
                shapes: observed
                    .step_stats
                    .iter()
                    .map(|s| ShapeSpeed {
                        ps: s.shape.ps,
                        workers: s.shape.workers,
                        samples: s.samples,
                        mean_step_ms: 1000.0 * s.mean_step_s,
                        predicted_step_ms: 1000.0 * speed.step_s(s.shape),
                    })
                    .collect(),
            },
            convergence: convergence.map(|m| ConvergenceFit {
                beta: m.beta,
                samples: observed.loss_samples.len(),
                converged_step: Some(m.converged_step()).filter(|s| s.is_finite()),
            }),
            remaining,
        }
    }
}
