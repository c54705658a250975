//! Gandiva (Xiao et al., OSDI'18), with every decision checked against observed per-step progress:
//!
//! - Time-slicing: while jobs wait, a running job that has had its slice (`slice_s` since it last
//!   started) yields to the job that has waited longest, by suspending at a step boundary (cheap to
//!   resume); jobs within their slice keep running. Round-robin follows from both orders.
//! - Packing: a waiting single-GPU job shares the GPU of a running single-GPU job when both fit in its
//!   memory. Introspection: a job whose step time while shared is more than twice its step time alone
//!   (the pair then makes less progress than one job alone) is not packed again, and its pair is undone.
//! - Grow-shrink: when nobody waits, an elastic job grows to twice its workers (within its range) onto
//!   idle GPUs; as soon as others wait it shrinks back to its requested shape, keeping the first of its
//!   workers where they are and giving the other GPUs back. A job whose observed step rate did not
//!   improve at the larger shape is not grown again.
//! - Migration: a running job spread over more nodes than its GPUs need is moved onto fewer nodes when
//!   they have room (consolidation, which also de-fragments).

use super::common::{arrival_if_free, claim_order, ordered_round};
use super::interface::{Oracle, Policy, PolicyError};
use super::packing::pack;
use super::state::{Restored, SavedState, encode, restore_jobs};
use crate::place::{FreeResources, Strategy};
use crate::plan::{JobPlan, Plan, Role, RunReason, WaitReason};
use crate::snapshot::{ClusterSnapshot, JobView, Shape};
use drover_core::JobId;
use std::collections::BTreeSet;

#[derive(Debug, Clone)]
pub struct Gandiva {
    /// Seconds a job runs before it may be suspended for a waiting one.
    pub slice_s: f64,
    /// Packing introspection: a shared step this many times slower than alone undoes the packing.
    pub max_shared_slowdown: f64,
    no_pack: BTreeSet<JobId>,
    no_grow: BTreeSet<JobId>,
}

/// A job's introspection verdicts, as saved for the next leader.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Verdict {
    #[serde(default)]
    no_pack: bool,
    #[serde(default)]
    no_grow: bool,
}

impl Default for Gandiva {
    fn default() -> Self {
        Gandiva {
            slice_s: 600.0,
            max_shared_slowdown: 2.0,
            no_pack: BTreeSet::new(),
            no_grow: BTreeSet::new(),
        }
    }
}

fn mean_step(job: &JobView, shape: Shape, shared: bool) -> Option<f64> {
    job.observed
        .step_stats
        .iter()
        .find(|s| s.shape == shape && s.shared == shared && s.samples > 0)
        .map(|s| s.mean_step_s)
}

/// Packing introspection: jobs whose observed step time while sharing a GPU is more than
/// `max_slowdown` times their step time alone at the same shape join `no_pack`.
pub(super) fn learn_bad_packing(
    snapshot: &ClusterSnapshot,
    max_slowdown: f64,
    no_pack: &mut BTreeSet<JobId>,
) {
    for job in &snapshot.jobs {
        for stats in job.observed.step_stats.iter().filter(|s| s.shared) {
            if let Some(alone) = mean_step(job, stats.shape, false)
                && stats.mean_step_s > max_slowdown * alone
            {
                no_pack.insert(job.id);
            }
        }
    }
}

impl Gandiva {
    /// Learns from observed progress which packings and growths did not pay.
    fn introspect(&mut self, snapshot: &ClusterSnapshot) {
        let live: BTreeSet<JobId> = snapshot.jobs.iter().map(|j| j.id).collect();
        self.no_pack.retain(|id| live.contains(id));
        self.no_grow.retain(|id| live.contains(id));
        learn_bad_packing(snapshot, self.max_shared_slowdown, &mut self.no_pack);
        for job in &snapshot.jobs {
            let preferred_rate = mean_step(job, job.preferred, false).map(|t| 1.0 / t);
            for stats in job
                .observed
                .step_stats
                .iter()
                .filter(|s| !s.shared && s.shape.workers > job.preferred.workers)
            {
                if preferred_rate.is_some_and(|rate| 1.0 / stats.mean_step_s <= rate) {
                    self.no_grow.insert(job.id);
                }
            }
        }
    }
}

impl Policy for Gandiva {
    fn fork(&self, _oracle: Option<Box<dyn Oracle>>) -> Result<Box<dyn Policy>, PolicyError> {
        Ok(Box::new(self.clone()))
    }

