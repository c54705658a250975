//! Optimus (Peng et al., EuroSys'18): each job's remaining steps come from its fitted convergence curve
//! l(k) = 1/(β0·k + β1) + β2 and its speed from a fitted f(p, w) (a scaled prior until it has been seen at
//! enough shapes); jobs are admitted in arrival order at their smallest shape and the rest of the cluster
//! goes, one task at a time, to the largest reduction in remaining time per unit of dominant resource.
//! Placement uses the fewest nodes with PS shards spread over the workers' nodes. `optimus-oracle` is the
//! ablation that takes the true remaining steps and speed instead (through the oracle).

use super::common::{claim_order, min_shape, non_preemptible_first};
use super::elastic::{ElasticParams, Owed, allocate, keep_unneeded_victims, place_targets};
use super::interface::{Oracle, Policy, PolicyError};
use crate::perf::{ConvergenceModel, Layout, SpeedModel};
use crate::place::{FreeResources, Strategy};
use crate::plan::{JobPlan, Plan, RunReason};
use crate::snapshot::{ClusterSnapshot, JobView, Shape};
use drover_core::JobId;
use std::collections::BTreeMap;

/// Remaining steps assumed before a job's convergence curve can be fitted.
pub const PRIOR_REMAINING_STEPS: f64 = 1000.0;

/// Per-job models, refitted only when new samples arrive (a deterministic function of the snapshots).
#[derive(Debug, Clone, Default)]
pub(crate) struct ModelCache {
    entries: BTreeMap<JobId, CachedModels>,
}

#[derive(Debug, Clone, Copy)]
struct CachedModels {
    loss_samples: usize,
    step_samples: u32,
    convergence: Option<ConvergenceModel>,
    speed: SpeedModel,
}

impl ModelCache {
    /// Every job's [`Estimate`], in snapshot order.
    pub(crate) fn estimates(&mut self, snapshot: &ClusterSnapshot) -> Vec<Estimate> {
        // Which models of which jobs to (re)fit: a curve when its samples have grown by a quarter,
        // a speed model when its step times changed (fits are the costly part). Each job's entry
        // is looked up once, and copied here.
        let mut refits: Vec<Refit> = Vec::new();
        let mut models: Vec<CachedModels> = Vec::with_capacity(snapshot.jobs.len());
        for (i, job) in snapshot.jobs.iter().enumerate() {
            let observed = &job.observed;
            let step_samples: u32 = observed.step_stats.iter().map(|s| s.samples).sum();
            let entry = self.entries.entry(job.id).or_insert_with(|| CachedModels {
                loss_samples: usize::MAX,
                step_samples: u32::MAX,
                convergence: None,
                speed: SpeedModel::of_job(job, &[]),
            });
            let samples = observed.loss_samples.len();
            let curve = entry.loss_samples == usize::MAX
                || samples >= entry.loss_samples + entry.loss_samples / 4 + 4
                || samples < entry.loss_samples;
            // A job's layout is its document's; a resize may change it (refit in the new form).
            let speed = entry.step_samples != step_samples || entry.speed.layout != Layout::of(job);
            if curve || speed {
                refits.push(Refit {
                    job: i,
                    curve,
                    speed,
                    step_samples,
                });
            }
            models.push(*entry);
        }
        // Jobs gone since the last call leave (a set of every job only when some have).
        if self.entries.len() > snapshot.jobs.len() {
            let live: std::collections::HashSet<JobId> =
                snapshot.jobs.iter().map(|j| j.id).collect();
            self.entries.retain(|id, _| live.contains(id));
        }
        let fitted = fit_all(snapshot, &refits);
        for (refit, (convergence, speed)) in refits.iter().zip(fitted) {
            let job = &snapshot.jobs[refit.job];
            let model = &mut models[refit.job];
            if let Some(convergence) = convergence {
                model.convergence = convergence;
                model.loss_samples = job.observed.loss_samples.len();
            }
            if let Some(speed) = speed {
                model.speed = speed;
                model.step_samples = refit.step_samples;
            }
            if let Some(entry) = self.entries.get_mut(&job.id) {
                *entry = *model;
            }
        }
        snapshot
            .jobs
            .iter()
            .zip(models)
            .map(|(job, entry)| {
                let observed = &job.observed;
                let done = observed.steps_done as f64;
                let mut remaining = entry
                    .convergence
                    .map_or(PRIOR_REMAINING_STEPS.max(done), |m| m.remaining_steps(done));
                let mut known_length = entry.convergence.is_some();
                if let Some(budget) = observed.step_budget {
                    let left = (budget as f64 - done).max(1.0);
                    remaining = if observed.runs_to_budget {
                        known_length = true;
                        left
                    } else {
                        remaining.min(left)
                    };
                }
                Estimate {
                    steps: remaining,
                    speed: entry.speed,
                    known_length,
                }
            })
            .collect()
    }
}

