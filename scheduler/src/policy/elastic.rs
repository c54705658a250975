//! Elastic allocation, shared by Optimus and Drover's policy: admit jobs in the policy's order at their
//! smallest shape, then hand out the remaining GPUs and CPUs one task at a time to the job whose
//! remaining time falls most per unit of dominant resource (Optimus's greedy marginal-gain rule), give
//! each job the fastest shape within what it was handed (the greedy steps can pass it), keep a running
//! job's shape unless changing it buys more than the change costs, and place the result (placement:
//! `elastic/place.rs`).

use super::common::min_shape;
use crate::snapshot::{ClusterSnapshot, JobView, Shape};
use std::cmp::Ordering;
use std::collections::BinaryHeap;

mod place;
pub use place::{keep_unneeded_victims, place_targets, place_targets_on};

/// When a running job's shape is worth changing, where keeping it is possible.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ResizeRule {
    /// When the change saves at least this many seconds of predicted remaining time (Optimus).
    Threshold(f64),
    /// When the predicted saving, discounted by the prediction's relative uncertainty u (the job may
    /// have only (1 − u) of its predicted time left), exceeds (1 + margin) × what the resize costs
    /// (`cost_s`: a checkpoint and a restart). A job predicted to end before a resize pays back is
    /// never resized: its whole remaining time is less than the cost.
    Amortised { cost_s: f64, margin: f64 },
}

/// Tuning of the allocation.
#[derive(Debug, Clone, Copy)]
pub struct ElasticParams {
    pub resize: ResizeRule,
    /// Whether jobs may grow beyond their smallest shape at all.
    pub grow: bool,
}

impl Default for ElasticParams {
    fn default() -> Self {
        ElasticParams {
            resize: ResizeRule::Threshold(300.0),
            grow: true,
        }
    }
}

impl ResizeRule {
    /// Whether moving from `current` (`remaining_now` seconds left) to a target with `remaining_then`
    /// left is worth it, for a prediction of relative uncertainty `uncertainty`.
    pub fn worth_it(self, remaining_now: f64, remaining_then: f64, uncertainty: f64) -> bool {
        let saving = remaining_now - remaining_then;
        match self {
            ResizeRule::Threshold(seconds) => saving >= seconds,
            ResizeRule::Amortised { cost_s, margin } => {
                remaining_now > cost_s
                    && saving * (1.0 - uncertainty.clamp(0.0, 1.0)) > cost_s * (1.0 + margin)
            }
        }
    }
}

fn demand(job: &JobView, shape: Shape) -> (u64, u64) {
    (u64::from(job.gpus_at(shape)), u64::from(job.cpus_at(shape)))
}

#[derive(Debug, PartialEq)]
struct Gain {
    per_resource: f64,
    job: usize,
    worker: bool,
    version: u32,
}

impl Eq for Gain {}

impl PartialOrd for Gain {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Gain {
    fn cmp(&self, other: &Self) -> Ordering {
        // Largest gain first; ties to the earlier job (deterministic).
        self.per_resource
            .total_cmp(&other.per_resource)
            .then(other.job.cmp(&self.job))
            .then(self.worker.cmp(&other.worker))
    }
}

/// The shapes a policy owes each job (by index) in [`allocate`].
pub struct Owed<'a> {
    /// The shape a job is admitted at, where what is left allows (else its smallest).
    pub admit: &'a dyn Fn(usize) -> Shape,
    /// A shape below which a running job is not held back by the resize rule (the smallest, or one
    /// the policy owes the job).
    pub floor: &'a dyn Fn(usize) -> Shape,
}

impl std::fmt::Debug for Owed<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Owed").finish_non_exhaustive()
    }
}