    fn name(&self) -> &'static str {
        "gandiva"
    }

    /// Its introspection's verdicts: jobs not to pack again, jobs not to grow again.
    fn save(&self) -> SavedState {
        let mut jobs = std::collections::BTreeMap::new();
        for &job in self.no_pack.union(&self.no_grow) {
            let verdict = Verdict {
                no_pack: self.no_pack.contains(&job),
                no_grow: self.no_grow.contains(&job),
            };
            jobs.insert(job, encode(&verdict));
        }
        SavedState { jobs, shared: None }
    }

    fn restore(&mut self, saved: &SavedState) -> Restored {
        restore_jobs(saved, |job, verdict: Verdict| {
            if verdict.no_pack {
                self.no_pack.insert(job);
            }
            if verdict.no_grow {
                self.no_grow.insert(job);
            }
        })
    }

    fn schedule(&mut self, snapshot: &ClusterSnapshot, _previous: &Plan) -> Plan {
        self.introspect(snapshot);
        let total = snapshot.total_gpus();
        let someone_waits = snapshot
            .jobs
            .iter()
            .any(|j| j.placement.is_none() && j.gpus_at(j.preferred) <= total);
        // Shrink: while others wait, grown jobs hold only their requested shape.
        let shrunk = someone_waits.then(|| shrink_grown(snapshot)).flatten();
        let snapshot = shrunk.as_ref().unwrap_or(snapshot);
        let now = snapshot.now_s;
        // 0: running within its slice; 1: waiting, longest wait first; 2: running past its slice, the
        // longest-running last (first to be suspended).
        let key = |i: usize| {
            let job = &snapshot.jobs[i];
            let since = ((now - job.observed.last_state_change_s).max(0.0) * 1000.0) as u64;
            match &job.placement {
                Some(_) if someone_waits && since as f64 >= self.slice_s * 1000.0 => {
                    (2u8, since, i)
                }
                Some(_) => (0, 0, i),
                None => (1, u64::MAX - since, i),
            }
        };
        let mut order: Vec<usize> = (0..snapshot.jobs.len()).collect();
        order.sort_by_key(|&i| key(i));
        // Time slices turn within a claim: a higher one is never suspended for a lower one.
        let order = claim_order(snapshot, &order);
        let mut plan = ordered_round(snapshot, &order, |_| Strategy::Relaxed);
        for (i, job) in snapshot.jobs.iter().enumerate() {
            if let Some(JobPlan::Wait { reason }) = plan.jobs.get_mut(&job.id)
                && *reason == WaitReason::Preempted
                && key(i).0 == 2
            {
                *reason = WaitReason::Suspended;
            }
        }
        let mut free = FreeResources::empty_cluster(snapshot);
        for job in &snapshot.jobs {
            if let Some(JobPlan::Run { placement, .. }) = plan.jobs.get(&job.id) {
                free.take(job, placement);
            }
        }
        self.migrate_and_grow(snapshot, &order, &mut plan, &mut free, someone_waits);
        pack(snapshot, &order, &mut plan, &mut free, &self.no_pack);
        plan
    }

    fn place_arrival(&mut self, snapshot: &ClusterSnapshot, job: &JobView) -> JobPlan {
        arrival_if_free(snapshot, job, Strategy::Relaxed, RunReason::Started)
    }
}

/// GPUs the plan gives `tenant`'s jobs.
fn tenant_gpus(snapshot: &ClusterSnapshot, plan: &Plan, tenant: u32) -> u32 {
    snapshot
        .jobs
        .iter()
        .filter(|j| j.tenant == tenant)
        .filter_map(|j| plan.placement(j.id))
        .map(|p| p.num_gpus())
        .sum()
}

/// The snapshot with every job grown past its requested workers held at its requested shape (its
/// lowest-numbered workers, where they are, and all its PS); `None` when no job is grown.
fn shrink_grown(snapshot: &ClusterSnapshot) -> Option<ClusterSnapshot> {
    let grown = |job: &JobView| {
        job.placement
            .as_ref()
            .is_some_and(|p| p.shape().workers > job.preferred.workers)
    };
    if !snapshot.jobs.iter().any(grown) {
        return None;
    }
    let mut shrunk = snapshot.clone();
    for job in shrunk.jobs.iter_mut().filter(|j| grown(j)) {
        let keep = job.preferred.workers;
        if let Some(placement) = &mut job.placement {
            placement
                .tasks
                .retain(|t| t.role != Role::Worker || t.index < keep);
            if placement.shape().workers != keep {
                // Worker indices not 0..w: leave the job as it is rather than guess.
                job.placement = snapshot
                    .jobs
                    .iter()
                    .find(|j| j.id == job.id)
                    .and_then(|j| j.placement.clone());
            }
        }
    }
    Some(shrunk)
}

impl Gandiva {
    /// Consolidates spread-out jobs and, while nobody waits, grows elastic ones; both only into GPUs that
    /// are free besides the job's own (the old placement is released only once the new one is taken).
    fn migrate_and_grow(
        &self,
        snapshot: &ClusterSnapshot,
        order: &[usize],
        plan: &mut Plan,
        free: &mut FreeResources,
        someone_waits: bool,
    ) {
        let max_node_gpus = snapshot
            .nodes
            .iter()
            .map(|n| n.num_gpus())
            .max()
            .unwrap_or(1)
            .max(1);
        for &i in order {
            let job = &snapshot.jobs[i];
            let Some(JobPlan::Run {
                placement,
                reason: RunReason::Continuing,
            }) = plan.jobs.get(&job.id)
            else {
                continue;
            };
            let shape = placement.shape();
            let spread =
                placement.worker_nodes().len() as u32 > job.gpus_at(shape).div_ceil(max_node_gpus);
            let grow_to = Shape {
                workers: job.whole_replicas((shape.workers * 2).min(job.workers.max)),
                ..shape
            };
            let extra = job.gpus_at(grow_to).saturating_sub(job.gpus_at(shape));
            let within_max = snapshot
                .tenants
                .get(job.tenant as usize)
                .and_then(|t| t.max_gpus)
                .is_none_or(|max| tenant_gpus(snapshot, plan, job.tenant) + extra <= max);
            let grow = !someone_waits
                && grow_to.workers > shape.workers
                && within_max
                && !self.no_grow.contains(&job.id);
            let (target, strategy, reason) = if grow {
                (grow_to, Strategy::Relaxed, RunReason::Started)
            } else if spread {
                (shape, Strategy::Consolidate, RunReason::Continuing)
            } else {
                continue;
            };
            if let Ok(moved) = free.place(job, target, strategy) {
                plan.jobs.insert(
                    job.id,
                    JobPlan::Run {
                        placement: moved,
                        reason,
                    },
                );
            }
        }
        // Free holds both old and new placements of moved jobs until the round ends: conservative, never
        // over-committed.
    }
}
