//! Placing the elastic allocation's target shapes: jobs keeping their shape keep their GPUs, the rest
//! are placed in the policy's order, shrinking where fragmentation demands; preempted jobs whose GPUs
//! no one took keep running.

use crate::cluster::GpuModelTag;
use crate::place::{FreeResources, Strategy};
use crate::plan::{JobPlan, Plan, RunReason, WaitReason};
use crate::policy::common::min_shape;
use crate::snapshot::{ClusterSnapshot, JobView, Shape};

/// Places target shapes: jobs keeping their shape keep their placement; the rest are placed in `order`,
/// shrinking towards their smallest shape when fragmentation demands; jobs without a target wait.
pub fn place_targets(
    snapshot: &ClusterSnapshot,
    order: &[usize],
    targets: &[Option<Shape>],
    strategy: impl Fn(&JobView) -> Strategy,
) -> (Plan, FreeResources) {
    place_targets_on(snapshot, order, targets, strategy, |_| None, |_| false)
}

/// [`place_targets`], each job (by index) placed on GPUs of one model, the first of those
/// `models` gives that holds its gang, where it gives any; running jobs `moving` selects are placed
/// anew even where their shape stays (to move them to another model).
pub fn place_targets_on<'a>(
    snapshot: &ClusterSnapshot,
    order: &[usize],
    targets: &[Option<Shape>],
    strategy: impl Fn(&JobView) -> Strategy,
    models: impl Fn(usize) -> Option<&'a [GpuModelTag]>,
    moving: impl Fn(usize) -> bool,
) -> (Plan, FreeResources) {
    let keeps = |i: usize, job: &JobView| {
        targets[i].is_some()
            && job.placement.as_ref().map(|p| p.shape()) == targets[i]
            && !moving(i)
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
                    let placed = match models(i) {
                        Some(models) => free.place_preferring(job, shape, strategy(job), models),
                        None => free.place(job, shape, strategy(job)),
                    };
                    match placed {
                        Ok(placement) => {
                            break JobPlan::Run {
                                placement,
                                reason: RunReason::MarginalGain,
                            };
                        }
                        Err(_) if shape.workers > job.workers.min => {
                            shape = Shape {
                                workers: job.whole_replicas(shape.workers / 2),
                                ..shape
                            };
                            // A running job that fragmentation keeps from growing keeps its own
                            // GPUs rather than moving to as many or fewer elsewhere (a restart from
                            // its checkpoint for nothing).
                            if let Some(old) = &job.placement
                                && target.workers > old.shape().workers
                                && shape.workers <= old.shape().workers
                                && free.try_take_exact(job, old)
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
                                && free.try_take_exact(job, old)
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
        if preempted && free.try_take_exact(job, old) {
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
