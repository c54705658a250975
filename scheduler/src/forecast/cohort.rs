//! Cohorts: the jobs of a sweep. One tenant's jobs of one size (GPUs at the preferred shape)
//! submitted in a run, each within [`COHORT_GAP_S`] of the one before and at most
//! [`COHORT_SPAN_S`] after the first, finished ones included. Their
//! lengths go together (a sweep's jobs run about as long as each other), which the forecast uses
//! three ways: once a quarter of it has ended its own lengths are its members' estimate; before,
//! a cohort is as old as its oldest members (see [`super::estimate`]) and its members' remaining
//! times are drawn together in a sampled replay.

use super::history::Finished;
use super::remaining::Remaining;
use super::scenario::splitmix;
use crate::snapshot::JobView;
use drover_core::JobId;
use std::collections::{BTreeMap, HashMap};

/// Jobs submitted further apart than this start a new cohort.
pub const COHORT_GAP_S: f64 = 1_800.0;
/// A cohort spans at most this long from its first submission.
pub const COHORT_SPAN_S: f64 = 6.0 * 3_600.0;

/// Each active job's cohort, named by a key.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Cohorts {
    of: HashMap<JobId, u64>,
}

/// What puts a job in a cohort: its tenant, its size (GPUs at its preferred shape) and when it was
/// submitted.
#[derive(Debug, Clone, Copy)]
struct Member {
    tenant: u32,
    gpus: u32,
    submit_s: f64,
}

impl Cohorts {
    pub fn of(jobs: &[JobView]) -> Cohorts {
        Cohorts::with_finished(jobs, &[]).0
    }

    /// The active jobs' cohorts, and each finished job's (by position in `finished`; `None` for
    /// one without a submission time). Finished jobs chain a sweep as active ones do, so a
    /// sweep's ended jobs and its running ones share a key.
    pub fn with_finished(active: &[JobView], finished: &[Finished]) -> (Cohorts, Vec<Option<u64>>) {
        let members = active
            .iter()
            .map(|j| Member {
                tenant: j.tenant,
                gpus: j.gpus_at(j.preferred),
                submit_s: j.submit_s,
            })
            .chain(finished.iter().map(|f| Member {
                tenant: f.tenant,
                gpus: f.gpus,
                submit_s: f.submit_s,
            }));
        let mut groups: BTreeMap<(u32, u32), Vec<(usize, Member)>> = BTreeMap::new();
        for (position, member) in members.enumerate() {
            if member.submit_s.is_finite() {
                groups
                    .entry((member.tenant, member.gpus))
                    .or_default()
                    .push((position, member));
            }
        }
        let mut keys: Vec<Option<u64>> = vec![None; active.len() + finished.len()];
        for mut members in groups.into_values() {
            members.sort_by(|a, b| a.1.submit_s.total_cmp(&b.1.submit_s));
            let (mut first_s, mut last_s, mut key) = (f64::NEG_INFINITY, f64::NEG_INFINITY, 0);
            for (position, member) in members {
                if member.submit_s - last_s > COHORT_GAP_S
                    || member.submit_s - first_s > COHORT_SPAN_S
                {
                    first_s = member.submit_s;
                    key = key_of(member);
                }
                last_s = member.submit_s;
                keys[position] = Some(key);
            }
        }
        let finished_keys = keys.split_off(active.len());
        let of = active
            .iter()
            .zip(keys)
            .filter_map(|(job, key)| Some((job.id, key?)))
            .collect();
        (Cohorts { of }, finished_keys)
    }

    /// The job's cohort; a job not among those given is a cohort of its own.
    pub fn get(&self, job: JobId) -> u64 {
        self.of.get(&job).copied().unwrap_or_else(|| own_key(job))
    }

    /// The key a sampled replay draws the job's remaining work by: its cohort's, unless its
    /// estimate is to be drawn on its own.
    pub(super) fn draw_key(&self, job: JobId, estimate: Remaining) -> u64 {
        if estimate.alone {
            own_key(job)
        } else {
            self.get(job)
        }
    }
}

/// A job's key when it is a cohort of its own.
fn own_key(job: JobId) -> u64 {
    let id = job.0.as_u128();
    (id as u64) ^ ((id >> 64) as u64).rotate_left(29)
}

/// A cohort's key, from its first member.
fn key_of(first: Member) -> u64 {
    let mut key = (u64::from(first.tenant) << 32) | u64::from(first.gpus);
    key = splitmix(key ^ first.submit_s.to_bits());
    splitmix(key)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::Shape;

    fn job(id: u128, tenant: u32, workers: u32, submit_s: f64) -> JobView {
        JobView {
            id: JobId(uuid::Uuid::from_u128(id)),
            tenant,
            priority: 0,
            submit_s,
            workers: crate::snapshot::Range {
                min: workers,
                max: workers,
            },
            ps: crate::snapshot::Range { min: 0, max: 0 },
            preferred: Shape { ps: 0, workers },
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
            observed: Default::default(),
            search: None,
            image: false,
            node_selector: Default::default(),
            gpu_types: Vec::new(),
            tolerations: Vec::new(),
        }
    }

    #[test]
    fn a_sweep_is_one_cohort_across_clock_hours_and_others_are_apart() {
        // One tenant's 1-worker jobs a minute apart for two hours: one cohort.
        let mut jobs: Vec<JobView> = (0..120)
            .map(|i| job(i, 0, 1, 3_000.0 + 60.0 * i as f64))
            .collect();
        // The same tenant and shape after a three-hour pause; another shape; another tenant.
        jobs.push(job(500, 0, 1, 3_000.0 + 60.0 * 119.0 + 3.0 * 3_600.0));
        jobs.push(job(501, 0, 2, 3_100.0));
        jobs.push(job(502, 1, 1, 3_100.0));
        let cohorts = Cohorts::of(&jobs);
        let sweep = cohorts.get(jobs[0].id);
        assert!(jobs[..120].iter().all(|j| cohorts.get(j.id) == sweep));
        for other in &jobs[120..] {
            assert_ne!(cohorts.get(other.id), sweep, "job {:?}", other.id);
        }
        // A chain never spans more than six hours.
        let long: Vec<JobView> = (0..600).map(|i| job(i, 0, 1, 60.0 * i as f64)).collect();
        let cohorts = Cohorts::of(&long);
        assert_ne!(cohorts.get(long[0].id), cohorts.get(long[599].id));
    }
}
