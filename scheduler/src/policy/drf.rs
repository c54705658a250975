//! DRF across tenants, preemptive as fair-share schedulers are: every round the cluster is filled
//! progressively, the next job always from the tenant with the smallest dominant share so far (max over
//! GPUs and CPUs of its jobs' demand / capacity, divided by the tenant's weight); within a tenant its
//! running jobs first, then its waiting ones in arrival order. The jobs that fit in that order run
//! (running ones where they are), a running job that no longer fits is preempted, and what is left
//! goes to the rest (work-conserving). Weights are the tenants' guaranteed GPUs when any tenant has one
//! (weighted DRF), else equal.

use super::common::{arrival_if_free, by_priority, ordered_round};
use super::interface::{Oracle, Policy, PolicyError};
use crate::place::Strategy;
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

/// The progressive-filling order: tenants take turns by smallest weighted dominant share, each
/// contributing its next job (running first, then waiting by arrival).
fn fair_order(snapshot: &ClusterSnapshot) -> Vec<usize> {
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
            (f64::from(tenant.guaranteed_gpus) / guaranteed as f64).max(1e-6)
        }
        _ => 1.0,
    };
    let mut queues: Vec<Vec<usize>> = vec![Vec::new(); tenants];
    for (i, job) in snapshot.jobs.iter().enumerate() {
        queues[job.tenant as usize].push(i);
    }
    let mut queues: Vec<VecDeque<usize>> = queues
        .into_iter()
        .map(|mut queue| {
            queue.sort_by(|&a, &b| {
                let (ja, jb) = (&snapshot.jobs[a], &snapshot.jobs[b]);
                jb.placement
                    .is_some()
                    .cmp(&ja.placement.is_some())
                    .then(ja.submit_s.total_cmp(&jb.submit_s))
                    .then(a.cmp(&b))
            });
            VecDeque::from(queue)
        })
        .collect();
    let demand = |i: usize| {
        let job = &snapshot.jobs[i];
        match &job.placement {
            Some(placement) => (
                u64::from(placement.num_gpus()),
                placement.tasks.iter().map(|t| u64::from(t.cpus)).sum(),
            ),
            None => {
                let shape = job.preferred;
                (u64::from(job.gpus_at(shape)), u64::from(job.cpus_at(shape)))
            }
        }
    };
    let mut used = vec![(0u64, 0u64); tenants];
    let mut heap: BinaryHeap<Reverse<(u64, usize)>> = (0..tenants)
        .filter(|&t| !queues[t].is_empty())
        .map(|t| Reverse((share_key(0, 0, total_gpus, total_cpus, weight(t)), t)))
        .collect();
    let mut order = Vec::with_capacity(snapshot.jobs.len());
    while let Some(Reverse((_, tenant))) = heap.pop() {
        let Some(i) = queues[tenant].pop_front() else {
            continue;
        };
        order.push(i);
        let (g, c) = demand(i);
        used[tenant].0 += g;
        used[tenant].1 += c;
        if !queues[tenant].is_empty() {
            let key = share_key(
                used[tenant].0,
                used[tenant].1,
                total_gpus,
                total_cpus,
                weight(tenant),
            );
            heap.push(Reverse((key, tenant)));
        }
    }
    order
}

impl Policy for Drf {
    fn fork(&self, _oracle: Option<Box<dyn Oracle>>) -> Result<Box<dyn Policy>, PolicyError> {
        Ok(Box::new(self.clone()))
    }

    fn name(&self) -> &'static str {
        "drf"
    }

    fn schedule(&mut self, snapshot: &ClusterSnapshot, _previous: &Plan) -> Plan {
        // Guarantees weigh in the fair order itself; priority comes first.
        let order = by_priority(snapshot, &fair_order(snapshot));
        let mut plan = ordered_round(snapshot, &order, |_| Strategy::Relaxed);
        for decision in plan.jobs.values_mut() {
            match decision {
                JobPlan::Run { reason, .. } if *reason != RunReason::Continuing => {
                    *reason = RunReason::FairShare;
                }
                JobPlan::Wait { reason } if *reason == WaitReason::LowerPriority => {
                    *reason = WaitReason::FairShare;
                }
                _ => {}
            }
        }
        plan
    }

    fn place_arrival(&mut self, snapshot: &ClusterSnapshot, job: &JobView) -> JobPlan {
        arrival_if_free(snapshot, job, Strategy::Relaxed, RunReason::FairShare)
    }
}
