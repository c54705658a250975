//! A job's speed as a function of its shape, fitted online from observed step times.
//!
//! A parameter-server job takes Optimus's synchronous model (Peng et al. EuroSys'18):
//!
//! step time t(p, w) = θ0/w + θ1 + θ2·w/p + θ3·w + θ4·p, θ ≥ 0
//!
//! (Optimus writes θ0·M/w with M the global batch; M is fixed for a job, so it folds into θ0.) A
//! model-parallel job runs in replicas of the model, each of `S` pipeline stages × a tensor degree
//! `T`, its replica's share of the batch streaming through the stages in `M` micro-batches; with
//! `R = w / (S·T)` replicas:
//!
//! t(R) = θ0·(M+S−1)/(M·S·T·R) + θ1 + θ2·(R−1)/(R·S·T)
//!
//! — the step's computing divided among every worker and stretched by the pipeline's bubble
//! (stages idle (S−1)/(M+S−1) of it), what does not shrink with replicas (the hand-overs between
//! stages, a micro-batch's fixed cost), and the ring all-reduce of each worker's part of the model
//! (1/(S·T) of it) among the replicas. The tensor group's own sums scale with the activations a
//! worker holds, as its computing does, so they fold into θ0. For one layout (S, T and M fixed, as
//! a job's are) the three terms make a/R + b: a curve that falls with replicas and flattens, or
//! rises and flattens where the all-reduce outweighs what a replica computes (θ2 lets a be
//! negative); which θ carries how much of a and b is not unique, so read the curve, not each θ.
//! No term grows without bound: fitted to a few replica counts with noisy step times, one (θ·R, or
//! θ·log₂R for the latency of a tree) extrapolated 2.2× (0.72×) off at 16 replicas where this form
//! stays within 0.18 (`sim::parallel`'s test); θ3 and θ4 are 0. The fit is non-negative least
//! squares on relative error. Until a job has been seen at `MIN_SHAPES` shapes, or where a fit
//! would predict no time at one replica, it falls back to a prior whose scale is set by what has
//! been observed. A data-parallel job keeps the PS form (with no shards, p = 1): the replica form
//! is not tried on one, and no simulated workload has one to try it on.

use super::least_squares::nnls;
use crate::snapshot::{JobView, Shape, StepStats};

/// Distinct shapes needed before the fit replaces the prior.
pub const MIN_SHAPES: usize = 3;

/// The prior's relative weights: mostly compute that divides over workers, some fixed overhead, and PS
/// traffic that grows with workers per shard.
const PRIOR: [f64; 5] = [0.7, 0.1, 0.2, 0.0, 0.0];

/// How a job's workers divide its work, which sets the form of its speed model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// Workers that push gradients to parameter-server shards: Optimus's t(p, w).
    ParameterServers,
    /// Workers in replicas of `stages × tensor` (at least two workers) that all-reduce their
    /// gradients, a replica's share of each step in `micro_batches` micro-batches.
    Replicas {
        stages: u32,
        tensor: u32,
        micro_batches: u32,
    },
}

impl Layout {
    /// The layout of `job`: replicas for a model-parallel job (a replica of more than one worker),
    /// Optimus's form otherwise.
    pub fn of(job: &JobView) -> Layout {
        let step = job.worker_step.max(1);
        if step == 1 {
            return Layout::ParameterServers;
        }
        let tensor = job.worker_unit.max(1);
        Layout::Replicas {
            stages: (step / tensor).max(1),
            tensor,
            micro_batches: job.micro_batches.max(1),
        }
    }

    fn features(self, shape: Shape) -> [f64; 5] {
        match self {
            Layout::ParameterServers => {
                let p = f64::from(shape.ps.max(1));
                let w = f64::from(shape.workers.max(1));
                [1.0 / w, 1.0, w / p, w, p]
            }
            Layout::Replicas {
                stages,
                tensor,
                micro_batches,
            } => {
                let (s, m) = (f64::from(stages.max(1)), f64::from(micro_batches.max(1)));
                let per_replica = s * f64::from(tensor.max(1));
                let r = (f64::from(shape.workers.max(1)) / per_replica).max(1.0);
                [
                    (m + s - 1.0) / (m * per_replica * r),
                    1.0,
                    (r - 1.0) / (r * per_replica),
                    0.0,
                    0.0,
                ]
            }
        }
    }

    /// Relative weights before anything is fitted. Replicas: at one replica 0.8 computing and 0.1
    /// fixed, the all-reduce adding up to 0.2 as replicas grow (one replica 0.9, two 0.6, four
    /// 0.45, eight 0.375 — close to the PS prior's curve at one shard per worker).
    fn prior(self) -> [f64; 5] {
        match self {
            Layout::ParameterServers => PRIOR,
            Layout::Replicas {
                stages,
                tensor,
                micro_batches,
            } => {
                let (s, m) = (f64::from(stages), f64::from(micro_batches));
                let per_replica = s * f64::from(tensor);
                [
                    0.8 * per_replica * m / (m + s - 1.0),
                    0.1,
                    0.2 * per_replica,
                    0.0,
                    0.0,
                ]
            }
        }
    }

