//! The shapes Drover's policy judges a job at: the horizon a resize is weighed over, the step times
//! it trusts as measured, the shape an arriving job starts at, and the shape its user asked for.

use crate::perf::SpeedModel;
use crate::policy::optimus::Estimate;
use crate::snapshot::{ClusterSnapshot, JobView, Shape};

/// Seconds a job must have run before its fitted convergence curve decides a resize.
const CURVE_TRUST_S: f64 = 600.0;

/// What a resize of a running job from `current` to `target` is judged on: the predicted seconds left
/// at each shape and the relative uncertainty of that prediction. With a known length (a budget it runs
/// to, or a curve fitted after [`CURVE_TRUST_S`] of run) the time left is the model's; without one the prior's step count says nothing about this
/// job, so the horizon is the time the job has run so far (on a heavy-tailed workload a job that has run
/// t is expected to run about t more, the reasoning behind least-attained-service), and the shape's
/// effect is the speed model's ratio. Uncertainty: 0.25 with a known length and a fitted speed model,
/// 0.5 with one of them, 0.6 with neither.
pub(super) fn resize_horizon(
    job: &JobView,
    estimate: &Estimate,
    current: Shape,
    target: Shape,
) -> (f64, f64, f64) {
    let fitted = estimate.speed.fitted;
    let step_s = |shape: Shape| measured_step_s(job, &estimate.speed, shape);
    // A curve fitted on a few minutes of noisy losses says little: trusted after ten minutes of run.
    let trusted = job.observed.runs_to_budget || job.observed.executed_s >= CURVE_TRUST_S;
    if estimate.known_length && trusted {
        let uncertainty = if fitted { 0.25 } else { 0.5 };
        return (
            estimate.steps * step_s(current),
            estimate.steps * step_s(target),
            uncertainty,
        );
    }
    let horizon = job.observed.executed_s.max(0.0);
    let ratio = step_s(target) / step_s(current).max(1e-12);
    let uncertainty = if fitted { 0.5 } else { 0.6 };
    (horizon, horizon * ratio, uncertainty)
}

/// Rounds of steps measured at a shape before the measurement overrides the speed model there.
const MEASURED_MIN_SAMPLES: u32 = 3;

/// Seconds per step at `shape`: what the job measured there (alone on its GPUs, over at least
/// [`MEASURED_MIN_SAMPLES`] rounds) where it has run, else the speed model's prediction. A model fitted
/// to few shapes, or the prior, can be wrong about a shape the job has already run at (VGG-16 is slower
/// on two workers than on one; the prior says faster); the measurement is not, so a job grown to a shape
/// that turned out slower goes back.
pub(super) fn measured_step_s(job: &JobView, speed: &SpeedModel, shape: Shape) -> f64 {
    measurement(job, shape).unwrap_or_else(|| speed.step_s(shape))
}

/// The job's own measured seconds per step at `shape`, where it is trusted: alone on its GPUs, over
/// at least [`MEASURED_MIN_SAMPLES`] rounds.
fn measurement(job: &JobView, shape: Shape) -> Option<f64> {
    trusted_measurements(job)
        .find(|&(s, _)| s == shape)
        .map(|(_, step_s)| step_s)
}

fn trusted_measurements(job: &JobView) -> impl Iterator<Item = (Shape, f64)> + '_ {
    // On its home GPU model only, where its speed model is fitted.
    let home = job.observed.home_gpu();
    job.observed
        .step_stats
        .iter()
        .filter(move |s| {
            !s.shared && s.samples >= MEASURED_MIN_SAMPLES && s.mean_step_s > 0.0 && s.gpu == home
        })
        .map(|s| (s.shape, s.mean_step_s))
}

/// Whether the job measured a shape using no more of either task kind than `current` that ran faster.
pub(super) fn measured_slower(job: &JobView, current: Shape) -> bool {
    let Some(now) = measurement(job, current) else {
        return false;
    };
    trusted_measurements(job).any(|(shape, step_s)| {
        shape != current
            && shape.workers <= current.workers
            && shape.ps <= current.ps
            && step_s < now
    })
}

/// A relative speed-up smaller than this does not earn an arriving job another task.
const ARRIVAL_MIN_GAIN: f64 = 0.05;

/// The shape an arriving job starts at: from `start`, add workers (up to the size its user asked
/// for) or PS (within its range) one at a time, the one that speeds it most per unit of dominant
/// resource first, while each addition speeds it by at least [`ARRIVAL_MIN_GAIN`] and fits in `gpus`
/// and `cpus`. Starting at the right shape saves the resize a later round would pay to get there.
pub(super) fn arrival_shape(
    job: &JobView,
    start: Shape,
    gpus: u32,
    cpus: u32,
    snapshot: &ClusterSnapshot,
) -> Shape {
    let speed = SpeedModel::of_job(job, &job.observed.home_step_stats());
    let mut shape = start;
    let max_workers = job
        .preferred
        .workers
        .clamp(job.workers.min, job.workers.max);
    let total_gpus = f64::from(snapshot.total_gpus().max(1));
    let total_cpus = f64::from(snapshot.total_cpus().max(1));
    let demand = |s: Shape| (job.gpus_at(s), job.cpus_at(s));
    loop {
        let now = measured_step_s(job, &speed, shape);
        let candidates = [
            (shape.workers + job.worker_step.max(1) <= max_workers).then_some(Shape {
                workers: shape.workers + job.worker_step.max(1),
                ..shape
            }),
            (shape.ps < job.ps.max).then_some(Shape {
                ps: shape.ps + 1,
                ..shape
            }),
        ];
        let best = candidates
            .into_iter()
            .flatten()
            .filter(|&next| {
                // Within what is left, for the resource the step adds: a PS shard needs no GPU, so
                // GPUs the waiting jobs are owed do not keep it out.
                let ((g, c), (g0, c0)) = (demand(next), demand(shape));
                (g == g0 || g <= gpus)
                    && (c == c0 || c <= cpus)
                    && now - measured_step_s(job, &speed, next) >= ARRIVAL_MIN_GAIN * now
            })
            .map(|next| {
                let (g0, c0) = demand(shape);
                let (g1, c1) = demand(next);
                let share = (f64::from(g1 - g0) / total_gpus)
                    .max(f64::from(c1 - c0) / total_cpus)
                    .max(1e-9);
                ((now - measured_step_s(job, &speed, next)) / share, next)
            })
            .max_by(|a, b| a.0.total_cmp(&b.0));
        match best {
            Some((_, next)) => shape = next,
            None => return shape,
        }
    }
}

/// The shape the job asked for, within the ranges it may run at.
pub(super) fn requested_shape(job: &JobView) -> Shape {
    Shape {
        workers: job
            .preferred
            .workers
            .clamp(job.workers.min, job.workers.max),
        ps: job.preferred.ps.clamp(job.ps.min, job.ps.max),
    }
}
