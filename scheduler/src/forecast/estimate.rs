//! Remaining work: what has been measured of a job (its step budget and speed, a fitted loss curve;
//! before it has been measured, the speed of jobs running its program), or how long jobs of its
//! tenant and size ran (finished ones, and running ones as lengths of at
//! least their age), given how long it (or its sweep) has run, each as a 10th, 50th and 90th
//! percentile.

use super::cohort::Cohorts;
use super::config::PACKING_SLOWDOWN;
use super::history::{Finished, TENANT_HISTORY_MIN};
use super::lengths::{Lengths, Quantiles};
use super::remaining::{Basis, Remaining};
use crate::perf::{ConvergenceModel, Layout, SpeedModel};
use crate::snapshot::{JobView, Shape, StepStats};
use serde::Serialize;
use std::collections::BTreeMap;

/// A job's size for history: 0 for one GPU (or none), then one class per power of two (2; 3-4;
/// 5-8; 9-16), and 5 for more than 16. Lengths differ most between sizes: on the Philly trace a
/// 2-4-GPU job's remaining time was a median 5x that of its tenant's jobs of every size.
pub fn size_class(gpus: u32) -> u8 {
    match gpus {
        0..=1 => 0,
        2 => 1,
        3..=4 => 2,
        5..=8 => 3,
        9..=16 => 4,
        _ => 5,
    }
}

/// How long jobs took: per tenant and size, per size, per tenant and over all jobs. A job's
/// estimate comes from the narrowest of these with [`TENANT_HISTORY_MIN`] finished jobs.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Priors {
    pub overall: Option<Lengths>,
    pub by_tenant: BTreeMap<u32, Lengths>,
    /// Keyed by [`size_class`].
    pub by_size: BTreeMap<u8, Lengths>,
    /// Keyed by tenant, then [`size_class`].
    pub by_tenant_size: BTreeMap<u32, BTreeMap<u8, Lengths>>,
    /// The active jobs' cohorts, and the age (work seconds) of each sweep among them: the
    /// [`COHORT_AGE_LEVEL`] quantile of its members' ages, for cohorts of [`COHORT_MIN`] or more.
    #[serde(skip)]
    pub cohorts: Cohorts,
    pub cohort_ages: BTreeMap<u64, f64>,
    /// How long the jobs of each active sweep ran, from its members that ended and those still
    /// running, once [`TENANT_HISTORY_MIN`] of them have ended: the narrowest history there is.
    pub by_cohort: BTreeMap<u64, Lengths>,
    /// The speed of each program ([`Observations::program`](crate::snapshot::Observations)) among
    /// the active jobs, from the one of its jobs measured most: a job not yet measured runs at it.
    #[serde(skip)]
    pub programs: BTreeMap<u64, SpeedModel>,
}

/// A cohort says how old its members are once this many of them have run (a sweep, not a
/// few unrelated jobs that happen to share a tenant, a shape and an hour)...
const COHORT_MIN: usize = 5;
/// ... and then its age is this quantile of theirs (robust to one long-running member).
const COHORT_AGE_LEVEL: f64 = 0.8;

/// A sweep's own lengths say how long its jobs take once this share of those that have run have
/// ended: before, its ended jobs are its shortest (and often of an earlier batch), not a sample.
const COHORT_ENDED_SHARE: f64 = 0.25;

/// With no history at all: an hour, between ten minutes and eight hours.
pub const NO_HISTORY: Quantiles = Quantiles {
    p10: 600.0,
    p50: 3_600.0,
    p90: 28_800.0,
    samples: 0,
};