    /// The model's form in words, for people reading θ.
    pub fn formula(self) -> String {
        match self {
            Layout::ParameterServers => "t(p, w) = θ0/w + θ1 + θ2·w/p + θ3·w + θ4·p".to_owned(),
            Layout::Replicas {
                stages,
                tensor,
                micro_batches,
            } => format!(
                "t(R) = θ0·(M+S−1)/(M·S·T·R) + θ1 + θ2·(R−1)/(R·S·T) (θ3, θ4 unused), \
                 R = w/(S·T) replicas of S = {stages} stages × T = {tensor}, M = {micro_batches} \
                 micro-batches"
            ),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SpeedModel {
    pub theta: [f64; 5],
    /// Whether `theta` was fitted (true) or is the scaled prior.
    pub fitted: bool,
    /// The form `theta` weighs.
    pub layout: Layout,
}

impl SpeedModel {
    /// [`SpeedModel::fit`] with `job`'s layout.
    pub fn of_job(job: &JobView, stats: &[StepStats]) -> SpeedModel {
        SpeedModel::fit(Layout::of(job), stats)
    }

    /// Fits the model to a job's observations, or scales the prior to them when there are too few shapes.
    pub fn fit(layout: Layout, stats: &[StepStats]) -> SpeedModel {
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
                        layout.features(s.shape).map(|x| weight * x / s.mean_step_s),
                        weight,
                    )
                })
                .collect();
            let theta = nnls(&rows);
            // Time at the smallest shape (one worker, one replica: every other shape's terms are
            // at least as large, but a replica fit's θ2 term is zero there).
            let smallest = Shape { ps: 1, workers: 1 };
            if dot(layout, &theta, smallest) > 0.0 {
                return SpeedModel {
                    theta,
                    fitted: true,
                    layout,
                };
            }
        }
        // The prior, scaled to match the best-observed shape (or unit scale with nothing observed).
        let prior = layout.prior();
        let scale = usable
            .iter()
            .max_by_key(|s| s.samples)
            .map_or(1.0, |s| s.mean_step_s / dot(layout, &prior, s.shape));
        SpeedModel {
            theta: prior.map(|t| t * scale),
            fitted: false,
            layout,
        }
    }

    /// Predicted seconds per step at `shape`.
    pub fn step_s(&self, shape: Shape) -> f64 {
        dot(self.layout, &self.theta, shape)
    }

    /// Predicted steps per second at `shape`.
    pub fn steps_per_s(&self, shape: Shape) -> f64 {
        let t = self.step_s(shape);
        if t > 0.0 { 1.0 / t } else { 0.0 }
    }
}