/// One job's models to fit this round.
#[derive(Debug, Clone, Copy)]
struct Refit {
    /// Its index in the snapshot.
    job: usize,
    curve: bool,
    speed: bool,
    step_samples: u32,
}

/// Refits below this many run on the calling thread (a thread costs more than they do).
const PARALLEL_FITS: usize = 128;

/// The fits `refits` asks for, in its order: (the curve, the speed model), each `None` where not
/// asked. Many fits (a server's first round, a burst of jobs reporting) are split over the machine's
/// cores; the results are the same as one after the other.
fn fit_all(
    snapshot: &ClusterSnapshot,
    refits: &[Refit],
) -> Vec<(Option<Option<ConvergenceModel>>, Option<SpeedModel>)> {
    let fit = |refit: &Refit| {
        let job = &snapshot.jobs[refit.job];
        let observed = &job.observed;
        (
            refit
                .curve
                .then(|| ConvergenceModel::fit(&observed.loss_samples)),
            refit
                .speed
                .then(|| SpeedModel::of_job(job, &observed.home_step_stats())),
        )
    };
    let threads = cores().min(refits.len() / (PARALLEL_FITS / 2)).max(1);
    if threads == 1 || refits.len() < PARALLEL_FITS {
        return refits.iter().map(fit).collect();
    }
    let chunk = refits.len().div_ceil(threads);
    std::thread::scope(|scope| {
        let fit = &fit;
        let handles: Vec<_> = refits
            .chunks(chunk)
            .map(|part| scope.spawn(move || part.iter().map(fit).collect::<Vec<_>>()))
            .collect();
        handles
            .into_iter()
            .flat_map(|h| match h.join() {
                Ok(part) => part,
                Err(panic) => std::panic::resume_unwind(panic),
            })
            .collect()
    })
}

/// The cores this process may use, read once.
fn cores() -> usize {
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, usize::from))
}

/// What a job's models say of it now.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Estimate {
    /// Remaining steps: from the fitted curve or the step budget, else the prior.
    pub steps: f64,
    pub speed: SpeedModel,
    /// Whether `steps` comes from the job (a fitted curve, a budget it runs to), not the prior.
    pub known_length: bool,
}

impl Estimate {
    /// Predicted seconds left at `shape`.
    pub fn remaining_s(&self, shape: Shape) -> f64 {
        self.steps * self.speed.step_s(shape)
    }
}

#[derive(Debug)]
pub struct Optimus {
    oracle: Option<Box<dyn Oracle>>,
    models: ModelCache,
    params: ElasticParams,
}

impl Optimus {
    pub fn new() -> Self {
        Optimus {
            oracle: None,
            models: ModelCache::default(),
            params: ElasticParams::default(),
        }
    }

    pub fn with_oracle(oracle: Box<dyn Oracle>) -> Self {
        Optimus {
            oracle: Some(oracle),
            models: ModelCache::default(),
            params: ElasticParams::default(),
        }
    }
}

impl Default for Optimus {
    fn default() -> Self {
        Self::new()
    }
}

/// Places one arrival at its smallest shape in what running jobs leave free.
pub(crate) fn arrival_at_min_shape(
    snapshot: &ClusterSnapshot,
    job: &JobView,
    strategy: Strategy,
    reason: RunReason,
) -> JobPlan {
    if job.gpus_at(min_shape(job)) > snapshot.total_gpus() {
        return JobPlan::Wait {
            reason: crate::plan::WaitReason::NeverFits,
        };
    }
    let mut free = FreeResources::with_running(snapshot, |_, _| true);
    match free.place(job, min_shape(job), strategy) {
        Ok(placement) => JobPlan::Run { placement, reason },
        Err(reason) => JobPlan::Wait { reason },
    }
}

impl Policy for Optimus {
    fn fork(&self, oracle: Option<Box<dyn Oracle>>) -> Result<Box<dyn Policy>, PolicyError> {
        let oracle = match self.oracle {
            Some(_) => Some(oracle.ok_or(PolicyError::NeedsOracle("optimus-oracle"))?),
            None => None,
        };
        Ok(Box::new(Optimus {
            oracle,
            models: self.models.clone(),
            params: self.params,
        }))
    }

