//! Elastic allocation, shared by Optimus and Drover's policy: admit jobs in the policy's order at their
//! smallest shape, then hand out the remaining GPUs and CPUs one task at a time to the job whose
//! remaining time falls most per unit of dominant resource (Optimus's greedy marginal-gain rule), give
//! each job the fastest shape within what it was handed (the greedy steps can pass it), keep a running
//! job's shape unless changing it buys more than the change costs, and place the result.

use crate::place::{FreeResources, Strategy};
use crate::plan::{JobPlan, Plan, RunReason, WaitReason};
use crate::snapshot::{ClusterSnapshot, JobView, Shape};
use std::cmp::Ordering;
use std::collections::BinaryHeap;

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

/// The smallest shape a policy may run the job at.
pub fn min_shape(job: &JobView) -> Shape {
    Shape {
        ps: job.ps.min,
        workers: job.workers.min,
    }
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
            if shape.workers < job.workers.max && !blocked.0 {
                let next = Shape {
                    workers: shape.workers + 1,
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
                    workers: shape.workers + 1,
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
                && job.workers.contains(shape.workers)
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

/// Places target shapes: jobs keeping their shape keep their placement; the rest are placed in `order`,
/// shrinking towards their smallest shape when fragmentation demands; jobs without a target wait.
pub fn place_targets(
    snapshot: &ClusterSnapshot,
    order: &[usize],
    targets: &[Option<Shape>],
    strategy: impl Fn(&JobView) -> Strategy,
) -> (Plan, FreeResources) {
    let keeps = |i: usize, job: &JobView| {
        targets[i].is_some() && job.placement.as_ref().map(|p| p.shape()) == targets[i]
    };
    let mut free = FreeResources::with_running(snapshot, keeps);
    let mut plan = Plan {
        order: order.iter().map(|&i| snapshot.jobs[i].id).collect(),
        ..Plan::default()
    };
    let total = snapshot.total_gpus();
    for &i in order {
        let job = &snapshot.jobs[i];
        if keeps(i, job)
            && let Some(placement) = &job.placement
        {
            plan.jobs.insert(
                job.id,
                JobPlan::Run {
                    placement: placement.clone(),
                    reason: RunReason::Continuing,
                },
            );
        }
    }
    for &i in order {
        let job = &snapshot.jobs[i];
        if keeps(i, job) {
            continue;
        }
        let decision = match targets[i] {
            Some(target) => {
                let mut shape = target;
                loop {
                    match free.place(job, shape, strategy(job)) {
                        Ok(placement) => {
                            break JobPlan::Run {
                                placement,
                                reason: RunReason::MarginalGain,
                            };
                        }
                        Err(_) if shape.workers > job.workers.min => {
                            shape = Shape {
                                workers: (shape.workers / 2).max(job.workers.min),
                                ..shape
                            };
                            // A running job that fragmentation keeps from growing keeps its own
                            // GPUs rather than moving to as many or fewer elsewhere (a restart from
                            // its checkpoint for nothing).
                            if let Some(old) = &job.placement
                                && target.workers > old.shape().workers
                                && shape.workers <= old.shape().workers
                                && free.try_take_exact(old)
                            {
                                break JobPlan::Run {
                                    placement: old.clone(),
                                    reason: RunReason::Continuing,
                                };
                            }
                        }
                        Err(reason) => {
                            // A running job that cannot take its new shape keeps its old one if it can.
                            if let Some(old) = &job.placement
                                && free.try_take_exact(old)
                            {
                                break JobPlan::Run {
                                    placement: old.clone(),
                                    reason: RunReason::Continuing,
                                };
                            }
                            break JobPlan::Wait {
                                reason: if job.placement.is_some() {
                                    WaitReason::Preempted
                                } else {
                                    reason
                                },
                            };
                        }
                    }
                }
            }
            None if job.gpus_at(min_shape(job)) > total => JobPlan::Wait {
                reason: WaitReason::NeverFits,
            },
            None if job.placement.is_some() => JobPlan::Wait {
                reason: WaitReason::Preempted,
            },
            None => JobPlan::Wait {
                reason: WaitReason::LowerPriority,
            },
        };
        plan.jobs.insert(job.id, decision);
    }
    (plan, free)
}

/// Running jobs the plan preempts whose resources no job took (the allocation counts GPUs
/// cluster-wide, so a job ahead of them may have failed to place) keep running where they are, in
/// `order`: preempting them would free GPUs for no one. Returns how many were kept.
pub fn keep_unneeded_victims(
    snapshot: &ClusterSnapshot,
    order: &[usize],
    plan: &mut Plan,
    free: &mut FreeResources,
) -> usize {
    let mut kept = 0;
    for &i in order {
        let job = &snapshot.jobs[i];
        let Some(old) = &job.placement else {
            continue;
        };
        let preempted = matches!(
            plan.jobs.get(&job.id),
            Some(JobPlan::Wait {
                reason: WaitReason::Preempted
            })
        );
        if preempted && free.try_take_exact(old) {
            plan.jobs.insert(
                job.id,
                JobPlan::Run {
                    placement: old.clone(),
                    reason: RunReason::Continuing,
                },
            );
            kept += 1;
        }
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::{NodeId, uniform_cluster};
    use crate::plan::{Placement, Role, TaskPlacement};
    use crate::snapshot::{Observations, Range, Tenant};
    use drover_core::JobId;

    /// A job with `workers` 1-GPU workers on `node`'s GPUs `gpus` (none: not running) and one PS.
    fn running(id: u128, node: u32, gpus: &[u16], max_workers: u32) -> JobView {
        let task = |role, index, gpus: Vec<u16>| TaskPlacement {
            role,
            index,
            node: NodeId(node),
            gpus,
            cpus: 1,
            packed: false,
        };
        let mut tasks: Vec<TaskPlacement> = (0..)
            .zip(gpus)
            .map(|(i, &g)| task(Role::Worker, i, vec![g]))
            .collect();
        tasks.push(task(Role::Ps, 0, Vec::new()));
        let workers = gpus.len() as u32;
        JobView {
            id: JobId(uuid::Uuid::from_u128(id)),
            tenant: 0,
            priority: 0,
            submit_s: id as f64,
            workers: Range {
                min: 1,
                max: max_workers,
            },
            ps: Range { min: 1, max: 1 },
            preferred: Shape { ps: 1, workers },
            gpus_per_worker: 1,
            gpu_memory_gb: Some(24.0),
            cpus_per_worker: 1,
            cpus_per_ps: 1,
            preemptible: true,
            consolidate: true,
            placement: Some(Placement { tasks }),
            observed: Observations::default(),
            search: None,
        }
    }

    /// What [`allocate`] gives job 0 of `jobs` on one 8-GPU node, owed `owed_workers` workers, with
    /// `remaining` seconds left at each worker count (PS fixed at 1).
    fn allocated(
        jobs: Vec<JobView>,
        owed_workers: u32,
        remaining: fn(u32) -> f64,
    ) -> Option<Shape> {
        let snapshot = ClusterSnapshot {
            now_s: 100.0,
            nodes: uniform_cluster(1, 8, 64, 32),
            tenants: vec![Tenant {
                name: "a".into(),
                guaranteed_gpus: 8,
                max_gpus: None,
            }],
            jobs,
        };
        let owed = Owed {
            admit: &|_| Shape {
                ps: 1,
                workers: owed_workers,
            },
            floor: &|_| Shape { ps: 1, workers: 1 },
        };
        let targets = allocate(
            &snapshot,
            &[0],
            &owed,
            &|_, _| true,
            &|_, shape| remaining(shape.workers),
            &|_, _, _| true,
            ElasticParams::default(),
        );
        targets[0]
    }

    #[test]
    fn a_job_given_more_than_its_fastest_shape_takes_the_shape_it_was_measured_fastest_at() {
        // Owed 8 workers, measured at 2 where it runs in a fifth of the time: 2 it is, and 6 GPUs
        // stay free (growth stops at 8, where one more worker would be slower).
        let mut job = running(0, 0, &[], 8);
        job.placement = None;
        job.observed.step_stats = vec![crate::snapshot::StepStats {
            shape: Shape { ps: 1, workers: 2 },
            shared: false,
            samples: 10,
            mean_step_s: 0.1,
        }];
        let remaining = |workers| match workers {
            2 => 100.0,
            8 => 500.0,
            _ => 1_000.0,
        };
        assert_eq!(
            allocated(vec![job], 8, remaining),
            Some(Shape { ps: 1, workers: 2 })
        );
    }

    #[test]
    fn a_running_job_given_more_takes_the_fastest_shape_on_the_way() {
        // Running at 2 workers, owed 6; 3 workers is the fastest shape between the two.
        let job = running(0, 0, &[0, 1], 8);
        let remaining = |workers| match workers {
            3 => 100.0,
            6 => 400.0,
            _ => 1_000.0,
        };
        assert_eq!(
            allocated(vec![job], 6, remaining),
            Some(Shape { ps: 1, workers: 3 })
        );
    }

    #[test]
    fn a_job_that_cannot_grow_keeps_its_own_gpus_rather_than_moving() {
        // Two 4-GPU nodes. Job 0 runs 2 workers on node 1's GPUs 0-1 and is to grow to 8 on one
        // node; job 1 holds node 0's GPUs 0-1, job 2 node 1's GPU 2. Neither 8 nor 4 fit on one
        // node; 2 fit best on node 0's GPUs 2-3, where the old rule moved it.
        let jobs = vec![
            running(0, 1, &[0, 1], 8),
            running(1, 0, &[0, 1], 2),
            running(2, 1, &[2], 1),
        ];
        let snapshot = ClusterSnapshot {
            now_s: 100.0,
            nodes: uniform_cluster(2, 4, 64, 32),
            tenants: vec![Tenant {
                name: "a".into(),
                guaranteed_gpus: 0,
                max_gpus: None,
            }],
            jobs,
        };
        let current = |i: usize| snapshot.jobs[i].placement.as_ref().map(Placement::shape);
        let targets = [Some(Shape { ps: 1, workers: 8 }), current(1), current(2)];
        let (plan, _) = place_targets(&snapshot, &[0, 1, 2], &targets, |_| Strategy::Consolidate);
        for job in &snapshot.jobs {
            assert_eq!(
                plan.jobs.get(&job.id),
                Some(&JobPlan::Run {
                    placement: job.placement.clone().expect("running"),
                    reason: RunReason::Continuing,
                }),
            );
        }
    }
}