fn dot(layout: Layout, theta: &[f64; 5], shape: Shape) -> f64 {
    layout
        .features(shape)
        .iter()
        .zip(theta)
        .map(|(x, t)| x * t)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Exact step times of `layout`'s model with `theta` at each shape.
    fn observed(layout: Layout, theta: [f64; 5], shapes: &[Shape]) -> Vec<StepStats> {
        shapes
            .iter()
            .map(|&shape| StepStats {
                shape,
                shared: false,
                spread_samples: 0,
                spread_mean_step_s: 0.0,
                samples: 10,
                mean_step_s: dot(layout, &theta, shape),
                gpu: Default::default(),
            })
            .collect()
    }

    fn stats(theta: [f64; 5], shapes: &[(u32, u32)]) -> Vec<StepStats> {
        let shapes: Vec<Shape> = shapes
            .iter()
            .map(|&(ps, workers)| Shape { ps, workers })
            .collect();
        observed(Layout::ParameterServers, theta, &shapes)
    }

    #[test]
    fn recovers_a_true_model_from_enough_shapes() {
        let truth = [2.0, 0.3, 0.1, 0.05, 0.02];
        let model = SpeedModel::fit(
            Layout::ParameterServers,
            &stats(truth, &[(1, 1), (1, 2), (2, 4), (4, 4), (2, 8), (3, 6)]),
        );
        assert!(model.fitted);
        for shape in [Shape { ps: 2, workers: 3 }, Shape { ps: 8, workers: 16 }] {
            let want = dot(Layout::ParameterServers, &truth, shape);
            assert!(
                (model.step_s(shape) - want).abs() / want < 1e-6,
                "{shape:?}"
            );
        }
    }

    #[test]
    fn falls_back_to_a_scaled_prior() {
        let seen = stats([1.0, 0.0, 0.0, 0.0, 0.0], &[(1, 2)]);
        let model = SpeedModel::fit(Layout::ParameterServers, &seen);
        assert!(!model.fitted);
        assert!(
            (model.step_s(Shape { ps: 1, workers: 2 }) - 0.5).abs() < 1e-9,
            "matches what was seen"
        );
        assert!(
            model.steps_per_s(Shape { ps: 2, workers: 4 })
                > model.steps_per_s(Shape { ps: 1, workers: 2 })
        );
        let blind = SpeedModel::fit(Layout::ParameterServers, &[]);
        assert!(blind.steps_per_s(Shape { ps: 1, workers: 1 }) > 0.0);
    }

    fn replicas(stages: u32, tensor: u32, micro_batches: u32) -> Layout {
        Layout::Replicas {
            stages,
            tensor,
            micro_batches,
        }
    }

    fn at(layout: Layout, theta: [f64; 5], workers: &[u32]) -> Vec<StepStats> {
        let shapes: Vec<Shape> = workers
            .iter()
            .map(|&workers| Shape { ps: 0, workers })
            .collect();
        observed(layout, theta, &shapes)
    }

    #[test]
    fn a_model_parallel_job_is_fitted_in_replicas() {
        let layout = replicas(4, 2, 8);
        let truth = [3.0, 0.05, 0.4, 0.0, 0.0];
        let model = SpeedModel::fit(layout, &at(layout, truth, &[8, 16, 24]));
        assert!(model.fitted);
        for workers in [32, 64, 8 * 16] {
            let shape = Shape { ps: 0, workers };
            let want = dot(layout, &truth, shape);
            assert!(
                (model.step_s(shape) - want).abs() / want < 1e-6,
                "{workers}"
            );
        }
        // The bubble: at one replica, 4 stages and 8 micro-batches compute for (8+3)/8 of the
        // time an unsplit step would over the same 8 workers.
        let x = layout.features(Shape { ps: 0, workers: 8 });
        assert!((x[0] - 11.0 / 64.0).abs() < 1e-12);
    }

    /// Before anything is fitted, more replicas are faster (the PS prior, given no shards, read a
    /// model-parallel job as that many workers on one shard: slower beyond two workers).
    #[test]
    fn the_replica_prior_grows_a_job() {
        for layout in [replicas(2, 1, 4), replicas(1, 2, 1), replicas(4, 2, 16)] {
            let per_replica = match layout {
                Layout::Replicas { stages, tensor, .. } => stages * tensor,
                Layout::ParameterServers => unreachable!(),
            };
            let seen = at(layout, layout.prior(), &[per_replica]);
            let model = SpeedModel::fit(layout, &seen);
            assert!(!model.fitted);
            let step = |r: u32| {
                model.step_s(Shape {
                    ps: 0,
                    workers: r * per_replica,
                })
            };
            assert!((step(1) - seen[0].mean_step_s).abs() < 1e-12);
            assert!(step(2) < step(1) && step(4) < step(2), "{layout:?}");
            assert!(step(1) / step(2) < 1.6, "modest gains: {layout:?}");
        }
        let ps_prior = SpeedModel::fit(Layout::ParameterServers, &[]);
        let ps_step = |workers| ps_prior.step_s(Shape { ps: 0, workers });
        assert!(ps_step(4) > ps_step(2) && ps_step(8) > ps_step(4));
    }

    #[test]
    fn a_job_s_layout_comes_from_its_view() {
        let mut job = JobView::of_resources(
            drover_core::JobId(uuid::Uuid::nil()),
            &drover_core::spec::Resources::default(),
        );
        job.ps = crate::shape::Range { min: 1, max: 4 };
        assert_eq!(Layout::of(&job), Layout::ParameterServers);
        job.ps = crate::shape::Range { min: 0, max: 0 };
        assert_eq!(
            Layout::of(&job),
            Layout::ParameterServers,
            "all-reduce, data-parallel: not tried"
        );
        job.worker_unit = 2;
        job.worker_step = 8;
        job.micro_batches = 6;
        assert_eq!(Layout::of(&job), replicas(4, 2, 6));
        assert!(Layout::of(&job).formula().contains("S = 4 stages × T = 2"));
    }

    /// A fit that puts all the time on the all-reduce term (nothing at one replica) is not taken.
    #[test]
    fn a_fit_that_predicts_no_time_at_one_replica_falls_back_to_the_prior() {
        let layout = replicas(2, 1, 2);
        let model = SpeedModel::fit(layout, &at(layout, [0.0, 0.0, 1.0, 0.0, 0.0], &[4, 6, 8]));
        assert!(!model.fitted);
        assert!(model.step_s(Shape { ps: 0, workers: 2 }) > 0.0);
        let rising = SpeedModel::fit(layout, &at(layout, [0.5, 0.0, 1.0, 0.0, 0.0], &[2, 4, 8]));
        assert!(rising.fitted, "a curve that rises with replicas is kept");
        assert!(
            rising.step_s(Shape { ps: 0, workers: 16 })
                > rising.step_s(Shape { ps: 0, workers: 2 })
        );
    }
}
