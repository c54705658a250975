//! What every policy's decisions are held to. Tenants' maximum GPUs, in all and of each GPU model
//! their quota names: whatever a policy plans, a start or a shape that takes its tenant past one is
//! turned into a wait (`TenantLimit`); policies that already plan within the maxima (`drover`,
//! `optimus`, and every policy for the maxima per model, which placement keeps) pass through
//! unchanged. And jobs that no
//! node could ever hold ([`super::unplaceable`]) are kept from the policy altogether: they wait with
//! `NeverFits` and count in no tenant's share. Last, a wait for jobs ahead is sharpened into the
//! resource the job lacks ([`super::lacking`]).

use super::interface::{Oracle, Policy, PolicyError};
use super::unplaceable::{never_fits, unplaceable};
use crate::flavours::FlavourMap;
use crate::plan::{JobPlan, Plan, WaitReason};
use crate::snapshot::{ClusterSnapshot, JobView};
use std::collections::BTreeMap;

/// A policy whose plans are held to the tenants' maximum GPUs.
#[derive(Debug)]
pub struct TenantLimited(pub Box<dyn Policy>);

fn has_limits(snapshot: &ClusterSnapshot) -> bool {
    snapshot
        .tenants
        .iter()
        .any(|t| t.max_gpus.is_some() || t.flavours.iter().any(|f| f.max_gpus.is_some()))
}

fn max_of(snapshot: &ClusterSnapshot, tenant: u32) -> u64 {
    snapshot
        .tenants
        .get(tenant as usize)
        .and_then(|t| t.max_gpus)
        .map_or(u64::MAX, u64::from)
}

/// Turns the plan's runs that exceed a tenant's maximum into waits. Jobs that keep their current
/// placement count first (they hold those GPUs already), then the rest in the plan's order, then in the
/// snapshot's.
pub fn enforce(snapshot: &ClusterSnapshot, plan: &mut Plan) {
    if !has_limits(snapshot) {
        return;
    }
    let position: BTreeMap<drover_core::JobId, usize> = snapshot
        .jobs
        .iter()
        .enumerate()
        .map(|(i, j)| (j.id, i))
        .collect();
    let mut sequence: Vec<usize> = plan
        .order
        .iter()
        .filter_map(|id| position.get(id).copied())
        .collect();
    let mut listed = vec![false; snapshot.jobs.len()];
    for &i in &sequence {
        listed[i] = true;
    }
    sequence.extend((0..snapshot.jobs.len()).filter(|&i| !listed[i]));
    let keeps = |i: usize, plan: &Plan| {
        let job = &snapshot.jobs[i];
        matches!((plan.jobs.get(&job.id), &job.placement),
            (Some(JobPlan::Run { placement, .. }), Some(current)) if placement.same_resources(current))
    };
    sequence.sort_by_key(|&i| !keeps(i, plan));
    let flavours = FlavourMap::of(snapshot);
    let mut used: BTreeMap<u32, u64> = BTreeMap::new();
    // GPUs each tenant holds of each flavour.
    let mut used_of: BTreeMap<(u32, u16), u64> = BTreeMap::new();
    for i in sequence {
        let job = &snapshot.jobs[i];
        let Some(JobPlan::Run { placement, .. }) = plan.jobs.get(&job.id) else {
            continue;
        };
        let gpus = u64::from(placement.num_gpus());
        let by_flavour = flavours
            .as_ref()
            .map(|f| f.gpus_by_flavour(placement))
            .unwrap_or_default();
        let within_flavours = by_flavour.iter().all(|&(f, g)| {
            let max = flavours
                .as_ref()
                .map_or(u32::MAX, |m| m.max_of(job.tenant, f));
            used_of.get(&(job.tenant, f)).copied().unwrap_or(0) + u64::from(g) <= u64::from(max)
        });
        let held = used.entry(job.tenant).or_default();
        if *held + gpus <= max_of(snapshot, job.tenant) && within_flavours {
            *held += gpus;
            for (f, g) in by_flavour {
                *used_of.entry((job.tenant, f)).or_default() += u64::from(g);
            }
        } else {
            plan.jobs.insert(
                job.id,
                JobPlan::Wait {
                    reason: WaitReason::TenantLimit,
                },
            );
        }
    }
}

impl Policy for TenantLimited {
    fn name(&self) -> &'static str {
        self.0.name()
    }

    fn save(&self) -> super::SavedState {
        self.0.save()
    }

    fn restore(&mut self, saved: &super::SavedState) -> super::Restored {
        self.0.restore(saved)
    }

    fn schedule(&mut self, snapshot: &ClusterSnapshot, previous: &Plan) -> Plan {
        let never = unplaceable(snapshot);
        let mut plan = if never.is_empty() {
            self.0.schedule(snapshot, previous)
        } else {
            let mut placeable = snapshot.clone();
            let mut index = 0;
            placeable.jobs.retain(|_| {
                index += 1;
                !never.contains(&(index - 1))
            });
            self.0.schedule(&placeable, previous)
        };
        for &i in &never {
            plan.jobs.insert(
                snapshot.jobs[i].id,
                JobPlan::Wait {
                    reason: WaitReason::NeverFits,
                },
            );
        }
        enforce(snapshot, &mut plan);
        super::lacking::sharpen(snapshot, &mut plan);
        plan
    }

    fn place_arrival(&mut self, snapshot: &ClusterSnapshot, job: &JobView) -> JobPlan {
        if never_fits(snapshot, job) {
            return JobPlan::Wait {
                reason: WaitReason::NeverFits,
            };
        }
        let decision = self.0.place_arrival(snapshot, job);
        let JobPlan::Run { placement, .. } = &decision else {
            return decision;
        };
        let max = max_of(snapshot, job.tenant);
        let flavours = FlavourMap::of(snapshot).filter(|_| has_limits(snapshot));
        if max == u64::MAX && flavours.is_none() {
            return decision;
        }
        let theirs = || {
            snapshot
                .jobs
                .iter()
                .filter(|j| j.tenant == job.tenant && j.id != job.id)
                .filter_map(|j| j.placement.as_ref())
        };
        let held: u64 = theirs().map(|p| u64::from(p.num_gpus())).sum();
        let within_flavours = flavours.as_ref().is_none_or(|map| {
            // What the tenant holds of each model, in one pass over its placements.
            let mut held_of: BTreeMap<u16, u64> = BTreeMap::new();
            for (f, g) in theirs().flat_map(|p| map.gpus_by_flavour(p)) {
                *held_of.entry(f).or_default() += u64::from(g);
            }
            map.gpus_by_flavour(placement).into_iter().all(|(f, g)| {
                held_of.get(&f).copied().unwrap_or(0) + u64::from(g)
                    <= u64::from(map.max_of(job.tenant, f))
            })
        });
        if held + u64::from(placement.num_gpus()) <= max && within_flavours {
            decision
        } else {
            JobPlan::Wait {
                reason: WaitReason::TenantLimit,
            }
        }
    }

    fn fork(&self, oracle: Option<Box<dyn Oracle>>) -> Result<Box<dyn Policy>, PolicyError> {
        Ok(Box::new(TenantLimited(self.0.fork(oracle)?)))
    }
}
