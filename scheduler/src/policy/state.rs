//! What a policy keeps between rounds that the store does not hold, in the form a leader saves it
//! for the next ([`Policy::save`](super::Policy::save), [`Policy::restore`](super::Policy::restore)):
//! each job's part (Tiresias's queue level and order of entry, Drover's last move to another GPU
//! model and its packing verdict) and the part that is no job's (the entry counter, the model
//! speed ratios learned from jobs gone). Everything else a policy keeps is recomputed from the
//! snapshot's observations in its first round.

use drover_core::JobId;
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::collections::BTreeMap;

/// A policy's saved state: per job and shared, each a JSON document of the policy's own.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SavedState {
    pub jobs: BTreeMap<JobId, String>,
    /// `None` when the policy keeps nothing that is no job's.
    pub shared: Option<String>,
}

/// What [`Policy::restore`](super::Policy::restore) took in: the jobs whose state it restored, and
/// the entries it could not read (written by another version of the policy, say), whose jobs start
/// afresh as after a restart without saved state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Restored {
    pub jobs: usize,
    pub unreadable: usize,
}

/// The JSON of one part of a policy's state. Non-finite numbers are written as `null` (serde_json's
/// way) and so read back as unreadable, never as a wrong value.
pub(crate) fn encode<T: Serialize>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

/// One part of a policy's state read back; `None` when it cannot be.
pub(crate) fn decode<T: DeserializeOwned>(json: &str) -> Option<T> {
    serde_json::from_str(json).ok()
}

/// Restores every job's part with `restore_job`, counting what it could read.
pub(crate) fn restore_jobs<T: DeserializeOwned>(
    saved: &SavedState,
    mut restore_job: impl FnMut(JobId, T),
) -> Restored {
    let mut restored = Restored::default();
    for (&job, json) in &saved.jobs {
        match decode::<T>(json) {
            Some(part) => {
                restore_job(job, part);
                restored.jobs += 1;
            }
            None => restored.unreadable += 1,
        }
    }
    restored
}