    fn name(&self) -> &'static str {
        if self.oracle.is_some() {
            "optimus-oracle"
        } else {
            "optimus"
        }
    }

    fn schedule(&mut self, snapshot: &ClusterSnapshot, _previous: &Plan) -> Plan {
        let all: Vec<usize> = (0..snapshot.jobs.len()).collect();
        let order = non_preemptible_first(snapshot, &claim_order(snapshot, &all));
        let ElasticParams { resize, .. } = self.params;
        let smallest = |i: usize| min_shape(&snapshot.jobs[i]);
        let estimates;
        let remaining: Box<dyn Fn(usize, Shape) -> f64 + '_> = match &self.oracle {
            Some(oracle) => {
                Box::new(|i: usize, shape: Shape| oracle.remaining_s(snapshot.jobs[i].id, shape))
            }
            None => {
                estimates = self.models.estimates(snapshot);
                Box::new(|i: usize, shape: Shape| estimates[i].remaining_s(shape))
            }
        };
        let worth = |i: usize, current: Shape, target: Shape| {
            resize.worth_it(remaining(i, current), remaining(i, target), 0.0)
        };
        let owed = Owed {
            admit: &smallest,
            floor: &smallest,
        };
        let targets = allocate(
            snapshot,
            &order,
            &owed,
            &|_, _| true,
            &*remaining,
            &worth,
            self.params,
        );
        let (mut plan, mut free) = place_targets(snapshot, &order, &targets, |_| Strategy::Relaxed);
        keep_unneeded_victims(snapshot, &order, &mut plan, &mut free);
        plan
    }

    fn place_arrival(&mut self, snapshot: &ClusterSnapshot, job: &JobView) -> JobPlan {
        arrival_at_min_shape(snapshot, job, Strategy::Relaxed, RunReason::MarginalGain)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::{Observations, Range, StepStats};

    fn job(n: u32) -> JobView {
        let loss: Vec<(u64, f64)> = (1..=40u64)
            .map(|k| {
                (
                    k * 10,
                    1.0 / (0.01 * f64::from(n + 1) * k as f64 + 1.0) + 0.1,
                )
            })
            .collect();
        JobView {
            id: JobId(uuid::Uuid::from_u128(u128::from(n) + 1)),
            tenant: 0,
            priority: 0,
            submit_s: 0.0,
            workers: Range { min: 1, max: 4 },
            ps: Range { min: 1, max: 2 },
            preferred: Shape { ps: 1, workers: 2 },
            gpus_per_worker: 1,
            gpu_memory_gb: None,
            cpus_per_worker: 1,
            cpus_per_ps: 1,
            memory_gb_per_task: 0,
            preemptible: true,
            consolidate: false,
            worker_unit: 1,
            worker_step: 1,
            micro_batches: 1,
            placement: None,
            observed: Observations {
                steps_done: 400,
                loss_samples: loss.into(),
                step_stats: (1..=3)
                    .map(|w| StepStats {
                        shape: Shape { ps: 1, workers: w },
                        shared: false,
                        spread_samples: 0,
                        spread_mean_step_s: 0.0,
                        samples: 4,
                        mean_step_s: 0.1 + 0.3 / f64::from(w) + 0.001 * f64::from(n),
                        gpu: Default::default(),
                    })
                    .collect(),
                ..Observations::default()
            },
            search: None,
            image: false,
            node_selector: Default::default(),
            gpu_types: Vec::new(),
            tolerations: Vec::new(),
        }
    }

    #[test]
    fn fits_split_over_cores_equal_fits_one_after_the_other() {
        let snapshot = ClusterSnapshot {
            now_s: 0.0,
            nodes: Vec::new(),
            tenants: Vec::new(),
            jobs: (0..3 * PARALLEL_FITS as u32).map(job).collect(),
        };
        let together = ModelCache::default().estimates(&snapshot);
        for (i, estimate) in together.iter().enumerate() {
            let alone = ClusterSnapshot {
                jobs: vec![snapshot.jobs[i].clone()],
                ..snapshot.clone()
            };
            let one = ModelCache::default().estimates(&alone)[0];
            assert_eq!(estimate.steps.to_bits(), one.steps.to_bits(), "job {i}");
            assert_eq!(estimate.speed, one.speed, "job {i}");
            assert!(estimate.known_length);
        }
    }
}