impl Priors {
    /// From finished jobs' lengths and the active jobs (those that have run count as lengths of at
    /// least their age so far, in the same units: see [`work_done_s`]).
    pub fn from_history(finished: &[Finished], active: &[JobView]) -> Priors {
        let (cohorts, finished_cohorts) = Cohorts::with_finished(active, finished);
        let mut ages: BTreeMap<u64, Vec<f64>> = BTreeMap::new();
        for job in active {
            let age = work_done_s(job);
            if age > 0.0 {
                ages.entry(cohorts.get(job.id)).or_default().push(age);
            }
        }
        let cohort_ages = ages
            .into_iter()
            .filter(|(_, ages)| ages.len() >= COHORT_MIN)
            .filter_map(|(cohort, ages)| {
                Some((cohort, Lengths::of(ages)?.quantile(COHORT_AGE_LEVEL)))
            })
            .collect();
        let running = Priors::running_of(active);
        #[derive(Default)]
        struct Bucket {
            finished: Vec<f64>,
            running: Vec<f64>,
        }
        impl Bucket {
            fn add(&mut self, seconds: f64, ended: bool) {
                if ended {
                    self.finished.push(seconds);
                } else {
                    self.running.push(seconds);
                }
            }
            fn lengths(self) -> Option<Lengths> {
                Lengths::estimate(self.finished, self.running)
                    .filter(|q| q.samples >= TENANT_HISTORY_MIN)
            }
        }
        let mut overall = Bucket::default();
        let mut per_tenant: BTreeMap<u32, Bucket> = BTreeMap::new();
        let mut per_size: BTreeMap<u8, Bucket> = BTreeMap::new();
        let mut per_tenant_size: BTreeMap<(u32, u8), Bucket> = BTreeMap::new();
        let jobs = finished.iter().map(|j| (j, true));
        let running = running.as_slice();
        for (job, ended) in jobs.chain(running.iter().map(|j| (j, false))) {
            let size = size_class(job.gpus);
            overall.add(job.seconds, ended);
            per_tenant
                .entry(job.tenant)
                .or_default()
                .add(job.seconds, ended);
            per_size.entry(size).or_default().add(job.seconds, ended);
            per_tenant_size
                .entry((job.tenant, size))
                .or_default()
                .add(job.seconds, ended);
        }
        // Each active sweep's own lengths: its members that ended, and those running as lengths of
        // at least their age.
        let mut per_cohort: BTreeMap<u64, Bucket> = active
            .iter()
            .map(|j| (cohorts.get(j.id), Bucket::default()))
            .collect();
        for (job, cohort) in finished.iter().zip(&finished_cohorts) {
            if let Some(bucket) = cohort.and_then(|c| per_cohort.get_mut(&c)) {
                bucket.add(job.seconds, true);
            }
        }
        for job in active.iter().filter(|j| j.observed.attained_gpu_s > 0.0) {
            if let Some(bucket) = per_cohort.get_mut(&cohorts.get(job.id)) {
                bucket.add(work_done_s(job), false);
            }
        }
        let by_cohort = per_cohort
            .into_iter()
            .filter(|(_, bucket)| {
                let ended = bucket.finished.len() as f64;
                ended >= COHORT_ENDED_SHARE * (ended + bucket.running.len() as f64)
            })
            .filter_map(|(cohort, bucket)| Some((cohort, bucket.lengths()?)))
            .collect();
        let mut by_tenant_size: BTreeMap<u32, BTreeMap<u8, Lengths>> = BTreeMap::new();
        for ((tenant, size), bucket) in per_tenant_size {
            if let Some(lengths) = bucket.lengths() {
                by_tenant_size
                    .entry(tenant)
                    .or_default()
                    .insert(size, lengths);
            }
        }
        Priors {
            programs: Priors::programs_of(active),
            overall: Lengths::estimate(overall.finished, overall.running),
            by_tenant: per_tenant
                .into_iter()
                .filter_map(|(tenant, b)| Some((tenant, b.lengths()?)))
                .collect(),
            by_size: per_size
                .into_iter()
                .filter_map(|(size, b)| Some((size, b.lengths()?)))
                .collect(),
            by_tenant_size,
            cohorts,
            cohort_ages,
            by_cohort,
        }
    }

    /// Each program's speed, from the active job of it with the most step times measured alone
    /// (else shared) on its GPUs.
    fn programs_of(active: &[JobView]) -> BTreeMap<u64, SpeedModel> {
        let mut best: BTreeMap<u64, (bool, u64, &JobView)> = BTreeMap::new();
        for job in active {
            let Some(program) = job.observed.program else {
                continue;
            };
            let stats = &job.observed.step_stats;
            let alone = stats.iter().any(|s| !s.shared && s.samples > 0);
            let samples: u64 = stats.iter().map(|s| u64::from(s.samples)).sum();
            if samples == 0 {
                continue;
            }
            let rank = (alone, samples, job);
            match best.get(&program) {
                Some(&(a, n, _)) if (a, n) >= (alone, samples) => {}
                _ => {
                    best.insert(program, rank);
                }
            }
        }
        best.into_iter()
            .filter_map(|(program, (_, _, job))| Some((program, speed_model(job)?)))
            .collect()
    }

    /// Seconds per step at `shape` of the jobs running `job`'s program, when one was measured in
    /// `job`'s layout (a program run as pipeline stages is another speed curve).
    fn borrowed_step_s(&self, job: &JobView, shape: Shape) -> Option<f64> {
        let model = self.programs.get(&job.observed.program?)?;
        if model.layout != Layout::of(job) {
            return None;
        }
        let s = model.step_s(shape);
        (s.is_finite() && s > 0.0).then_some(s)
    }

    /// The jobs that have run, as censored lengths.
    fn running_of(active: &[JobView]) -> Vec<Finished> {
        active
            .iter()
            .filter(|j| j.observed.attained_gpu_s > 0.0)
            .map(|j| Finished {
                tenant: j.tenant,
                gpus: j.gpus_at(j.preferred),
                seconds: work_done_s(j),
                submit_s: j.submit_s,
            })
            .collect()
    }