/// Target shapes (`None`: not admitted) for every job, given `owed` for the shapes jobs are admitted
/// at and held to, `keep(job index, current)` for whether a running job holds on to its current
/// shape before growth is handed out, `remaining_s(job index, shape)` for the marginal gains, and
/// `worth_change(job index, current, target)` for whether a running job that could keep its shape
/// should change it.
pub fn allocate(
    snapshot: &ClusterSnapshot,
    order: &[usize],
    owed: &Owed<'_>,
    keep: &dyn Fn(usize, Shape) -> bool,
    remaining_s: &dyn Fn(usize, Shape) -> f64,
    worth_change: &dyn Fn(usize, Shape, Shape) -> bool,
    params: ElasticParams,
) -> Vec<Option<Shape>> {
    let total_gpus = u64::from(snapshot.total_gpus());
    let total_cpus = u64::from(snapshot.total_cpus());
    let (mut gpus_left, mut cpus_left) = (total_gpus, total_cpus);
    // GPUs each tenant may still take under its maximum quota.
    let tenants = snapshot
        .jobs
        .iter()
        .map(|j| j.tenant as usize + 1)
        .max()
        .unwrap_or(0);
    let mut tenant_left: Vec<u64> = (0..tenants)
        .map(|t| {
            snapshot
                .tenants
                .get(t)
                .and_then(|t| t.max_gpus)
                .map_or(u64::MAX, u64::from)
        })
        .collect();
    let mut targets: Vec<Option<Shape>> = vec![None; snapshot.jobs.len()];
    for &i in order {
        let job = &snapshot.jobs[i];
        let quota = &mut tenant_left[job.tenant as usize];
        for shape in [(owed.admit)(i), min_shape(job)] {
            let (g, c) = demand(job, shape);
            if g <= gpus_left && c <= cpus_left && g <= *quota {
                targets[i] = Some(shape);
                gpus_left -= g;
                cpus_left -= c;
                *quota -= g;
                break;
            }
        }
    }
    // Running jobs admitted keep their current shape where what is left allows, before anything
    // grows: growth then competes only for what they leave, and a shape change is a choice the rule
    // below weighs, not a side effect of others' growth.
    for &i in order {
        let job = &snapshot.jobs[i];
        let (Some(target), Some(current)) = (targets[i], job.placement.as_ref().map(|p| p.shape()))
        else {
            continue;
        };
        if current == target
            || !job.workers.contains(current.workers)
            || !job.ps.contains(current.ps)
            || !keep(i, current)
        {
            continue;
        }
        let (g0, c0) = demand(job, target);
        let (g1, c1) = demand(job, current);
        let (dg, dc) = (g1.saturating_sub(g0), c1.saturating_sub(c0));
        if g1 >= g0
            && c1 >= c0
            && dg <= gpus_left
            && dc <= cpus_left
            && dg <= tenant_left[job.tenant as usize]
        {
            gpus_left -= dg;
            cpus_left -= dc;
            tenant_left[job.tenant as usize] -= dg;
            targets[i] = Some(current);
        }
    }
    if params.grow {
        let share = |job: &JobView, worker: bool| -> f64 {
            let (g, c) = if worker {
                (job.gpus_per_worker, job.cpus_per_worker)
            } else {
                (0, job.cpus_per_ps)
            };
            (f64::from(g) / total_gpus.max(1) as f64)
                .max(f64::from(c) / total_cpus.max(1) as f64)
                .max(1e-9)
        };
        let mut versions = vec![0u32; snapshot.jobs.len()];
        // Task kinds that no longer fit, per job: (worker, ps).
        let mut blocked = vec![(false, false); snapshot.jobs.len()];
        let mut heap = BinaryHeap::new();
        let push = |heap: &mut BinaryHeap<Gain>,
                    i: usize,
                    shape: Shape,
                    version: u32,
                    blocked: (bool, bool),
                    remaining: &dyn Fn(usize, Shape) -> f64| {
            let job = &snapshot.jobs[i];
            let now = remaining(i, shape);
            // A model-parallel job grows by whole replicas.
            let step = job.worker_step.max(1);
            if shape.workers + step <= job.workers.max && !blocked.0 {
                let next = Shape {
                    workers: shape.workers + step,
                    ..shape
                };
                let gain = (now - remaining(i, next)) / share(job, true);
                if gain > 0.0 {
                    heap.push(Gain {
                        per_resource: gain,
                        job: i,
                        worker: true,
                        version,
                    });
                }
            }
            if shape.ps < job.ps.max && !blocked.1 {
                let next = Shape {
                    ps: shape.ps + 1,
                    ..shape
                };
                let gain = (now - remaining(i, next)) / share(job, false);
                if gain > 0.0 {
                    heap.push(Gain {
                        per_resource: gain,
                        job: i,
                        worker: false,
                        version,
                    });
                }
            }
        };
        for &i in order {
            if let Some(shape) = targets[i] {
                push(&mut heap, i, shape, 0, (false, false), remaining_s);
            }
        }
        while let Some(gain) = heap.pop() {
            if gain.version != versions[gain.job] {
                continue;
            }
            let job = &snapshot.jobs[gain.job];
            let Some(shape) = targets[gain.job] else {
                continue;
            };
            let next = if gain.worker {
                Shape {
                    workers: shape.workers + job.worker_step.max(1),
                    ..shape
                }
            } else {
                Shape {
                    ps: shape.ps + 1,
                    ..shape
                }
            };
            let (g0, c0) = demand(job, shape);
            let (g1, c1) = demand(job, next);
            let (dg, dc) = (g1 - g0, c1 - c0);
            if dg > gpus_left || dc > cpus_left || dg > tenant_left[job.tenant as usize] {
                // This kind of task no longer fits; the job's other kind may.
                versions[gain.job] += 1;
                if gain.worker {
                    blocked[gain.job].0 = true
                } else {
                    blocked[gain.job].1 = true
                }
                push(
                    &mut heap,
                    gain.job,
                    shape,
                    versions[gain.job],
                    blocked[gain.job],
                    remaining_s,
                );
                continue;
            }
            gpus_left -= dg;
            cpus_left -= dc;
            tenant_left[job.tenant as usize] -= dg;
            targets[gain.job] = Some(next);
            versions[gain.job] += 1;
            push(
                &mut heap,
                gain.job,
                next,
                versions[gain.job],
                blocked[gain.job],
                remaining_s,
            );
        }
    }
    // Growth one task at a time follows each step's gain, and can end past the job's best shape: a
    // shape it was measured at, or one on the way from its current shape, may be faster on fewer
    // resources (its measured pace at one shape and the model's at the next need not agree). The
    // job takes the fastest of those that fit in what it was given; the rest is left free. Only a
    // measurement takes a job below the shape the policy owes it (what it asked for, within its
    // guarantee): the model alone does not overrule what the user asked for.
    for &i in order {
        let Some(target) = targets[i] else {
            continue;
        };
        let job = &snapshot.jobs[i];
        let (g0, c0) = demand(job, target);
        let floor = (owed.floor)(i);
        let seen = job
            .observed
            .step_stats
            .iter()
            .filter(|s| !s.shared)
            .map(|s| s.shape);
        let on_the_way = job
            .placement
            .as_ref()
            .map(|p| p.shape())
            .filter(|&current| current != target)
            .into_iter()
            .flat_map(|current| between(current, target))
            .filter(|shape| shape.workers >= floor.workers && shape.ps >= floor.ps);
        let fits = |shape: Shape| {
            let (g, c) = demand(job, shape);
            shape != target
                && job.runs_at_workers(shape.workers)
                && job.ps.contains(shape.ps)
                && g <= g0
                && c <= c0
        };
        let best = seen
            .chain(on_the_way)
            .filter(|&shape| fits(shape))
            .map(|shape| (remaining_s(i, shape), shape))
            .filter(|(seconds, _)| seconds.is_finite())
            .min_by(|a, b| a.0.total_cmp(&b.0));
        if let Some((seconds, shape)) = best
            && seconds < remaining_s(i, target)
        {
            let (g1, c1) = demand(job, shape);
            gpus_left += g0 - g1;
            cpus_left += c0 - c1;
            tenant_left[job.tenant as usize] =
                tenant_left[job.tenant as usize].saturating_add(g0 - g1);
            targets[i] = Some(shape);
        }
    }
    // Stickiness: a running job keeps its shape unless the change is worth it ([`ResizeRule`]).
    for &i in order {
        let job = &snapshot.jobs[i];
        let (Some(target), Some(current)) = (targets[i], job.placement.as_ref().map(|p| p.shape()))
        else {
            continue;
        };
        if target == current
            || !job.workers.contains(current.workers)
            || !job.ps.contains(current.ps)
        {
            continue;
        }
        // A job kept below its floor by an earlier round takes the floor when it can.
        let wanted = (owed.floor)(i);
        let below_floor = current.workers < wanted.workers || current.ps < wanted.ps;
        if !below_floor && !worth_change(i, current, target) {
            let (g0, c0) = demand(job, target);
            let (g1, c1) = demand(job, current);
            let quota = tenant_left[job.tenant as usize].saturating_add(g0);
            if g1 <= g0 + gpus_left && c1 <= c0 + cpus_left && g1 <= quota {
                gpus_left = gpus_left + g0 - g1;
                cpus_left = cpus_left + c0 - c1;
                tenant_left[job.tenant as usize] = quota - g1;
                targets[i] = Some(current);
            }
        }
    }
    targets
}

/// The shapes between `a` and `b`: workers from one's count to the other's, at either's PS count.
fn between(a: Shape, b: Shape) -> impl Iterator<Item = Shape> {
    let workers = a.workers.min(b.workers)..=a.workers.max(b.workers);
    workers.flat_map(move |workers| {
        let other = (a.ps != b.ps).then_some(Shape { workers, ps: b.ps });
        std::iter::once(Shape { workers, ps: a.ps }).chain(other)
    })
}

#[cfg(test)]
mod tests;
