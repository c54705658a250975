//! Pieces several policies share.

use crate::invariants;
use crate::place::{FreeResources, Strategy};
use crate::plan::{JobPlan, Plan, RunReason, WaitReason};
use crate::snapshot::{ClusterSnapshot, JobView, Shape};

/// The smallest shape a policy may run the job at.
pub fn min_shape(job: &JobView) -> Shape {
    Shape {
        ps: job.ps.min,
        workers: job.workers.min,
    }
}

/// Places `job` at its preferred shape in what running jobs leave free, or says why it waits.
pub fn arrival_if_free(
    snapshot: &ClusterSnapshot,
    job: &JobView,
    strategy: Strategy,
    reason: RunReason,
) -> JobPlan {
    if job.gpus_at(job.preferred) > snapshot.total_gpus() {
        return JobPlan::Wait {
            reason: WaitReason::NeverFits,
        };
    }
    let mut free = FreeResources::with_running(snapshot, |_, _| true);
    match free.place(job, job.preferred, strategy) {
        Ok(placement) => JobPlan::Run { placement, reason },
        Err(reason) => JobPlan::Wait { reason },
    }
}

/// A preemptive round in priority order (SRTF, Tiresias): the first jobs in `order` whose GPUs add up to
/// the cluster's are chosen; chosen running jobs stay where they are, chosen waiting ones are placed;
/// then whatever is left goes, in order, to the rest (running ones keep their place if it is still free).
pub fn ordered_round(
    snapshot: &ClusterSnapshot,
    order: &[usize],
    strategy: impl Fn(&JobView) -> Strategy,
) -> Plan {
    let order = &non_preemptible_first(snapshot, order);
    let total = snapshot.total_gpus();
    let mut chosen = vec![false; snapshot.jobs.len()];
    let mut budget = total;
    // GPUs each tenant may still take under its maximum.
    let mut tenant_left: std::collections::BTreeMap<u32, u32> = snapshot
        .tenants
        .iter()
        .enumerate()
        .filter_map(|(t, tenant)| tenant.max_gpus.map(|max| (t as u32, max)))
        .collect();
    for &i in order {
        let job = &snapshot.jobs[i];
        let need = job
            .placement
            .as_ref()
            .map_or_else(|| job.gpus_at(job.preferred), |p| p.num_gpus());
        let within_max = tenant_left
            .get(&job.tenant)
            .is_none_or(|left| need <= *left);
        if need <= budget && within_max {
            chosen[i] = true;
            budget -= need;
            if let Some(left) = tenant_left.get_mut(&job.tenant) {
                *left -= need;
            }
        }
    }
    let mut free = FreeResources::with_running(snapshot, |i, _| chosen[i]);
    let mut plan = Plan {
        order: order.iter().map(|&i| snapshot.jobs[i].id).collect(),
        ..Plan::default()
    };
    // Chosen running jobs keep their placement.
    for &i in order {
        let job = &snapshot.jobs[i];
        if chosen[i]
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
    debug_assert_eq!(
        invariants::check_placements(snapshot, &plan),
        Ok(()),
        "after keeping chosen jobs"
    );
    // Chosen waiting jobs are placed in order.
    for &i in order {
        let job = &snapshot.jobs[i];
        if chosen[i] && job.placement.is_none() {
            let decision = match free.place(job, job.preferred, strategy(job)) {
                Ok(placement) => JobPlan::Run {
                    placement,
                    reason: RunReason::PriorityOrder,
                },
                Err(reason) => JobPlan::Wait { reason },
            };
            plan.jobs.insert(job.id, decision);
        }
    }
    debug_assert_eq!(
        invariants::check_placements(snapshot, &plan),
        Ok(()),
        "after placing chosen jobs"
    );
    // The rest, in order, in what is left.
    for &i in order {
        let job = &snapshot.jobs[i];
        if chosen[i] {
            continue;
        }
        let decision = if job.gpus_at(job.preferred) > total {
            JobPlan::Wait {
                reason: WaitReason::NeverFits,
            }
        } else if tenant_left
            .get(&job.tenant)
            .is_some_and(|left| job.gpus_at(job.preferred) > *left)
        {
            JobPlan::Wait {
                reason: if job.placement.is_some() {
                    WaitReason::Preempted
                } else {
                    WaitReason::TenantLimit
                },
            }
        } else if let Some(placement) = &job.placement {
            if free.try_take_exact(job, placement) {
                JobPlan::Run {
                    placement: placement.clone(),
                    reason: RunReason::Continuing,
                }
            } else {
                JobPlan::Wait {
                    reason: WaitReason::Preempted,
                }
            }
        } else {
            match free.place(job, job.preferred, strategy(job)) {
                Ok(placement) => JobPlan::Run {
                    placement,
                    reason: RunReason::Backfilled,
                },
                Err(_) => JobPlan::Wait {
                    reason: WaitReason::LowerPriority,
                },
            }
        };
        if let (JobPlan::Run { placement, .. }, Some(left)) =
            (&decision, tenant_left.get_mut(&job.tenant))
        {
            *left = left.saturating_sub(placement.num_gpus());
        }
        plan.jobs.insert(job.id, decision);
    }
    debug_assert_eq!(invariants::check(snapshot, &plan), Ok(()));
    plan
}

/// `order` (a policy's own preference) stably re-ranked by priority, highest first: a policy's order
/// decides only among jobs of equal priority. Unchanged where every job has the same priority.
pub fn by_priority(snapshot: &ClusterSnapshot, order: &[usize]) -> Vec<usize> {
    let mut ranked = order.to_vec();
    if mixed_priorities(snapshot) {
        ranked.sort_by_key(|&i| std::cmp::Reverse(snapshot.jobs[i].priority));
    }
    ranked
}

fn mixed_priorities(snapshot: &ClusterSnapshot) -> bool {
    let first = snapshot.jobs.first().map(|j| j.priority);
    snapshot.jobs.iter().any(|j| Some(j.priority) != first)
}

/// What a job may claim, lowest first: within its tenant's guarantee before borrowing, then the
/// higher priority.
type Claim = (bool, std::cmp::Reverse<i32>);

/// Each job's [`Claim`] (by index), counting guarantees in `order`'s order within each priority; `None`
/// where priorities are equal and no tenant has a guarantee (every claim alike). A job is within its
/// tenant's guarantee when its GPUs (its placement's running, its preferred shape's waiting), with those
/// of the tenant's jobs before it, fit the guarantee.
fn claims(snapshot: &ClusterSnapshot, order: &[usize]) -> Option<Vec<Claim>> {
    let guarantees = snapshot.tenants.iter().any(|t| t.guaranteed_gpus > 0);
    if !guarantees && !mixed_priorities(snapshot) {
        return None;
    }
    let mut used = vec![0u32; snapshot.tenants.len()];
    let mut claims: Vec<Claim> = snapshot
        .jobs
        .iter()
        .map(|j| (true, std::cmp::Reverse(j.priority)))
        .collect();
    for i in by_priority(snapshot, order) {
        let job = &snapshot.jobs[i];
        let need = job
            .placement
            .as_ref()
            .map_or_else(|| job.gpus_at(job.preferred), |p| p.num_gpus());
        let guaranteed = snapshot
            .tenants
            .get(job.tenant as usize)
            .map_or(0, |t| t.guaranteed_gpus);
        if let Some(used) = used.get_mut(job.tenant as usize)
            && *used + need <= guaranteed
        {
            *used += need;
            claims[i].0 = false;
        }
    }
    Some(claims)
}

/// `order` stably re-ranked by what its jobs may claim: jobs within their tenant's guarantee first,
/// then those that borrow; each group by priority; the policy's order decides within. A policy that
/// runs the first jobs of this order starts a higher claim before a lower one, and where it preempts,
/// stops the lower claim for it: a guarantee lent out is taken back.
pub fn claim_order(snapshot: &ClusterSnapshot, order: &[usize]) -> Vec<usize> {
    let mut ranked = order.to_vec();
    if let Some(claims) = claims(snapshot, order) {
        ranked.sort_by_key(|&i| claims[i]);
    }
    ranked
}

/// `order` with running jobs that may not be preempted moved to the front: whatever a policy prefers,
/// they keep their resources.
pub fn non_preemptible_first(snapshot: &ClusterSnapshot, order: &[usize]) -> Vec<usize> {
    let pinned =
        |i: &usize| snapshot.jobs[*i].placement.is_some() && !snapshot.jobs[*i].preemptible;
    order
        .iter()
        .copied()
        .filter(pinned)
        .chain(order.iter().copied().filter(|i| !pinned(i)))
        .collect()
}
