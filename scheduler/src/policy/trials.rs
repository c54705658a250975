//! Trials of a hyper-parameter search, ordered by what their searcher expects of them.
//!
//! A searcher and a scheduler that do not talk waste GPUs in two ways under contention: the fresh
//! trials of an experiment (little attained service, so first in a least-attained-service order) hold
//! GPUs while its promoted, most promising trials wait; and trials the searcher is about to stop or
//! not promote keep training until it does. With the searcher's [`SearchHint`]s, Drover's policy
//!
//! - lets an experiment's trials trade the places the order gave them, most promising first, so the
//!   experiment keeps its share but spends it on the trials that matter; a running trial keeps its
//!   place against a waiting one unless the waiting one is clearly ahead ([`STAY`]), so small changes
//!   of rank do not pay restarts;
//! - puts the trials the searcher is about to stop or not promote ("doomed") last among those places,
//!   so when the experiment's share shrinks they are the ones preempted.
//!
//! No other job's place changes: an experiment's trials only swap among themselves. (Moving doomed
//! trials behind every other job of their tenant was measured too, and dropped: the searches took
//! half as long again, since ASHA still waits for a doomed trial's result before it promotes the
//! rung. See the policies' README.)

use crate::snapshot::{ClusterSnapshot, JobView};
use drover_core::ExperimentId;
use std::collections::BTreeMap;

/// The promise a running trial is credited with when it competes for its place with a waiting one.
pub const STAY: f64 = 0.15;

fn doomed(job: &JobView) -> bool {
    job.search.is_some_and(|hint| hint.doomed)
}

/// `order` (indexes into `snapshot.jobs`, first served first) with trials reordered as above.
pub fn prefer_promising(snapshot: &ClusterSnapshot, mut order: Vec<usize>) -> Vec<usize> {
    let jobs = &snapshot.jobs;
    // Each experiment's places in the order.
    let mut places: BTreeMap<ExperimentId, Vec<usize>> = BTreeMap::new();
    for (place, &i) in order.iter().enumerate() {
        if let Some(hint) = jobs[i].search {
            places.entry(hint.experiment).or_default().push(place);
        }
    }
    if places.is_empty() {
        return order;
    }
    for places in places.values() {
        let mut trials: Vec<usize> = places.iter().map(|&p| order[p]).collect();
        let key = |i: usize| {
            let job = &jobs[i];
            let promise = job.search.map_or(0.0, |hint| hint.promise);
            promise + if job.is_running() { STAY } else { 0.0 }
        };
        // Stable: equal keys keep the order's choice.
        trials.sort_by(|&a, &b| {
            doomed(&jobs[a])
                .cmp(&doomed(&jobs[b]))
                .then(key(b).total_cmp(&key(a)))
        });
        for (&place, trial) in places.iter().zip(trials) {
            order[place] = trial;
        }
    }
    order
}
