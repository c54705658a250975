//! What `drover` saves for the next leader and takes back: per job its Tiresias queue entry, its
//! packing verdict, when it last moved to another GPU model and its own model speed ratios; shared,
//! the queue's entry counter and the ratios learned from jobs gone.

use super::DroverPolicy;
use crate::policy::state::{Restored, SavedState, decode, encode, restore_jobs};
use crate::policy::tiresias::{Counter, QueueEntry};
use drover_core::JobId;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// One job's part.
#[derive(Debug, Default, Serialize, Deserialize)]
struct JobPart {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    las: Option<QueueEntry>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    no_pack: bool,
    /// Seconds since the Unix epoch (the live snapshot's clock).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    moved_at: Option<f64>,
    /// (lower model tag, higher model tag, log step-time ratio).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    ratios: Vec<(u64, u64, f64)>,
}

/// The part that is no job's.
#[derive(Debug, Serialize, Deserialize)]
struct SharedPart {
    las: Counter,
    /// (lower model tag, higher model tag, Σ log ratio, jobs), of jobs gone.
    #[serde(default)]
    retired: Vec<(u64, u64, f64, u32)>,
}

impl DroverPolicy {
    pub(super) fn save_state(&self) -> SavedState {
        let mut ids: BTreeSet<JobId> = self.no_pack.iter().copied().collect();
        ids.extend(self.moved_at.keys().copied());
        // The LAS entries hold every job of the last round: the rest are a subset.
        let mut jobs = std::collections::BTreeMap::new();
        let mut save = |job: JobId| {
            let part = JobPart {
                las: self.las.entry(job),
                no_pack: self.no_pack.contains(&job),
                moved_at: self.moved_at.get(&job).copied(),
                ratios: self.model_learner.active(job).unwrap_or_default(),
            };
            jobs.insert(job, encode(&part));
        };
        for job in self.las.jobs() {
            ids.remove(&job);
            save(job);
        }
        for job in ids {
            save(job);
        }
        SavedState {
            jobs,
            shared: Some(encode(&SharedPart {
                las: self.las.counter(),
                retired: self.model_learner.retired(),
            })),
        }
    }

    pub(super) fn restore_state(&mut self, saved: &SavedState) -> Restored {
        if let Some(shared) = saved.shared.as_deref().and_then(decode::<SharedPart>) {
            self.las.restore_counter(shared.las);
            self.model_learner.restore_retired(&shared.retired);
        }
        restore_jobs(saved, |job, part: JobPart| {
            if let Some(entry) = part.las {
                self.las.restore_entry(job, entry);
            }
            if part.no_pack {
                self.no_pack.insert(job);
            }
            if let Some(at) = part.moved_at.filter(|at| at.is_finite()) {
                self.moved_at.insert(job, at);
            }
            self.model_learner.restore_active(job, &part.ratios);
        })
    }
}
