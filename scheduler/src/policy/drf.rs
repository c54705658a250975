//! DRF across tenants: when capacity frees up, the next job comes from the tenant with the smallest
//! dominant share (max over GPUs and CPUs of used/capacity, divided by the tenant's weight); FIFO within a
//! tenant; work-conserving; non-preemptive. Weights are the tenants' guaranteed GPUs when any tenant has
//! one (weighted DRF), else equal.

use super::{Oracle, Policy, PolicyError, arrival_if_free};
use crate::place::{FreeResources, Strategy};
use crate::plan::{JobPlan, Plan, RunReason, WaitReason};
use crate::snapshot::{ClusterSnapshot, JobView};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

#[derive(Debug, Clone, Default)]
pub struct Drf;

/// A dominant share as an orderable integer (parts per billion), lower first.
fn share_key(gpus: u64, cpus: u64, total_gpus: u64, total_cpus: u64, weight: f64) -> u64 {
    let share = (gpus as f64 / total_gpus.max(1) as f64)
        .max(cpus as f64 / total_cpus.max(1) as f64)
        / weight;
    (share * 1e9) as u64
}

impl Policy for Drf {
    fn fork(&self, _oracle: Option<Box<dyn Oracle>>) -> Result<Box<dyn Policy>, PolicyError> {
        Ok(Box::new(self.clone()))
    }

    fn name(&self) -> &'static str {
        "drf"
    }

    fn schedule(&mut self, snapshot: &ClusterSnapshot, _previous: &Plan) -> Plan {
        let total_gpus = u64::from(snapshot.total_gpus());
        let total_cpus = u64::from(snapshot.total_cpus());
        let tenants = snapshot.tenants.len().max(
            1 + snapshot
                .jobs
                .iter()
                .map(|j| j.tenant as usize)
                .max()
                .unwrap_or(0),
        );
        let guaranteed: u64 = snapshot
            .tenants
            .iter()
            .map(|t| u64::from(t.guaranteed_gpus))
            .sum();
        let weight = |t: usize| match snapshot.tenants.get(t) {
            Some(tenant) if guaranteed > 0 => {
                (tenant.guaranteed_gpus as f64 / guaranteed as f64).max(1e-6)
            }
            _ => 1.0,
        };
        let mut used = vec![(0u64, 0u64); tenants];
        let mut waiting: Vec<VecDeque<usize>> = vec![VecDeque::new(); tenants];
        let mut plan = Plan::default();
        for (i, job) in snapshot.jobs.iter().enumerate() {
            match &job.placement {
                Some(placement) => {
                    let entry = &mut used[job.tenant as usize];
                    entry.0 += u64::from(placement.num_gpus());
                    entry.1 += placement
                        .tasks
                        .iter()
                        .map(|t| u64::from(t.cpus))
                        .sum::<u64>();
                    plan.jobs.insert(
                        job.id,
                        JobPlan::Run {
                            placement: placement.clone(),
                            reason: RunReason::Continuing,
                        },
                    );
                }
                None => waiting[job.tenant as usize].push_back(i),
            }
        }
        let mut free = FreeResources::with_running(snapshot, |_, _| true);
        let mut heap: BinaryHeap<Reverse<(u64, usize)>> = (0..tenants)
            .filter(|&t| !waiting[t].is_empty())
            .map(|t| {
                Reverse((
                    share_key(used[t].0, used[t].1, total_gpus, total_cpus, weight(t)),
                    t,
                ))
            })
            .collect();
        while let Some(Reverse((_, tenant))) = heap.pop() {
            let Some(i) = waiting[tenant].pop_front() else {
                continue;
            };
            let job = &snapshot.jobs[i];
            let decision = if u64::from(job.gpus_at(job.preferred)) > total_gpus {
                JobPlan::Wait {
                    reason: WaitReason::NeverFits,
                }
            } else {
                match free.place(job, job.preferred, Strategy::Relaxed) {
                    Ok(placement) => {
                        used[tenant].0 += u64::from(placement.num_gpus());
                        used[tenant].1 += placement
                            .tasks
                            .iter()
                            .map(|t| u64::from(t.cpus))
                            .sum::<u64>();
                        JobPlan::Run {
                            placement,
                            reason: RunReason::FairShare,
                        }
                    }
                    Err(reason) => JobPlan::Wait { reason },
                }
            };
            plan.jobs.insert(job.id, decision);
            if !waiting[tenant].is_empty() {
                heap.push(Reverse((
                    share_key(
                        used[tenant].0,
                        used[tenant].1,
                        total_gpus,
                        total_cpus,
                        weight(tenant),
                    ),
                    tenant,
                )));
            }
        }
        plan
    }

    fn place_arrival(&mut self, snapshot: &ClusterSnapshot, job: &JobView) -> JobPlan {
        arrival_if_free(snapshot, job, Strategy::Relaxed, RunReason::FairShare)
    }
}