    /// The narrowest bucket with enough history for a job of `tenant` with `gpus`.
    fn for_job(&self, tenant: u32, gpus: u32) -> Option<&Lengths> {
        let size = size_class(gpus);
        self.by_tenant_size
            .get(&tenant)
            .and_then(|sizes| sizes.get(&size))
            .or_else(|| self.by_size.get(&size))
            .or_else(|| self.by_tenant.get(&tenant))
            .or(self.overall.as_ref())
    }
}

/// A job's speed alone as the forecast takes it, from what was observed (`None` when nothing was).
/// A job only ever seen sharing its GPUs is taken to run alone [`PACKING_SLOWDOWN`] faster
/// than it was seen: the speed model leaves such a job in its prior's unit, which would count its
/// work in that unit rather than in seconds (on week 40 at 48×8 a sweep's ended lengths, counted
/// so, grew a tail to 18,000 s, and predicted starts behind it came 20% late).
pub(super) fn speed_model(job: &JobView) -> Option<SpeedModel> {
    let stats = &job.observed.step_stats;
    if stats.is_empty() {
        return None;
    }
    // As the speed model counts an observation usable.
    let usable = |s: &&StepStats| s.samples > 0 && s.mean_step_s > 0.0 && s.shape.workers > 0;
    if stats.iter().filter(usable).any(|s| !s.shared) {
        return Some(SpeedModel::of_job(job, stats));
    }
    let as_alone: Vec<StepStats> = stats
        .iter()
        .map(|s| StepStats {
            shared: false,
            spread_samples: 0,
            spread_mean_step_s: 0.0,
            mean_step_s: s.mean_step_s * (1.0 - PACKING_SLOWDOWN),
            ..*s
        })
        .collect();
    Some(SpeedModel::of_job(job, &as_alone))
}

/// Seconds per step at `shape` from what was observed, when anything was.
pub(super) fn step_s(job: &JobView, shape: Shape) -> Option<f64> {
    let s = speed_model(job)?.step_s(shape);
    (s.is_finite() && s > 0.0).then_some(s)
}

/// Seconds of work a job has done at its preferred shape: its steps times its fitted step time
/// there, when it has been measured; else its GPU-seconds per GPU of that shape (the same for a
/// job that ran at that shape). History and a job's age are both counted this way, and the replay
/// runs remaining work at each placement's fitted speed.
pub fn work_done_s(job: &JobView) -> f64 {
    let gpus = job.gpus_at(job.preferred);
    match step_s(job, job.preferred) {
        Some(step_s) if job.observed.steps_done > 0 => job.observed.steps_done as f64 * step_s,
        _ => job.observed.attained_gpu_s / f64::from(gpus.max(1)),
    }
}

/// A job's remaining work from what has been observed of it, else from the history of jobs of its
/// tenant and size.
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
            None => Remaining::scaled(Remaining::point(left * step_s, Basis::Measured), 0.9, 1.2),
            Some(fit) => Remaining::scaled(
                Remaining::point(left.min(fit) * step_s, Basis::Measured),
                0.6,
                1.3,
            ),
        };
    }
    // Not measured yet, but jobs of its program were: its budget at their speed. Wider than its
    // own: its GPUs, its neighbours and its target may differ from theirs.
    if let (Some(step_s), Some(left)) = (priors.borrowed_step_s(job, job.preferred), budget_left) {
        let left = fitted_left.map_or(left, |fit| left.min(fit));
        let low = if job.observed.runs_to_budget {
            0.8
        } else {
            0.5
        };
        return Remaining::scaled(Remaining::point(left * step_s, Basis::Borrowed), low, 1.5);
    }
    // Without a budget a fitted loss curve says when training could stop, not when the job will:
    // how long jobs of its tenant and size ran is the better guide, given how long it has run.
    // History counts GPU-seconds per GPU of the preferred shape, and so does `ran`: a job held
    // at one of its eight GPUs for an hour has done about an eighth of an hour's work.
    let gpus = job.gpus_at(job.preferred);
    let ran = work_done_s(job);
    // Its own sweep's lengths, once enough of it has ended, given its own age.
    if let Some(lengths) = priors.by_cohort.get(&priors.cohorts.get(job.id)) {
        return Remaining {
            alone: true,
            basis: Basis::Sweep,
            ..lengths.remaining_after(ran)
        };
    }
    // A sweep's jobs run about as long as each other, so a young one has at least as long to go as
    // what is left of its sweep at the sweep's age, plus the lag between them.
    let cohort_ran = priors
        .cohort_ages
        .get(&priors.cohorts.get(job.id))
        .map_or(ran, |&oldest| oldest.max(ran));
    let (left, basis) = match priors.for_job(job.tenant, gpus) {
        Some(lengths) => (lengths.remaining_after(cohort_ran), Basis::History),
        None => (
            Lengths::from_quantiles(NO_HISTORY).remaining_after(cohort_ran),
            Basis::Guess,
        ),
    };
    let lag = cohort_ran - ran;
    Remaining {
        p10: left.p10 + lag,
        p50: left.p50 + lag,
        p90: left.p90 + lag,
        alone: false,
        basis,
    }
}
